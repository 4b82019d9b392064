"""What-if sweeps of a whole model over one variable, in one vectorised pass.

``sweep(cfg, hw, over="prompt", values=np.arange(128, 32769, 128))`` calls
:func:`perfmodel.predict_model` once with an array (no Python loop per point) and reports
the per-op times along the sweep and where the regime changes:

- ``attention_over_mlp``: the first length (or batch) where the attention kernels take
  longer than the MLP (gate/up, activation, down; for MoE the router and experts);
- ``decode_compute_bound``: the first point where the summed compute time of the pass
  exceeds its summed memory time (for decode: the batch where it turns compute-bound);
- ``linear_compute_bound``: the same for the linear layers (GEMMs) alone;
- ``stops_fitting``: the first point where weights + KV cache + activations + reserve
  exceed the GPU's memory.

A crossover between two grid points is interpolated linearly on the difference of the two
sides; ``bracket`` gives the grid points around it.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._limits import MAX_SWEEP_POINTS, check_count, clip_message
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig, load_model
from perfmodel.models.predict import ModelPrediction, PhaseName, predict_model
from perfmodel.ops.cost import Array

__all__ = ["GROUPS", "Crossover", "SweepResult", "op_group", "parse_values", "sweep"]

Over = Literal["prompt", "context", "batch", "tp"]
_DEFAULT_PHASE: dict[str, PhaseName] = {"prompt": "prefill", "context": "decode",
                                        "batch": "decode", "tp": "decode"}
#: Op groups for tables and stacked charts, in drawing order.
GROUPS = ("attention", "mlp", "qkv_o_proj", "lm_head", "allreduce", "small_ops")
_MLP = ("gate_up_proj", "up_proj", "act_mul", "act", "down_proj", "router", "router_topk",
        "moe_permute", "experts_gate_up", "experts_up", "experts_act", "experts_down",
        "moe_combine")


#: The projections around attention: QKV and O, and multi-head latent attention's down-
#: and up-projections (its decompression in prefill, the absorbed ones in decode).
_PROJECTIONS = ("qkv_proj", "o_proj", "qkv_a_proj", "kv_a_proj", "q_proj", "q_b_proj",
                "kv_b_proj", "q_absorb", "v_up")


def op_group(name: str) -> str:
    """The group of an op row: attention kernels, MLP (or MoE), QKV/O projections (MLA's
    too), LM head, all-reduces, or the small memory-bound ops (norms, rotary, residual,
    embedding, cache writes)."""
    if name.startswith(("attention", "mla_attention")):
        return "attention"
    if name in _MLP or name.startswith("shared_"):
        return "mlp"
    if name in _PROJECTIONS:
        return "qkv_o_proj"
    if name == "lm_head":
        return "lm_head"
    if name.endswith("allreduce"):
        return "allreduce"
    return "small_ops"


@dataclass(frozen=True)
class Crossover:
    """Where a regime changes along the sweep (``value`` None if not inside it)."""

    name: str
    description: str
    value: float | None
    bracket: tuple[float, float] | None
    status: Literal["crosses", "from_start", "never"] = "never"
    """``crosses`` inside the sweep, already true ``from_start``, or ``never`` within it."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "value": self.value,
                "bracket": list(self.bracket) if self.bracket else None,
                "status": self.status}


