"""Step times of a serving engine, precomputed from the model graphs and interpolated.

One engine step runs every layer once over T tokens: the decode tokens of d running
sequences plus the prefill chunks scheduled with them. Its time is split into parts that
each depend on few variables, predicted once over a grid with
:func:`perfmodel.models.evaluate.evaluate_graphs` (one vectorised call per op group) and
interpolated linearly:

    step = dense(T) + lm(S) + A_dec(d, c̄) + Σ_chunks A_pre(t_j, p_j)

- dense(T): every op except attention and the LM head for T tokens (GEMMs, norms, rotary,
  all-reduces, embedding), from the decode graph at batch T;
- lm(S): the LM head for the S sequences that sample a token this step;
- A_dec(d, c̄): decode attention of d sequences at mean context c̄ (KV length including the
  new token) — decode attention is linear in the total context read, so the mean stands
  for a mix of lengths;
- A_pre(t, p): attention of a prefill chunk of t tokens after p tokens already cached;
  the chunks of one step run in one (variable-length) call, so its fixed cost (launch and
  prologue, ``pre_fixed``) is paid once, not per chunk.

Under pipeline parallelism (``pp`` stages of ⌈L/pp⌉ layers, ``pp`` micro-batches in
flight, each simulated as a replica) a micro-batch gets its next token once per pipeline
cycle, pp times the slowest stage's time: the last stage also runs the LM head, and each
stage passes its tokens' hidden states (T·h activations) to the next over the GPU link
(:func:`perfmodel.models.pipeline.stage_send_s`), so

    step = dense(T) + pp·(lm(S) + hop(T)) + attention     (stages of equal layers)

which is the whole model's time on one stage's GPUs when pp = 1.

Host overheads are added by the simulator. :func:`build_step_model` is the one place the
model graphs are evaluated for serving: ``engine`` (its attention path, all-reduce fusion
and ``kernels``, the engine profile of :func:`~perfmodel.models.evaluate.evaluate_graphs`)
is passed through there.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig
from perfmodel.models.evaluate import GraphTiming, evaluate_graphs
from perfmodel.models.graph import (
    Dtypes,
    GraphOp,
    attention_ranks,
    decode_graph,
    prefill_graph,
)
from perfmodel.models.pipeline import stage_layers, stage_send_s
from perfmodel.ops import Attention
from perfmodel.ops.cost import Array
from perfmodel.serving.engines import EngineConfig

__all__ = ["StepModel", "build_step_model", "grid"]


def grid(hi: float, dense_to: int = 64, points: int = 48, lo: float = 1.0) -> Array:
    """Every integer from ``lo`` to ``dense_to``, then ``points`` geometric steps to
    ``hi`` (rounded, unique)."""
    hi = max(float(hi), lo)
    small = np.arange(lo, min(hi, dense_to) + 1.0)
    if hi <= dense_to:
        return small if small.size >= 2 else np.asarray([lo, lo + 1.0])
    big = np.round(np.geomspace(dense_to, hi, points))
    return np.unique(np.concatenate([small, big, [hi]]))


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise-linear interpolation, extended linearly beyond the ends."""
    i = bisect_right(xs, x) - 1
    if i < 0:
        i = 0
    elif i >= len(xs) - 1:
        i = len(xs) - 2
    x0 = xs[i]
    return ys[i] + (x - x0) * (ys[i + 1] - ys[i]) / (xs[i + 1] - x0)


def _cell(xs: list[float], x: float) -> tuple[int, float]:
    """Index i and weight w with x ≈ (1 − w)·xs[i] + w·xs[i+1], clamped to the grid."""
    if x <= xs[0]:
        return 0, 0.0
    if x >= xs[-1]:
        return len(xs) - 2, 1.0
    i = bisect_right(xs, x) - 1
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


def _integral(xs: list[float], ys: list[float], qs: list[float], x: float) -> float:
    """∫ from xs[0] to x of the piecewise-linear function (ys on xs); qs[m] is the integral
    up to xs[m]. Linear extension beyond the ends."""
    i = bisect_right(xs, x) - 1
    if i < 0:
        return ys[0] * (x - xs[0])
    if i >= len(xs) - 1:
        return qs[-1] + ys[-1] * (x - xs[-1])
    u = x - xs[i]
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
    return qs[i] + ys[i] * u + 0.5 * slope * u * u


