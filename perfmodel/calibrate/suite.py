"""The designed microbenchmark suite, as data: which kernels to time, and how many fit a
time budget.

Design (per device kind):

- **GEMM** spanning the regimes of the timing model: latency-bound (tiny products, where
  the fixed cost per kernel dominates), memory-bound (matrix-vector and skinny products,
  m ≤ 64), compute-bound (large square and rectangular products), and tile/wave edges (a
  tile count that exactly fills the device, then one tile row more; sizes one past a
  multiple of the tile), plus batched products.
- **Attention** through ``torch.nn.functional.scaled_dot_product_attention``: the fused
  (flash) backend for prefill (causal and not, GQA) and decode with a long KV cache, and
  the unfused math path. Sequence lengths above 4k are tagged ``extrapolation`` so a report
  can fit on S ≤ 4k and predict them.
- **Streams**: copies from a few kB to well past the last-level cache (bandwidth vs size),
  residual add, RMSNorm/LayerNorm, GELU and softmax (single-kernel ops in eager torch).

Cases come in tiers: tier 0 covers every regime coarsely, later tiers refine it. A budget
keeps whole tiers first, round-robin across families, using perfmodel's own prediction of
each case to estimate its measuring time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from perfmodel.calibrate.data import Row, dataset_from_rows
from perfmodel.engines import PRE_AMPERE_ARCHS
from perfmodel.hardware.spec import HardwareSpec

__all__ = ["Case", "DeviceKind", "design_suite", "estimate_seconds", "select_cases"]

DeviceKind = Literal["cuda", "cpu"]

#: ``impl`` text written for each attention path (read back by perfmodel.validation's
#: kernel_path: "flash2" -> FA2-class fused kernel, "math" -> unfused path).
ATTN_IMPL = {
    "flash": "flash2 (torch sdpa FLASH_ATTENTION backend)",
    "mem-efficient": "mem-efficient (torch sdpa EFFICIENT_ATTENTION backend)",
    "math": "math (torch sdpa MATH backend, unfused)",
    "cpu": "flash (torch sdpa, cpu fused kernel)",
}

_SIZE_COLUMNS = ("batch", "m", "n", "k", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim")


@dataclass(frozen=True)
class Case:
    """One kernel to time: an op, its dtype, the path, its sizes and a design tag."""

    op: str
    dtype: str
    sizes: tuple[tuple[str, int], ...]
    impl: str = ""
    causal: bool = False
    phase: str = ""
    tag: str = ""
    """Design regime (latency, memory, compute, wave-edge, ...)."""
    tier: int = 0
    extra: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def size(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def family(self) -> str:
        if self.op == "gemm":
            return "gemm"
        if self.op == "attention":
            return "attention"
        return "stream"

    @property
    def id(self) -> str:
        """Stable identifier (written to ``notes`` as ``case=...``; used to resume)."""
        dims = ",".join(f"{k}{v}" for k, v in self.sizes)
        path = self.impl.split(" ")[0] if self.impl else ""
        causal = ",causal" if self.causal else ""
        return f"{self.op}:{self.dtype}:{path}{causal}:{dims}".replace(" ", "")

    def csv_row(self) -> dict[str, object]:
        """Shared-schema columns of this case (without the measurement)."""
        row: dict[str, object] = {"op": self.op, "dtype": self.dtype, "impl": self.impl,
                                  "phase": self.phase}
        row.update(self.size)
        if self.op == "attention":
            row["causal"] = self.causal
            row["direction"] = "fwd"
        return row

    def as_row(self, measured_s: float = 1e-3, timing: str = "") -> Row:
        """The case as a calibration :class:`Row` (for predictions)."""
        from perfmodel.calibrate.data import parse_line

        raw = dict.fromkeys(("spec", "source", "gpu", "impl", "phase", "notes", "causal",
                             *_SIZE_COLUMNS), "")
        raw.update({k: str(v) for k, v in self.csv_row().items()})
        raw["measured_us"] = repr(measured_s * 1e6)
        raw["timing"] = timing
        return parse_line(raw, 0)


def _g(m: int, n: int, k: int, b: int = 1, *, dtype: str, tag: str, tier: int) -> Case:
    sizes = (("batch", b), ("m", m), ("n", n), ("k", k))
    return Case(op="gemm", dtype=dtype, sizes=sizes, impl="torch.matmul", tag=tag, tier=tier)


def _a(b: int, h: int, kv: int, sq: int, skv: int, d: int, *, dtype: str, path: str,
       causal: bool, tag: str, tier: int) -> Case:
    sizes = (("batch", b), ("heads", h), ("kv_heads", kv), ("seq_q", sq), ("seq_kv", skv),
             ("head_dim", d))
    phase = "decode" if sq == 1 else "prefill"
    if sq > 4096 or (skv > 4096 and sq > 1):
        tag = "extrapolation"
    return Case(op="attention", dtype=dtype, sizes=sizes, impl=ATTN_IMPL[path],
                causal=causal, phase=phase, tag=tag, tier=tier)


def _s(op: str, m: int, n: int | None = None, *, dtype: str, tag: str, tier: int) -> Case:
    sizes: tuple[tuple[str, int], ...] = (("m", m),) if n is None else (("m", m), ("n", n))
    return Case(op=op, dtype=dtype, sizes=sizes, impl="torch", tag=tag, tier=tier)


def _wave_edges(units: int, tile: int, n_tiles: int, k: int, dtype: str) -> list[Case]:
    """m at one full wave of ``tile``×``tile`` output tiles, and one tile row more."""
    n = tile * n_tiles
    rows_full = max(units // n_tiles, 1)
    out = []
    for rows, tier in ((rows_full, 1), (rows_full + 1, 1), (2 * rows_full, 2),
                       (2 * rows_full + 1, 2)):
        out.append(_g(rows * tile, n, k, dtype=dtype, tag="wave-edge", tier=tier))
    return out


def gemm_cases(kind: DeviceKind, dtype: str, units: int) -> list[Case]:
    """GEMM shapes across latency-, memory- and compute-bound regimes and wave edges."""
    big = 16384 if kind == "cuda" else 2048
    out: list[Case] = []
    # latency-bound: tiny products
    for i, s in enumerate((16, 64, 128, 256) if kind == "cuda" else (8, 32, 64)):
        out.append(_g(s, s, s, dtype=dtype, tag="latency", tier=0 if i % 2 == 0 else 1))
    # memory-bound: GEMV and skinny products (weights streamed once)
    widths = (4096, 8192, 16384) if kind == "cuda" else (512, 1024, 2048)
    for i, w in enumerate(widths):
        for j, m in enumerate((1, 8, 32, 64) if kind == "cuda" else (1, 4, 16)):
            out.append(_g(m, w, w, dtype=dtype, tag="memory", tier=(i + j) % 3))
    # compute-bound: square and rectangular
    s = 512
    tier_sq = 0
    while s <= big:
        out.append(_g(s, s, s, dtype=dtype, tag="compute", tier=tier_sq % 2))
        tier_sq += 1
        s *= 2
    rect = ((4096, 4096, 512), (512, 4096, 4096), (8192, 1024, 8192), (2048, 8192, 2048),
            (16384, 4096, 1024)) if kind == "cuda" else (
        (1024, 1024, 128), (128, 1024, 1024), (2048, 256, 1024), (512, 2048, 512))
    for i, (m, n, k) in enumerate(rect):
        out.append(_g(m, n, k, dtype=dtype, tag="compute", tier=i % 3))
    # odd sizes: padded edge tiles
    odd = ((4097, 4096, 4096), (1000, 3000, 2000), (129, 4096, 4096)) if kind == "cuda" else (
        (513, 512, 512), (300, 700, 500), (65, 1024, 1024))
    for i, (m, n, k) in enumerate(odd):
        out.append(_g(m, n, k, dtype=dtype, tag="wave-edge", tier=1 + i % 2))
    # waves: exactly one wave of tiles, then one tile row more
    if kind == "cuda":
        out += _wave_edges(units, 128, 16, 4096, dtype)
        out += _wave_edges(units, 128, 8, 8192, dtype)
    else:
        out += _wave_edges(units, 64, 8, 512, dtype)
    # batched
    batched = ((8, 512, 512, 512), (32, 128, 128, 64), (64, 2048, 64, 128)) if kind == "cuda" \
        else ((8, 128, 128, 128), (16, 64, 64, 64), (4, 512, 64, 128))
    for i, (b, m, n, k) in enumerate(batched):
        out.append(_g(m, n, k, b, dtype=dtype, tag="batched", tier=i % 3))
    return out


def fused_path(kind: DeviceKind, arch: str = "") -> str:
    """The fused SDPA path the suite times: PyTorch's FlashAttention-2 backend on a CUDA GPU
    from Ampere on, its memory-efficient backend before (FlashAttention-2 needs SM80), the
    CPU's fused kernel on the CPU."""
    if kind != "cuda":
        return "cpu"
    return "mem-efficient" if arch in PRE_AMPERE_ARCHS else "flash"


