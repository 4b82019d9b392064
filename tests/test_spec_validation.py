"""Bad hardware specs fail loudly, naming the field, both in Python and on the command line;
``extends`` merges a user spec onto a bundled or local one and validates the result."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from perfmodel._errors import SpecError
from perfmodel.cli.main import main
from perfmodel.hardware import catalog
from perfmodel.hardware.catalog import allow_spec_dirs, load_hardware

# A small spec that validates: 132 SMs x 1.83 GHz x 4096 FLOPs/clock = 989.4e12 FLOP/s dense bf16.
MINIMAL: dict[str, Any] = {
    "id": "test-gpu",
    "name": "Test GPU",
    "vendor": "nvidia",
    "arch": "hopper",
    "compute": {"units": 132, "boost_clock": "1830 MHz"},
    "peaks": {"bf16": {"peak": "989.4 TFLOP/s", "flops_per_clock_per_unit": 4096}},
    "memory": {"type": "HBM3", "capacity": "80 GiB", "bandwidth": "3.35 TB/s"},
    "sources": {"compute": "test", "peaks": "test", "memory": "test"},
}


def _spec(**changes: Any) -> str:
    """MINIMAL with changes at ``__``-separated paths (``memory__bandwidth="-1 TB/s"``);
    None deletes the key."""
    data: dict[str, Any] = yaml.safe_load(yaml.safe_dump(MINIMAL))
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for part in parents:
            node = node[part]
        if value is None:
            del node[leaf]
        else:
            node[leaf] = value
    return yaml.safe_dump(data, sort_keys=False)


def _renamed(path: str, new: str) -> Callable[[], str]:
    def text() -> str:
        data: dict[str, Any] = yaml.safe_load(yaml.safe_dump(MINIMAL))
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[new] = node.pop(leaf)
        return yaml.safe_dump(data, sort_keys=False)

    return text


MARKER = "HACKED_MARKER"

# (case id, YAML text (or a callable making it), substrings the errors must contain)
BAD_SPECS: list[tuple[str, str | Callable[[], str], tuple[str, ...]]] = [
    ("missing-bandwidth", lambda: _spec(memory__bandwidth=None),
     ("memory.bandwidth", "missing")),
    ("missing-sources", lambda: _spec(sources=None), ("sources", "missing")),
    ("negative-bandwidth", lambda: _spec(memory__bandwidth="-3.35 TB/s"),
     ("memory.bandwidth", "greater than 0")),
    ("zero-capacity", lambda: _spec(memory__capacity=0), ("memory.capacity", "greater than 0")),
    ("bytes-as-bandwidth", lambda: _spec(memory__bandwidth="3.35 TB"),
     ("memory.bandwidth", "bytes quantity", "'3.35 TB/s'")),
    # 132 x 1.83e9 x 4096 = 989.4e12, so 1978.9e12 is 2.0x: the 2:4-sparse figure.
    ("sparse-as-dense", lambda: _spec(peaks__bf16={
        "peak": "1978.9 TFLOP/s", "flops_per_clock_per_unit": 4096}),
     ("peaks.bf16.peak", "sparse", "989.4 TFLOP/s")),
    # 1.83 GHz tensor peak checked against a 1.0 GHz clock: 989.4 / 540.7 = 1.83x, no sparsity.
    ("wrong-clock", lambda: _spec(compute__boost_clock="1000 MHz"),
     ("peaks.bf16.peak", "disagrees", "540.7 TFLOP/s")),
    # a sparse figure below the dense one, with no FLOPs/clock to cross-check the peak by
    ("sparse-below-dense", lambda: _spec(peaks__bf16={
        "peak": "989.4 TFLOP/s", "sparse_peak": "494.7 TFLOP/s"}),
     ("peaks.bf16.sparse_peak", "smaller than the dense peak")),
    ("sparse-string", lambda: _spec(peaks__bf16={"peak": "989 TFLOP/s sparse"}),
     ("peaks.bf16.peak", "sparse figure")),
    ("unknown-dtype", lambda: _spec(peaks__fp12={"peak": "1 TFLOP/s"}),
     ("peaks.fp12", "unknown dtype", "bf16")),
    ("dtype-twice", lambda: _spec(peaks__bfloat16={"peak": "989.4 TFLOP/s"}),
     ("peaks.bfloat16", "both bf16")),
    ("typo-bandwith", _renamed("memory.bandwidth", "bandwith"),
     ("memory.bandwith", "did you mean 'bandwidth'")),
    ("typo-top-level", _renamed("vendor", "vendr"), ("vendr", "did you mean 'vendor'")),
    ("typo-in-peak", lambda: _spec(peaks__bf16={"pek": "989.4 TFLOP/s"}),
     ("peaks.bf16.pek", "did you mean 'peak'")),
    ("units-many", lambda: _spec(compute__units="many"),
     ("compute.units", "valid integer", "'many'")),
    ("vendor-unknown", lambda: _spec(vendor="acme"), ("vendor", "'acme'")),
    # the engine floors and kernel builds follow arch: an AMD spec with a Hopper arch got
    # NVIDIA's engines and kernels
    ("arch-of-another-vendor", lambda: _spec(vendor="amd"),
     ("arch", "'hopper' is not an architecture of vendor 'amd'", "cdna3")),
    ("l2-partitions-zero", lambda: _spec(memory__l2_partitions=0),
     ("memory.l2_partitions", "greater than or equal to 1")),
    ("l2-partitions-fraction", lambda: _spec(memory__l2_partitions=1.5),
     ("memory.l2_partitions", "integer")),
    ("efficiency-above-1.2", lambda: _spec(efficiency={"memory": 1.5},
                                           sources={"all": "test"}),
     ("efficiency.memory",)),
    ("efficiency-unknown-key", lambda: _spec(efficiency={"compute": {"fp12": 0.8}},
                                             sources={"all": "test"}),
     ("efficiency.compute", "fp12")),
    ("uncited-block", lambda: _spec(tdp="700 W"), ("sources", "power")),
    ("empty-file", "", ("empty",)),
    ("comment-only", "# nothing here\n", ("empty",)),
    ("python-tag", f'!!python/object/apply:os.system ["touch {MARKER}"]\n', ("YAML tag",)),
    ("python-tag-nested", _spec() + f'notes: !!python/object/apply:os.system ["touch {MARKER}"]\n',
     ("YAML tag",)),
    ("top-level-list", "- id: a\n- id: b\n", ("top level", "list")),
    ("top-level-string", "just some text\n", ("top level", "str")),
    ("bad-indentation", "id: x\nmemory:\n  type: HBM3\n    bandwidth: 3 TB/s\n", ("malformed YAML",
                                                                               "line 4")),
    ("duplicate-key", _spec() + "name: Another name\n", ("duplicate key 'name'",)),
    ("extends-unknown", "extends: h100-sxn\n", ("extends", "unknown hardware")),
    ("extends-missing-file", "extends: ./nowhere.yaml\n", ("extends", "nowhere.yaml")),
    ("extends-not-a-string", "extends: [a, b]\n", ("extends",)),
]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in ``tmp_path`` so a ``touch`` smuggled into YAML would land there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _write(folder: Path, name: str, text: str | Callable[[], str]) -> Path:
    path = folder / name
    path.write_text(text() if callable(text) else text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("case", "text", "needles"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_raises_spec_error(
    in_tmp: Path, case: str, text: str | Callable[[], str], needles: tuple[str, ...]
) -> None:
    path = _write(in_tmp, f"{case}.yaml", text)
    with pytest.raises(SpecError) as info:
        load_hardware(path)
    joined = "\n".join(info.value.errors)
    for needle in needles:
        assert needle in joined
    assert info.value.source == str(path)
    assert not (in_tmp / MARKER).exists()


@pytest.mark.parametrize(("case", "text", "needles"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_fails_cli_validate(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], case: str,
    text: str | Callable[[], str], needles: tuple[str, ...],
) -> None:
    path = _write(in_tmp, f"{case}.yaml", text)
    assert main(["specs", "validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert str(path) in err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err
    assert not (in_tmp / MARKER).exists()


def test_minimal_spec_loads_with_si_values(tmp_path: Path) -> None:
    hw = load_hardware(_write(tmp_path, "ok.yaml", _spec()))
    assert hw.id == "test-gpu"
    assert hw.memory.bandwidth == 3.35e12
    assert hw.memory.capacity == 80 * 2**30
    assert hw.peak("bf16") == 989.4e12
    assert hw.ridge_point("bf16") == pytest.approx(989.4e12 / 3.35e12)  # 295.34 FLOP/byte
    assert not hw.supports("fp8")


def test_minimal_spec_validates_on_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = _write(tmp_path, "ok.yaml", _spec())
    bad = _write(tmp_path, "bad.yaml", _spec(memory__bandwidth="3.35 TB"))
    assert main(["specs", "validate", str(ok)]) == 0
    assert capsys.readouterr().out == "ok: test-gpu\n"
    # several files: every valid one is reported, and any invalid one fails the run
    assert main(["specs", "validate", str(ok), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "ok: test-gpu\n"
    assert "bad.yaml" in err
    assert "ok.yaml" not in err


def test_all_problems_are_listed(tmp_path: Path) -> None:
    path = _write(tmp_path, "two.yaml", _spec(memory__bandwidth="-1 TB/s", compute__units="x"))
    with pytest.raises(SpecError) as info:
        load_hardware(path)
    fields = sorted(line.split(":")[0] for line in info.value.errors)
    assert fields == ["compute.units", "memory.bandwidth"]
    assert "(+1 more)" in str(info.value)


def test_vector_peak_is_checked_at_the_boost_clock(tmp_path: Path) -> None:
    # H100 SXM: fp32 on CUDA cores runs at the 1.98 GHz boost clock, tensor peaks at 1.83 GHz.
    # 132 SMs x 1.98e9 x 256 FLOPs/clock = 66.9e12; at 1.83 GHz it would be 61.8e12 (8 % off).
    text = _spec(
        compute__boost_clock="1980 MHz",
        compute__tensor_clock="1830 MHz",
        peaks__fp32={"peak": "66.9 TFLOP/s", "unit": "vector", "flops_per_clock_per_unit": 256},
    )
    hw = load_hardware(_write(tmp_path, "clocks.yaml", text))
    assert hw.peak("fp32") == 66.9e12


def test_default_efficiency_needs_no_citation(tmp_path: Path) -> None:
    hw = load_hardware(_write(tmp_path, "ok.yaml", _spec()))
    assert hw.efficiency.memory == 0.85  # the project default, not a datasheet claim
    explicit = _spec(efficiency={"memory": 0.9})
    with pytest.raises(SpecError, match="no citation for efficiency"):
        load_hardware(_write(tmp_path, "explicit.yaml", explicit))


# ----------------------------------------------------------------------------- extends
def test_extends_bundled_overrides_and_keeps_the_rest(tmp_path: Path) -> None:
    base = load_hardware("h100-sxm")
    text = """
