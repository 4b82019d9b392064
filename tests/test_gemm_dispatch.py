"""Engine GEMM kernels whose CTA tile a fixed table picks by shape (vLLM's and SGLang's SM89
fp8 scaled-mm, TensorRT-LLM's SM89 block-fp8 GEMM): the table's tile is the one timed, not
the fastest of the menu.

The expected tiles are computed here from the engines' own dispatch code as written there
(vLLM: M bucket max(32, next_pow_2(m)) and next_pow_2(n), with its ``np2 <= 8196`` bound;
SGLang: plain bounds on m and n), not from the bounds perfmodel stores.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfmodel as pm
from perfmodel.cli.main import main
from perfmodel.engines import gemm_dispatch
from perfmodel.timing import RunContext, predict
from perfmodel.timing.constants import bundled_constants
from perfmodel.timing.core import make_env
from perfmodel.timing.family import FAMILIES
from perfmodel.timing.gemm import menu_efficiency, time_gemm
from perfmodel.timing.kernels import gemm_cta_bandwidth, gemm_efficiency
from perfmodel.timing.knobs import knobs_for


def _np2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _vllm_sm89(m: int, n: int) -> tuple[int, int]:
    """scaled_mm_c2x_sm89_fp8_dispatch.cuh, branch by branch."""
    mp2, np2 = max(32, _np2(m)), _np2(n)
    if mp2 <= 16:  # dead branch: mp2 >= 32
        return (16, 64) if np2 <= 8192 else (16, 128) if np2 <= 24576 else (32, 64)
    if mp2 <= 32:
        return (32, 64) if np2 <= 8192 else (32, 128) if np2 <= 16384 else (32, 64)
    if mp2 <= 64:
        return (64, 64) if np2 <= 8196 else (64, 128) if np2 <= 16384 else (64, 64)
    if mp2 <= 128:
        return (64, 128) if np2 <= 8192 else (128, 128) if np2 <= 16384 else (128, 64)
    if mp2 <= 256:
        return (64, 128) if np2 <= 4096 else (128, 128)
    return (128, 128) if np2 <= 4096 else (256, 128) if np2 <= 8192 else (128, 128)


def _sglang_sm89(m: int, n: int) -> tuple[int, int]:
    """sgl-kernel fp8_gemm_kernel.cu sm89_fp8_dispatch_shape, branch by branch."""
    if m == 1:
        return (16, 64) if n <= 8192 else (32, 64)
    if m <= 16:
        return (16, 64) if n <= 8192 else (32, 64) if n <= 16384 else (16, 64)
    if m <= 64:
        return (32, 64) if n <= 16384 else (16, 64)
    if m <= 128:
        return (64, 64) if n <= 16384 else (32, 64)
    if m <= 256:
        return (128, 64) if n <= 8192 else (64, 128) if n <= 16384 else (128, 64)
    return (128, 128)


_MS = (1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 128, 129, 255, 256, 257, 511, 512, 513,
       4096, 9000)
_NS = (64, 1000, 4096, 4097, 8192, 8193, 8196, 8197, 12288, 16384, 16385, 24576, 28672,
       40000)


@pytest.mark.parametrize(("engine", "quant", "rule"), [
    ("vllm", "per-tensor", _vllm_sm89), ("vllm", "per-channel", _vllm_sm89),
    ("sglang", "per-channel", _sglang_sm89), ("sglang", "per-tensor", _sglang_sm89),
])
def test_the_stored_tables_select_what_the_engines_code_selects(engine: str, quant: str,
                                                                rule: object) -> None:
    table = gemm_dispatch(engine, "ada", "cutlass", quant)
    assert table is not None
    assert table.source
    for m in _MS:
        for n in _NS:
            assert table.tile(m, n) == rule(m, n), (m, n)  # type: ignore[operator]


def test_tensorrt_llms_sm89_block_fp8_gemm_has_one_tile() -> None:
    # gemm_dispatch_sm89: TileShape GemmShape<32, 128, 128> for every call
    table = gemm_dispatch("trtllm", "ada", "cutlass", "block")
    assert table is not None
    for m in _MS:
        for n in _NS:
            assert table.tile(m, n) == (32.0, 128.0)
    p = predict(pm.Gemm(m=4096, n=7168, k=4096, dtype="fp8", out_dtype="bf16",
                        quant="block", impl="cutlass", quantize_input=True),
                pm.load_hardware("l40s"), context=RunContext(launch="graph", engine="trtllm"))
    assert (float(p.details["tile_m"]), float(p.details["tile_n"])) == (32.0, 128.0)


def test_only_the_encoded_kernels_have_a_table() -> None:
    assert gemm_dispatch("vllm", "hopper", "cutlass", "per-tensor") is None
    assert gemm_dispatch("vllm", "blackwell", "cutlass", "per-tensor") is None
    assert gemm_dispatch("trtllm", "ada", "cublas", "per-tensor") is None
    assert gemm_dispatch("trtllm", "hopper", "cutlass", "block") is None
    assert gemm_dispatch("trtllm", "ada", "cutlass", "per-tensor") is None
    assert gemm_dispatch("vllm", "ada", "triton", "block") is None
    assert gemm_dispatch("none", "ada", "cutlass", "per-tensor") is None
    # a name no engine profile has means no engine, as for the engine-cost lookups
    assert gemm_dispatch("not-an-engine", "ada", "cutlass", "per-tensor") is None
    assert gemm_dispatch("vllm", "ada", "cutlass", "none") is None


def _fp8(m: object, n: object, k: object, quant: str = "per-tensor") -> pm.Gemm:
    return pm.Gemm(m=m, n=n, k=k, dtype="fp8", out_dtype="bf16", quant=quant,
                   impl="cutlass", quantize_input=True)


def test_a_prediction_times_the_tables_tile_where_the_fastest_differs() -> None:
    hw = pm.load_hardware("l40s")
    differs = 0
    for m, n in ((8, 12288), (100, 12288), (200, 4096), (4096, 8192), (4096, 28672)):
        p = predict(_fp8(m, n, 4096), hw, context=RunContext(launch="graph", engine="vllm"))
        free = predict(_fp8(m, n, 4096), hw, context=RunContext(launch="graph"))
        assert (float(p.details["tile_m"]), float(p.details["tile_n"])) == \
            _vllm_sm89(m, n)
        assert p.details["tile_from"] == "the engine's dispatch table"
        assert "tile_from" not in free.details
        differs += (float(free.details["tile_m"]), float(free.details["tile_n"])) != \
            _vllm_sm89(m, n)
    assert differs >= 3  # the menu's fastest tile is another for most of these shapes
    # on Hopper the same engine's kernel keeps the menu's fastest tile
    h100 = pm.load_hardware("h100-sxm")
    ctx = RunContext(launch="graph", engine="vllm")
    assert float(predict(_fp8(4096, 28672, 4096), h100, context=ctx).details["tile_m"]) \
        == float(predict(_fp8(4096, 28672, 4096), h100,
                         context=RunContext(launch="graph")).details["tile_m"])


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(16, 60000), k=st.integers(16, 30000),
       warm=st.booleans())
def test_a_fixed_tile_is_never_faster_than_the_fastest_of_a_menu_holding_it(
        m: int, n: int, k: int, warm: bool) -> None:
    hw = pm.load_hardware("l40s")
    consts = bundled_constants()
    op = _fp8(m, n, k)
    kn = knobs_for(hw, "gemm", op.dtype)
    env = make_env(kn, RunContext(launch="graph", l2="warm" if warm else "cold"), consts,
                   hw.arch)
    args = (op, kn, env, gemm_efficiency(op, consts, hw.arch),
            gemm_cta_bandwidth(kn, consts, op))
    table = gemm_dispatch("vllm", "ada", "cutlass", "per-tensor")
    assert table is not None
    tile = table.tile(m, n)
    fixed = time_gemm(*args, dispatch=table)
    best = time_gemm(*args)
    assert (fixed["tile_m"], fixed["tile_n"]) == tile
    if any((a, b) == tile for a, b, _ in kn.family.tensor_tiles):
        assert fixed["latency_s"] >= best["latency_s"] * (1 - 1e-12)


def test_one_call_over_many_shapes_equals_each_shape_alone() -> None:
    rng = np.random.default_rng(7)
    m, n, k = (rng.integers(1, 9000, 120), rng.integers(64, 40000, 120),
               rng.integers(64, 20000, 120))
    copies = rng.integers(1, 4, 120).astype(float)
    hw = pm.load_hardware("l40s")
    for engine, quant in (("vllm", "per-tensor"), ("sglang", "per-channel")):
        many = predict(_fp8(m, n, k, quant), hw, context=RunContext(
            launch="graph", l2="warm", engine=engine, copies=copies))
        for i in range(0, 120, 7):
            one = predict(_fp8(int(m[i]), int(n[i]), int(k[i]), quant), hw,
                          context=RunContext(launch="graph", l2="warm", engine=engine,
                                             copies=float(copies[i])))
            assert float(np.asarray(many.latency_s)[i]) == pytest.approx(
                float(one.latency_s), rel=1e-12)
            assert float(np.asarray(many.details["tile_m"])[i]) == \
                float(one.details["tile_m"])


def test_a_tile_off_the_menu_takes_the_efficiency_of_its_operand_reuse() -> None:
    menu = FAMILIES["ada"].tensor_tiles
    # on the menu: its own figure
    for tm, tn, e in menu:
        assert menu_efficiency(menu, tm, tn) == e
    # reuse I = tm·tn/(tm + tn): 64×32 has I = 64/3 (e 0.45), 64×64 has I = 32 (e 0.65)
    i_64x32, i_64x64 = 64 * 32 / 96, 32.0
    assert menu_efficiency(menu, 32, 128) == pytest.approx(
        0.45 + (0.65 - 0.45) * (25.6 - i_64x32) / (i_64x64 - i_64x32))
    # below the smallest reuse: proportional to it
    assert menu_efficiency(menu, 16, 64) == pytest.approx(0.45 * 12.8 / i_64x32)
    # above the largest: the largest tile's figure
    assert menu_efficiency(menu, 256, 256) == 1.0
    # more reuse never loses efficiency
    shapes = [(a, b) for a in (8, 16, 32, 48, 64, 96, 128, 192, 256)
              for b in (16, 32, 64, 128, 256)]
    shapes.sort(key=lambda t: t[0] * t[1] / (t[0] + t[1]))
    effs = [menu_efficiency(menu, a, b) for a, b in shapes
            if not any((a, b) == (x, y) for x, y, _ in menu)]
    assert all(y >= x - 1e-12 for x, y in itertools.pairwise(effs))


def test_the_explanation_names_the_tables_tile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "gemm", "--gpu", "l40s", "--m", "100", "--n", "12288", "--k",
                 "4096", "--dtype", "fp8", "--engine", "vllm", "--quant", "per-tensor",
                 "--launch", "graph"]) == 0
    text = capsys.readouterr().out
    assert "tile 128x128" in text  # vLLM's M128 bucket, n = 12,288 <= 16,384
    assert "kernel family cutlass" in text
    assert "tile from the engine's dispatch table" in text
