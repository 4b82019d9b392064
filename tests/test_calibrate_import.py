"""``perfmodel calibrate import`` and ``perfmodel explain-trace``: profiler captures mapped to
perfmodel ops, written as measurement rows, explained against the model.

Expected shapes are the ones each test creates (a 64x128 by 128x32 matmul is gemm m=64,
k=128, n=32); expected times are the ones written into the hand-made captures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.capture import Capture, Device, arch_of_cc, check_device
from perfmodel.calibrate.importer import (
    explain,
    group_calls,
    measured_bottleneck,
    measurement_rows,
    read_capture,
)
from perfmodel.calibrate.ncu import TIMING as NCU_TIMING
from perfmodel.calibrate.ncu import nvtx_calls, read_ncu
from perfmodel.calibrate.opmap import MappedOp, dtype_from_kernel, map_op
from perfmodel.calibrate.trace import TIMING_CPU, TIMING_GPU, read_trace
from perfmodel.cli.main import main
from perfmodel.measurements import COLUMNS, read_measurements
from perfmodel.validation import TIMING_FLOORS

FIXTURES = Path(__file__).parent / "fixtures"
NCU_FIXTURE = FIXTURES / "ncu_raw_h100.csv"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------ a CPU trace, recorded here
@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two GEMMs of different shapes, one SDPA call (S_q != S_kv, no mask) and a relu (no
    perfmodel op), profiled on the CPU with record_shapes=True."""
    torch = pytest.importorskip("torch")
    from torch.nn import functional

    a, b = torch.randn(64, 128), torch.randn(128, 32)
    x, w = torch.randn(2, 16, 96), torch.randn(96, 48)
    q = torch.randn(1, 4, 32, 16)
    k, v = torch.randn(1, 4, 40, 16), torch.randn(1, 4, 40, 16)
    for _ in range(2):  # warm up, so the profiled calls are not first calls
        torch.mm(a, b)
        torch.matmul(x, w)
        functional.scaled_dot_product_attention(q, k, v)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True) as prof:
        torch.mm(a, b)
        torch.matmul(x, w)
        functional.scaled_dot_product_attention(q, k, v)
        torch.relu(a)
    path = tmp_path_factory.mktemp("trace") / "cpu_trace.json"
    prof.export_chrome_trace(str(path))
    return path


def test_cpu_trace_maps_to_exactly_the_profiled_ops(cpu_trace: Path) -> None:
    capture = read_trace(cpu_trace)
    assert capture.device.kind == "cpu"
    assert capture.timing == TIMING_CPU
    ops = [u.op for u in capture.units]
    assert [o.op for o in ops] == ["gemm", "gemm", "attention"]
    mm, matmul, sdpa = ops
    assert (mm.m, mm.n, mm.k, mm.batch, mm.dtype) == (64, 32, 128, 1, "fp32")
    # [2, 16, 96] @ [96, 48]: the two leading dims fold into m = 32
    assert (matmul.m, matmul.n, matmul.k, matmul.batch) == (32, 48, 96, 1)
    assert (sdpa.batch, sdpa.heads, sdpa.kv_heads, sdpa.seq_q, sdpa.seq_kv, sdpa.head_dim,
            sdpa.causal, sdpa.dtype) == (1, 4, 4, 32, 40, 16, False, "fp32")
    assert [u.source_op for u in capture.units] == [
        "aten::mm", "aten::matmul", "aten::scaled_dot_product_attention"]
    assert all(u.measured_s > 0 for u in capture.units)


def test_cpu_trace_lists_ops_that_match_nothing(cpu_trace: Path) -> None:
    capture = read_trace(cpu_trace)
    relu = [u for u in capture.unmatched if "relu" in u.name or "relu" in u.context]
    assert relu, [(u.name, u.context) for u in capture.unmatched]
    assert all(u.reason for u in capture.unmatched)


def test_import_writes_rows_in_the_shared_schema(cpu_trace: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.csv"
    code, stdout, err = _run(["calibrate", "import", str(cpu_trace), "--out", str(out),
                              "--gpu", "cpu-local"], capsys)
    assert code == 0, err
    assert "imported 3 op call(s) as 3 row(s)" in stdout
    assert "relu" in err  # unmatched work is listed on stderr
    header = out.read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header == list(COLUMNS)
    rows = read_measurements(out, strict=True).rows
    assert [(r.op, r.m, r.n, r.k) for r in rows[:2]] == [("gemm", 64, 32, 128),
                                                        ("gemm", 32, 48, 96)]
    assert (rows[2].op, rows[2].heads, rows[2].seq_q, rows[2].seq_kv, rows[2].head_dim,
            rows[2].causal) == ("attention", 4, 32, 40, 16, False)
    assert {r.spec for r in rows} == {"cpu-local"}
    assert {r.timing for r in rows} == {TIMING_CPU}
    from perfmodel.calibrate.data import read_rows

    assert len(read_rows(out)[0]) == 3  # calibration's strict reader takes them too
    assert main(["validate", str(out)]) == 0
    capsys.readouterr()
    # an existing --out is never overwritten
    code, _, err = _run(["calibrate", "import", str(cpu_trace), "--out", str(out)], capsys)
    assert code == 2
    assert "--append" in err
    code, _, err = _run(["calibrate", "import", str(cpu_trace), "--out", str(out), "--append"],
                        capsys)
    assert code == 0, err
    assert len(read_measurements(out).rows) == 6


def test_explain_trace_on_the_cpu(cpu_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, err = _run(["explain-trace", str(cpu_trace), "--gpu", "cpu-local", "--json"],
                             capsys)
    assert code == 0, err
    doc = json.loads(stdout)
    assert [o["op"] for o in doc["ops"]] != []
    hw = pm.load_hardware("cpu-local")
    for o in doc["ops"]:
        if o["op"] == "gemm" and o["m"] == 64:
            p = pm.predict(pm.Gemm(m=64, n=32, k=128, dtype="fp32"), hw)
            assert o["predicted_s"] == pytest.approx(float(p.latency_s))
            assert o["ape"] == pytest.approx(abs(o["predicted_s"] - o["measured_s"])
                                             / o["measured_s"])
    assert any("relu" in u["name"] or "relu" in u["context"] for u in doc["unmatched"])


def test_cpu_trace_with_a_gpu_spec_is_refused(cpu_trace: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["explain-trace", str(cpu_trace), "--gpu", "h100-sxm"], capsys)
    assert code == 2
    assert str(cpu_trace) in err
    assert "recorded on the CPU" in err
    assert "fix:" in err
    assert "Traceback" not in err
    code, _, err = _run(["calibrate", "import", str(cpu_trace), "--gpu", "h100-sxm", "--out",
                         str(cpu_trace.with_suffix(".csv"))], capsys)
    assert code == 2
    assert "--gpu cpu-local" in err
    assert not cpu_trace.with_suffix(".csv").exists()


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "binary", "empty", "no-events",
                                    "not-a-trace", "no-shapes"])
