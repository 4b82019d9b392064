"""Model-level predictions: TTFT, TPOT, end-to-end latency, throughput, per-op table, memory.

Definitions (what the numbers mean):

- TTFT: the prefill of the whole prompt of every sequence at once (no chunking), ending
  with the first token's logits. No queueing, tokenisation, sampling or host gaps.
- TPOT: time per output token *excluding the first*: the mean of the G − 1 decode steps,
  the step producing token i + 1 reading a KV cache of P + i tokens (i = 1 … G − 1). The
  step time is evaluated at ``decode_points`` contexts spread over P + 1 … P + G − 1 and
  averaged with the trapezoid rule (exact where it is linear in context, as attention is).
- End-to-end: TTFT + (G − 1)·TPOT. Tokens/s: batch·G / end-to-end (output tokens of the
  whole batch, static batching).
- Per-op rows: every op of the graph summed over the layers it occurs in; ``share`` is its
  fraction of the phase (or request) time; ``bottleneck`` is that of its kernel.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from perfmodel._errors import PerfmodelError, PerfmodelWarning
from perfmodel._limits import MAX_BATCH, MAX_TOKENS, MAX_TP, check_count, clip_message
from perfmodel.dtypes import DType, bytes_per_element, normalize_dtype
from perfmodel.engines import STEP_OVERHEAD_SOURCE, normalize_engine, step_overhead
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig, load_model
from perfmodel.models.evaluate import evaluate_graphs
from perfmodel.models.graph import Dtypes, decode_graph, prefill_graph
from perfmodel.models.memo import Memo, spec_token
from perfmodel.models.memory import (
    DEFAULT_RESERVE_BYTES,
    DEFAULT_RESERVE_FRACTION,
    MemoryEstimate,
    estimate_memory,
)
from perfmodel.models.pipeline import (
    check_stages,
    stage_layers,
    stage_send_bytes,
    stage_send_s,
)
from perfmodel.models.rows import (
    NUMERIC,
    OpRow,
    PhaseResult,
    aggregate,
    label_of,
    to_json,
    with_host,
    with_stage_sends,
)
from perfmodel.ops.cost import Array
from perfmodel.timing.prediction import Value, as_value

__all__ = ["ModelPrediction", "OpRow", "PhaseResult", "check_context", "predict_model",
           "resolve_dtypes"]

PhaseName = Literal["prefill", "decode", "generate"]


@dataclass(frozen=True)
class ModelPrediction:
    """A model on one GPU type (per GPU under tensor parallelism), and why.

    ``latency_s`` is the TTFT for ``phase="prefill"``, one decode step for ``"decode"`` and
    the end-to-end time for ``"generate"``. Quantities that a phase does not define are NaN
    (e.g. ``ttft_s`` of a decode step). Values are floats for scalar inputs, arrays for
    array inputs. See the module docstring for the definitions.
    """

    model: str
    hardware: str
    phase: PhaseName
    batch: Value
    prompt_len: Value
    context_len: Value
    gen_len: Value
    tp: Value
    latency_s: Value
    ttft_s: Value
    tpot_s: Value
    e2e_s: Value
    tokens_per_s: Value
    prefill: PhaseResult | None
    decode: PhaseResult | None
    memory: MemoryEstimate
    dtypes: Dtypes
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    parallel: str = "tp"
    """How an MoE model spreads over the ``tp`` GPUs (:mod:`perfmodel.models.graph`)."""
    pp: int = 1
    """Pipeline stages, each ``tp`` GPUs (:mod:`perfmodel.models.pipeline`)."""

    @functools.cached_property
    def ops(self) -> tuple[OpRow, ...]:
        """Per-op rows of the phase; for ``generate``, of the whole request (prefill plus
        G − 1 decode steps), share of the end-to-end time (built on first access)."""
        if self.phase == "prefill" and self.prefill is not None:
            return self.prefill.ops
        if self.phase == "decode" and self.decode is not None:
            return self.decode.ops
        return _request_rows(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: SI units (s, bytes, FLOPs), NaN and infinity as null."""
        out: dict[str, Any] = {
            "model": self.model, "hardware": self.hardware, "phase": self.phase,
            "batch": self.batch, "prompt_len": self.prompt_len,
            "context_len": self.context_len, "gen_len": self.gen_len, "tp": self.tp,
            "parallel": self.parallel, "pp": self.pp, "latency_s": self.latency_s,
            "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s,
            "e2e_s": self.e2e_s, "tokens_per_s": self.tokens_per_s,
            "dtypes": {"weight": self.dtypes.weight, "expert": self.dtypes.expert,
                       "activation": self.dtypes.activation, "kv_cache": self.dtypes.kv},
        }
        out = to_json(out)
        out["memory"] = to_json(self.memory.to_dict())
        out["ops"] = [_op_dict(self, row) for row in self.ops]
        for ph in (self.prefill, self.decode):
            if ph is not None:
                out[ph.phase] = to_json({f: getattr(ph, f) for f in NUMERIC})
        out["assumptions"] = list(self.assumptions)
        return out