def attention_cases(kind: DeviceKind, dtype: str, arch: str = "") -> list[Case]:
    """Fused prefill (causal and not, GQA), decode with long KV caches, and the math path
    (the fused path by :func:`fused_path`)."""
    out: list[Case] = []
    fused = fused_path(kind, arch)
    seqs: tuple[int, ...]
    if kind == "cuda":
        seqs = (512, 1024, 2048, 4096, 8192, 16384, 32768)
        heads, d = 32, 128
    else:
        seqs = (128, 256, 512, 1024, 2048)
        heads, d = 8, 64
    for i, s in enumerate(seqs):
        batch = max(1, (16384 if kind == "cuda" else 2048) // s)
        tier = 0 if i % 2 == 0 else 1
        out.append(_a(batch, heads, heads, s, s, d, dtype=dtype, path=fused, causal=False,
                      tag="compute", tier=tier))
        out.append(_a(batch, heads, heads, s, s, d, dtype=dtype, path=fused, causal=True,
                      tag="compute", tier=1 - tier))
        out.append(_a(1, heads, heads // 4, s, s, d, dtype=dtype, path=fused, causal=True,
                      tag="gqa", tier=2))
    if kind == "cuda":
        out.append(_a(4, 16, 16, 2048, 2048, 64, dtype=dtype, path=fused, causal=True,
                      tag="compute", tier=1))
    # decode: one query, long KV cache (memory-bound KV stream), GQA
    ctx = (1024, 4096, 16384, 65536, 131072) if kind == "cuda" else (256, 1024, 4096, 16384)
    batches = (1, 8, 32) if kind == "cuda" else (1, 4)
    for i, c in enumerate(ctx):
        for j, b in enumerate(batches):
            out.append(_a(b, heads, max(heads // 4, 1), 1, c, d, dtype=dtype, path=fused,
                          causal=False, tag="decode", tier=(i + j) % 3))
    # unfused math path (scores written to memory): moderate S only
    math_seqs = (256, 512, 1024, 2048) if kind == "cuda" else (64, 128, 256, 512)
    for i, s in enumerate(math_seqs):
        b = max(1, (4096 if kind == "cuda" else 512) // s)
        out.append(_a(b, heads, heads, s, s, d, dtype=dtype, path="math", causal=i % 2 == 1,
                      tag="naive", tier=i % 2))
    return out


def stream_cases(kind: DeviceKind, dtype: str) -> list[Case]:
    """Copies (bandwidth vs size), residual add, norms, activations, softmax."""
    out: list[Case] = []
    top = 30 if kind == "cuda" else 25          # 2^30 or 2^25 elements
    for i, e in enumerate(range(10, top + 1, 2)):
        out.append(_s("copy", 2**e, dtype=dtype, tag="bandwidth", tier=i % 2))
    for i, e in enumerate(range(12, top - 1, 4)):
        out.append(_s("add", 2**e, dtype=dtype, tag="bandwidth", tier=i % 2))
    hidden = 4096 if kind == "cuda" else 1024
    tokens = (1, 64, 1024, 16384) if kind == "cuda" else (1, 64, 1024)
    for i, t in enumerate(tokens):
        out.append(_s("rmsnorm", t, hidden, dtype=dtype, tag="norm", tier=i % 2))
        out.append(_s("layernorm", t, hidden, dtype=dtype, tag="norm", tier=1 + i % 2))
        out.append(_s("gelu", t, hidden * 2, dtype=dtype, tag="activation", tier=i % 3))
        out.append(_s("softmax", t * 8, hidden, dtype=dtype, tag="softmax", tier=1 + i % 2))
    return out


def _log_uniform(rng: np.random.Generator, lo: float, hi: float, multiple: int = 1) -> int:
    value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return int(max(multiple, round(value / multiple) * multiple))


def fill_cases(kind: DeviceKind, dtype: str, count: int, seed: int = 0,
               arch: str = "") -> list[list[Case]]:
    """Tier-3 cases: shapes drawn log-uniformly inside the designed ranges (a fixed seed,
    so the same budget gives the same suite). Returns [gemm, attention, stream] lists;
    these are what a larger budget buys: more shapes for the fit and its cross-validation."""
    rng = np.random.default_rng(seed)
    cuda = kind == "cuda"
    gemm: list[Case] = []
    attn: list[Case] = []
    stream: list[Case] = []
    top = 16384 if cuda else 2048
    flop_cap = 2 * 16384**3 if cuda else 2 * 1536**3
    while len(gemm) < count:
        m = _log_uniform(rng, 1, top)
        n = _log_uniform(rng, 16, top, 16)
        k = _log_uniform(rng, 16, top, 16)
        b = 1 if rng.uniform() < 0.8 else int(rng.choice([2, 4, 8, 16]))
        if 2 * m * n * k * b > flop_cap:
            continue
        gemm.append(_g(m, n, k, b, dtype=dtype, tag="fill", tier=3))
    heads, d = (32, 128) if cuda else (8, 64)
    while len(attn) < count:
        group = int(rng.choice([1, 4, 8])) if cuda else int(rng.choice([1, 4]))
        dd = int(rng.choice([64, 128])) if cuda else d
        if rng.uniform() < 0.4:  # decode
            ctx = _log_uniform(rng, 256, 131072 if cuda else 16384)
            b = int(rng.choice([1, 2, 4, 8, 16, 32, 64] if cuda else [1, 2, 4, 8]))
            attn.append(_a(b, heads, heads // group, 1, ctx, dd, dtype=dtype,
                           path=fused_path(kind, arch), causal=False, tag="fill", tier=3))
        else:
            s = _log_uniform(rng, 128, 8192 if cuda else 1536, 64)
            b = max(1, int((16384 if cuda else 1024) // s * rng.uniform(0.25, 1.0)))
            path = "math" if rng.uniform() < 0.15 and s <= (2048 if cuda else 512) else \
                fused_path(kind, arch)
            attn.append(_a(b, heads, heads // group if path != "math" else heads, s, s, dd,
                           dtype=dtype, path=path, causal=bool(rng.uniform() < 0.5),
                           tag="fill", tier=3))
    ops = ("copy", "add", "rmsnorm", "layernorm", "gelu", "softmax")
    top_e = 2**30 if cuda else 2**24
    while len(stream) < count:
        op = ops[len(stream) % len(ops)]
        if op in ("copy", "add"):
            stream.append(_s(op, _log_uniform(rng, 256, top_e), dtype=dtype, tag="fill",
                             tier=3))
        else:
            width = int(rng.choice([512, 1024, 2048, 4096, 8192] if cuda else [256, 512, 1024,
                                                                               2048]))
            rows = _log_uniform(rng, 1, max(top_e // width, 2))
            stream.append(_s(op, rows, width, dtype=dtype, tag="fill", tier=3))
    return [gemm, attn, stream]


def design_suite(kind: DeviceKind, units: int, dtypes: Sequence[str] | None = None,
                 fill: int = 300, arch: str = "") -> list[Case]:
    """Every case of the suite for a device, in priority order: tier by tier, families
    interleaved round-robin inside a tier (so a truncated run still spans them all);
    ``fill`` log-uniform cases per family come last (tier 3). ``arch`` (the spec's) picks
    the fused attention path (:func:`fused_path`) and, before Ampere, the default dtype
    (fp16: no bf16 tensor cores)."""
    if dtypes is None:
        dtypes = ("fp32",) if kind != "cuda" else (
            "fp16",) if arch in PRE_AMPERE_ARCHS else ("bf16",)
    families: list[list[Case]] = []
    for i, dt in enumerate(dtypes):
        families.append(gemm_cases(kind, dt, units))
        families.append(attention_cases(kind, dt, arch) if i == 0 else [])
        families.append(stream_cases(kind, dt) if i == 0 else [])
    if fill > 0:
        extra = fill_cases(kind, dtypes[0], fill, arch=arch)
        for j, lst in enumerate(extra):
            families[j] = families[j] + lst
    ordered: list[Case] = []
    seen: set[str] = set()
    for tier in range(4):
        lists = [[c for c in fam if c.tier == tier] for fam in families]
        for j in range(max((len(x) for x in lists), default=0)):
            for lst in lists:
                if j < len(lst) and lst[j].id not in seen:
                    seen.add(lst[j].id)
                    ordered.append(lst[j])
    return ordered


def _bytes_touched(case: Case) -> float:
    s = 2.0 if case.dtype in ("bf16", "fp16") else 4.0
    z = case.size
    if case.op == "gemm":
        b = z.get("batch", 1)
        return s * b * (z["m"] * z["k"] + z["k"] * z["n"] + z["m"] * z["n"])
    if case.op == "attention":
        q = z["batch"] * z["heads"] * z["seq_q"] * z["head_dim"]
        kv = z["batch"] * z["kv_heads"] * z["seq_kv"] * z["head_dim"]
        score = 0.0
        if "math" in case.impl:
            score = z["batch"] * z["heads"] * z["seq_q"] * z["seq_kv"] * 3.0
        return s * (2 * q + 2 * kv + score)
    return s * z["m"] * z.get("n", 1) * 3.0


@dataclass(frozen=True)
class CostModel:
    """Seconds spent on one case besides its kernels: setup (allocate and fill inputs at
    ``fill_bytes_per_s``, plus ``setup_s``), a per-sample host cost, and samples taken."""

    setup_s: float
    fill_bytes_per_s: float
    per_sample_s: float
    warmup: int
    samples: int


COSTS: dict[str, CostModel] = {
    "cuda": CostModel(setup_s=0.02, fill_bytes_per_s=200e9, per_sample_s=60e-6, warmup=3,
                      samples=25),
    "cpu": CostModel(setup_s=0.002, fill_bytes_per_s=0.3e9, per_sample_s=5e-6, warmup=2,
                     samples=9),
}


def estimate_seconds(cases: Sequence[Case], hw: HardwareSpec, kind: DeviceKind) -> np.ndarray:
    """Estimated wall time to measure each case: setup + (warm-up + samples) × (predicted
    latency + per-sample host cost), with the latency predicted by perfmodel on ``hw``."""
    cost = COSTS[kind]
    if not cases:
        return np.zeros(0)
    ds = dataset_from_rows([c.as_row() for c in cases])
    try:
        lat = ds.predict(hw)
    except Exception:  # a dtype the spec lacks: fall back to a bandwidth estimate
        lat = np.asarray([_bytes_touched(c) / hw.memory.bandwidth for c in cases])
    lat = np.where(np.isfinite(lat), lat, 1e-3)
    bytes_ = np.asarray([_bytes_touched(c) for c in cases])
    per = cost.setup_s + bytes_ / cost.fill_bytes_per_s
    return np.asarray(per + (cost.warmup + cost.samples) * (lat + cost.per_sample_s))


def select_cases(cases: Sequence[Case], estimates: np.ndarray, budget_s: float,
                 reserve: float = 0.25, max_case_fraction: float = 0.08,
                 memory_limit_bytes: float = math.inf) -> list[Case]:
    """Keep cases in priority order while their estimated total stays within
    (1 − reserve)·budget; a case alone above ``max_case_fraction`` of the budget, or
    needing more than ``memory_limit_bytes``, is left out."""
    out: list[Case] = []
    total = 0.0
    room = budget_s * (1.0 - reserve)
    for case, est in zip(cases, estimates, strict=False):
        if est > max_case_fraction * budget_s or _bytes_touched(case) > memory_limit_bytes:
            continue
        if total + est > room:
            continue
        total += float(est)
        out.append(case)
    return out