@dataclass(frozen=True)
class SweepResult:
    """Per-point results of a sweep. Arrays run along ``values``."""

    model: str
    hardware: str
    over: Over
    phase: PhaseName
    values: Array
    latency_s: Array
    ops: dict[str, Array]
    """Time of each op row along the sweep, s (summed over layers)."""
    groups: dict[str, Array]
    """Time of each op group (:data:`GROUPS`), s."""
    compute_s: Array
    memory_s: Array
    memory_bytes: Array
    """Total memory per GPU (weights + KV + activations + reserve), bytes."""
    fits: np.ndarray[Any, np.dtype[np.bool_]]
    crossovers: tuple[Crossover, ...]
    prediction: ModelPrediction
    window: int | None = None
    """The model's context window (``max_position_embeddings``), tokens; None if unknown."""

    @property
    def x_label(self) -> str:
        return {"prompt": "prompt length (tokens)", "context": "context length (tokens)",
                "batch": "batch (sequences)", "tp": "tensor-parallel GPUs"}[self.over]

    def crossover(self, name: str) -> Crossover:
        for c in self.crossovers:
            if c.name == name:
                return c
        raise KeyError(name)

    def columns(self) -> dict[str, Array]:
        """Named columns (SI units) for CSV/JSON: x, latency, groups, ops, memory."""
        out: dict[str, Array] = {self.over: self.values, "latency_s": self.latency_s}
        if self.phase == "generate":
            out["ttft_s"] = np.asarray(self.prediction.ttft_s) * np.ones_like(self.values)
            out["tpot_s"] = np.asarray(self.prediction.tpot_s) * np.ones_like(self.values)
        out.update({f"{g}_s": v for g, v in self.groups.items()})
        out.update({"compute_s": self.compute_s, "memory_s": self.memory_s,
                    "memory_bytes": self.memory_bytes,
                    "fits": self.fits.astype(np.float64)})
        out.update({f"op_{n}_s": v for n, v in self.ops.items()})
        return out

    def to_csv(self) -> str:
        cols = self.columns()
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(list(cols))
        for i in range(len(self.values)):
            writer.writerow([_fmt_csv(name, cols[name][i]) for name in cols])
        return buf.getvalue()

    def to_dict(self) -> dict[str, Any]:
        cols = self.columns()
        return {
            "model": self.model, "hardware": self.hardware, "over": self.over,
            "phase": self.phase,
            # the inputs held constant along the sweep (a prompt sweep moves the context too)
            "fixed": {k: _first(v) for k in ("batch", "prompt_len", "context_len", "gen_len",
                                              "tp")
                      if k.removesuffix("_len") != self.over
                      and _constant(v := getattr(self.prediction, k))},
            "crossovers": [c.to_dict() for c in self.crossovers],
            "columns": {k: [_clean(x) for x in np.asarray(v).tolist()] for k, v in cols.items()},
            "fits": [bool(x) for x in self.fits],
            "assumptions": list(self.prediction.assumptions),
        }


def _fmt_csv(name: str, x: float) -> str:
    if name == "fits":
        return "1" if x else "0"
    return f"{x:.6g}"


def _clean(x: float) -> float | None:
    return x if np.isfinite(x) else None


def _constant(x: Any) -> bool:
    """Whether every point of ``x`` has the same value (NaN equal to NaN)."""
    a = np.asarray(x, dtype=np.float64)
    return bool(np.all((a == a.flat[0]) | (np.isnan(a) & np.isnan(a.flat[0])))) if a.size \
        else True


def _first(x: Any) -> float | None:
    v = float(np.asarray(x, dtype=np.float64).flat[0])
    return v if np.isfinite(v) else None


