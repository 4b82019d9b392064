"""Timers for real kernels: CUDA events with the L2 flushed before every sample, and a
monotonic host clock on the CPU with a fixed thread count. torch is imported lazily.

Statistics of one measurement (n samples t_1..t_n, s):

- median t̃ (the reported time);
- spread = IQR / t̃, the interquartile range relative to the median;
- the sampling error of the median, estimated as 1.2533·σ̂/√n with σ̂ = IQR/1.349 (the
  normal-theory standard error of a median), relative to t̃;
- ``unstable`` when spread exceeds a threshold (0.10 by default): noisy neighbours,
  clock changes, or a kernel whose time depends on what ran before.

Sampling stops when the relative error of the median falls under ``target_rel_err`` (after
at least ``min_samples``), at ``max_samples``, or when the time allowed for the case is
spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["L2Flusher", "QueueAhead", "Sample", "TimerConfig", "summarize", "time_cpu",
           "time_cuda"]


@dataclass(frozen=True)
class TimerConfig:
    """How hard to try for a stable median."""

    warmup: int = 3
    """Untimed calls before sampling (allocator, caches, autotuning, clocks)."""
    min_samples: int = 5
    max_samples: int = 200
    target_rel_err: float = 0.01
    """Stop once the estimated relative standard error of the median is below this."""
    max_seconds: float = 2.0
    """Time allowed for one case's samples (the warm-up is not counted)."""
    unstable_spread: float = 0.10
    """IQR/median above which a case is flagged unstable."""
    flush_l2: bool = True
    """CUDA: overwrite a buffer larger than L2 before every sample (cold-cache time)."""


@dataclass(frozen=True)
class Sample:
    """Summary of the timed samples of one case (seconds)."""

    median_s: float
    p10_s: float
    p90_s: float
    iqr_s: float
    n: int
    spread: float
    """IQR / median."""
    rel_err: float
    """Estimated relative standard error of the median."""
    unstable: bool


def summarize(times_s: list[float] | np.ndarray, unstable_spread: float = 0.10) -> Sample:
    """Median, percentiles, spread and stability of ``times_s`` (see module docstring)."""
    t = np.asarray(times_s, dtype=np.float64)
    if t.size == 0:
        raise ValueError("no samples to summarize")
    med = float(np.median(t))
    q25, q75 = np.percentile(t, [25, 75])
    iqr = float(q75 - q25)
    spread = iqr / med if med > 0 else math.inf
    rel_err = 1.2533 * (iqr / 1.349) / math.sqrt(t.size) / med if med > 0 else math.inf
    return Sample(median_s=med, p10_s=float(np.percentile(t, 10)),
                  p90_s=float(np.percentile(t, 90)), iqr_s=iqr, n=int(t.size), spread=spread,
                  rel_err=rel_err, unstable=bool(spread > unstable_spread))


def _enough(times: list[float], cfg: TimerConfig, spent: float) -> bool:
    if len(times) >= cfg.max_samples:
        return True
    if len(times) < cfg.min_samples:
        return False
    if spent >= cfg.max_seconds:
        return True
    return summarize(times, cfg.unstable_spread).rel_err <= cfg.target_rel_err


