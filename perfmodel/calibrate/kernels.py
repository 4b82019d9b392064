"""torch callables for suite cases (torch imported inside the functions).

Each builder allocates the inputs once on the device and returns a zero-argument callable
that launches the op; outputs are preallocated where torch allows (``out=``) so the
timed call does not include the caching allocator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.suite import Case

__all__ = ["build_callable", "torch_dtype"]


def torch_dtype(name: str) -> Any:
    import torch

    table = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
             "fp16": torch.float16, "fp64": torch.float64}
    if name not in table:
        raise PerfmodelError("dtype", f"the harness cannot time {name}",
                             f"use one of {', '.join(table)}")
    return table[name]


def _rand(shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
    import torch

    return torch.randn(shape, device=device, dtype=torch.float32).to(dtype)


def _gemm(case: Case, dtype: Any, device: Any) -> Callable[[], Any]:
    import torch

    z = case.size
    b, m, n, k = z.get("batch", 1), z["m"], z["n"], z["k"]
    if b == 1:
        a = _rand((m, k), dtype, device)
        w = _rand((k, n), dtype, device)
        out = torch.empty((m, n), dtype=dtype, device=device)
        return lambda: torch.mm(a, w, out=out)
    a = _rand((b, m, k), dtype, device)
    w = _rand((b, k, n), dtype, device)
    out = torch.empty((b, m, n), dtype=dtype, device=device)
    return lambda: torch.bmm(a, w, out=out)


def _attention(case: Case, dtype: Any, device: Any) -> Callable[[], Any]:
    import torch.nn.functional as F  # noqa: N812

    z = case.size
    b, h, kv, sq, skv, d = (z["batch"], z["heads"], z["kv_heads"], z["seq_q"], z["seq_kv"],
                            z["head_dim"])
    q = _rand((b, h, sq, d), dtype, device)
    k = _rand((b, kv, skv, d), dtype, device)
    v = _rand((b, kv, skv, d), dtype, device)
    # bottom-right aligned causal mask (queries are the last S_q positions), as perfmodel
    # counts it; for S_q == S_kv it is the usual lower triangle.
    mask = None
    causal = case.causal
    if causal and sq != skv:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(sq, skv)
        causal = False
    gqa = h != kv
    backend = None
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if case.impl.startswith("flash2"):
        backend = SDPBackend.FLASH_ATTENTION
    elif case.impl.startswith("mem-efficient"):
        backend = SDPBackend.EFFICIENT_ATTENTION
    elif case.impl.startswith("math"):
        backend = SDPBackend.MATH

    def call() -> Any:
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                  enable_gqa=gqa)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                  enable_gqa=gqa)

    return call


def _stream(case: Case, dtype: Any, device: Any) -> Callable[[], Any]:
    import torch
    import torch.nn.functional as F  # noqa: N812

    z = case.size
    m = z["m"]
    if case.op == "copy":
        src = _rand((m,), dtype, device)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    if case.op == "add":
        x = _rand((m,), dtype, device)
        y = _rand((m,), dtype, device)
        out = torch.empty_like(x)
        return lambda: torch.add(x, y, out=out)
    n = z["n"]
    if case.op in ("rmsnorm", "layernorm"):
        x = _rand((m, n), dtype, device)
        weight = torch.ones(n, dtype=dtype, device=device)
        if case.op == "rmsnorm":
            return lambda: F.rms_norm(x, (n,), weight)
        bias = torch.zeros(n, dtype=dtype, device=device)
        return lambda: F.layer_norm(x, (n,), weight, bias)
    if case.op == "silu_mul":
        # n is the output width; the input holds gate and up side by side. Eager torch runs
        # this as two kernels (silu, then mul), which the fitted stream overhead absorbs.
        x = _rand((m, 2 * n), dtype, device)

        def silu_mul() -> Any:
            return F.silu(x[:, :n]) * x[:, n:]

        return silu_mul
    if case.op == "gelu":
        x = _rand((m, n), dtype, device)
        return lambda: F.gelu(x, approximate="tanh")
    if case.op == "softmax":
        x = _rand((m, n), dtype, device)
        return lambda: torch.softmax(x, dim=-1)
    raise PerfmodelError("op", f"no torch kernel for {case.op!r}", "use a suite case")


def build_callable(case: Case, device: Any) -> Callable[[], Any]:
    """Allocate the inputs of ``case`` on ``device`` and return the timed callable."""
    dtype = torch_dtype(case.dtype)
    if case.op == "gemm":
        return _gemm(case, dtype, device)
    if case.op == "attention":
        return _attention(case, dtype, device)
    return _stream(case, dtype, device)