extends: h100-sxm
id: my-h100
name: Our H100
pricing: {usd_per_hour: 1.25, assumption: "our contract"}
efficiency: {memory: 0.80}
"""
    hw = load_hardware(_write(tmp_path, "mine.yaml", text))
    assert (hw.id, hw.name) == ("my-h100", "Our H100")
    assert hw.price_per_hour == 1.25
    assert hw.efficiency.memory == 0.80
    # deep merge: the rest of efficiency, and everything else, comes from h100-sxm
    assert hw.efficiency.compute == base.efficiency.compute
    assert hw.efficiency.kernel_overhead == base.efficiency.kernel_overhead
    assert hw.memory == base.memory
    assert hw.peaks == base.peaks
    assert hw.sources == base.sources
    assert base.price_per_hour == 2.50  # the bundled spec is untouched


def test_extends_result_is_validated(tmp_path: Path) -> None:
    text = "extends: h100-sxm\nmemory: {bandwidth: -3.35 TB/s}\n"
    with pytest.raises(SpecError) as info:
        load_hardware(_write(tmp_path, "neg.yaml", text))
    assert any(line.startswith("memory.bandwidth:") for line in info.value.errors)


def test_extends_null_removes_a_field(tmp_path: Path) -> None:
    hw = load_hardware(_write(tmp_path, "free.yaml", "extends: h100-sxm\npricing: null\n"))
    assert hw.pricing is None


def test_extends_cycle_is_rejected(tmp_path: Path) -> None:
    _write(tmp_path, "a.yaml", "extends: b.yaml\n" + _spec())
    _write(tmp_path, "b.yaml", "extends: a.yaml\nname: B\n")
    with pytest.raises(SpecError, match="cycle") as info:
        load_hardware(tmp_path / "a.yaml")
    assert "a.yaml" in info.value.errors[0]
    assert "b.yaml" in info.value.errors[0]


def test_extends_self_is_a_cycle(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cycle"):
        load_hardware(_write(tmp_path, "me.yaml", "extends: me.yaml\n"))


def test_extends_path_is_relative_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "team").mkdir()
    (tmp_path / "elsewhere").mkdir()
    _write(tmp_path / "base", "base.yaml", _spec())
    child = _write(tmp_path / "team", "child.yaml",
                   "extends: ../base/base.yaml\nid: child-gpu\nmemory: {bandwidth: 2 TB/s}\n")
    monkeypatch.chdir(tmp_path / "elsewhere")  # not where either file lives
    with pytest.raises(SpecError, match=r"not a \.yaml file in a spec folder"):
        load_hardware(child)  # ../base is outside team/: allowed only when asked for
    with allow_spec_dirs(tmp_path / "base"):
        hw = load_hardware(child)
    assert hw.id == "child-gpu"
    assert hw.memory.bandwidth == 2e12
    assert hw.memory.capacity == 80 * 2**30  # from base.yaml
    assert hw.name == "Test GPU"


def test_extends_chain_of_three(tmp_path: Path) -> None:
    _write(tmp_path, "one.yaml", "extends: h100-sxm\nid: one\ntdp: 600 W\n")
    _write(tmp_path, "two.yaml", "extends: one.yaml\nid: two\n")
    hw = load_hardware(_write(tmp_path, "three.yaml", "extends: two.yaml\nid: three\n"))
    assert (hw.id, hw.tdp) == ("three", 600.0)


# ------------------------------------------------------------------ bundled catalogue rules
@pytest.fixture
def fake_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the catalogue at an empty folder for one test, with its caches cleared."""
    monkeypatch.setattr(catalog, "specs_dir", lambda: tmp_path)
    catalog._bundled_paths.cache_clear()
    catalog._load_bundled.cache_clear()
    yield tmp_path
    catalog._bundled_paths.cache_clear()
    catalog._load_bundled.cache_clear()


def test_bundled_id_must_match_file_name(fake_catalogue: Path) -> None:
    (fake_catalogue / "nvidia").mkdir()
    _write(fake_catalogue / "nvidia", "other-name.yaml", _spec())  # id: test-gpu
    with pytest.raises(SpecError, match=r"differs from the file name 'other-name\.yaml'"):
        load_hardware("other-name")


def test_bundled_id_twice_is_an_error(fake_catalogue: Path) -> None:
    for vendor in ("nvidia", "amd"):
        (fake_catalogue / vendor).mkdir()
        _write(fake_catalogue / vendor, "test-gpu.yaml", _spec())
    with pytest.raises(SpecError, match="bundled twice"):
        catalog.list_hardware()


def test_sources_key_that_is_not_a_block_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("extends: h100-sxm\nid: typo-sources\nsources: {memroy: a datasheet}\n")
    with pytest.raises(SpecError) as info:
        load_hardware(path)
    assert "sources.memroy" in str(info.value.errors)
    assert "memory" in " ".join(info.value.errors)
