"""cpu-local: a spec of the machine we run on, measured on the spot with torch.

- peak fp32 rate R = 2·n³ / t of a large n×n matmul (the best of a few runs: an
  achievable rate, so the spec's compute efficiency is 1);
- bandwidth BW = 2·bytes / t of a copy far larger than the last-level cache (read +
  write; best of a few runs; memory efficiency 1);
- fixed cost per op = median time of an in-place add on 4 elements;
- special-function rate = elements / t of ``torch.exp`` over a cache-resident tensor.

The spec is written as plain YAML in the hardware-spec schema (arch ``cpu``), with the
measured figures under ``sources`` so anyone can see where they came from.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from perfmodel.calibrate.measure import TimerConfig, time_cpu
from perfmodel.hardware.catalog import load_hardware_file, spec_from_dict
from perfmodel.hardware.spec import HardwareSpec

__all__ = ["CpuFigures", "default_threads", "measure_cpu", "write_cpu_spec"]


@dataclass(frozen=True)
class CpuFigures:
    """What :func:`measure_cpu` found (SI units)."""

    threads: int
    matmul_flops_per_s: float
    matmul_n: int
    copy_bytes_per_s: float
    copy_bytes: int
    overhead_s: float
    exp_per_s: float
    cpu_name: str
    l2_bytes: float
    llc_bytes: float
    capacity_bytes: float
    clock_hz: float


def default_threads() -> int:
    """Threads used when none are given: half the logical CPUs (no SMT siblings fighting
    over a core), at most 8, at least 1."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def _cache_bytes(level: int) -> float:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(base.glob("index*")):
            if (index / "level").read_text().strip() == str(level) and \
                    (index / "type").read_text().strip() in ("Unified", "Data"):
                text = (index / "size").read_text().strip().upper()
                mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
                return float(text.rstrip("KMG")) * mult
    except (OSError, ValueError):
        pass
    return 0.0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _clock_hz() -> float:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("cpu mhz"):
                return float(line.split(":", 1)[1]) * 1e6
    except (OSError, ValueError):
        pass
    return 3.0e9


def _capacity() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8.0 * 1024**3


def _copy_rate(elems: int, cfg: TimerConfig) -> float:
    """Best copy bandwidth over ``elems`` fp32 elements, read + write bytes per second."""
    import torch

    src = torch.ones(elems)
    dst = torch.empty_like(src)
    s = time_cpu(lambda: dst.copy_(src), cfg)
    return 2.0 * 4 * elems / s.p10_s


def measure_cpu(threads: int | None = None, quick: bool = False) -> CpuFigures:
    """Measure peak fp32 matmul rate, copy bandwidth, fixed op cost and exp rate.

    ``quick`` uses smaller problems (about 1 s in all instead of about 3 s).
    """
    import torch

    threads = threads or default_threads()
    torch.set_num_threads(threads)
    llc = max(_cache_bytes(3), _cache_bytes(2), 8 * 1024**2)
    cfg = TimerConfig(warmup=1, min_samples=3, max_samples=7, max_seconds=0.6,
                      target_rel_err=0.02)

    n = 768 if quick else 1536
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    out = torch.empty(n, n)
    s = time_cpu(lambda: torch.mm(a, b, out=out), cfg)
    matmul = 2.0 * n**3 / s.p10_s

    elems = int(max(4 * llc, 64 * 1024**2) // 4)
    if quick:
        elems = int(max(2 * llc, 32 * 1024**2) // 4)
    bandwidth = _copy_rate(elems, cfg)

    tiny = torch.ones(4)
    s = time_cpu(lambda: tiny.add_(1.0), TimerConfig(warmup=100, min_samples=200,
                                                     max_samples=2000, max_seconds=0.3,
                                                     target_rel_err=0.01))
    overhead = s.median_s

    m = 1 << 16
    x = torch.randn(m)
    y = torch.empty_like(x)
    s = time_cpu(lambda: torch.exp(x, out=y), cfg)
    exp_rate = m / max(s.p10_s - overhead, s.p10_s * 0.5)

    return CpuFigures(
        threads=threads, matmul_flops_per_s=matmul, matmul_n=n, copy_bytes_per_s=bandwidth,
        copy_bytes=4 * elems, overhead_s=overhead, exp_per_s=exp_rate, cpu_name=_cpu_name(),
        l2_bytes=_cache_bytes(2) or 1024**2, llc_bytes=llc, capacity_bytes=_capacity(),
        clock_hz=_clock_hz(),
    )


def cpu_spec_dict(fig: CpuFigures, spec_id: str = "cpu-local") -> dict[str, Any]:
    """The measured figures as a spec mapping (SI numbers)."""
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    how = (f"measured by perfmodel calibrate on {platform.node() or 'this host'}, {when}, "
           f"{fig.threads} thread(s)")
    return {
        "id": spec_id,
        "name": f"{fig.cpu_name} ({fig.threads} thread{'s' if fig.threads > 1 else ''})",
        "vendor": "cpu",
        "arch": "cpu",
        "form_factor": "host CPU",
        "compute": {"units": fig.threads, "unit_name": "core", "boost_clock": fig.clock_hz,
                    "special_function_rate": fig.exp_per_s},
        "peaks": {"fp32": {"peak": fig.matmul_flops_per_s, "unit": "vector"}},
        "memory": {"type": "host DRAM", "capacity": fig.capacity_bytes,
                   "bandwidth": fig.copy_bytes_per_s, "l2": fig.llc_bytes,
                   "smem_per_unit": fig.l2_bytes},
        "efficiency": {"compute": {"default": 1.0}, "memory": 1.0,
                       "kernel_overhead": fig.overhead_s},
        "sources": {
            "peaks": f"{how}: best of a {fig.matmul_n}x{fig.matmul_n} fp32 matmul",
            "memory": f"{how}: best of a {fig.copy_bytes / 2**20:.0f} MiB copy (read + write); "
                      "l2 = last-level cache, smem_per_unit = L2 per core (sysfs)",
            "compute": f"{how}: exp rate from torch.exp on a cache-resident tensor; clock "
                       "from /proc/cpuinfo",
            "efficiency": f"{how}: rates above are achieved rates (efficiency 1); kernel "
                          "overhead = median in-place add on 4 elements",
        },
        "notes": "Measured figures, not a datasheet: rerun `perfmodel calibrate cpu-spec` on "
                 "the machine you predict for.",
    }


def write_cpu_spec(path: str | Path, fig: CpuFigures, spec_id: str = "cpu-local") -> HardwareSpec:
    """Validate and write the measured spec to ``path`` (YAML); returns it as loaded back."""
    data = cpu_spec_dict(fig, spec_id)
    spec_from_dict(data, source="<measured cpu spec>")
    p = Path(path)
    p.write_text("# CPU spec measured by `perfmodel calibrate`; SI units (FLOP/s, B/s, bytes, "
                 "s, Hz).\n" + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return load_hardware_file(p)