def test_damaged_traces_give_clear_errors(cpu_trace: Path, tmp_path: Path, damage: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    text = cpu_trace.read_text(encoding="utf-8")
    bad = tmp_path / f"{damage}.json"
    expect = {"truncated": "truncated", "corrupt": "corrupt JSON", "binary": "UTF-8",
              "empty": "empty", "no-events": "no events", "not-a-trace": "traceEvents",
              "no-shapes": "record_shapes=True"}[damage]
    if damage == "truncated":
        bad.write_text(text[: len(text) // 2], encoding="utf-8")
    elif damage == "corrupt":
        bad.write_text(text.replace('"traceEvents"', '"traceEvents" ]', 1), encoding="utf-8")
    elif damage == "binary":
        bad.write_bytes(b"{\xff\xfe\x00garbage")
    elif damage == "empty":
        bad.write_bytes(b"")
    elif damage == "no-events":
        bad.write_text('{"schemaVersion": 1, "traceEvents": []}', encoding="utf-8")
    elif damage == "not-a-trace":
        bad.write_text('{"hello": 1}', encoding="utf-8")
    else:
        doc = json.loads(text)
        for e in doc["traceEvents"]:
            e.get("args", {}).pop("Input Dims", None)
        bad.write_text(json.dumps(doc), encoding="utf-8")
    code, _, err = _run(["calibrate", "import", str(bad), "--out", str(tmp_path / "o.csv")],
                        capsys)
    assert code == 2
    assert str(bad) in err, err
    assert expect in err, err
    assert "fix:" in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "o.csv").exists()


# ------------------------------------------------------------------ a GPU trace, written by hand
def _gpu_trace() -> dict[str, Any]:
    """A Kineto-style trace written by hand (not recorded on a GPU): cpu_op events on host
    thread (1, 1), kernels on device 0 stream 7, linked three ways: by External id (the
    linear's two kernels), by correlation through the launch call (the SDPA kernel), and by
    a flow event only (the mm kernel). One kernel under aten::relu, one launched outside
    any operator."""
    bf16 = "c10::BFloat16"

    def op(name: str, ts: float, dur: float, ext: int, dims: list[list[int]],
           types: list[str], concrete: list[str] | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"External id": ext, "Input Dims": dims, "Input type": types}
        if concrete is not None:
            args["Concrete Inputs"] = concrete
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                "dur": dur, "args": args}

    def launch(ts: float, corr: int, ext: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                "tid": 1, "ts": ts, "dur": 3, "args": {"correlation": corr, "External id": ext}}

    def kernel(name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts,
                "dur": dur, "args": {"device": 0, "stream": 7, **args}}

    qkv = [[2, 8, 128, 64], [2, 2, 128, 64], [2, 2, 128, 64], [], [], [], [], []]
    events = [
        op("aten::linear", 0, 50, 1, [[8, 4096], [1024, 4096], [1024]], [bf16] * 3),
        op("aten::t", 1, 2, 2, [[1024, 4096]], [bf16]),
        op("aten::addmm", 5, 40, 3, [[1024], [8, 4096], [4096, 1024], [], []], [bf16] * 3),
        launch(10, 900, 3), launch(20, 902, 3),
        op("aten::scaled_dot_product_attention", 100, 60, 4, qkv, [bf16] * 3,
           ["", "", "", "", "0.", "True", "", "True"]),
        op("aten::_scaled_dot_product_flash_attention", 105, 50, 5, qkv[:3] + [[]] * 4,
           [bf16] * 3),
        launch(115, 901, 5),
        op("aten::mm", 200, 30, 6, [[16, 32], [32, 64]], ["float", "float"]),
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 903, "pid": 1, "tid": 1, "ts": 205},
        op("aten::relu", 300, 10, 7, [[16, 64]], ["float"]),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", 30, 12.5,
               correlation=900, **{"External id": 3}),
        kernel("cublasLt::splitKreduce_kernel<bf16>", 43, 2.5, correlation=902,
               **{"External id": 3}),
        kernel("void pytorch_flash::flash_fwd_kernel<cutlass::bfloat16_t>", 130, 30,
               correlation=901),
        kernel("ampere_sgemm_32x32_sliced1x4_nn", 210, 8),
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 903, "pid": 0, "tid": 7, "ts": 210,
         "bp": "e"},
        kernel("void at::native::vectorized_elementwise_kernel<4, clamp_min>", 305, 3,
               **{"External id": 7}),
        kernel("orphan_kernel", 400, 1),
    ]
    return {"schemaVersion": 1, "traceEvents": events,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9,
                                  "computeMinor": 0, "numSms": 132}]}


@pytest.fixture
def gpu_trace(tmp_path: Path) -> Path:
    path = tmp_path / "gpu_trace.json"
    path.write_text(json.dumps(_gpu_trace()), encoding="utf-8")
    return path


