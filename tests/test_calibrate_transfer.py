"""Transfer of a calibration to another GPU: synthetic recovery (measurements made by the
model with known kernel-family and device figures on GPU A, fitted, carried to GPU B),
the rules of what is carried, and the ``calibrate transfer`` command's errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.data import dataset_from_rows
from perfmodel.calibrate.fit import apply_params
from perfmodel.calibrate.parts import fit_parts
from perfmodel.calibrate.profile import write_profile
from perfmodel.calibrate.suite import design_suite
from perfmodel.calibrate.transfer import rekey, transfer, within_reach
from perfmodel.cli.main import main
from perfmodel.timing.knobs import knobs_for

SOURCE, TARGET = "a100-80gb-sxm", "h100-sxm"
#: Device figures of the synthetic A100 (its spec says 0.85 of the bf16 peak and 0.82 of
#: the bandwidth): a card that reaches less than its spec.
DEVICE = {"compute_fraction": 0.62, "memory_fraction": 0.78}
#: Kernel-family figures of the synthetic truth: the fixed cost of a GEMM kernel and the
#: FlashAttention-2 family on Ampere (rate, fixed time per prefill tile), away from the
#: bundled values so that a fit that does not move them fails.
OVERHEAD_S = 4.5e-6
#: The suite calls the kernels directly: the ``none`` engine's configuration of a family.
FAMILY = {"attn.flash2.efficiency.ampere.none": 0.8, "attn.flash2.tile_s.ampere.none": 4.0e-6}


def _suite_rows(hw: pm.HardwareSpec, truth: pm.HardwareSpec, noise: float = 0.01
                ) -> list[object]:
    cases = design_suite("cuda", hw.compute.units, fill=40)
    probe = dataset_from_rows([c.as_row() for c in cases])
    t = probe.predict(truth) * np.exp(np.random.default_rng(0).normal(0.0, noise, len(cases)))
    return [c.as_row(float(x)) for c, x in zip(cases, t, strict=True)]


def _truth(hw: pm.HardwareSpec, device: dict[str, float] | None,
           family: dict[str, float]) -> pm.HardwareSpec:
    dev = device or {}
    return apply_params(hw, {"gemm/bf16": {**dev, "overhead_s": OVERHEAD_S},
                             "attention/bf16": dict(dev),
                             "stream/bf16": {k: v for k, v in dev.items()
                                             if k == "memory_fraction"}},
                        constants=family)


@pytest.fixture(scope="module")
def fitted() -> pm.HardwareSpec:
    """A100 calibrated (in parts) on the suite measured on the synthetic truth."""
    hw = pm.load_hardware(SOURCE)
    rows = _suite_rows(hw, _truth(hw, DEVICE, FAMILY))
    data = dataset_from_rows(rows)  # type: ignore[arg-type]
    result = fit_parts(data, hw, residual="off")
    return apply_params(hw, result.params, constants=result.constants)


def test_fit_separates_device_from_family_figures(fitted: pm.HardwareSpec) -> None:
    cal = fitted.calibration
    assert cal is not None
    for key in ("gemm/bf16", "attention/bf16"):
        assert cal.params[key]["compute_fraction"] == pytest.approx(0.62, rel=0.02)
        assert cal.params[key]["memory_fraction"] == pytest.approx(0.78, rel=0.02)
    assert cal.params["gemm/bf16"]["overhead_s"] == pytest.approx(OVERHEAD_S, rel=0.05)
    # with 1 % noise the family rate lands within 5 % (0.83 at seed 0: the suite's one-wave
    # causal cases take their longest CTA's time, which the rate and the tile time share);
    # without noise it is exact (test_noise_free_suite_recovers_the_family_rate)
    assert cal.constants["attn.flash2.efficiency.ampere.none"] == pytest.approx(0.8, rel=0.05)
    assert cal.constants["attn.flash2.tile_s.ampere.none"] == pytest.approx(4.0e-6, rel=0.15)
    # the device's lower compute fraction is not absorbed by the family's rate
    assert "gemm.auto.none.efficiency" not in cal.constants


def test_noise_free_suite_recovers_the_family_rate() -> None:
    hw = pm.load_hardware(SOURCE)
    rows = _suite_rows(hw, _truth(hw, DEVICE, FAMILY), noise=0.0)
    result = fit_parts(dataset_from_rows(rows), hw,  # type: ignore[arg-type]
                       residual="off")
    assert result.constants["attn.flash2.efficiency.ampere.none"] == pytest.approx(0.8,
                                                                                 rel=0.01)
    assert result.params["attention/bf16"]["compute_fraction"] == pytest.approx(0.62,
                                                                               rel=0.01)


def test_transfer_carries_the_family_and_keeps_the_target_spec(fitted: pm.HardwareSpec) -> None:
    target = pm.load_hardware(TARGET)
    result = transfer(fitted, target)
    cal = result.spec.calibration
    assert cal is not None
    # device figures: the target's spec values, exactly
    for family in ("gemm", "attention", "stream"):
        mine, spec = knobs_for(result.spec, family, "bf16"), knobs_for(target, family, "bf16")
        assert mine.rate == spec.rate
        assert mine.achievable_bandwidth == spec.achievable_bandwidth
    assert all(name not in values for values in cal.params.values()
               for name in ("compute_fraction", "memory_fraction"))
    # family figures: carried, Ampere's constants as Hopper's
    assert cal.params["gemm/bf16"]["overhead_s"] == pytest.approx(OVERHEAD_S, rel=0.05)
    assert cal.constants["attn.flash2.efficiency.hopper.none"] == pytest.approx(0.8, rel=0.05)
    assert not any(".ampere" in name for name in cal.constants)
    assert cal.provenance["constants.attn.flash2.efficiency.hopper.none"].startswith(
        f"carried: {SOURCE} calibration (as attn.flash2.efficiency.ampere.none")
    assert cal.provenance["device.compute_fraction.bf16"].startswith(f"spec: {TARGET} ")
    # the target's suite as the truth's family figures on the target's own spec predict it
    truth_b = _truth(target, None, {k.replace("ampere", "hopper"): v for k, v in FAMILY.items()})
    cases = design_suite("cuda", target.compute.units, fill=40)
    data = dataset_from_rows([c.as_row() for c in cases])
    want = data.predict(truth_b)
    got = np.abs(data.predict(result.spec) / want - 1.0)
    spec_only = np.abs(data.predict(target) / want - 1.0)
    assert np.median(got) < 0.01
    assert np.percentile(got, 90) < 0.03
    assert np.percentile(spec_only, 90) > 0.1  # what carrying nothing would miss


def _profile(hw: pm.HardwareSpec) -> pm.HardwareSpec:
    """A hand-made calibrated profile of ``hw`` with one of each kind of value (int4: a
    dtype B200 has no peak for)."""
    prof = apply_params(
        hw, {"gemm/bf16": {"compute_fraction": 0.5, "memory_fraction": 0.6,
                           "overhead_s": 5e-6, "tile_efficiency_exponent": 1.4},
             "gemm/int4": {"overhead_s": 7e-6}},
        residuals={"gemm/bf16": [[-1.0, 0.0], [1.0, 0.1]]},
        constants={"graph_kernel_s.hopper": 1.7e-6, "gemm.cutlass.per-tensor.efficiency": 0.9,
                   "attn.triton.efficiency.hopper.sglang": 0.3,
                   "host.vllm.eager_s.cutlass.hopper": 1e-4})
    return prof


def test_transfer_rules() -> None:
    h100 = pm.load_hardware("h100-sxm")
    result = transfer(_profile(h100), pm.load_hardware("b200"))
    cal = result.spec.calibration
    assert cal is not None
    assert cal.params == {"gemm/bf16": {"overhead_s": 5e-6, "tile_efficiency_exponent": 1.4}}
    assert cal.constants == {"attn.triton.efficiency.blackwell.sglang": 0.3,
                             "gemm.cutlass.per-tensor.efficiency": 0.9}
    assert cal.residuals == {}
    dropped = dict(result.dropped)
    assert "device figure" in dropped["params.gemm/bf16.compute_fraction"]
    assert "no int4 peak" in dropped["params.gemm/int4"]
    assert "measured machine" in dropped["constants.host.vllm.eager_s.cutlass.hopper"]
    assert "same architecture" in dropped["constants.graph_kernel_s.hopper"]
    assert "local correction" in dropped["residuals.gemm/bf16"]
    assert cal.environment["transfer_from"] == "h100-sxm"
    assert result.within_reach
    # to a GPU of the same architecture the architecture's own figures travel too
    same = transfer(_profile(h100), pm.load_hardware("h200-sxm")).spec.calibration
    assert same is not None
    assert same.constants["graph_kernel_s.hopper"] == 1.7e-6
    assert same.constants["attn.triton.efficiency.hopper.sglang"] == 0.3


def test_rekey_and_reach() -> None:
    assert rekey("attn.triton.efficiency.hopper.sglang", "hopper", "blackwell") == \
        "attn.triton.efficiency.blackwell.sglang"
    assert rekey("l2_capacity_fraction", "hopper", "blackwell") == "l2_capacity_fraction"
    assert rekey("graph_kernel_s.hopper", "hopper", "cdna3") == "graph_kernel_s"
    assert rekey("no.such.constant.hopper", "hopper", "ampere") is None
    assert within_reach("ampere", "hopper")
    assert within_reach("hopper", "blackwell")
    assert within_reach("ada", "ampere")
    assert within_reach("hopper", "hopper")
    assert not within_reach("ampere", "blackwell")
    assert not within_reach("ada", "blackwell")
    assert within_reach("ada", "blackwell-consumer")  # SM120: Ada's SM design
    assert not within_reach("blackwell", "blackwell-consumer")


@pytest.mark.parametrize(("profile", "target", "match"), [
    ("plain", "b200", "not a calibrated profile"),
    ("profile", "mi300x", "amd device"),
    ("profile", "calibrated", "calibrated profile already"),
])
def test_transfer_refuses(profile: str, target: str, match: str) -> None:
    h100 = pm.load_hardware("h100-sxm")
    src = h100 if profile == "plain" else _profile(h100)
    dst = _profile(pm.load_hardware("b200")) if target == "calibrated" else \
        pm.load_hardware(target)
    with pytest.raises(PerfmodelError, match=match):
        transfer(src, dst)


# ----------------------------------------------------------------------------- the command
def _write_profile(path: Path) -> Path:
    data = _profile(pm.load_hardware("h100-sxm")).model_dump(mode="json", exclude_none=True)
    write_profile(path, data, "# test profile\n")
    return path


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_transfer_command_writes_a_loadable_profile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write_profile(tmp_path / "h100.cal.yaml")
    before = src.read_bytes()
    code, out, err = _run(["calibrate", "transfer", str(src), "--to", "h200-sxm", "--out",
                           str(tmp_path / "h200.cal.yaml")], capsys)
    assert code == 0, err
    assert "h100-sxm (hopper) -> h200-sxm (hopper)" in out
    assert "carried graph_kernel_s.hopper" in out
    assert "device compute_fraction.bf16: spec: h200-sxm" in out
    assert src.read_bytes() == before
    hw = pm.load_hardware(str(tmp_path / "h200.cal.yaml"))
    assert hw.id == "h200-sxm"
    assert hw.calibration is not None
    assert hw.calibration.constants["graph_kernel_s.hopper"] == 1.7e-6
    assert "transfer_source_profile_sha256" in hw.calibration.environment
    # predictions read the carried constants: a graph-replayed tiny GEMM pays the floor
    from perfmodel.timing.context import RunContext

    op, ctx = pm.Gemm(m=1, n=64, k=64, dtype="bf16"), RunContext(launch="graph")
    carried = pm.predict(op, hw, context=ctx).latency_s
    plain = pm.predict(op, "h200-sxm", context=ctx).latency_s
    # the floor is stated at the reference SM clock (1.5 GHz); H200 boosts to 1.98 GHz
    assert float(carried) - float(plain) == pytest.approx(
        (1.7e-6 - pm.timing.constants.bundled_constants()["graph_kernel_s.hopper"])
        * 1.5e9 / 1.98e9, rel=1e-6)
    code, out, _ = _run(["calibrate", "transfer", str(src), "--to", "b200", "--out",
                         str(tmp_path / "b200.cal.yaml"), "--json"], capsys)
    doc = json.loads(out)
    assert doc["constants"]["attn.triton.efficiency.blackwell.sglang"]["from"] == \
        "attn.triton.efficiency.hopper.sglang"
    assert "graph_kernel_s.blackwell" not in doc["constants"]
    assert doc["provenance"]["device.memory_fraction"].startswith("spec: b200")


@pytest.mark.parametrize(("args", "message"), [
    (["{missing}", "--to", "b200"], "file not found"),
    (["{plain}", "--to", "b200"], "not a calibrated profile"),
    (["{src}", "--to", "no-such-gpu"], "no-such-gpu"),
    (["{src}", "--to", "mi300x"], "amd device"),
    (["{src}", "--to", "{src}"], "calibrated profile already"),
    (["{src}", "--to", "b200", "--out", "{src}"], "is the input file"),
    (["{src}", "--to", "b200", "--out", "{tmp}"], "is a folder"),
    (["{garbage}", "--to", "b200"], "garbage"),
])
def test_transfer_command_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    args: list[str], message: str) -> None:
    src = _write_profile(tmp_path / "h100.cal.yaml")
    plain = tmp_path / "plain.yaml"
    plain.write_text("extends: h100-sxm\nid: my-h100\n", encoding="utf-8")
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("{{{ not yaml", encoding="utf-8")
    names = {"{missing}": str(tmp_path / "missing.yaml"), "{plain}": str(plain),
             "{src}": str(src), "{tmp}": str(tmp_path), "{garbage}": str(garbage)}
    argv = [names.get(a, a) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "out.yaml")]
    code, _out, err = _run(["calibrate", "transfer", *argv], capsys)
    assert code == 2
    assert err.startswith("error:")
    assert message.lower() in err.lower()
    assert "Traceback" not in err
    assert not (tmp_path / "out.yaml").exists()
