"""Streaming-op rows (as calibration writes them) are read and predicted by validate()."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfmodel as pm
from perfmodel.measurements import read_measurements
from perfmodel.validation import validate

HEADER = "spec,op,dtype,m,n,measured_us,timing\n"


def test_stream_rows_are_predicted_not_skipped(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    code = "perfmodel_cuda_event_pair_l2_flushed_median"
    path.write_text(HEADER
                    + f"h100-sxm,copy,bf16,67108864,,100,{code}\n"
                    + f"h100-sxm,rmsnorm,bf16,8192,4096,30,{code}\n"
                    + f"h100-sxm,softmax,fp16,4096,4096,20,{code}\n")
    report = validate(read_measurements(path))
    assert report.skipped == ()
    assert len(report.rows) == 3
    # a 64 Mi-element bf16 copy moves 2 * 2 * 2**26 bytes: at most the datasheet bandwidth
    copy = pm.predict(pm.Elementwise(2**26, reads=1, writes=1, flops_per_element=0,
                                     dtype="bf16", kind="copy"), "h100-sxm")
    assert report.predicted_s[0] == pytest.approx(copy.latency_s)
    assert report.predicted_s[0] >= 4 * 2**26 / 3.35e12
    # the perfmodel harness codes are known and add no floor
    assert all("unknown" not in g.floor_rule for g in report.groups)


def test_stream_row_without_its_width_is_skipped_with_the_column(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text(HEADER + "h100-sxm,rmsnorm,bf16,8192,,30,x\n"
                    + "h100-sxm,copy,bf16,1024,,3,x\n")
    ms = read_measurements(path)
    assert len(ms.rows) == 1
    assert "column n" in ms.skipped[0][1]


def test_kernel_path_tells_torch_math_from_a_plain_unfused_path() -> None:
    from perfmodel.validation import kernel_path

    assert kernel_path("math (torch sdpa MATH backend, unfused)")[0] == "math"
    assert kernel_path("naive bmm + softmax")[0] == "naive"
    assert kernel_path("unfused eager attention")[0] == "naive"
    assert kernel_path("flash2 (torch sdpa FLASH_ATTENTION backend)")[0] == "flash2"