def time_cpu(fn: Callable[[], Any], cfg: TimerConfig | None = None,
             flush: Callable[[], Any] | None = None) -> Sample:
    """Time ``fn`` on the host with ``time.perf_counter`` (monotonic).

    The caller fixes the thread count (``torch.set_num_threads``) before building ``fn``;
    every call is timed on its own, after ``flush()`` (untimed; e.g. overwriting a buffer
    larger than the last-level cache) when ``cfg.flush_l2`` is set.
    """
    cfg = cfg or TimerConfig()
    for _ in range(cfg.warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while not _enough(times, cfg, time.perf_counter() - start):
        if flush is not None and cfg.flush_l2:
            flush()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return summarize(times, cfg.unstable_spread)


class L2Flusher:
    """A buffer twice the size of the last cache level (L2 on a GPU, the LLC on a CPU);
    ``flush()`` overwrites it so that the next kernel finds none of its operands there."""

    def __init__(self, device: Any, l2_bytes: int) -> None:
        import torch

        size = max(int(l2_bytes) * 2, 8 << 20)
        self.buffer = torch.empty(size // 4, dtype=torch.float32, device=device)

    def flush(self) -> None:
        self.buffer.fill_(1.0)


class QueueAhead:
    """Keep the GPU busy while the host enqueues a batch of samples.

    An event pair times the GPU from ``begin`` to ``end``. When the GPU reaches ``begin``
    before the host has enqueued ``fn``'s kernels, the pair also times the host's dispatch:
    an eager framework's launch calls, slow under a virtualised driver. On an H200 VM the
    same tiny GEMM read 5 µs or 20-28 µs from one sample to the next (spread 0.3-0.6), the
    larger figure being host time. So each batch begins with a spin kernel
    (``torch.cuda._sleep``) that outlasts the host's enqueueing of the whole batch:

        spin_s = margin · host_s(batch) + pad_s,   host_s(batch) = todo · per_sample_s

    with ``per_sample_s`` the host time per sample of the last warm-up call, then of the
    previous batch (a host's dispatch time for one call is steady once warm). The spin is
    inside no event pair; the samples then run back to back on the GPU and each pair holds
    the kernel and the GPU's own gap between commands. ``clock`` is the host clock (a
    parameter, so that tests can simulate one).
    """

    def __init__(self, torch: Any, margin: float = 1.5, pad_s: float = 50e-6,
                 max_spin_s: float = 0.05,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.torch = torch
        self.margin = margin
        self.pad_s = pad_s
        self.max_spin_s = max_spin_s
        self.clock = clock
        self.cycles_per_s = self._spin_rate()

    def _spin_rate(self) -> float:
        """Cycles per second of ``torch.cuda._sleep`` (the SM clock it counts), measured
        once with an event pair around a spin of 10⁶ cycles after one untimed spin."""
        cuda = self.torch.cuda
        cycles = 1_000_000
        cuda._sleep(cycles)
        begin = cuda.Event(enable_timing=True)
        end = cuda.Event(enable_timing=True)
        begin.record()
        cuda._sleep(cycles)
        end.record()
        cuda.synchronize()
        seconds = begin.elapsed_time(end) * 1e-3
        return cycles / seconds if seconds > 0 else 1.5e9

    def hold(self, samples: int, per_sample_s: float) -> float:
        """Enqueue a spin long enough for the host to enqueue ``samples`` samples of
        ``per_sample_s`` host seconds each; returns the spin's length, s."""
        spin_s = min(self.margin * samples * per_sample_s + self.pad_s, self.max_spin_s)
        self.torch.cuda._sleep(max(int(spin_s * self.cycles_per_s), 1))
        return spin_s


def time_cuda(fn: Callable[[], Any], cfg: TimerConfig | None = None,
              flusher: L2Flusher | None = None, batch: int = 10,
              queue: QueueAhead | None = None) -> Sample:
    """Time ``fn`` on the current CUDA stream with a pair of CUDA events per sample.

    Each sample is: L2 flush (untimed), start event, ``fn()``, end event. Samples are
    enqueued ``batch`` at a time and read after one synchronize. With ``queue`` each batch
    starts behind a GPU spin that outlasts the host's enqueueing (:class:`QueueAhead`), so
    host dispatch never enters an event pair; without it, only once the queue happens to
    run ahead of the GPU.
    """
    import torch

    cfg = cfg or TimerConfig()
    clock = queue.clock if queue is not None else time.perf_counter
    per_sample_s = 100e-6  # no warm-up: a guess; else the last warm-up call's host time
    for _ in range(cfg.warmup):
        t0 = clock()
        if cfg.flush_l2 and flusher is not None:
            flusher.flush()
        fn()
        per_sample_s = clock() - t0
    torch.cuda.synchronize()
    times: list[float] = []
    start = time.perf_counter()
    while not _enough(times, cfg, time.perf_counter() - start):
        todo = min(batch, cfg.max_samples - len(times))
        events = []
        if queue is not None:
            queue.hold(todo, per_sample_s)
        t0 = clock()
        for _ in range(todo):
            if cfg.flush_l2 and flusher is not None:
                flusher.flush()
            begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            begin.record()
            fn()
            end.record()
            events.append((begin, end))
        per_sample_s = (clock() - t0) / todo
        torch.cuda.synchronize()
        times.extend(b.elapsed_time(e) * 1e-3 for b, e in events)
    return summarize(times, cfg.unstable_spread)
