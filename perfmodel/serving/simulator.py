"""One engine replica stepping through time: continuous batching with a token budget,
chunked prefill, a cap on running sequences, a paged KV cache, preemption by recompute.

Each loop iteration is one engine step (or a run of identical decode steps, below):

1. requests that have arrived join the waiting queue (FIFO; a preempted request goes back
   to its front);
2. the scheduler builds the step (:mod:`perfmodel.serving.engines` for the policies):
   decode tokens of the running sequences, chunks of partial prefills, new admissions —
   within the token budget, the sequence cap and the KV pool;
3. the step takes host overhead (per step and per sequence) + the GPU time of
   :class:`~perfmodel.serving.steptime.StepModel` (a decode-only step's non-attention
   work at its CUDA graph's padded batch where the engine pads,
   :attr:`~perfmodel.serving.engines.EngineConfig.graph_batch_sizes`); at its end every
   decoding sequence has one more token, finished requests leave (in a closed loop the
   client sends the next), and a request whose prefill completes samples its first token
   (its TTFT) and starts decoding.

Decode runs in bulk: when no prefill is pending and no waiting request can be admitted,
every step until the next event (a request finishing, a request arriving, the KV pool
filling) decodes the same d sequences, each context growing by one per step, so the run's
time is k·(host + dense(p) + lm(p)) + ∫ A_dec(d, x) dx over the mean context
(:meth:`StepModel.decode_attn_sum_s`; p is d padded to its CUDA graph's batch, d without
padding): one closed-form evaluation per event instead of one Python iteration per step.

KV accounting: ``reserve`` holds ⌈(prompt + output)/block⌉ blocks per running request;
``lazy`` holds ⌈computed tokens/block⌉ per prefilling request and, for decoding ones, the
bound Σ (context/block + 1) ≥ Σ ⌈context/block⌉, so the pool never holds more than its N
blocks (slightly conservative, by under one block per sequence).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perfmodel._errors import PerfmodelError
from perfmodel.serving.engines import EngineConfig
from perfmodel.serving.kvcache import KVPool
from perfmodel.serving.requests import Workload
from perfmodel.serving.steptime import StepModel

__all__ = ["ReplicaRun", "simulate_replica"]

Floats = npt.NDArray[np.float64]
Progress = Callable[[int, int], None]

_WAITING, _PREFILL, _DECODE, _DONE = 0, 1, 2, 3


class _Req:
    __slots__ = ("arrival", "blocks", "done", "finish", "first", "gen", "i", "kterm",
                 "output", "preempt", "prompt", "send", "start", "state", "target",
                 "version")

    def __init__(self, i: int, prompt: int, output: int) -> None:
        self.i = i
        self.prompt = prompt
        self.output = output
        self.send = math.nan
        self.arrival = math.nan
        self.start = math.nan
        self.first = math.nan
        self.finish = math.nan
        self.target = prompt
        self.done = 0
        self.gen = 0
        self.blocks = 0
        self.kterm = 0.0
        self.state = _WAITING
        self.preempt = 0
        self.version = 0


@dataclass(frozen=True)
class ReplicaRun:
    """Per-request times (s) and run records of one replica."""

    send_s: Floats
    arrival_s: Floats
    start_s: Floats
    first_token_s: Floats
    finish_s: Floats
    preemptions: npt.NDArray[np.int64]
    itl_values: Floats
    itl_weights: Floats
    timeline: dict[str, Floats]
    steps: int


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_fits(wl: Workload, engine: EngineConfig, pool: KVPool) -> None:
    """Every request must fit the pool alone (and the budget, without chunked prefill)."""
    longest = int(np.max(wl.prompt + wl.output))
    need = _ceil_div(longest, pool.block_size) + 1
    if pool.blocks < need:
        why = pool.explain()
        raise PerfmodelError(
            "kv_cache", f"a request of {longest:,} tokens needs {need:,} KV blocks but the "
            f"pool holds {pool.blocks:,} ({why})",
            "use more GPUs (--tp), a smaller --kv-dtype or --weight-dtype, or shorter "
            "requests")
    if not engine.chunked_prefill and int(np.max(wl.prompt)) > engine.max_num_batched_tokens:
        raise PerfmodelError(
            "max_num_batched_tokens", f"a {int(np.max(wl.prompt)):,}-token prompt exceeds "
            f"the {engine.max_num_batched_tokens:,}-token step budget and {engine.name} "
            "prefills without chunks", "raise --max-num-batched-tokens or enable chunked "
            "prefill (--chunked-prefill)")


def simulate_replica(model: StepModel, engine: EngineConfig, pool: KVPool, wl: Workload,
                     progress: Progress | None = None, *, bulk: bool = True) -> ReplicaRun:
    """Simulate ``wl`` on one replica (see the module docstring). ``bulk=False`` takes every
    decode step one at a time (the reference the closed-form runs must match)."""
    check_fits(wl, engine, pool)
    sim = _Sim(model, engine, pool, wl, progress)
    sim.bulk = bulk
    return sim.run()


class _Sim:
    def __init__(self, model: StepModel, engine: EngineConfig, pool: KVPool, wl: Workload,
                 progress: Progress | None) -> None:
        self.m = model
        self.e = engine
        self.n_blocks = pool.blocks
        self.bs = pool.block_size
        self.wl = wl
        self.progress = progress
        self.reqs = [_Req(i, int(p), int(o)) for i, (p, o) in
                     enumerate(zip(wl.prompt.tolist(), wl.output.tolist(), strict=True))]
        self.lazy = engine.kv_policy == "lazy"
        self.budget = engine.max_num_batched_tokens
        self.cap = engine.max_num_seqs if engine.policy == "prefill_first" else min(
            engine.max_num_seqs, engine.max_num_batched_tokens)
        # state
        self.t = 0.0
        self.g = 0                      # decode steps so far (all decoders advance together)
        self.waiting: deque[_Req] = deque()
        self.future: deque[tuple[float, _Req]] = deque()
        self.prefilling: list[_Req] = []
        self.heap: list[tuple[int, int, int, _Req]] = []
        self.order: list[_Req] = []
        self.d = 0                      # decoding sequences
        self.k = 0.0                    # Σ (context − g) over decoding sequences
        self.kv_fixed = 0               # reserve: all running; lazy: prefilling sequences
        self.running = 0
        self.finished = 0
        self.sent = 0
        self.steps = 0
        self.itl_v: list[float] = []
        self.itl_w: list[float] = []
        self.tl: list[tuple[float, int, int, float, int]] = []
        self.waited_iters = 0
        self.bulk = True

    # ------------------------------------------------------------------ arrivals
    def _send(self, r: _Req, when: float) -> None:
        r.send = when
        self.future.append((when + self.e.request_overhead_s, r))
        self.sent += 1

    def _take_arrivals(self) -> None:
        while self.future and self.future[0][0] <= self.t:
            when, r = self.future.popleft()
            r.arrival = when
            self.waiting.append(r)

    # ------------------------------------------------------------------ KV
    def _kv_used(self, g: int) -> float:
        """Blocks held when the decoders run step ``g``."""
        if not self.lazy:
            return float(self.kv_fixed)
        dec = (self.k + self.d * g) / self.bs + self.d if self.d else 0.0
        return self.kv_fixed + dec

    def _free(self) -> float:
        return self.n_blocks - self._kv_used(self.g)

    def _need_new(self, r: _Req, chunk: int) -> int:
        if self.lazy:
            return _ceil_div(r.done + chunk, self.bs) - _ceil_div(r.done, self.bs)
        return _ceil_div(r.prompt + r.output, self.bs) if r.state == _WAITING else 0

    def _chunk(self, r: _Req, tokens_used: int) -> int:
        """Prefill tokens ``r`` would get with ``tokens_used`` of the budget taken; 0 if it
        cannot run (without chunked prefill the whole rest, or alone in an empty step
        when it exceeds the budget, e.g. a recompute)."""
        room = self.budget - tokens_used
        rest = r.target - r.done
        if self.e.chunked_prefill:
            return min(rest, room) if room > 0 else 0
        return rest if rest <= room or tokens_used == 0 else 0

    def _admissible(self, r: _Req, tokens_used: int) -> bool:
        if self.running >= self.cap:
            return False
        n = self._chunk(r, tokens_used)
        return n > 0 and self._need_new(r, n) <= self._free()

    # ------------------------------------------------------------------ transitions
    def _finish(self, r: _Req) -> None:
        if r.state == _DECODE:
            self.d -= 1
            self.k -= r.kterm
        if not self.lazy or r.state == _PREFILL:
            self.kv_fixed -= r.blocks
        r.state = _DONE
        r.finish = self.t
        self.running -= 1
        self.finished += 1
        if self.wl.kind == "closed" and self.sent < len(self.reqs):
            self._send(self.reqs[self.sent], self.t)

    def _prefill_done(self, r: _Req) -> None:
        r.gen += 1
        if math.isnan(r.first):
            r.first = self.t
        self.prefilling.remove(r)
        if r.gen >= r.output:
            self._finish(r)
            return
        if self.lazy:
            self.kv_fixed -= r.blocks   # now counted by the decode bound
        r.state = _DECODE
        r.kterm = float(r.prompt + r.gen - self.g)
        self.k += r.kterm
        self.d += 1
        r.version += 1
        heapq.heappush(self.heap, (self.g + r.output - r.gen, r.i, r.version, r))

    def _preempt_newest(self) -> bool:
        while self.order:
            r = self.order.pop()
            if r.state in (_DECODE, _PREFILL):
                break
        else:
            return False
        if r.state == _DECODE:
            self.d -= 1
            self.k -= r.kterm
        else:
            self.prefilling.remove(r)
            self.kv_fixed -= r.blocks
        r.state = _WAITING
        r.version += 1
        r.target = r.prompt + r.gen
        r.done = 0
        r.blocks = 0
        r.preempt += 1
        self.running -= 1
        self.waiting.appendleft(r)
        return True

    def _pop_finished(self) -> None:
        heap = self.heap
        while heap and (heap[0][3].state != _DECODE or heap[0][2] != heap[0][3].version
                        or heap[0][0] <= self.g):
            _, _, version, r = heapq.heappop(heap)
            if r.state == _DECODE and version == r.version:
                self._finish(r)

    def _clean_heap(self) -> None:
        heap = self.heap
        while heap and (heap[0][3].state != _DECODE or heap[0][2] != heap[0][3].version):
            heapq.heappop(heap)

    # ------------------------------------------------------------------ steps
    def _record(self, kv: float) -> None:
        self.tl.append((self.t, self.running, len(self.waiting), kv, self.d))

    def _step(self) -> None:
        """One step built by the scheduler (mixed, or prefill-only for prefill_first)."""
        e, m = self.e, self.m
        prefill_only = e.policy == "prefill_first"
        if not prefill_only and self.lazy:
            while self.d and self._kv_used(self.g) > self.n_blocks:
                if not self._preempt_newest():
                    break
        d = 0 if prefill_only else self.d
        tokens = d
        chunks: list[tuple[int, int, _Req]] = []
        for r in self.prefilling:
            n = self._chunk(r, tokens)
            if n <= 0:
                break
            if self.lazy:
                free = int(self.n_blocks - self._kv_used(self.g))
                n = min(n, (free + _ceil_div(r.done, self.bs)) * self.bs - r.done)
                if n <= 0:
                    break
            new = self._need_new(r, n)
            chunks.append((n, r.done, r))
            tokens += n
            if self.lazy:
                self.kv_fixed += new
                r.blocks += new
        hold = False
        if e.batch_wait_iters and self.waiting and self.waited_iters < e.batch_wait_iters:
            queued = sum(r.target for r in self.waiting)
            hold = queued < e.batch_wait_tokens_ratio * self.budget or \
                e.batch_wait_tokens_ratio == 0.0
        while self.waiting and not hold and self._admissible(self.waiting[0], tokens):
            r = self.waiting.popleft()
            n = self._chunk(r, tokens)
            new = self._need_new(r, n)
            r.state = _PREFILL
            if math.isnan(r.start):
                r.start = self.t
            self.running += 1
            self.prefilling.append(r)
            self.order.append(r)
            chunks.append((n, 0, r))
            tokens += n
            self.kv_fixed += new
            r.blocks += new
        self.waited_iters = self.waited_iters + 1 if hold else 0
        if not chunks and not d:
            return
        sampled = d + sum(1 for n, p, r in chunks if p + n >= r.target)
        kv = self._kv_used(self.g)
        dt = e.step_overhead_s + e.step_overhead_per_seq_s * (d + len(chunks)) \
            + m.step_s(d, self.k + d * self.g, [(n, p) for n, p, _ in chunks], sampled)
        if not chunks:
            dt += self._padding_s(d)
        self.t += dt
        self.steps += 1
        if d:
            self.itl_v.append(dt)
            self.itl_w.append(float(d))
            self.g += 1
            self._pop_finished()
        for n, _, r in chunks:
            if r.state != _PREFILL:
                continue
            r.done += n
            if r.done >= r.target:
                self._prefill_done(r)
        self._record(kv)

    def _padding_s(self, d: int) -> float:
        """What padding a decode-only step of ``d`` sequences to its CUDA graph's batch adds
        (:attr:`EngineConfig.graph_batch_sizes`): the non-attention work of the padding
        entries, s (0 without padding)."""
        if not self.e.graph_batch_sizes:  # the default: no padding, nothing to look up
            return 0.0
        p = self.e.padded(d)
        if p == d:
            return 0.0
        m = self.m
        return m.dense_s(p) - m.dense_s(d) + m.lm_s(p) - m.lm_s(d)

    def _run_time(self, k: int, const: float, x0: float) -> float:
        return k * const + self.m.decode_attn_sum_s(self.d, x0 - 0.5, x0 + k - 0.5)

    def _decode_run(self) -> bool:
        """Advance a run of identical decode steps in closed form; False if a single
        step must be taken instead."""
        self._clean_heap()
        d = self.d
        if not d or not self.heap:
            return False
        k = self.heap[0][0] - self.g
        if self.lazy:
            room = (self.n_blocks - self.kv_fixed - d) * self.bs - self.k
            k = min(k, math.floor(room / d - self.g) + 1)
        if k < 2:
            return False
        e, m = self.e, self.m
        const = e.step_overhead_s + e.step_overhead_per_seq_s * d + m.dense_s(d) + m.lm_s(d) \
            + self._padding_s(d)
        x0 = (self.k + d * self.g) / d
        dt = self._run_time(k, const, x0)
        if not self.waiting and self.future:
            gap = self.future[0][0] - self.t
            if dt > gap:   # stop at the step during which the next request arrives
                k = self._steps_until(gap, k, const, x0)
                dt = self._run_time(k, const, x0)
        kv = self._kv_used(self.g + k - 1)
        self.t += dt
        self.g += k
        self.steps += k
        self.itl_v.append(dt / k)
        self.itl_w.append(float(d * k))
        self._pop_finished()
        self._record(kv)
        return True

    def _steps_until(self, gap: float, k_max: int, const: float, x0: float) -> int:
        """Smallest k ≥ 1 whose run time reaches ``gap`` (≤ ``k_max``)."""
        per = const + self.m.decode_attn_s(self.d, x0)
        k = min(max(1, math.ceil(gap / per)), k_max)
        for _ in range(60):
            t_k = self._run_time(k, const, x0)
            if t_k < gap and k < k_max:
                k = min(k_max, k + max(1, math.ceil((gap - t_k) / per)))
            elif k > 1 and self._run_time(k - 1, const, x0) >= gap:
                k -= 1
            else:
                break
        return k

    # ------------------------------------------------------------------ main loop
    def run(self) -> ReplicaRun:
        wl, reqs = self.wl, self.reqs
        if wl.kind == "closed":
            for r in reqs[:wl.concurrency]:
                self._send(r, 0.0)
        else:
            assert wl.send_s is not None
            for r, s in zip(reqs, wl.send_s.tolist(), strict=True):
                self._send(r, float(s))
        n = len(reqs)
        tick = max(n // 100, 1)
        last = -1
        guard = 0
        while self.finished < n:
            self._take_arrivals()
            if not self.running and not self.waiting:
                self.t = max(self.t, self.future[0][0])
                continue
            if self.e.policy == "prefill_first":
                want_prefill = bool(self.prefilling) or (
                    bool(self.waiting) and self._admissible(self.waiting[0], 0))
                if want_prefill:
                    self._step()
                elif not self.bulk or not self._decode_run():
                    self._decode_step()
            else:
                blocked = not self.waiting or not self._admissible(self.waiting[0], self.d)
                if self.prefilling or not blocked or not self.bulk or not self._decode_run():
                    self._step()
            guard += 1
            if guard > 50 * n + 10_000_000:
                raise RuntimeError("serving simulation made no progress")  # a bug, not input
            if self.progress is not None and self.finished // tick != last:
                last = self.finished // tick
                self.progress(self.finished, n)
        return self._result()

    def _decode_step(self) -> None:
        """One decode-only step (prefill_first policy)."""
        if self.lazy:
            while self.d and self._kv_used(self.g) > self.n_blocks:
                if not self._preempt_newest():
                    break
        d = self.d
        if not d:
            return
        e, m = self.e, self.m
        kv = self._kv_used(self.g)
        dt = e.step_overhead_s + e.step_overhead_per_seq_s * d \
            + m.step_s(d, self.k + d * self.g, [], d) + self._padding_s(d)
        self.t += dt
        self.steps += 1
        self.itl_v.append(dt)
        self.itl_w.append(float(d))
        self.g += 1
        self._pop_finished()
        self._record(kv)

    def _result(self) -> ReplicaRun:
        rs = self.reqs

        def arr(name: str) -> Floats:
            return np.asarray([getattr(r, name) for r in rs], dtype=np.float64)

        tl = np.asarray(self.tl, dtype=np.float64).reshape(-1, 5)
        return ReplicaRun(
            send_s=arr("send"), arrival_s=arr("arrival"), start_s=arr("start"),
            first_token_s=arr("first"), finish_s=arr("finish"),
            preemptions=np.asarray([r.preempt for r in rs], dtype=np.int64),
            itl_values=np.asarray(self.itl_v), itl_weights=np.asarray(self.itl_w),
            timeline={"t_s": tl[:, 0], "running": tl[:, 1], "waiting": tl[:, 2],
                      "kv_blocks": tl[:, 3], "decoding": tl[:, 4]},
            steps=self.steps)