def _op_dict(pred: ModelPrediction, row: OpRow) -> dict[str, Any]:
    d = row.to_dict()
    if pred.phase == "generate":
        for ph in (pred.prefill, pred.decode):
            if ph is None:
                continue
            try:
                d[ph.phase] = ph.op(row.name).to_dict()
            except KeyError:
                continue
    return d


def _request_rows(pred: ModelPrediction) -> tuple[OpRow, ...]:
    pre, dec = pred.prefill, pred.decode
    assert pre is not None  # generate always has both phases
    assert dec is not None
    if type(pred.gen_len) is float and type(pred.e2e_s) is float:
        return _request_rows_scalar(pre, dec, pred.gen_len, pred.e2e_s)
    steps = np.maximum(np.asarray(pred.gen_len, dtype=np.float64) - 1.0, 0.0)
    e2e = np.maximum(np.asarray(pred.e2e_s), 1e-30)
    rows = []
    for prow in pre.ops:
        try:
            drow = dec.op(prow.name)
        except KeyError:
            drow = None
        vals = {f: np.asarray(getattr(prow, f))
                + (steps * np.asarray(getattr(drow, f)) if drow is not None else 0.0)
                for f in NUMERIC}
        dec_time = steps * np.asarray(drow.latency_s) if drow is not None else 0.0
        label = prow.bottleneck if drow is None else np.where(
            dec_time > np.asarray(prow.latency_s), drow.bottleneck, prow.bottleneck)
        rows.append(OpRow(
            name=prow.name, kind=prow.kind, phase="request", count=prow.count,
            share=as_value(vals["latency_s"] / e2e),
            arithmetic_intensity=as_value(vals["flops"] / np.maximum(vals["bytes"], 1e-30)),
            bottleneck=label_of(label), **{f: as_value(v) for f, v in vals.items()}))
    return tuple(rows)


def _floor30(x: float) -> float:
    """``np.maximum(x, 1e-30)`` of a float (NaN stays NaN)."""
    return x if x > 1e-30 or x != x else 1e-30


def _request_rows_scalar(pre: PhaseResult, dec: PhaseResult, gen_len: float,
                         e2e_s: float) -> tuple[OpRow, ...]:
    """:func:`_request_rows` of a scalar prediction in plain floats: the same operations
    in the same order (IEEE doubles either way), without 0-d arrays."""
    steps = gen_len - 1.0
    steps = steps if steps > 0.0 or steps != steps else 0.0
    e2e = _floor30(e2e_s)
    by_name = {row.name: row for row in reversed(dec.ops)}  # the first row of a name
    rows = []
    for prow in pre.ops:
        drow = by_name.get(prow.name)
        vals = [float(getattr(prow, f)) for f in NUMERIC]
        label = prow.bottleneck
        if drow is not None:
            vals = [v + steps * float(getattr(drow, f)) for v, f in zip(vals, NUMERIC,
                                                                         strict=True)]
            if steps * float(drow.latency_s) > float(prow.latency_s):
                label = drow.bottleneck
        lat, comp, mem, over, flops, byts = vals
        rows.append(OpRow(
            name=prow.name, kind=prow.kind, phase="request", count=prow.count,
            share=lat / e2e, arithmetic_intensity=flops / _floor30(byts),
            bottleneck=str(label), latency_s=lat, compute_s=comp, memory_s=mem,
            overhead_s=over, flops=flops, bytes=byts))
    return tuple(rows)


