"""Common GPU spellings resolve to bundled ids; ambiguous and unknown names say what to type.

These use the bundled catalogue (ids from DESIGN.md section 4).
"""

from __future__ import annotations

import pytest

from perfmodel._errors import PerfmodelError
from perfmodel.hardware import catalog
from perfmodel.hardware.catalog import load_hardware, resolve_id


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("h100-sxm", "h100-sxm"),
        ("H100", "h100-sxm"),
        ("h100", "h100-sxm"),
        ("H100-SXM5-80GB", "h100-sxm"),
        ("H100_SXM", "h100-sxm"),  # underscores and case are normalised
        ("nvidia-h100-sxm", "h100-sxm"),
        ("A100", "a100-80gb-sxm"),
        ("a100-sxm4-40gb", "a100-40gb-sxm"),
        ("MI300X", "mi300x"),
        ("4090", "rtx-4090"),
        ("tesla-t4", "t4"),
    ],
)
def test_alias_resolves(name: str, expected: str) -> None:
    assert resolve_id(name) == expected
    assert load_hardware(name).id == expected


def test_alias_logs_a_note_once_and_prints_nothing(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog, "_NOTED", set())
    with caplog.at_level("INFO", logger="perfmodel"):
        resolve_id("H100-80GB-HBM3")
        resolve_id("H100-80GB-HBM3")
        resolve_id("h100-sxm")  # the id itself needs no note
    assert [r.getMessage() for r in caplog.records] == [
        "note: 'H100-80GB-HBM3' resolved to 'h100-sxm' (say 'h100-sxm' to silence this note)"
    ]
    assert capsys.readouterr().err == ""  # a library prints nothing of its own


def test_cli_prints_the_alias_note(capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from perfmodel.cli.main import main

    monkeypatch.setattr(catalog, "_NOTED", set())
    assert main(["specs", "show", "H100-80GB-HBM3"]) == 0
    assert "note: 'H100-80GB-HBM3' resolved to 'h100-sxm'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("prefix", "candidates"),
    [
        ("mi3", ("mi300x", "mi325x", "mi355x")),
        ("a100-80gb-", ("a100-80gb-pcie", "a100-80gb-sxm")),
        ("h100-", ("h100-nvl", "h100-pcie", "h100-sxm")),
    ],
)
def test_ambiguous_prefix_lists_candidates(prefix: str, candidates: tuple[str, ...]) -> None:
    with pytest.raises(PerfmodelError, match="ambiguous") as info:
        resolve_id(prefix)
    for candidate in candidates:
        assert candidate in info.value.fix


def test_unique_prefix_resolves() -> None:
    assert resolve_id("rtx-409") == "rtx-4090"
    assert resolve_id("a100-80gb-sx") == "a100-80gb-sxm"


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(PerfmodelError, match="unknown hardware 'h100-sxn'") as info:
        resolve_id("h100-sxn")
    assert "h100-sxm" in info.value.fix
    assert "perfmodel specs list" in info.value.fix


def test_nothing_close_still_says_what_to_do() -> None:
    with pytest.raises(PerfmodelError) as info:
        resolve_id("zzzzzzzz")
    assert "did you mean" not in info.value.fix
    assert "perfmodel specs list" in info.value.fix
