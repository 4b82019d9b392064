"""The CUDA timer keeps host dispatch out of its event pairs (QueueAhead), checked on a
simulated GPU: a host clock that each launch advances, and a GPU that runs each command at
max(when it was enqueued, when the previous command finished)."""

from __future__ import annotations

from typing import Any

import pytest

from perfmodel.calibrate.measure import QueueAhead, TimerConfig, time_cuda

torch = pytest.importorskip("torch")

KERNEL_S = 3e-6  # GPU time of the kernel under test
FN_HOST_S = 50e-6  # host time to dispatch it (an eager framework under a slow driver)
FLUSH_GPU_S, FLUSH_HOST_S = 30e-6, 20e-6
EVENT_HOST_S = 1e-6
CLOCK_HZ = 1.98e9  # SM clock the spin counts


class SimGPU:
    """One stream: host time advances per call; GPU commands run in order."""

    def __init__(self) -> None:
        self.host = 0.0
        self.gpu_free = 0.0
        self.spins: list[float] = []

    def now(self) -> float:
        return self.host

    def enqueue(self, host_s: float, gpu_s: float) -> float:
        """Spend host_s on the host, then queue gpu_s of GPU work; returns its start."""
        self.host += host_s
        start = max(self.gpu_free, self.host)
        self.gpu_free = start + gpu_s
        return start

    def synchronize(self) -> None:
        self.host = max(self.host, self.gpu_free)

    def sleep(self, cycles: int) -> None:
        self.spins.append(cycles / CLOCK_HZ)
        self.enqueue(1e-6, cycles / CLOCK_HZ)


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> SimGPU:
    gpu = SimGPU()

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.t = 0.0

        def record(self) -> None:
            self.t = gpu.enqueue(EVENT_HOST_S, 0.0)

        def elapsed_time(self, other: Any) -> float:
            return float(other.t - self.t) * 1e3  # ms, as torch reports it

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", gpu.synchronize)
    monkeypatch.setattr(torch.cuda, "_sleep", gpu.sleep)
    return gpu


class Flusher:
    def __init__(self, gpu: SimGPU) -> None:
        self.gpu = gpu

    def flush(self) -> None:
        self.gpu.enqueue(FLUSH_HOST_S, FLUSH_GPU_S)


CFG = TimerConfig(warmup=2, min_samples=20, max_samples=40, target_rel_err=0.0,
                  max_seconds=60.0)


def test_without_the_spin_a_slow_host_enters_the_event_pair(sim: SimGPU) -> None:
    # the setting the H200 run showed: the GPU drains the queue and waits for the host,
    # so begin..end spans the host's dispatch of fn, not the kernel alone
    sample = time_cuda(lambda: sim.enqueue(FN_HOST_S, KERNEL_S), CFG, Flusher(sim))  # type: ignore[arg-type]
    expected = FN_HOST_S + EVENT_HOST_S - FLUSH_GPU_S + KERNEL_S
    assert sample.median_s == pytest.approx(expected, rel=1e-6)
    assert sample.median_s > 5 * KERNEL_S


def test_the_spin_ahead_leaves_the_kernel_alone_in_each_pair(sim: SimGPU) -> None:
    queue = QueueAhead(torch, clock=sim.now)
    assert queue.cycles_per_s == pytest.approx(CLOCK_HZ)  # measured with an event pair
    sample = time_cuda(lambda: sim.enqueue(FN_HOST_S, KERNEL_S), CFG, Flusher(sim),  # type: ignore[arg-type]
                       queue=queue)
    assert sample.median_s == pytest.approx(KERNEL_S, rel=1e-6)
    assert sample.p90_s == pytest.approx(KERNEL_S, rel=1e-6)
    # each batch's spin covers its host time (10 samples of 50 + 20 + 2 µs) and no more
    # than the margin asks: 1.5 x 720 µs + 50 µs
    host_per_batch = 10 * (FN_HOST_S + FLUSH_HOST_S + 2 * EVENT_HOST_S)
    batch_spins = sim.spins[2:]  # after the rate measurement's two
    assert batch_spins
    assert all(host_per_batch < s <= 1.5 * host_per_batch + 51e-6 for s in batch_spins[1:])


def test_the_spin_is_capped(sim: SimGPU) -> None:
    queue = QueueAhead(torch, clock=sim.now, max_spin_s=1e-3)
    assert queue.hold(1000, 1e-3) == pytest.approx(1e-3)
    assert sim.spins[-1] == pytest.approx(1e-3, rel=1e-6)