def resolve_dtypes(cfg: TransformerConfig, hw: HardwareSpec, weight: str | None = None,
                   activation: str | None = None, kv: str | None = None,
                   expert: str | None = None) -> Dtypes:
    """Pick the dtypes: activations bf16 (fp16 where the GPU lacks bf16, fp32 where it
    lacks both); weights the checkpoint's dtype (or the one given), or the activation
    dtype when that is as narrow (engines cast wider weights to it on load:
    :func:`widened_weights` says when); KV cache and experts follow unless given."""
    if activation is None:
        act: DType = next((d for d in ("bf16", "fp16") if hw.supports(d)), "fp32")
    else:
        act = normalize_dtype(activation, "activation_dtype")
    if act not in hw.peaks:
        raise PerfmodelError("activation_dtype", f"{hw.id} has no {act} peak",
                             f"use one of {', '.join(hw.peaks)}")
    w = normalize_dtype(weight or cfg.weight_dtype, "weight_dtype")
    if bytes_per_element(w) >= bytes_per_element(act):
        w = act
    e = normalize_dtype(expert or cfg.expert_weight_dtype or w, "expert_dtype")
    if bytes_per_element(e) >= bytes_per_element(act):
        e = act
    k = normalize_dtype(kv or act, "kv_dtype")
    return Dtypes(weight=w, activation=act, kv=k, expert=e)


def widened_weights(cfg: TransformerConfig, dt: Dtypes, weight: str | None = None) -> str:
    """A note when the weights asked for (``weight``, else the checkpoint's) are wider than
    the activations and run cast to them (:func:`resolve_dtypes`); else ''."""
    asked = normalize_dtype(weight or cfg.weight_dtype, "weight_dtype")
    if asked == dt.weight or bytes_per_element(asked) <= bytes_per_element(dt.activation):
        return ""
    return (f"weights {asked} run as {dt.weight}, the activation dtype (engines cast wider "
            "weights on load; pass --dtype to keep them wide)")


def _assumptions(cfg: TransformerConfig, phase: str, dt: Dtypes, notes: list[str],
                 mem: MemoryEstimate, points: int, host: Any = 0.0) -> tuple[str, ...]:
    out = []
    if phase in ("prefill", "generate"):
        out.append("TTFT = whole-prompt prefill of all sequences at once (no chunking, no "
                   "queueing), logits for the last position only")
    if phase in ("decode", "generate"):
        out.append("decode step: every sequence at the same context; kernels back to back"
                   + (" after the host time of the step" if np.any(np.asarray(host) > 0.0)
                      else " (no host gaps)"))
    if phase == "generate":
        out.append(f"TPOT = mean step time over contexts P+1..P+G-1 (excludes the first token),"
                   f" trapezoid rule over {points} points; e2e = TTFT + (G-1)·TPOT; "
                   "tokens/s = batch·G/e2e")
    out.append(f"dtypes: weights {dt.weight}, activations {dt.activation}, KV cache {dt.kv}"
               + (f", experts {dt.expert}" if cfg.is_moe else ""))
    if cfg.is_moe:
        out.append("MoE: tokens spread evenly over the experts they touch (perfect balance); "
                   "experts touched = E·(1-(1-k/E)^tokens)"
                   + (f"; {cfg.num_dense_layers} of {cfg.num_layers} layers have a dense MLP"
                      if cfg.num_dense_layers else ""))
    if cfg.num_sliding_layers and cfg.chunked_attention:
        out.append(f"{cfg.num_sliding_layers} of {cfg.num_layers} layers attend within "
                   f"{cfg.sliding_window}-token chunks (chunked local attention: a token "
                   "sees its chunk so far; KV cache capped at one chunk)")
    elif cfg.num_sliding_layers:
        out.append(f"{cfg.num_sliding_layers} of {cfg.num_layers} layers use a "
                   f"{cfg.sliding_window}-token sliding window (KV cache capped there too)")
    out += notes
    out.append(f"memory reserve {mem.reserve_bytes / 1e9:.1f} GB (10% of capacity + 1 GiB by "
               "default) for CUDA context, workspaces and fragmentation")
    return tuple(out)


