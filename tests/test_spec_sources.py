"""Citations ship with the package: every ``[S#]`` tag and ``D#`` note that a bundled spec cites
resolves in ``hardware_specs/SOURCES.md``, and the wheel carries that file next to the specs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfmodel.hardware.catalog import specs_dir

_S_TAG = re.compile(r"\[S(\d+)\]")
_D_TAG = re.compile(r"\bD(\d+)\b")
_S_ENTRY = re.compile(r"^- \*\*\[S(\d+)\]\*\*", re.MULTILINE)
_D_ENTRY = re.compile(r"^- \*\*D(\d+)\*\*", re.MULTILINE)
_REPO = Path(__file__).resolve().parent.parent


def _sources_text() -> str:
    path = specs_dir() / "SOURCES.md"
    assert path.is_file(), f"{path} is missing: the specs' citations would not resolve"
    return path.read_text(encoding="utf-8")


def unresolved(text: str, sources: str) -> list[str]:
    """Tags cited in ``text`` (S and D) that have no entry in ``sources``."""
    s_known = set(_S_ENTRY.findall(sources))
    d_known = set(_D_ENTRY.findall(sources))
    missing = [f"[S{n}]" for n in _S_TAG.findall(text) if n not in s_known]
    missing += [f"D{n}" for n in _D_TAG.findall(text) if n not in d_known]
    return sorted(set(missing))


def test_checker_reports_a_missing_tag() -> None:
    sources = "- **[S1]** a source\n- **D7** a note\n"
    assert unresolved("peaks [S1] (D7)", sources) == []
    assert unresolved("peaks [S1][S999] (D7, D998)", sources) == ["D998", "[S999]"]
    # D numbers inside die names (AD102, GB202) are not note tags.
    assert unresolved("AD102 GA102 GD102", sources) == []


@pytest.mark.parametrize(
    "path", sorted(specs_dir().rglob("*.yaml")), ids=lambda p: p.stem
)
def test_every_cited_tag_resolves(path: Path) -> None:
    missing = unresolved(path.read_text(encoding="utf-8"), _sources_text())
    assert not missing, f"{path.name} cites {missing}; add them to hardware_specs/SOURCES.md"


def test_sources_file_is_self_consistent() -> None:
    text = _sources_text()
    s_entries = _S_ENTRY.findall(text)
    d_entries = _D_ENTRY.findall(text)
    assert len(s_entries) == len(set(s_entries)), "an [S#] entry is listed twice"
    assert len(d_entries) == len(set(d_entries)), "a D# note is listed twice"
    assert not unresolved(text, text), "SOURCES.md cites a tag it does not list"


def test_specs_point_at_the_shipped_sources_not_the_shared_folder() -> None:
    for path in specs_dir().rglob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        assert "../shared" not in text, path.name
        if _S_TAG.search(text):
            assert "SOURCES.md" in text, f"{path.name}: header should say where [S#] resolve"


def test_wheel_force_includes_the_specs_folder_with_sources() -> None:
    """pyproject ships the whole hardware_specs folder as perfmodel/hardware_specs (SOURCES.md too),
    where ``specs_dir()`` looks in an installed package."""
    pyproject = (_REPO / "pyproject.toml").read_text(encoding="utf-8")

    def section(name: str) -> str:
        return pyproject.split(f"[{name}]", 1)[1].split("\n[", 1)[0]

    include = section("tool.hatch.build.targets.wheel.force-include")
    mapping = r'^"hardware_specs"\s*=\s*"perfmodel/hardware_specs"\s*$'
    assert re.search(mapping, include, re.MULTILINE)
    assert "exclude" not in section("tool.hatch.build.targets.wheel")
    assert (_REPO / "hardware_specs" / "SOURCES.md").is_file()