def parse_values(text: str, points: int | None = None, log: bool = False) -> Array:
    """Sweep values: ``"1,2,4,8"``, ``"128:32768:128"`` (start:stop:step: start, start +
    step, … up to and including stop, never past it), or ``"16:32768"`` with ``points``
    (evenly or, with ``log``, geometrically spaced, rounded to whole numbers, duplicates
    dropped). At most :data:`~perfmodel._limits.MAX_SWEEP_POINTS` points, counted before
    any array is made."""
    fix = "use 1,2,4,8 or START:STOP:STEP or START:STOP with --points"
    shown = clip_message(repr(text), 80)
    text = text.strip()
    if points is not None:
        check_count(points, "points", MAX_SWEEP_POINTS,
                    what="perfmodel._limits.MAX_SWEEP_POINTS")
    try:
        if ":" in text:
            parts = [float(x) for x in text.split(":")]
            if not all(math.isfinite(x) for x in parts):
                raise ValueError
            if len(parts) == 3:
                start, stop, step = parts
                if step <= 0:
                    raise PerfmodelError("values", f"{shown}: the step must be > 0", fix)
                ratio = (stop - start) / step
                if not math.isfinite(ratio) or ratio + 1 > MAX_SWEEP_POINTS:
                    raise PerfmodelError(
                        "values", f"{shown} gives {ratio + 1:,.4g} points, above the cap of "
                        f"{MAX_SWEEP_POINTS:,} (perfmodel._limits.MAX_SWEEP_POINTS)",
                        "use a larger step, or START:STOP with --points")
                count = math.floor(ratio * (1 + 1e-12) + 1e-9) + 1  # stop, not past it
                vals = start + step * np.arange(max(count, 0))
            elif len(parts) == 2:
                start, stop = parts
                n = points or 64
                if log and (start <= 0 or stop <= 0):
                    raise PerfmodelError("values", f"{shown}: --log needs START and STOP > 0",
                                         "e.g. 16:32768 --points 64 --log")
                vals = np.geomspace(start, stop, n) if log else np.linspace(start, stop, n)
            else:
                raise ValueError
        else:
            items = [x for x in text.split(",") if x.strip()]
            if len(items) > MAX_SWEEP_POINTS:
                raise PerfmodelError("values", f"{len(items):,} values, above the cap of "
                                     f"{MAX_SWEEP_POINTS:,} (perfmodel._limits."
                                     "MAX_SWEEP_POINTS)", "sweep fewer values")
            vals = np.asarray([float(x) for x in items])
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, PerfmodelError):
            raise
        raise PerfmodelError("values", f"cannot read {shown}", fix) from None
    if vals.size and not np.all(np.isfinite(vals)):
        raise PerfmodelError("values", f"{shown} has a value that is not finite", fix)
    vals = np.unique(np.round(vals))
    if vals.size == 0 or np.any(vals < 1):
        raise PerfmodelError("values", f"{shown} gives no values ≥ 1" if vals.size == 0
                             else f"{shown} has a value below 1", "e.g. 128:32768:128")
    return np.asarray(vals, dtype=np.float64)


def _cross(name: str, desc: str, x: Array, a: Array, b: Array) -> Crossover:
    """First x where a − b turns ≥ 0 (after being < 0), linearly interpolated."""
    d = np.asarray(a - b, dtype=np.float64)
    pos = d >= 0
    if pos.size and bool(pos[0]):
        return Crossover(name, desc, None, None, "from_start")
    if not bool(np.any(pos)):
        return Crossover(name, desc, None, None, "never")
    i = int(np.argmax(pos))
    x0, x1, d0, d1 = float(x[i - 1]), float(x[i]), float(d[i - 1]), float(d[i])
    value = x0 + (x1 - x0) * (-d0) / (d1 - d0) if d1 != d0 else x1
    return Crossover(name, desc, float(value), (x0, x1), "crosses")