def _host_overhead(engine: str, given: float | None, batch: Array) -> Array:
    """Host seconds per pass of ``batch`` sequences: ``given`` (finite, ≥ 0) or the
    engine's default (:func:`perfmodel.engines.step_overhead`)."""
    if given is None:
        return np.asarray(step_overhead(engine, batch), dtype=np.float64)
    if isinstance(given, bool) or not isinstance(given, (int, float)) \
            or not math.isfinite(given) or given < 0.0 or given > 10.0:
        raise PerfmodelError("step_overhead_s", f"must be a number of seconds in [0, 10], "
                             f"got {given!r}", "e.g. 0.001 (1 ms)")
    normalize_engine(engine)
    return np.asarray(float(given))


def _bounded(value: Any, name: str, maximum: float, minimum: float = 1.0,
             cap: str = "") -> Array:
    """``value`` as a float array, every element a whole number in [minimum, maximum]."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        raise PerfmodelError(name, f"expected a whole number or an array, got "
                             f"{clip_message(repr(value), 60)}", "pass e.g. 512")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except OverflowError:  # a Python int beyond a float (10**400)
        raise PerfmodelError(name, f"{clip_message(repr(value), 40)} is beyond any float",
                             f"pass a number below perfmodel._limits.{cap or 'caps'}") from None
    except (TypeError, ValueError):
        raise PerfmodelError(name, f"cannot read {clip_message(repr(value), 60)} as numbers",
                             "pass a whole number or a numeric array") from None
    if arr.size == 0:
        raise PerfmodelError(name, "empty array", "pass at least one value")
    bad = ~np.isfinite(arr) | (arr < minimum) | (arr != np.round(arr)) | (arr > maximum)
    if np.any(bad):
        v = float(arr[bad].flat[0])
        check_count(v, name, maximum, minimum=minimum, what=f"perfmodel._limits.{cap}")
    return arr


def _shape_of(**arrays: Array) -> tuple[int, ...]:
    """The broadcast shape of the array inputs, else an error naming them and their
    shapes."""
    try:
        return np.broadcast_shapes(*(a.shape for a in arrays.values()))
    except ValueError:
        shown = ", ".join(f"{k} {a.shape}" for k, a in arrays.items() if a.ndim)
        raise PerfmodelError(next(k for k, a in arrays.items() if a.ndim),
                             f"array inputs of shapes that do not broadcast together: {shown}",
                             "give the arrays one shape (or shapes numpy broadcasts, e.g. "
                             "(n, 1) and (m,))") from None


def _window_problem(cfg: TransformerConfig, context: Any) -> str:
    """"" if ``context`` stays within the model's window, else a sentence saying by how
    much."""
    window = cfg.max_position_embeddings
    if window is None:
        return ""
    ctx = np.asarray(context, dtype=np.float64)
    over = ctx > window
    if not np.any(over):
        return ""
    longest = float(np.max(ctx))
    count = f"{int(np.sum(over)):,} of {ctx.size:,} points reach" if ctx.size > 1 else "reaches"
    return (f"context {count} {longest:,.0f} tokens, past {cfg.name}'s "
            f"{window:,}-position window: the model was not trained for it")


_ANYWAY = " (predicted anyway: kernel costs do not depend on it)"


def check_context(cfg: TransformerConfig, context: Any, *, strict: bool = False) -> str:
    """"" if ``context`` (tokens held at the end: prompt + generated) stays within the
    model's window, else a sentence saying by how much, issued as a
    :class:`PerfmodelWarning` (or raised as :class:`PerfmodelError` with ``strict``)."""
    return _issue_window(cfg, _window_problem(cfg, context), strict, stacklevel=4)


def _issue_window(cfg: TransformerConfig, problem: str, strict: bool,
                  stacklevel: int = 3) -> str:
    """:func:`check_context` for a context whose :func:`_window_problem` is ``problem``;
    the warning points ``stacklevel`` frames up (3: the caller of this function's
    caller)."""
    if not problem:
        return ""
    window = cfg.max_position_embeddings
    if strict:
        raise PerfmodelError("context", problem, f"keep prompt + generated ≤ {window:,}")
    warnings.warn(PerfmodelWarning("context", problem + "; predicted anyway",
                                   f"keep prompt + generated ≤ {window:,}"),
                  stacklevel=stacklevel)
    return problem + _ANYWAY


_PARALLEL_NOTES = {
    "tep": "parallel tep: attention and dense layers tensor-parallel over the tp GPUs, the "
           "experts expert-parallel (E/tp whole experts per GPU, balanced routing)",
    "dep": "parallel dep: attention data-parallel (each GPU runs ceil(batch/tp) of the "
           "sequences with whole weights and its own KV cache), the experts expert-parallel "
           "(E/tp per GPU) on the tokens of every GPU, gathered and scattered back (one "
           "ring all-reduce's traffic per MoE layer); balanced routing and ranks",
}


def predict_model(config: TransformerConfig | str, hw: HardwareSpec | str, *,
                  phase: PhaseName = "prefill", batch: Any = 1, prompt_len: Any = None,
                  context_len: Any = None, gen_len: Any = None, cached_prefix: Any = 0,
                  tp: Any = 1, weight_dtype: str | None = None,
                  activation_dtype: str | None = None, kv_dtype: str | None = None,
                  expert_dtype: str | None = None, attention_impl: str = "flash",
                  decode_points: int = 5, reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
                  reserve_bytes: float = DEFAULT_RESERVE_BYTES,
                  strict: bool = False, engine: str = "none",
                  step_overhead_s: float | None = None,
                  parallel: str = "tp", pp: int = 1) -> ModelPrediction:
    """Predict a transformer's prefill, decode step, or whole generation on ``hw``.

    Parameters
    ----------
    config, hw:
        A :class:`TransformerConfig` (or preset id / config.json path) and a GPU spec
        (or bundled id / YAML path).
    phase:
        ``prefill`` (needs ``prompt_len``), ``decode`` (needs ``context_len``: the KV cache
        length including the new token) or ``generate`` (needs ``prompt_len`` and
        ``gen_len``, the tokens generated including the first).
    batch, prompt_len, context_len, gen_len, cached_prefix, tp:
        Numbers or numpy arrays; arrays broadcast together (one vectorised pass).
        ``cached_prefix`` is the part of the prompt already in the KV cache (prefix
        caching): the prefill computes the other ``prompt_len − cached_prefix`` tokens, so
        it must be below ``prompt_len``. Capped (perfmodel._limits): tokens ≤ 2³¹, batch
        ≤ 2²⁴, tp ≤ 2¹⁶.
    weight_dtype, activation_dtype, kv_dtype, expert_dtype:
        Storage dtypes, chosen independently (see :func:`resolve_dtypes` for defaults).
    attention_impl:
        Attention kernel path (``flash``, ``paged``, ``naive``...).
    decode_points:
        Context points for the TPOT average (``generate``).
    reserve_fraction, reserve_bytes:
        Memory held back: fraction of capacity plus bytes.
    strict:
        A context longer than the model's window (``max_position_embeddings``) raises
        :class:`PerfmodelError`; by default it is predicted (the cost of the kernels does
        not depend on what the model was trained for) with a :class:`PerfmodelWarning` and
        a line in ``assumptions``.
    engine:
        ``none`` (engine-neutral: each op one kernel of the architecture's native kind) or
        ``trtllm``/``vllm``/``sglang``: the kernels, fusions and bookkeeping that engine runs
        on the GPU, replayed from CUDA graphs (:mod:`perfmodel.engines`), plus the
        engine's host time per pass (:func:`perfmodel.engines.step_overhead`), shown as
        its own row.
    step_overhead_s:
        Host time per pass (prefill or decode step), seconds, instead of the engine's
        (:data:`perfmodel.engines.STEP_OVERHEAD_S` under an engine, 0 for ``none``).
    parallel:
        How an MoE model spreads over the ``tp`` GPUs (:mod:`perfmodel.models.graph`):
        ``tp`` (default: everything tensor-parallel), ``tep`` (experts whole, E/tp per
        GPU, beside tensor-parallel attention) or ``dep`` (attention data-parallel, each
        GPU running ⌈batch/tp⌉ of the sequences with whole attention weights and its own
        KV cache, experts expert-parallel). ``batch`` is the whole instance's in all three.
    pp:
        Pipeline stages, each ``tp`` GPUs holding ⌈L/pp⌉ layers
        (:mod:`perfmodel.models.pipeline`): memory is the largest stage's GPU's; the batch
        passes the stages in turn, so each pass (prefill, decode step) takes the whole
        model's time plus pp − 1 sends of its hidden states between stages (one batch keeps
        one stage busy at a time; micro-batches in flight: :func:`perfmodel.serving.simulate`).
    """
    cfg = load_model(config)
    spec = load_hardware(hw)
    key = (cfg, spec_token(spec), phase, batch, prompt_len, context_len, gen_len,
           cached_prefix, tp, weight_dtype, activation_dtype, kv_dtype, expert_dtype,
           attention_impl, decode_points, reserve_fraction, reserve_bytes, strict, engine,
           step_overhead_s, parallel, pp)
    memo = _memoisable(key)
    if memo:
        hit = MEMO.get(key)
        if hit is not None:
            if hit[0] is not None:
                check_context(cfg, hit[0], strict=strict)  # its warning, as each call gives
            return hit[1]
    result, ctx, problem = _predict_model(
        cfg, spec, phase=phase, batch=batch, prompt_len=prompt_len, context_len=context_len,
        gen_len=gen_len, cached_prefix=cached_prefix, tp=tp, weight_dtype=weight_dtype,
        activation_dtype=activation_dtype, kv_dtype=kv_dtype, expert_dtype=expert_dtype,
        attention_impl=attention_impl, decode_points=decode_points,
        reserve_fraction=reserve_fraction, reserve_bytes=reserve_bytes, strict=strict,
        engine=engine, step_overhead_s=step_overhead_s, parallel=parallel, pp=pp)
    over = bool(_issue_window(cfg, problem, strict))
    if memo:
        MEMO.put(key, (float(ctx) if over else None, result))
    return result


#: Scalar-input predictions by value (:mod:`perfmodel.models.memo`): the key is the config
#: (a frozen pydantic model, hashed by value), the spec's value token and every other argument;
#: an entry is the final context when past the model's window (its warning is issued again
#: on a hit) and the prediction (floats, strings and tuples only: safe to share). 256
#: entries: a generate prediction with its request rows takes ~30 KB, ~8 MB in all.
MEMO: Memo[tuple[float | None, ModelPrediction]] = Memo(256)
_NUMBER = (int, float)


def _memoisable(key: tuple[Any, ...]) -> bool:
    """Whether a call can be memoised: every argument a plain Python scalar of the type
    the call accepts (no arrays, no bools for numbers: ``True == 1`` must not hit)."""
    (_, _, phase, batch, prompt, context, gen, cached, tp, w, a, kv, e, impl, points,
     frac, reserve, strict, engine, host, parallel, pp) = key
    return (type(phase) is str and type(batch) in _NUMBER and type(tp) in _NUMBER
            and type(cached) in _NUMBER
            and all(x is None or type(x) in _NUMBER for x in (prompt, context, gen, host))
            and all(x is None or type(x) is str for x in (w, a, kv, e))
            and type(impl) is str and type(points) is int and type(frac) in _NUMBER
            and type(reserve) in _NUMBER and type(strict) is bool and type(engine) is str
            and type(parallel) is str and type(pp) is int)


def _predict_model(cfg: TransformerConfig, spec: HardwareSpec, *, phase: PhaseName,
                   batch: Any, prompt_len: Any, context_len: Any, gen_len: Any,
                   cached_prefix: Any, tp: Any, weight_dtype: str | None,
                   activation_dtype: str | None, kv_dtype: str | None,
                   expert_dtype: str | None, attention_impl: str, decode_points: int,
                   reserve_fraction: float, reserve_bytes: float, strict: bool, engine: str,
                   step_overhead_s: float | None,
                   parallel: str = "tp", pp: int = 1) -> tuple[ModelPrediction, Array, str]:
    """:func:`predict_model` on a loaded config and spec, the final context and what is
    wrong with it (:func:`_window_problem`, "" when it is within the model's window)."""
    if phase not in ("prefill", "decode", "generate"):
        raise PerfmodelError("phase", f"unknown phase {phase!r}",
                             "use 'prefill', 'decode' or 'generate'")
    if isinstance(decode_points, bool) or not isinstance(decode_points, int) or decode_points < 2:
        raise PerfmodelError("decode_points", "must be an integer ≥ 2", "e.g. 5")
    dt = resolve_dtypes(cfg, spec, weight_dtype, activation_dtype, kv_dtype, expert_dtype)
    pp = check_stages(cfg, pp)

    def need(value: Any, name: str) -> Array:
        if value is None:
            raise PerfmodelError(name, f"required for phase={phase!r}", f"pass {name}=...")
        return _bounded(value, name, MAX_TOKENS, cap="MAX_TOKENS")

    nan = np.nan
    b = _bounded(batch, "batch", MAX_BATCH, cap="MAX_BATCH")
    host = _host_overhead(engine, step_overhead_s, b)
    t = _bounded(tp, "tp", MAX_TP, cap="MAX_TP")
    c0 = _bounded(cached_prefix, "cached_prefix", MAX_TOKENS, minimum=0.0, cap="MAX_TOKENS")
    prefill_res = decode_res = None

    def staged(res: PhaseResult, seqs: Array, tokens_each: Any = 1.0) -> PhaseResult:
        """``res`` with its pp − 1 sends between stages, of the tokens each GPU holds
        (``tokens_each`` per sequence; under dep a GPU holds its own ⌈seqs/tp⌉)."""
        if pp == 1:
            return res
        per_gpu = (np.ceil(seqs / t) if parallel == "dep" else seqs) * tokens_each
        return with_stage_sends(res, pp - 1.0, stage_send_s(cfg, spec, per_gpu, dt.activation),
                                stage_send_bytes(cfg, per_gpu, dt.activation))

    notes: list[str] = []
    if phase == "decode":
        ctx = need(context_len, "context_len")
        shape = _shape_of(batch=b, context_len=ctx, tp=t)
        timings, notes = evaluate_graphs(
            [(decode_graph(cfg, b, ctx, t, dt, attention_impl, parallel=parallel), shape)],
            spec, engine,
            cfg.attention_sinks, cfg.block_scales, cfg.mx_experts)
        decode_res = staged(with_host(aggregate(timings[0], "decode"), host), b)
        step = np.asarray(decode_res.latency_s)
        p_len, g_len = np.full(shape, nan), np.full(shape, nan)
        ttft, tpot, e2e, tps, lat = np.full(shape, nan), step, np.full(shape, nan), b / step, step
        mem = estimate_memory(cfg, spec.memory.capacity, b, ctx, 1.0, t, dt, reserve_fraction,
                              reserve_bytes, parallel, pp)
    else:
        p = need(prompt_len, "prompt_len")
        g = need(gen_len, "gen_len") if phase == "generate" else np.asarray(1.0)
        shape = _shape_of(batch=b, prompt_len=p, gen_len=g, tp=t, cached_prefix=c0)
        if np.any(c0 >= p):
            raise PerfmodelError("cached_prefix", "must be smaller than prompt_len (the "
                                 "cached prefix is part of the prompt; at least the last "
                                 "prompt token is computed)", "e.g. cached_prefix=prompt_len-1")
        graphs = [(prefill_graph(cfg, b, p - c0, c0, t, dt, attention_impl,
                                 parallel=parallel), shape)]
        p_len, g_len = p * np.ones(shape), g * np.ones(shape)
        ctx = p + g - 1.0  # KV cache after the last step
        weights = None
        if phase == "generate":
            frac = np.linspace(0.0, 1.0, decode_points)
            first = p + 1.0
            span = np.maximum(g - 2.0, 0.0)
            ctx_pts = np.round(first[..., None] + span[..., None] * frac) * np.ones(
                (*shape, decode_points))
            w = np.gradient(ctx_pts, axis=-1) if decode_points > 1 else np.ones_like(ctx_pts)
            w = np.where(span[..., None] > 0, w, 0.0)
            w[..., 0] = np.where(span > 0, w[..., 0] / 2.0, 1.0)
            w[..., -1] = np.where(span > 0, w[..., -1] / 2.0, w[..., -1])
            weights = w / np.sum(w, axis=-1, keepdims=True)
            graphs.append((decode_graph(cfg, b[..., None], ctx_pts, t[..., None], dt,
                                        attention_impl, parallel=parallel),
                           (*shape, decode_points)))
        timings, notes = evaluate_graphs(graphs, spec, engine, cfg.attention_sinks,
                                         cfg.block_scales, cfg.mx_experts)
        prefill_res = staged(with_host(aggregate(timings[0], "prefill"), host), b, p - c0)
        ttft = np.asarray(prefill_res.latency_s) * np.ones(shape)
        lat, e2e, tps, tpot = ttft, ttft, b * (p - c0) / ttft, np.full(shape, nan)
        if phase == "generate":
            decode_res = staged(with_host(aggregate(timings[1], "decode", weights), host), b)
            tpot = np.where(g > 1, np.asarray(decode_res.latency_s), nan)
            e2e = ttft + np.where(g > 1, (g - 1.0) * np.asarray(decode_res.latency_s), 0.0)
            lat, tps = e2e, b * g / e2e
        mem = estimate_memory(cfg, spec.memory.capacity, b, ctx, p - c0, t, dt,
                              reserve_fraction, reserve_bytes, parallel, pp)
    window = _window_problem(cfg, ctx)
    if window:
        notes = [*notes, window + _ANYWAY]
    if parallel != "tp":
        notes = [*notes, _PARALLEL_NOTES[parallel]]
    if pp > 1:
        notes = [*notes, f"pipeline parallel: {pp} stages of at most "
                 f"{stage_layers(cfg, pp)} layers (memory: the largest stage's GPU); the "
                 f"batch passes them in turn, each pass the whole model plus {pp - 1} "
                 "send(s) of its hidden states between stages; no micro-batches in flight "
                 "(perfmodel serve --pp keeps pp of them)"]
    widened = widened_weights(cfg, dt, weight_dtype)
    if widened:
        notes = [*notes, widened]
    if np.any(host > 0.0):
        source = STEP_OVERHEAD_SOURCE if step_overhead_s is None else "given"
        notes = [*notes, f"engine host time {float(np.max(host)) * 1e3:.3g} ms per pass "
                 f"(prefill, each decode step): {source}"]
    return ModelPrediction(
        model=cfg.name, hardware=spec.id, phase=phase, batch=as_value(b * np.ones(shape)),
        prompt_len=as_value(p_len), context_len=as_value(ctx * np.ones(shape)),
        gen_len=as_value(g_len), tp=as_value(t * np.ones(shape)), latency_s=as_value(lat),
        ttft_s=as_value(ttft), tpot_s=as_value(tpot), e2e_s=as_value(e2e),
        tokens_per_s=as_value(tps), prefill=prefill_res, decode=decode_res, memory=mem,
        dtypes=dt, assumptions=_assumptions(cfg, phase, dt, notes, mem, decode_points, host),
        parallel=parallel, pp=pp), ctx, window