def test_gpu_trace_links_kernels_to_their_ops(gpu_trace: Path) -> None:
    capture = read_trace(gpu_trace)
    assert capture.device == Device(kind="gpu", name="NVIDIA H100 80GB HBM3",
                                    compute_capability=(9, 0),
                                    evidence=capture.device.evidence)
    assert capture.timing == TIMING_GPU
    linear, sdpa, mm = capture.units
    # the linear's gemm and split-K reduce kernels: 12.5 + 2.5 µs
    assert (linear.source_op, linear.op.op, linear.op.m, linear.op.n, linear.op.k,
            linear.op.bias, linear.op.dtype) == ("aten::linear", "gemm", 8, 1024, 4096, True,
                                                 "bf16")
    assert linear.measured_s == pytest.approx(15e-6)
    assert len(linear.kernels) == 2
    assert (sdpa.op.op, sdpa.op.batch, sdpa.op.heads, sdpa.op.kv_heads, sdpa.op.seq_q,
            sdpa.op.head_dim, sdpa.op.causal) == ("attention", 2, 8, 2, 128, 64, True)
    assert "flash2" in sdpa.op.impl  # the backend op says FlashAttention-2
    assert sdpa.measured_s == pytest.approx(30e-6)
    assert (mm.op.m, mm.op.n, mm.op.k, mm.op.dtype) == (16, 64, 32, "fp32")
    assert mm.measured_s == pytest.approx(8e-6)
    names = {u.name: u for u in capture.unmatched}
    assert set(names) == {"void at::native::vectorized_elementwise_kernel<4, clamp_min>",
                          "orphan_kernel"}
    relu = names["void at::native::vectorized_elementwise_kernel<4, clamp_min>"]
    assert "aten::relu" in relu.reason
    assert relu.measured_s == pytest.approx(3e-6)
    assert "outside any recorded operator" in names["orphan_kernel"].reason


def test_gpu_trace_device_is_checked(gpu_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["explain-trace", str(gpu_trace), "--gpu", "a100-80gb-sxm"], capsys)
    assert code == 2
    assert str(gpu_trace) in err
    assert "NVIDIA H100 80GB HBM3" in err
    assert "--gpu h100-sxm" in err  # the fix names the right spec
    code, _out, err = _run(["explain-trace", str(gpu_trace), "--gpu", "h100-sxm"], capsys)
    assert code == 0, err
    assert "orphan_kernel" in err  # unmatched kernels listed
    code, _, err = _run(["explain-trace", str(gpu_trace), "--gpu", "a100-80gb-sxm",
                         "--allow-other-gpu"], capsys)
    assert code == 0, err
    code, _, err = _run(["explain-trace", str(gpu_trace), "--gpu", "cpu-local"], capsys)
    assert code == 2
    assert "CPU spec" in err