def sweep(config: TransformerConfig | str, hw: HardwareSpec | str, over: Over,
          values: Any, *, phase: PhaseName | None = None, batch: Any = 1,
          prompt_len: Any = 2048, context_len: Any = None, gen_len: Any = 256, tp: Any = 1,
          **options: Any) -> SweepResult:
    """Sweep ``over`` (``prompt``, ``context``, ``batch`` or ``tp``) across ``values`` with
    the other inputs fixed; ``phase`` defaults to prefill for prompt sweeps and decode
    otherwise. ``options`` go to :func:`predict_model` (dtypes, attention_impl...).
    ``values`` are swept in ascending order (the crossovers are read along it), at most
    :data:`perfmodel._limits.MAX_SWEEP_POINTS` of them."""
    cfg = load_model(config)
    spec = load_hardware(hw)
    if over not in _DEFAULT_PHASE:
        raise PerfmodelError("over", f"cannot sweep over {over!r}",
                             "use prompt, context, batch or tp")
    ph: PhaseName = phase or _DEFAULT_PHASE[over]
    try:
        x = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    except (TypeError, ValueError):
        raise PerfmodelError("values", f"cannot read {clip_message(repr(values), 60)} as "
                             "numbers", "pass a list or array of sizes") from None
    if x.size == 0:
        raise PerfmodelError("values", "no values to sweep", "pass at least one value")
    if not np.all(np.isfinite(x)):
        raise PerfmodelError("values", "holds NaN or infinity (or None)",
                             "pass finite sizes")
    check_count(x.size, "values", MAX_SWEEP_POINTS, what="perfmodel._limits.MAX_SWEEP_POINTS")
    if over == "prompt" and ph == "decode":
        raise PerfmodelError("phase", "a prompt sweep needs phase prefill or generate",
                             "sweep over context for decode")
    if over == "context" and ph != "decode":
        raise PerfmodelError("phase", "a context sweep is a decode sweep",
                             "use --phase decode, or sweep over prompt")
    args: dict[str, Any] = {"batch": batch, "tp": tp}
    if ph == "decode":
        args["context_len"] = context_len if context_len is not None else prompt_len
    else:
        args["prompt_len"] = prompt_len
        if ph == "generate":
            args["gen_len"] = gen_len
    key = {"prompt": "prompt_len", "context": "context_len", "batch": "batch", "tp": "tp"}[over]
    args[key] = x
    pred = predict_model(cfg, spec, phase=ph, **args, **options)
    rows = pred.ops
    ops = {r.name: np.asarray(r.latency_s) * np.ones_like(x) for r in rows}
    groups = {g: np.zeros_like(x) for g in GROUPS}
    for name, v in ops.items():
        groups[op_group(name)] = groups[op_group(name)] + v
    compute = sum((np.asarray(r.compute_s) * np.ones_like(x) for r in rows), np.zeros_like(x))
    memory = sum((np.asarray(r.memory_s) * np.ones_like(x) for r in rows), np.zeros_like(x))
    gemm_c = sum((np.asarray(r.compute_s) * np.ones_like(x) for r in rows
                  if r.kind == "gemm"), np.zeros_like(x))
    gemm_m = sum((np.asarray(r.memory_s) * np.ones_like(x) for r in rows
                  if r.kind == "gemm"), np.zeros_like(x))
    mem_total = np.asarray(pred.memory.total_bytes) * np.ones_like(x)
    fits = np.asarray(pred.memory.fits) & np.ones_like(x, dtype=bool)
    cap = pred.memory.capacity_bytes
    crossings = [
        ("attention_over_mlp", "attention kernels take longer than the MLP",
         groups["attention"], groups["mlp"]),
        ("decode_compute_bound" if ph == "decode" else "compute_bound",
         "summed compute time exceeds summed memory time", compute, memory),
        ("linear_compute_bound", "linear layers (GEMMs) turn compute-bound", gemm_c, gemm_m),
        ("stops_fitting", "weights + KV cache + activations + reserve exceed GPU memory",
         mem_total, np.full_like(x, cap)),
    ]
    found = []
    for name, desc, a, b in crossings:
        c = _cross(name, desc, x, a, b)
        if name == "stops_fitting" and c.value is not None:
            c = Crossover(name, desc, float(np.floor(c.value)), c.bracket, c.status)
        found.append(c)
    return SweepResult(
        model=cfg.name, hardware=spec.id, over=over, phase=ph, values=x,
        latency_s=np.asarray(pred.latency_s) * np.ones_like(x), ops=ops, groups=groups,
        compute_s=compute, memory_s=memory, memory_bytes=mem_total, fits=fits,
        crossovers=tuple(found), prediction=pred, window=cfg.max_position_embeddings)