@dataclass(frozen=True)
class StepModel:
    """Interpolation tables of the step-time parts (s; see the module docstring)."""

    tokens: list[float]
    dense: list[float]
    lm: list[float]
    dec_batch: list[float]
    dec_ctx: list[float]
    dec_attn: list[list[float]]
    dec_attn_q: list[list[float]]
    pre_tokens: list[float]
    pre_prior: list[float]
    pre_attn: list[list[float]]
    pre_fixed: float = 0.0
    """Fixed part of one prefill-attention call, s."""
    notes: tuple[str, ...] = ()

    def dense_s(self, tokens: float) -> float:
        """Non-attention time of a step over ``tokens`` tokens, s."""
        return _interp(self.tokens, self.dense, tokens)

    def lm_s(self, seqs: float) -> float:
        """LM-head time for ``seqs`` sampled sequences, s (0 for none)."""
        return _interp(self.tokens, self.lm, seqs) if seqs > 0 else 0.0

    def decode_attn_s(self, batch: float, mean_ctx: float) -> float:
        """Decode attention of ``batch`` sequences at mean context ``mean_ctx``, s."""
        if batch <= 0:
            return 0.0
        j, w = _cell(self.dec_batch, batch)
        a = _interp(self.dec_ctx, self.dec_attn[j], mean_ctx)
        b = _interp(self.dec_ctx, self.dec_attn[j + 1], mean_ctx)
        return a + w * (b - a)

    def decode_attn_sum_s(self, batch: float, ctx_lo: float, ctx_hi: float) -> float:
        """∫ A_dec(batch, x) dx from ``ctx_lo`` to ``ctx_hi``: with bounds at ±0.5 around
        the first and last step's mean context, the sum over a run of decode steps
        (midpoint rule; exact where A_dec is linear in the context), s."""
        j, w = _cell(self.dec_batch, batch)
        xs = self.dec_ctx
        a = _integral(xs, self.dec_attn[j], self.dec_attn_q[j], ctx_hi) \
            - _integral(xs, self.dec_attn[j], self.dec_attn_q[j], ctx_lo)
        if w == 0.0:
            return a
        b = _integral(xs, self.dec_attn[j + 1], self.dec_attn_q[j + 1], ctx_hi) \
            - _integral(xs, self.dec_attn[j + 1], self.dec_attn_q[j + 1], ctx_lo)
        return a + w * (b - a)

    def prefill_attn_s(self, tokens: float, prior: float) -> float:
        """Attention of a prefill chunk of ``tokens`` after ``prior`` cached tokens, s."""
        j, w = _cell(self.pre_tokens, tokens)
        a = _interp(self.pre_prior, self.pre_attn[j], prior)
        b = _interp(self.pre_prior, self.pre_attn[j + 1], prior)
        return a + w * (b - a)

    def step_s(self, decode_batch: int, decode_ctx_sum: float,
               chunks: list[tuple[int, int]], sampled: int) -> float:
        """GPU time of one step: ``decode_batch`` decodes with contexts summing to
        ``decode_ctx_sum``, prefill ``chunks`` (tokens, prior), ``sampled`` sequences
        producing a token, s."""
        tokens = decode_batch + sum(t for t, _ in chunks)
        s = self.dense_s(tokens) + self.lm_s(sampled)
        if decode_batch:
            s += self.decode_attn_s(decode_batch, decode_ctx_sum / decode_batch)
        for t, p in chunks:
            s += self.prefill_attn_s(t, p)
        if len(chunks) > 1:
            s -= (len(chunks) - 1) * self.pre_fixed
        return s


#: Multi-head latent attention's GEMMs that belong with its attention call rather than
#: with the step's tokens (perfmodel.models.graph): a decode's absorbed up-projections
#: (per decoding sequence) and a prefill's decompression of the chunk's whole context
#: (prior tokens included), which a step of prefill chunks runs instead of the absorption.
_MLA_ATTENTION_GEMMS = frozenset({"q_absorb", "v_up", "kv_b_proj"})


def _per_sequence(g: GraphOp) -> bool:
    """Whether op ``g`` is timed with the attention tables (its cost depends on which
    sequences are decoding or prefilling and their contexts), not per step token."""
    return g.kind is Attention or g.name in _MLA_ATTENTION_GEMMS


def _rows(t: GraphTiming, keep: list[bool], field: str = "latency_s") -> Array:
    """Σ over the kept ops of count × ``field``, per point."""
    sel = np.asarray(keep)
    lat = t.values[field][sel]
    cnt = t.counts[sel]
    return np.asarray(np.sum(lat * cnt, axis=0), dtype=np.float64)