def test_gpu_trace_rows_default_to_the_recorded_device(gpu_trace: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.csv"
    code, _, err = _run(["calibrate", "import", str(gpu_trace), "--out", str(out)], capsys)
    assert code == 0, err
    rows = read_measurements(out).rows
    assert {r.spec for r in rows} == {"h100-sxm"}
    assert {r.gpu for r in rows} == {"NVIDIA H100 80GB HBM3"}
    assert rows[0].measured_s == pytest.approx(15e-6)
    assert "bias=y" in rows[0].notes


def test_device_check_by_compute_capability() -> None:
    assert arch_of_cc((9, 0)) == "hopper"
    assert arch_of_cc((8, 0)) == "ampere"
    assert arch_of_cc((8, 9)) == "ada"
    assert arch_of_cc((3, 5)) is None
    cap = Capture(path="x.json", format="torch-profiler",
                  device=Device("gpu", "Some Future GPU", (9, 0), "deviceProperties"),
                  units=(), unmatched=(), timing=TIMING_GPU)
    with pytest.raises(PerfmodelError, match="hopper"):
        check_device(cap, pm.load_hardware("a100-80gb-sxm"))
    notes = check_device(cap, pm.load_hardware("h200-sxm"))
    assert notes
    assert "hopper" in notes[0]


# ------------------------------------------------------------------ Nsight Compute exports
def test_ncu_fixture_maps_a_gemm_and_an_attention_kernel() -> None:
    capture = read_ncu(NCU_FIXTURE)
    assert capture.device.name == "NVIDIA H100 80GB HBM3"
    assert capture.device.compute_capability == (9, 0)
    assert capture.timing == NCU_TIMING
    gemm, attn = capture.units
    assert (gemm.op.op, gemm.op.m, gemm.op.n, gemm.op.k, gemm.op.bias, gemm.op.dtype) == (
        "gemm", 4096, 4096, 4096, False, "bf16")
    assert gemm.source_op == "aten::linear"
    assert gemm.measured_s == pytest.approx(196_416e-9)  # "196,416" nsecond
    assert (gemm.sm_pct, gemm.memory_pct, gemm.dram_pct) == (80.45, 48.92, 21.37)
    assert (attn.op.op, attn.op.batch, attn.op.heads, attn.op.seq_q, attn.op.seq_kv,
            attn.op.head_dim, attn.op.causal, attn.op.dtype) == (
        "attention", 1, 32, 4096, 4096, 128, False, "bf16")
    assert attn.measured_s == pytest.approx(812_288e-9)
    assert "flash2" in attn.op.impl
    (fill,) = capture.unmatched
    assert "FillFunctor" in fill.name
    assert "aten::zero_" in fill.reason
    assert read_ncu(NCU_FIXTURE, causal=True).units[1].op.causal


def test_ncu_import_and_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "n.csv"
    code, _, err = _run(["calibrate", "import", str(NCU_FIXTURE), "--out", str(out)], capsys)
    assert code == 0, err
    assert "FillFunctor" in err
    gemm = read_measurements(out).rows[0]
    assert gemm.spec == "h100-sxm"
    assert gemm.timing == NCU_TIMING
    assert float(gemm.extra.get("measured_tflops", "0") or 0) == 0  # a schema column, not extra
    text = out.read_text(encoding="utf-8")
    tflops = 2 * 4096**3 / 196.416e-6 / 1e12
    assert f"{tflops:.5g}" in text
    code, stdout, err = _run(["explain-trace", str(NCU_FIXTURE), "--gpu", "h100-sxm", "--json"],
                             capsys)
    assert code == 0, err
    doc = json.loads(stdout)
    by_op = {o["op"]: o for o in doc["ops"]}
    g = by_op["gemm"]
    p = pm.predict(pm.Gemm(m=4096, n=4096, k=4096, dtype="bf16"), pm.load_hardware("h100-sxm"))
    assert g["predicted_s"] == pytest.approx(float(p.latency_s))
    assert g["predicted_compute_util"] == pytest.approx(float(p.compute_util))
    assert g["measured_sm_pct"] == pytest.approx(80.45)
    assert g["measured_dram_pct"] == pytest.approx(21.37)
    assert g["measured_bottleneck"] == "compute"  # 80.45 % SM over 21.37 % DRAM
    assert g["ape"] == pytest.approx(abs(float(p.latency_s) - 196.416e-6) / 196.416e-6)
    (fill,) = doc["unmatched"]
    assert fill["measured_bottleneck"] == "memory"  # 9.87 % SM, 88.41 % DRAM
    code, stdout, _ = _run(["explain-trace", str(NCU_FIXTURE), "--gpu", "h100-sxm"], capsys)
    assert code == 0
    assert "SM % meas/ours" in stdout
    assert "80.5 / " in stdout
    code, _, err = _run(["explain-trace", str(NCU_FIXTURE), "--gpu", "mi300x"], capsys)
    assert code == 2
    assert "--gpu h100-sxm" in err


def _ncu_lines() -> list[str]:
    return [line for line in NCU_FIXTURE.read_text(encoding="utf-8").splitlines()
            if not line.startswith(("#", "=="))]


@pytest.mark.parametrize("damage", ["no-rows", "zero-bytes", "truncated-row", "no-header",
                                    "no-kernels", "no-duration"])
def test_damaged_ncu_exports_give_clear_errors(tmp_path: Path, damage: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    lines = _ncu_lines()
    bad = tmp_path / f"{damage}.csv"
    expect = {"no-rows": "empty export", "zero-bytes": "empty", "truncated-row": "truncated",
              "no-header": "no Nsight Compute table", "no-kernels": "profiled no kernels",
              "no-duration": "no kernel duration"}[damage]
    if damage == "no-rows":
        bad.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    elif damage == "zero-bytes":
        bad.write_bytes(b"")
    elif damage == "truncated-row":
        bad.write_text("\n".join(lines)[:-200] + "\n", encoding="utf-8")
        expect = f"{bad}:"  # names the line
    elif damage == "no-header":
        bad.write_text("kernel,time\na,1\n", encoding="utf-8")
    elif damage == "no-kernels":
        bad.write_text("==PROF== Disconnected from process 1\n==WARNING== No kernels were "
                       "profiled.\n", encoding="utf-8")
    else:
        bad.write_text("\n".join(lines).replace("gpu__time_duration.sum", "other.metric")
                       + "\n", encoding="utf-8")
    code, _, err = _run(["explain-trace", str(bad), "--gpu", "h100-sxm"], capsys)
    assert code == 2
    assert str(bad) in err, err
    assert expect in err, err
    assert "fix:" in err, err
    assert "Traceback" not in err


def test_ncu_details_page_is_read_too(tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The default --page details export: one line per (kernel, metric)."""
    head = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","Section Name","Metric Name",'
            '"Metric Unit","Metric Value"')
    ident = '"0","1","python3","h","ampere_bf16_s16816gemm_bf16_128x128_nn","1","7",' \
            '"(256, 1, 1)","(64, 1, 1)","0","8.0"'
    sol = '"GPU Speed Of Light Throughput"'
    lines = [head,
             f'{ident},{sol},"Duration","usecond","1,250.50"',
             f'{ident},{sol},"Memory Throughput","Gbyte/s","716.00"',
             f'{ident},{sol},"Memory Throughput","%","35.10"',
             f'{ident},{sol},"Compute (SM) Throughput","%","71.20"',
             f'{ident},{sol},"DRAM Throughput","%","30.00"']
    path = tmp_path / "details.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    capture = read_capture(path)
    assert capture.device.compute_capability == (8, 0)
    assert capture.device.name == ""
    (u,) = capture.unmatched  # no NVTX ranges: no shapes, but listed with its measurement
    assert u.measured_s == pytest.approx(1250.5e-6)
    assert "emit_nvtx" in u.reason
    assert "gemm" in u.reason
    with pytest.raises(PerfmodelError, match="ampere"):
        check_device(capture, pm.load_hardware("h100-sxm"))
    (note,) = check_device(capture, pm.load_hardware("a100-80gb-sxm"))
    assert "names no GPU" in note
    assert "ampere" in note
    code, _, err = _run(["calibrate", "import", str(path), "--out", str(tmp_path / "o.csv"),
                         "--gpu", "a100-80gb-sxm"], capsys)
    assert code == 2
    assert "no launch maps to a perfmodel op" in err
    assert "emit_nvtx" in err
    assert not (tmp_path / "o.csv").exists()


def test_nvtx_range_text() -> None:
    cell = ('7  "<default domain>:aten::linear, seq = 4, op_id = 9, sizes = [[8, 16], '
            '[32, 16], []]:none"  "<default domain>:aten::addmm, seq = 4, sizes = '
            '[[32], [8, 16], [16, 32], [], []]:none"  "<default domain>:my_region:none"')
    calls = nvtx_calls(cell)
    assert [c[0] for c in calls] == ["aten::linear", "aten::addmm"]
    assert calls[0][1] == [[8, 16], [32, 16], []]
    assert nvtx_calls("") == []


# ------------------------------------------------------------------ operator mapping
def _op(name: str, dims: list[list[int]], types: list[str] | None = None,
        concrete: list[str] | None = None) -> MappedOp:
    got = map_op(name, dims, types or ["float"] * max(len(dims), 1), concrete or [])
    assert isinstance(got, MappedOp), got
    return got


def test_gemm_shapes() -> None:
    m = _op("aten::matmul", [[3, 5, 8, 16], [5, 16, 4]])  # batch broadcast 3 x 5
    assert (m.batch, m.m, m.k, m.n) == (15, 8, 16, 4)
    m = _op("aten::linear", [[2, 7, 16], [24, 16], []])
    assert (m.m, m.k, m.n, m.bias) == (14, 16, 24, False)
    m = _op("aten::baddbmm", [[4, 8, 2], [4, 8, 3], [4, 3, 2]])
    assert (m.batch, m.m, m.k, m.n, m.bias) == (4, 8, 3, 2, True)  # adds input, as addmm
    assert not _op("aten::bmm", [[4, 8, 3], [4, 3, 2]]).bias
    m = _op("aten::addmm", [[2], [8, 3], [3, 2]], ["c10::Half"] * 3)
    assert (m.m, m.k, m.n, m.bias, m.dtype) == (8, 3, 2, True, "fp16")
    assert "matrix-vector" in str(map_op("aten::matmul", [[8, 16], [16]], ["float"] * 2))
    assert "inner dims differ" in str(map_op("aten::mm", [[8, 16], [15, 4]], ["float"] * 2))
    assert map_op("aten::conv2d", [[1, 3, 8, 8]], ["float"]) is None


def test_attention_and_stream_shapes() -> None:
    # _flash_attention_forward takes [batch, seq, heads, dim]
    a = _op("aten::_flash_attention_forward",
            [[2, 100, 16, 64], [2, 300, 4, 64], [2, 300, 4, 64]] + [[]] * 6,
            ["c10::BFloat16"] * 3, [""] * 8 + ["True"])
    assert (a.batch, a.heads, a.kv_heads, a.seq_q, a.seq_kv, a.head_dim, a.causal) == (
        2, 16, 4, 100, 300, 64, True)
    s = _op("aten::softmax", [[2, 3, 10], [], []], concrete=["", "1", ""])
    assert (s.op, s.m, s.n) == ("softmax", 20, 3)
    n = _op("aten::layer_norm", [[4, 6, 8], [], [8], [8], [], []], concrete=["", "[6, 8]"])
    assert (n.op, n.m, n.n) == ("layernorm", 4, 48)
    assert _op("aten::silu", [[6, 10]]).op == "silu"
    assert _op("aten::add", [[6, 10], [6, 10], []]).m == 60
    assert "scalar" in str(map_op("aten::add", [[6, 10], [], []], ["float"] * 3))
    assert "broadcast" in str(map_op("aten::add", [[6, 10], [10], []], ["float"] * 3))
    assert "converting copy" in str(map_op("aten::copy_", [[4], [4], []],
                                           ["c10::BFloat16", "float", "Scalar"]))
    assert "not a floating-point dtype" in str(map_op("aten::mm", [[2, 2], [2, 2]],
                                                      ["long int", "long int"]))


def test_dtype_from_kernel_names() -> None:
    assert dtype_from_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n") == "bf16"
    assert dtype_from_kernel("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn") == "fp16"
    assert dtype_from_kernel("flash_fwd_kernel<traits<cutlass::bfloat16_t>>") == "bf16"
    assert dtype_from_kernel("ampere_sgemm_128x64_nn") == "fp32"
    assert dtype_from_kernel("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32") == "fp8"
    assert dtype_from_kernel("triton_poi_fused_0") is None
    # cuDNN's generated SDPA kernels say f16 for bf16 inputs too (seen on an H200): unknown
    assert dtype_from_kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_"
                             "knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0") is None
    assert dtype_from_kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_bf16_"
                             "knob_7") == "bf16"


def test_measured_bottleneck_rule() -> None:
    assert measured_bottleneck(80.0, 40.0, 20.0) == "compute"
    assert measured_bottleneck(20.0, 90.0, 85.0) == "memory"
    assert measured_bottleneck(20.0, 90.0, None) == "memory"
    assert measured_bottleneck(5.0, 9.0, 3.0) == "latency"
    assert measured_bottleneck(None, 50.0) is None


def test_timing_codes_have_floors() -> None:
    for code in (TIMING_GPU, TIMING_CPU, NCU_TIMING):
        assert code in TIMING_FLOORS
        assert TIMING_FLOORS[code][1]


def test_groups_take_the_median_over_calls(gpu_trace: Path) -> None:
    doc = _gpu_trace()
    # repeat the whole trace 3 times later in time, the linear's kernels slower each time
    events = list(doc["traceEvents"])
    for r, extra in ((1, 1.0), (2, 9.0)):
        for e in doc["traceEvents"]:
            e2 = {**e, "ts": e["ts"] + 1000 * r}
            if "args" in e:
                args = dict(e["args"])
                for key in ("External id", "correlation"):
                    if key in args:
                        args[key] += 100 * r
                e2["args"] = args
            if e.get("id") is not None:
                e2["id"] = e["id"] + 100 * r
            if e.get("cat") == "kernel" and "xmma" in e["name"]:
                e2["dur"] = e["dur"] + extra
            events.append(e2)
    gpu_trace.write_text(json.dumps({**doc, "traceEvents": events}), encoding="utf-8")
    capture = read_trace(gpu_trace)
    groups = group_calls(capture)
    assert [g.calls for g in groups] == [3, 3, 3]
    assert groups[0].measured_s == pytest.approx(16e-6)  # median of 15, 16, 24 µs
    rows = measurement_rows(capture, groups, "h100-sxm")
    assert rows[0]["measured_us"] == "16"
    explained = explain(capture, pm.load_hardware("h100-sxm"))
    assert explained[0].group.op.op == "attention"  # largest total time first (3 x 30 µs)


def test_silu_and_gzip_traces_round_trip(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A CPU trace (written by hand) with a plain silu: its row is read back by validate and
    by calibration's strict reader; the same trace gzip-compressed reads the same."""
    import gzip

    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::silu", "pid": 1, "tid": 1, "ts": 0,
         "dur": 10.0, "args": {"Input Dims": [[32, 64]], "Input type": ["float"]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::silu", "pid": 1, "tid": 1, "ts": 20,
         "dur": 14.0, "args": {"Input Dims": [[32, 64]], "Input type": ["float"]}}],
        "deviceProperties": []}
    path = tmp_path / "silu.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    capture = read_capture(path)
    assert capture.device.kind == "cpu"
    (group,) = group_calls(capture)
    assert (group.op.op, group.op.m, group.op.n, group.calls) == ("silu", 32, 64, 2)
    assert group.measured_s == pytest.approx(12e-6)  # median of 10 and 14 µs
    out = tmp_path / "s.csv"
    code, _, err = _run(["calibrate", "import", str(path), "--out", str(out), "--gpu",
                         "cpu-local"], capsys)
    assert code == 0, err
    from perfmodel.calibrate.data import read_rows

    (row,) = read_rows(out)[0]
    assert (row.op, row.sizes) == ("silu", (32.0, 64.0))
    assert main(["validate", str(out)]) == 0



def _read_h100_trace(path: Path, events: list[dict[str, Any]]) -> Capture:
    """``events`` written as a Kineto trace recorded on an H100 at ``path``, read back."""
    doc = {"schemaVersion": 1, "traceEvents": events,
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                 "computeMajor": 9, "computeMinor": 0}]}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return read_trace(path)

