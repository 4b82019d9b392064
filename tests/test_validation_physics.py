"""validate() skips rows no device could have run so fast: their compulsory bytes beyond
the L2 would have to stream from DRAM above the datasheet bandwidth, or their FLOPs run
above the dtype's dense peak."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.measurements import read_measurements
from perfmodel.validation import ValidationReport, validate

HEADER = "spec,op,dtype,m,n,k,measured_us,timing,notes\n"
#: H100 SXM datasheet: 3.35 TB/s HBM3, 50 MiB L2 (hardware_specs/h100-sxm.yaml).
BW, L2 = 3.35e12, 50 * 2**20
#: A bf16 GEMM m = 1, n = k = 16384 reads A (1×k) and B (k×n) and writes C (1×n) once.
M, N, K = 1, 16384, 16384
BYTES = 2 * (M * K + K * N + M * N)
#: The least time the bytes beyond the L2 take at the datasheet bandwidth, µs.
FLOOR_US = (BYTES - L2) / BW * 1e6


def _report(tmp_path: Path, times_us: list[float],
            include_suspect: bool = False) -> ValidationReport:
    path = tmp_path / "m.csv"
    path.write_text(HEADER + "".join(f"h100-sxm,gemm,bf16,{M},{N},{K},{t},x,\n"
                                     for t in times_us))
    return validate(read_measurements(path), include_suspect=include_suspect)


def test_the_floor_by_hand() -> None:
    assert BYTES == 536_936_448
    assert pytest.approx(144.63, abs=0.01) == FLOOR_US


def test_rows_faster_than_the_datasheet_bandwidth_are_skipped_with_the_figures(
        tmp_path: Path) -> None:
    # 100 µs implies 4.85 TB/s; 140 µs 3.46 TB/s (3 % over: beyond the 2 % slack);
    # 143 µs 3.39 TB/s (1 % over: timer rounding, kept); 300 µs is plausible
    report = _report(tmp_path, [100.0, 140.0, 143.0, 300.0])
    assert [r.measured_s * 1e6 for r in report.rows] == [143.0, 300.0]
    assert len(report.skipped) == 2
    reasons = [why for _, why in report.skipped]
    assert "4.85 TB/s" in reasons[0]
    assert "3.46 TB/s" in reasons[1]
    for why in reasons:
        assert "datasheet's 3.35 TB/s" in why
        assert "50 MiB L2" in why
        assert "include_suspect=True" in why


def test_include_suspect_keeps_them(tmp_path: Path) -> None:
    report = _report(tmp_path, [100.0, 300.0], include_suspect=True)
    assert report.skipped == ()
    assert len(report.rows) == 2


def test_a_shape_that_fits_the_l2_is_never_called_too_fast(tmp_path: Path) -> None:
    # 1×4096×4096 bf16 is 33.6 MB < 50 MiB: a warm repeated call may read it all from L2
    path = tmp_path / "m.csv"
    path.write_text(HEADER + "h100-sxm,gemm,bf16,1,4096,4096,1.0,x,\n")
    report = validate(read_measurements(path))
    assert report.skipped == ()


def test_rows_faster_than_the_dense_peak_are_skipped_too(tmp_path: Path) -> None:
    # 8192³ bf16: 2·8192³ = 1.0995e12 FLOP, at H100 SXM's dense 989.4 TFLOP/s at least
    # 1.111 ms; its 402.7 MB of operands take only 104.5 µs beyond the L2: compute binds
    flops = 2.0 * 8192**3
    assert flops / 989.4e12 * 1e6 == pytest.approx(1111.3, abs=0.1)
    path = tmp_path / "m.csv"
    path.write_text(HEADER + "h100-sxm,gemm,bf16,8192,8192,8192,1000,x,\n"
                    + "h100-sxm,gemm,bf16,8192,8192,8192,1200,x,\n")
    report = validate(read_measurements(path))
    assert [r.measured_s * 1e6 for r in report.rows] == [1200.0]
    (_, why), = report.skipped
    assert "1100 TFLOP/s, above the dense peak of 989.4 TFLOP/s" in why