def build_step_model(cfg: TransformerConfig, hw: HardwareSpec, tp: int, dtypes: Dtypes,
                     engine: EngineConfig, *, max_tokens: int, max_batch: int,
                     max_context: int, max_prompt: int, parallel: str = "tp",
                     pp: int = 1) -> StepModel:
    """Evaluate the step-time tables for ``cfg`` on ``hw`` at TP ``tp`` as ``engine`` runs
    it (its attention path, all-reduce fusion and kernels): steps of up to ``max_tokens``
    tokens, ``max_batch`` decoding sequences, contexts up to ``max_context``, prefill chunks
    after up to ``max_prompt`` cached tokens. ``parallel``: the MoE layout over the ``tp``
    GPUs (:mod:`perfmodel.models.graph`); under ``dep`` the tables are one attention rank's,
    its steps' tokens meeting as many from each other rank in the MoE layers (ranks in
    lock-step, equally loaded). ``pp``: pipeline stages, the tables one micro-batch's
    pipeline cycle (module docstring)."""
    impl, fuse = engine.attention_impl, engine.fuse_allreduce
    # GEMM time steps with the tile count (waves of m-tiles): every 16 tokens up to 16k
    t_grid = np.unique(np.concatenate([grid(min(max_tokens, 64), 64, 2),
                                       np.arange(64.0, min(max_tokens, 16384) + 16.0, 16.0),
                                       grid(max_tokens, 64, 48)]))
    b_grid = grid(max_batch, 64, 40)
    c_grid = grid(max_context, 16, 40)
    pt_grid = grid(max_tokens, 16, 40)
    pp_grid = np.concatenate([[0.0], grid(max(max_prompt, 1), 16, 32)])
    if cfg.chunked_attention and cfg.sliding_window:
        # a chunked layer's keys drop back to 1 after each chunk: both sides of every
        # boundary on the grids, so interpolation between them is exact for decode
        edges = np.arange(1.0, max(max_context, max_prompt) // cfg.sliding_window + 1.0) \
            * cfg.sliding_window
        both = np.concatenate([edges, edges + 1.0])
        c_grid = np.unique(np.concatenate([c_grid, both[both <= max_context]]))
        pp_grid = np.unique(np.concatenate([pp_grid, both[both <= max(max_prompt, 1)]]))

    def attn_only(graph: list[GraphOp]) -> list[GraphOp]:
        return [g for g in graph if _per_sequence(g)]

    # under dep a graph's batch is the instance's: tp ranks of t_grid tokens each
    ranks = attention_ranks(parallel, tp)
    dense_graph = decode_graph(cfg, t_grid * ranks, 1.0, tp, dtypes, impl, fuse,
                               parallel=parallel)
    dense_graph = [g for g in dense_graph if not _per_sequence(g)]
    attn_tp = tp // ranks  # under dep attention is the rank's own, unsplit
    dec_graph = attn_only(decode_graph(cfg, b_grid[:, None], c_grid[None, :], attn_tp,
                                       dtypes, impl, fuse))
    pre_graph = attn_only(prefill_graph(cfg, 1.0, pt_grid[:, None], pp_grid[None, :],
                                        attn_tp, dtypes, impl, fuse))
    timings, notes = evaluate_graphs(
        [(dense_graph, t_grid.shape), (dec_graph, (b_grid.size, c_grid.size)),
         (pre_graph, (pt_grid.size, pp_grid.size))], hw, engine.kernels,
        cfg.attention_sinks, cfg.block_scales, cfg.mx_experts)
    dense_t, dec_t, pre_t = timings
    is_lm = [n == "lm_head" for n in dense_t.names]
    dense = _rows(dense_t, [not x for x in is_lm])
    lm = _rows(dense_t, is_lm)
    if pp > 1:
        lm = pp * lm
        dense = dense + pp * stage_send_s(cfg, hw, t_grid, dtypes.activation)
        notes = [*notes, f"pipeline parallel: {pp} stages of at most "
                 f"{stage_layers(cfg, pp)} layers, {pp} micro-batches in flight; a "
                 f"micro-batch's step is the pipeline cycle: the layers once, the LM head "
                 f"and a hop of its hidden states between stages {pp} times"]
    dec = _rows(dec_t, [True] * len(dec_t.names)).reshape(b_grid.size, c_grid.size)
    pre = _rows(pre_t, [True] * len(pre_t.names)).reshape(pt_grid.size, pp_grid.size)
    pre_fixed = float(_rows(pre_t, [True] * len(pre_t.names), "overhead_s").reshape(
        pt_grid.size, pp_grid.size)[0, 0])
    widths = np.diff(c_grid)
    q = np.concatenate([np.zeros((b_grid.size, 1)),
                        np.cumsum(0.5 * (dec[:, 1:] + dec[:, :-1]) * widths, axis=1)], axis=1)
    return StepModel(
        tokens=t_grid.tolist(), dense=dense.tolist(), lm=lm.tolist(),
        dec_batch=b_grid.tolist(), dec_ctx=c_grid.tolist(), dec_attn=dec.tolist(),
        dec_attn_q=q.tolist(), pre_tokens=pt_grid.tolist(), pre_prior=pp_grid.tolist(),
        pre_attn=pre.tolist(), pre_fixed=pre_fixed, notes=tuple(notes))