# ------------------------------------------------------------------ audit fixes: CPU accounting
def _top_level_us(path: Path) -> float:
    """Sum of the spans of operator calls nested in no other call on their thread, µs."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    ops = sorted((e for e in doc["traceEvents"] if e.get("ph") == "X"
                  and e.get("cat") == "cpu_op"),
                 key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    total = 0.0
    end: dict[tuple[int, int], float] = {}
    for e in ops:
        thread = (e["pid"], e["tid"])
        if e["ts"] + e["dur"] > end.get(thread, -1.0) + 2e-3:
            total += e["dur"]
            end[thread] = e["ts"] + e["dur"]
    return total


def test_cpu_trace_accounts_for_the_time_of_unmapped_parents(tmp_path: Path) -> None:
    """An unmapped or refused operator with nested calls (matmul of a matrix and a vector
    runs aten::mv > aten::addmv_) keeps its own time in the unmatched list, with the
    refusal reason: rows plus unmatched add up to the top-level spans."""
    torch = pytest.importorskip("torch")
    a, v, x = torch.randn(256, 512), torch.randn(512), torch.randn(64, 64)
    for _ in range(2):
        torch.matmul(a, v)
        torch.mm(x, x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True) as prof:
        torch.matmul(a, v)
        torch.mm(x, x)
    path = tmp_path / "mv.json"
    prof.export_chrome_trace(str(path))
    capture = read_trace(path)
    assert [u.source_op for u in capture.units] == ["aten::mm"]
    assert capture.measured_s * 1e6 == pytest.approx(_top_level_us(path), abs=0.01)
    (matmul,) = [u for u in capture.unmatched if u.name == "aten::matmul"]
    assert "matrix-vector" in matmul.reason  # the refusal reason is kept
    assert "self time" in matmul.reason
    assert matmul.measured_s > 0


# ------------------------------------------------------------------ audit fixes: autocast
def test_autocast_gemms_take_the_dtype_and_time_of_the_kernel(tmp_path: Path) -> None:
    """Under torch.autocast the outer aten::linear / aten::matmul keeps fp32 input types and
    holds the casts; the inner call with bf16 inputs ran the GEMM: rows are bf16 and timed
    by the inner call, the casts are listed as unmatched."""
    torch = pytest.importorskip("torch")
    lin, x = torch.nn.Linear(64, 96), torch.randn(32, 64)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        lin(x)
        torch.matmul(x, x.t())
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    record_shapes=True) as prof:
            y = lin(x)
            z = torch.matmul(x, x.t())
    assert (y.dtype, z.dtype) == (torch.bfloat16, torch.bfloat16)
    path = tmp_path / "autocast.json"
    prof.export_chrome_trace(str(path))
    capture = read_trace(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    spans = {(e["name"], e["args"]["Input type"][0]): e["dur"] * 1e-6
             for e in doc["traceEvents"] if e.get("cat") == "cpu_op"
             and e["name"] in ("aten::linear", "aten::matmul")}
    linear, matmul = capture.units
    bf16 = "c10::BFloat16"
    assert (linear.op.op, linear.op.m, linear.op.n, linear.op.k, linear.op.bias,
            linear.op.dtype) == ("gemm", 32, 96, 64, True, "bf16")
    assert (matmul.op.m, matmul.op.n, matmul.op.k, matmul.op.dtype) == (32, 32, 64, "bf16")
    ns = 2e-9  # the trace's times are rounded to 1 ns
    assert linear.measured_s == pytest.approx(spans[("aten::linear", bf16)], abs=ns)
    assert matmul.measured_s == pytest.approx(spans[("aten::matmul", bf16)], abs=ns)
    casts = [u for u in capture.unmatched if u.name == "aten::copy_"]
    assert casts
    assert all("converting copy" in u.reason for u in casts)
    assert any("autocast" in u.reason for u in capture.unmatched)
    assert capture.measured_s * 1e6 == pytest.approx(_top_level_us(path), abs=0.01)


def test_autocast_gpu_gemm_is_the_inner_calls_kernel(tmp_path: Path) -> None:
    """A hand-written GPU trace of an autocast linear: the outer fp32 call holds a cast
    kernel (under aten::to) and the inner bf16 call's GEMM kernel; the row is the GEMM's,
    bf16, 20 µs; the cast kernel is listed with its reason."""
    def op(name: str, ts: float, dur: float, ext: int, dims: list[list[int]],
           types: list[str]) -> dict[str, Any]:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                "dur": dur, "args": {"External id": ext, "Input Dims": dims,
                                     "Input type": types}}

    def kernel(name: str, ts: float, dur: float, ext: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts,
                "dur": dur, "args": {"device": 0, "stream": 7, "External id": ext}}

    bf16 = "c10::BFloat16"
    dims = [[8, 4096], [1024, 4096], [1024]]
    events = [
        op("aten::linear", 0, 100, 1, dims, ["float"] * 3),
        op("aten::to", 2, 20, 2, [[8, 4096], [], [], [], []], ["float", "Scalar"]),
        op("aten::_to_copy", 3, 18, 3, [[8, 4096], [], []], ["float", "Scalar"]),
        op("aten::copy_", 5, 10, 4, [[8, 4096], [8, 4096], []], [bf16, "float", "Scalar"]),
        op("aten::linear", 30, 60, 5, dims, [bf16] * 3),
        op("aten::addmm", 35, 50, 6, [[1024], [8, 4096], [4096, 1024], [], []], [bf16] * 3),
        kernel("void at::native::unrolled_elementwise_kernel<copy_kernel>", 110, 4, 4),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", 120, 20, 6),
    ]
    capture = _read_h100_trace(tmp_path / "autocast_gpu.json", events)
    (unit,) = capture.units
    assert (unit.op.m, unit.op.n, unit.op.k, unit.op.dtype) == (8, 1024, 4096, "bf16")
    assert unit.measured_s == pytest.approx(20e-6)
    (cast,) = capture.unmatched
    assert "copy_kernel" in cast.name
    assert cast.measured_s == pytest.approx(4e-6)
    assert "autocast" in cast.reason
    assert "converting copy" in cast.reason
    assert not capture.notes  # the outer call is not reported as launching nothing


# ------------------------------------------------------------------ audit fixes: attention masks
def test_top_left_causal_and_masks_are_not_mapped_to_other_work() -> None:
    """torch's is_causal is a top-left mask; perfmodel's causal is bottom-right: equal only
    when S_q == S_kv. Calls with a mask tensor have work perfmodel cannot know."""
    q, kv = [1, 8, 128, 64], [1, 8, 1024, 64]
    sdpa = "aten::scaled_dot_product_attention"
    flags = ["", "", "", "", "0.", "True", "", "False"]
    got = map_op(sdpa, [q, kv, kv, [], [], [], [], []], ["float"] * 3, flags)
    assert isinstance(got, str)
    assert "top-left" in got
    assert "seq_q 128 != seq_kv 1024" in got
    square = _op(sdpa, [q, q, q, [], [], [], [], []], concrete=flags)
    assert square.causal  # top-left and bottom-right agree when S_q == S_kv
    for mask in ([128, 1024], [1, 8, 128, 1024]):
        got = map_op(sdpa, [q, kv, kv, mask, [], [], [], []], ["float"] * 3 + ["bool"],
                     ["", "", "", "", "0.", "False", "", "False"])
        assert isinstance(got, str)
        assert "mask" in got
        assert str(mask) in got
        assert "bool" in got
    # the CPU flash backend keeps the top-left meaning and takes its mask at index 5
    cpu = "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert "top-left" in str(map_op(cpu, [q, kv, kv, [], [], [], []], ["float"] * 3,
                                    ["", "", "", "0.", "True", "", ""]))
    assert "mask" in str(map_op(cpu, [q, kv, kv, [], [], [128, 1024], []], ["float"] * 3,
                                ["", "", "", "0.", "False", "", ""]))
    # _efficient_attention_forward ([B, S, H, D]): custom_mask_type 1 top-left, 2 bottom-right
    eff = "aten::_efficient_attention_forward"
    qs, kvs = [1, 128, 8, 64], [1, 1024, 8, 64]
    dims: list[list[int]] = [qs, kvs, kvs] + [[]] * 8
    top = map_op(eff, dims, ["c10::BFloat16"] * 3, [""] * 9 + ["1"])
    assert "top-left" in str(top)
    right = _op(eff, dims, ["c10::BFloat16"] * 3, [""] * 9 + ["2"])
    assert (right.seq_q, right.seq_kv, right.causal) == (128, 1024, True)
    assert not _op(eff, dims, ["c10::BFloat16"] * 3, [""] * 9 + ["0"]).causal


def test_cpu_trace_with_top_left_causal_and_masks_writes_no_attention_row(
        tmp_path: Path) -> None:
    """The auditor's calls (is_causal with S_q 128 < S_kv 1024, causal_lower_right, an
    explicit boolean mask), recorded on the CPU: none becomes an attention row, each is
    listed with its reason, and their time is accounted for."""
    torch = pytest.importorskip("torch")
    from torch.nn import functional
    from torch.nn.attention.bias import causal_lower_right

    q = torch.randn(1, 2, 16, 8)
    k, v = torch.randn(1, 2, 64, 8), torch.randn(1, 2, 64, 8)
    mask = torch.ones(16, 64, dtype=torch.bool).tril()
    a = torch.randn(16, 16)

    def run() -> None:
        functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        functional.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(16, 64))
        functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.mm(a, a)

    run()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True) as prof:
        run()
    path = tmp_path / "causal.json"
    prof.export_chrome_trace(str(path))
    capture = read_trace(path)
    assert [u.op.op for u in capture.units] == ["gemm"]
    reasons = [u.reason for u in capture.unmatched if "attention" in u.name]
    assert any("top-left" in r for r in reasons), reasons
    assert any("mask" in r and "[16, 64]" in r for r in reasons), reasons
    assert capture.measured_s * 1e6 == pytest.approx(_top_level_us(path), abs=0.01)


# ------------------------------------------------------------------ audit fixes: memcpy
def test_host_device_memcpy_is_a_transfer_not_a_copy(tmp_path: Path) -> None:
    """aten::copy_ of a host tensor to the GPU runs a 'Memcpy HtoD' activity: listed as a
    transfer, not imported as an on-device copy; a DtoD memcpy still is a copy."""
    def op(name: str, ts: float, ext: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                "dur": 20, "args": {"External id": ext, "Input Dims": [[1024, 1024]] * 2
                                    + [[]], "Input type": ["float", "float", "Scalar"]}}

    def memcpy(name: str, ts: float, dur: float, ext: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": 0, "tid": 7, "ts": ts,
                "dur": dur, "args": {"device": 0, "stream": 7, "External id": ext}}

    events = [op("aten::copy_", 0, 1), op("aten::copy_", 100, 2), op("aten::copy_", 200, 3),
              memcpy("Memcpy HtoD (Pageable -> Device)", 5, 400.0, 1),
              memcpy("Memcpy DtoH (Device -> Pinned)", 500, 300.0, 2),
              memcpy("Memcpy DtoD (Device -> Device)", 900, 6.0, 3)]
    capture = _read_h100_trace(tmp_path / "memcpy.json", events)
    (dtod,) = capture.units
    assert (dtod.op.op, dtod.op.m) == ("copy", 1024 * 1024)
    assert dtod.measured_s == pytest.approx(6e-6)
    assert [u.name.split()[1] for u in capture.unmatched] == ["HtoD", "DtoH"]
    assert all("host-device transfer, not a device kernel" in u.reason
               for u in capture.unmatched)
    assert [u.measured_s for u in capture.unmatched] == pytest.approx([400e-6, 300e-6])


# ------------------------------------------------------------------ audit fixes: ncu launch IDs
def test_ncu_repeated_launch_ids_stay_separate_launches(tmp_path: Path) -> None:
    """Launch IDs restart in an export of two processes: each line of the raw page is its
    own launch, with its own name, ranges and time (a repeated ID took the first line's
    kernel and ranges and the last line's metrics)."""
    lines = _ncu_lines()
    assert lines[-1].startswith('"2",')
    lines[-1] = '"0",' + lines[-1][4:]  # the fill kernel's launch reuses ID 0
    path = tmp_path / "dup.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    capture = read_ncu(path)
    gemm, attn = capture.units
    assert gemm.source_op == "aten::linear"
    assert gemm.measured_s == pytest.approx(196_416e-9)
    assert attn.measured_s == pytest.approx(812_288e-9)
    (fill,) = capture.unmatched
    assert "FillFunctor" in fill.name
    assert fill.measured_s == pytest.approx(18_912e-9)
    assert fill.context.startswith("ID 0, line ")
    assert any("launch ID 0 appears 2 times" in n for n in capture.notes)


def test_ncu_details_page_with_a_repeated_launch_id(tmp_path: Path) -> None:
    """The details page: lines of one launch share ID and kernel; the same ID again with
    another kernel, or with a metric already read, starts another launch."""
    head = ('"ID","Kernel Name","CC","Section Name","Metric Name","Metric Unit",'
            '"Metric Value"')
    sol = '"GPU Speed Of Light Throughput"'
    lines = [head]
    for kernel, us in (("ampere_bf16_s16816gemm_bf16_128x128_nn", "10.00"),
                       ("ampere_bf16_s16816gemm_bf16_128x128_nn", "20.00"),
                       ("void at::native::FillFunctor<float>", "30.00")):
        lines += [f'"0","{kernel}","8.0",{sol},"Duration","usecond","{us}"',
                  f'"0","{kernel}","8.0",{sol},"Compute (SM) Throughput","%","50"']
    path = tmp_path / "details_dup.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    capture = read_ncu(path)
    assert [u.measured_s for u in capture.unmatched] == pytest.approx([10e-6, 20e-6, 30e-6])


def test_ncu_two_exports_appended_are_refused_by_line(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A second header inside the file is two exports appended, not several GPUs."""
    lines = _ncu_lines()
    path = tmp_path / "appended.csv"
    path.write_text("\n".join(lines + lines) + "\n", encoding="utf-8")
    code, _, err = _run(["calibrate", "import", str(path), "--out", str(tmp_path / "o.csv")],
                        capsys)
    assert code == 2
    assert f"{path}:{len(lines) + 1}: the header line repeats" in err, err
    assert "two exports appended" in err
    assert "several GPUs" not in err
    assert "fix:" in err
    assert not (tmp_path / "o.csv").exists()


def test_assumed_softmax_dim_and_norm_width_are_noted(tmp_path: Path) -> None:
    """An Nsight export records no non-tensor arguments: softmax's dim and a norm's
    normalized_shape are then taken as the last dim, and the row says so."""
    s = _op("aten::softmax", [[2, 3, 10], [], []])
    assert (s.m, s.n, s.note) == (6, 10, "dim=assumed-last")
    assert _op("aten::softmax", [[2, 3, 10], [], []], concrete=["", "-1", ""]).note == ""
    n = _op("aten::layer_norm", [[4, 6, 8], [], [8], [8], [], []])
    assert (n.m, n.n, n.note) == (24, 8, "width=assumed-last-dim")
    assert _op("aten::layer_norm", [[4, 6, 8], [], [8], [8], [], []],
               concrete=["", "[8]"]).note == ""
    assert _op("aten::rms_norm", [[4, 8], [], [8], []]).note == "width=assumed-last-dim"
    rng = '""<default domain>:aten::softmax, seq = 0, op_id = 1, sizes = [[128, 128], [], []]""'
    path = tmp_path / "softmax.csv"
    path.write_text('"ID","Kernel Name","CC","thread Domain:Push/Pop_Range",'
                    '"gpu__time_duration.sum"\n"","","","","usecond"\n'
                    f'"0","void softmax_warp_forward<c10::BFloat16>","9.0","{rng}","7.0"\n',
                    encoding="utf-8")
    capture = read_ncu(path)
    (row,) = measurement_rows(capture, group_calls(capture), "h100-sxm")
    assert (row["op"], row["m"], row["n"]) == ("softmax", 128, 128)
    assert "dim=assumed-last" in str(row["notes"])


def test_ops_timed_at_zero_are_not_written_and_a_failed_import_names_the_largest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a call below the trace's timer resolution (dur 0) was written as measured_us=0, which
    # validate and calibrate fit then refuse
    def op(name: str, ts: float, dur: float, dims: list[list[int]]) -> dict[str, Any]:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                "dur": dur, "args": {"Input Dims": dims, "Input type": ["float"]}}

    doc = {"traceEvents": [op("aten::silu", 0, 10.0, [[32, 64]]),
                           op("aten::silu", 20, 0.0, [[8, 8]])], "deviceProperties": []}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "t.csv"
    code, _, err = _run(["calibrate", "import", str(path), "--out", str(out), "--gpu",
                         "cpu-local"], capsys)
    assert code == 0, err
    assert "timed at 0 s" in err
    from perfmodel.measurements import read_measurements

    assert [r.op for r in read_measurements(out, strict=True).rows] == ["silu"]
    # nothing maps: the error names the largest unmatched call, not the first
    doc = {"traceEvents": [op("aten::frobnicate", 0, 1.0, [[4]]),
                           op("aten::big_unknown_op", 10, 500.0, [[4]])],
           "deviceProperties": []}
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, _, err = _run(["calibrate", "import", str(path), "--out", str(tmp_path / "u.csv"),
                         "--gpu", "cpu-local"], capsys)
    assert code != 0
    assert "big_unknown_op" in err
