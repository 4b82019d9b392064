"""Run the suite on a device: time each case, append rows to a CSV as they are measured,
record the environment in a sidecar, show progress with an ETA, resume after an interrupt.

Files written for ``--out m.csv``:

- ``m.csv``: one row per case in the shared measurement schema; ``notes`` carries
  ``case=<id>`` (what resuming skips), the design tag, sample count, spread and the
  ``unstable`` flag;
- ``m.csv.env.json``: torch, CUDA, driver, device name, clocks, threads, the spec used;
- on the CPU, ``m.cpu-local.yaml``: the spec measured on the spot (see ``calibrate.cpu``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from perfmodel import __version__
from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.measure import (
    L2Flusher,
    QueueAhead,
    Sample,
    TimerConfig,
    time_cpu,
    time_cuda,
)
from perfmodel.calibrate.suite import (
    Case,
    DeviceKind,
    design_suite,
    estimate_seconds,
    select_cases,
)
from perfmodel.hardware.catalog import load_hardware, resolve_id
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.measurements import write_measurements

__all__ = ["RunResult", "done_cases", "env_path", "run_suite", "spec_path_for"]

SOURCE = "perfmodel-calibrate"
#: ``timing`` codes of our rows. Neither names an eager host gap nor a host clock, so
#: perfmodel.validation adds no timing floor: the fitted fixed cost absorbs what remains.
TIMING = {
    "cuda": "perfmodel_cuda_event_pair_l2_flushed_spin_ahead_median",
    "cpu": "perfmodel_cpu_perf_counter_median",
}


@dataclass(frozen=True)
class RunResult:
    """What a run did."""

    out: Path
    env: Path
    spec_path: Path | None
    measured: int
    skipped_done: int
    left_out: int
    failed: tuple[tuple[str, str], ...]
    seconds: float
    unstable: int = 0
    hardware: str = ""
    planned: int = 0
    """Cases chosen within the budget's estimate; time left measures more of the rest."""
    stopped_early: bool = False
    notes: tuple[str, ...] = field(default=())
    repeated: int = 0
    """Noisy cases measured a second time with the budget left over."""


def env_path(out: Path) -> Path:
    return out.with_name(out.name + ".env.json")


def spec_path_for(out: Path) -> Path:
    """Where the measured CPU spec of a run writing ``out`` goes."""
    return out.with_name(out.stem + ".cpu-local.yaml")


# ----------------------------------------------------------------------------- progress
class Progress:
    """A progress bar over estimated seconds, with an ETA scaled by how the measured time
    compares with the estimate so far. tqdm when installed, else a small stderr bar."""

    def __init__(self, estimates: Sequence[float], quiet: bool, stream: TextIO | None = None):
        self.estimates = [float(e) for e in estimates]
        self.total = sum(self.estimates)
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.done_est = 0.0
        self.count = 0
        self.start = time.monotonic()
        self.last = 0.0
        self._tqdm: Any = None
        self.closed = False
        if not quiet:
            try:
                from tqdm import tqdm  # type: ignore[import-untyped]

                self._tqdm = tqdm(total=len(self.estimates), unit="case", file=self.stream,
                                  dynamic_ncols=True)
            except ImportError:
                self._tqdm = None

    def eta_s(self) -> float:
        elapsed = time.monotonic() - self.start
        if self.done_est <= 0:
            return self.total - self.done_est
        return max(0.0, (self.total - self.done_est) * elapsed / self.done_est)

    def update(self, label: str) -> None:
        self.done_est += self.estimates[self.count] if self.count < len(self.estimates) else 0
        self.count += 1
        if self.quiet:
            return
        if self._tqdm is not None:
            self._tqdm.set_postfix_str(label[:40], refresh=False)
            self._tqdm.update(1)
            return
        now = time.monotonic()
        tty = getattr(self.stream, "isatty", lambda: False)()
        if not tty and now - self.last < 5.0 and self.count < len(self.estimates):
            return
        self.last = now
        n = len(self.estimates)
        frac = self.done_est / self.total if self.total > 0 else 1.0
        width = 24
        fill = round(frac * width)
        bar = "#" * fill + "-" * (width - fill)
        eta = _fmt_s(self.eta_s())
        text = f"[{bar}] {self.count}/{n} ETA {eta:>6s}  {label[:48]}"
        if tty:
            self.stream.write("\r" + text.ljust(100))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._tqdm is not None:
            self._tqdm.close()
        elif not self.quiet and getattr(self.stream, "isatty", lambda: False)():
            self.stream.write("\n")
            self.stream.flush()


def _fmt_s(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    if s < 60:
        return f"{s:.0f}s"
    return f"{int(s // 60)}m{int(s % 60):02d}s"


# ----------------------------------------------------------------------------- environment
def _nvml_clocks() -> dict[str, str]:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        out = {
            "sm_clock_mhz": str(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            "mem_clock_mhz": str(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
            "sm_clock_max_mhz": str(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
            "driver": str(pynvml.nvmlSystemGetDriverVersion()),
        }
        with contextlib.suppress(Exception):  # not supported on every board
            out["power_limit_w"] = f"{pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000:.0f}"
        return out
    except Exception:
        pass
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        text = subprocess.run(
            [exe, "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,driver_version,power.limit",
             "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10,
            check=False).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return {}
    parts = [p.strip() for p in text.split(",")]
    keys = ("sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz", "driver", "power_limit_w")
    return dict(zip(keys, parts, strict=False))


def environment(kind: DeviceKind, threads: int) -> dict[str, str]:
    """torch, CUDA, driver, device name, clocks and thread count, as strings."""
    import torch

    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "perfmodel": __version__, "torch": str(torch.__version__),
        "python": platform.python_version(),
        "host": platform.node(), "device_kind": kind, "threads": str(threads),
    }
    if kind == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update({
            "device": torch.cuda.get_device_name(0), "cuda": str(torch.version.cuda),
            "sm_count": str(props.multi_processor_count),
            "memory_bytes": str(props.total_memory),
            "l2_bytes": str(getattr(props, "L2_cache_size", 0)),
            "capability": f"{props.major}.{props.minor}",
            "cudnn": str(torch.backends.cudnn.version()),  # type: ignore[no-untyped-call]
        })
        env.update(_nvml_clocks())
    else:
        from perfmodel.calibrate.cpu import _cpu_name

        env.update({"device": _cpu_name(), "cpu_capability":
                    str(torch.backends.cpu.get_cpu_capability())})
    return env


# ----------------------------------------------------------------------------- resume
def done_cases(out: Path) -> set[str]:
    """Case ids already in ``out``. A last line cut short by an interrupt is removed first
    (the file is rewritten without it)."""
    if not out.exists() or out.stat().st_size == 0:
        return set()
    import csv
    import io

    not_ours = PerfmodelError(str(out), "exists but is not a measurement CSV written by "
                              "calibrate run (left untouched)", "pass a new --out path")
    try:
        text = out.read_text(encoding="utf-8")
        header = next(csv.reader(io.StringIO(text.split("\n", 1)[0])), [])
    except (UnicodeDecodeError, csv.Error):
        raise not_ours from None
    ids: set[str] = set()
    if "notes" not in header or "measured_us" not in header:
        if text.strip():
            raise not_ours
        return ids
    if not text.endswith("\n"):
        # only now, the file being ours: drop a last line an interrupt cut short
        cut = text.rfind("\n")
        text = text[: cut + 1] if cut >= 0 else ""
        out.write_text(text, encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text))
    for raw in reader:
        for part in (raw.get("notes") or "").split():
            if part.startswith("case="):
                ids.add(part[5:].rstrip(";"))
    return ids


def _check_env(path: Path, env: dict[str, str]) -> None:
    if not path.exists():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for key in ("device", "device_kind", "threads"):
        if str(old.get(key, env.get(key))) != str(env.get(key)):
            raise PerfmodelError(
                str(path), f"the existing measurements were taken with {key}="
                f"{old.get(key)!r}, this run has {env.get(key)!r}",
                "resume on the same device and thread count, or pass a new --out")


# ----------------------------------------------------------------------------- rows
def _row(case: Case, sample: Sample, kind: DeviceKind, spec_id: str, device: str,
         extra_notes: str = "") -> dict[str, object]:
    row = case.csv_row()
    row.update({"spec": spec_id, "source": SOURCE, "gpu": device, "timing": TIMING[kind],
                "measured_us": f"{sample.median_s * 1e6:.4g}"})
    flops = _flops(case)
    if flops > 0:
        row["measured_tflops"] = f"{flops / sample.median_s / 1e12:.5g}"
    notes = (f"case={case.id} tag={case.tag} n={sample.n} spread={sample.spread:.3f} "
             f"p10_us={sample.p10_s * 1e6:.4g} p90_us={sample.p90_s * 1e6:.4g} "
             f"unstable={int(sample.unstable)}")
    if case.op in ("copy", "add"):
        notes += " m=elements"
    elif case.op not in ("gemm", "attention"):
        notes += " m=rows n=width"
    row["notes"] = notes + (" " + extra_notes if extra_notes else "")
    return row


def _flops(case: Case) -> float:
    z = case.size
    if case.op == "gemm":
        return 2.0 * z.get("batch", 1) * z["m"] * z["n"] * z["k"]
    if case.op == "attention":
        from perfmodel.ops.attention import Attention

        op = Attention(batch=z["batch"], heads=z["heads"], kv_heads=z["kv_heads"],
                       seq_q=z["seq_q"], seq_kv=z["seq_kv"], head_dim=z["head_dim"],
                       causal=case.causal)
        return float(np.asarray(op.flops()))
    return 0.0


# ----------------------------------------------------------------------------- run
def _cuda_spec(gpu: str | HardwareSpec | None, name: str, notes: list[str]) -> HardwareSpec:
    if gpu is not None:
        return load_hardware(gpu)
    try:
        return load_hardware(resolve_id(name))
    except PerfmodelError:
        notes.append(f"no bundled spec matches {name!r}; pass --gpu; budgets use h100-sxm")
        return load_hardware("h100-sxm")


def run_suite(kind: DeviceKind, out: str | Path, budget_s: float = 300.0, *,
              gpu: str | HardwareSpec | None = None, threads: int | None = None,
              dtypes: Sequence[str] | None = None, quiet: bool = False,
              timer: TimerConfig | None = None, resume: bool = True,
              log: Callable[[str], None] | None = None) -> RunResult:
    """Measure the suite on ``kind`` within ``budget_s`` seconds and append to ``out``.

    On the CPU, a spec of the machine is measured first (unless ``gpu`` names one) and
    written beside ``out``. Cases already in ``out`` are skipped (``resume``); without
    ``resume`` an existing ``out`` is an error.
    """
    import torch

    say = log or (lambda text: None if quiet else print(text, file=sys.stderr))
    t_start = time.monotonic()
    out = Path(out)
    if out.exists() and out.stat().st_size > 0 and not resume:
        raise PerfmodelError(str(out), "already exists (and resuming is off)",
                             "drop --no-resume to continue it, or pass a new --out path")
    out.parent.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    spec_file: Path | None = None
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise PerfmodelError("device", "cuda: torch sees no CUDA device",
                                 "run on a machine with an NVIDIA GPU and a CUDA build of "
                                 "torch, or use --device cpu")
        threads = threads or torch.get_num_threads()
        device_name = torch.cuda.get_device_name(0)
        hw = _cuda_spec(gpu, device_name, notes)
        spec_id = hw.id if not notes else ""
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif kind == "cpu":
        from perfmodel.calibrate.cpu import default_threads, measure_cpu, write_cpu_spec

        threads = threads or default_threads()
        torch.set_num_threads(threads)
        if gpu is not None:
            hw = load_hardware(gpu)
            if not isinstance(gpu, HardwareSpec) and Path(gpu).is_file():
                spec_file = Path(gpu)
        else:
            spec_file = spec_path_for(out)
            if spec_file.exists() and resume and out.exists():
                hw = load_hardware(spec_file)
            else:
                say(f"measuring this CPU ({threads} thread(s)) for the cpu-local spec ...")
                hw = write_cpu_spec(spec_file, measure_cpu(threads, quick=budget_s < 60))
                say(f"wrote {spec_file}")
        spec_id = hw.id
        device_name = environment("cpu", threads)["device"]
    else:
        raise PerfmodelError("device", f"unknown device {kind!r}", "use cuda or cpu")

    env = environment(kind, threads)
    env["spec"] = hw.id
    if spec_file is not None:
        env["spec_path"] = str(spec_file.resolve())
    epath = env_path(out)
    if resume and out.exists():
        _check_env(epath, env)
    done = done_cases(out) if resume else set()

    units = hw.compute.units
    if dtypes:
        missing = [dt for dt in dtypes if dt not in hw.peaks]
        if missing:  # measured rows the model could not predict: say so before measuring
            raise PerfmodelError("--dtype", f"{hw.id} has no {', '.join(missing)} peak in "
                                 "its spec", f"use one of {', '.join(hw.peaks)}")
    suite = design_suite(kind, units, dtypes, arch=hw.arch)
    todo = [c for c in suite if c.id not in done]
    spent = time.monotonic() - t_start
    remaining = max(budget_s - spent, 0.0)
    est = estimate_seconds(todo, hw, kind)
    mem_limit = 0.4 * hw.memory.capacity
    chosen = select_cases(todo, est, remaining, memory_limit_bytes=mem_limit)
    chosen_set = set(chosen)
    chosen_est = [float(e) for c, e in zip(todo, est, strict=True) if c in chosen_set]
    left_out = len(todo) - len(chosen)
    say(f"{len(chosen)} of {len(suite)} cases to measure on {device_name} "
        f"({len(done)} already in {out.name}, {left_out} left out by the budget's estimate, "
        f"measured after as time allows); estimated {_fmt_s(sum(chosen_est))}")

    env["budget_s"] = f"{budget_s:g}"
    env_old: dict[str, Any] = {}
    if epath.exists():
        try:
            env_old = json.loads(epath.read_text(encoding="utf-8"))
        except ValueError:
            env_old = {}
    runs = list(env_old.get("runs", []))
    runs.append({k: env[k] for k in ("date", "budget_s") if k in env})
    epath.write_text(json.dumps({**env, "runs": runs}, indent=2) + "\n", encoding="utf-8")

    cfg = timer or (TimerConfig() if kind == "cuda" else TimerConfig(
        warmup=2, min_samples=5, max_samples=41, target_rel_err=0.015, max_seconds=1.0,
        unstable_spread=0.15, flush_l2=False))
    device: Any = torch.device("cuda:0" if kind == "cuda" else "cpu")
    flusher = None
    if cfg.flush_l2:
        cache = int(env.get("l2_bytes", "0") or 0) if kind == "cuda" else int(hw.memory.l2 or 0)
        flusher = L2Flusher(device, cache or 64 << 20)
    # a GPU spin ahead of each batch keeps host dispatch out of the event pairs
    queue = QueueAhead(torch) if kind == "cuda" and hasattr(torch.cuda, "_sleep") else None
    progress = Progress(chosen_est, quiet)
    failed: list[tuple[str, str]] = []
    taken: list[tuple[Case, Sample, float]] = []
    deadline = t_start + budget_s
    repeats = 0
    stopped = False

    def measure(case: Case, case_cfg: TimerConfig, note: str = "") -> Sample | None:
        """Time one case and append its row; None (and a note in ``failed``) if it fails."""
        try:
            fn = _build(case, device)
            if kind == "cuda":
                sample = time_cuda(fn, case_cfg, flusher, queue=queue)
            else:
                sample = time_cpu(fn, case_cfg, flusher.flush if flusher else None)
        except Exception as exc:  # unsupported backend, out of memory: record, go on
            text = str(exc).splitlines()[0] if str(exc) else ""
            failed.append((case.id, f"{type(exc).__name__}: {text}".rstrip(": ")))
            if kind == "cuda":
                torch.cuda.empty_cache()
            return None
        if kind == "cuda" and len(taken) % 10 == 0:
            sm = _nvml_clocks().get("sm_clock_mhz", "")
            note = " ".join(x for x in (note, f"sm_mhz={sm}" if sm else "") if x)
        write_measurements(out, [_row(case, sample, kind, spec_id, device_name, note)])
        return sample

    try:
        # 1. the cases chosen for the budget, in priority order
        for i, case in enumerate(chosen):
            left = deadline - time.monotonic()
            if left < 0.5 * chosen_est[i]:
                stopped = True
                break
            per_case = max(0.05, min(cfg.max_seconds, left / max(len(chosen) - i, 1) * 2.0))
            sample = measure(case, replace(cfg, max_seconds=per_case))
            if sample is not None:
                taken.append((case, sample, chosen_est[i]))
            progress.update(case.id)
        progress.close()
        # 2. estimates are cautious: while the measured pace leaves room (15 % of the budget
        #    kept for step 3), take more of the cases the budget had left out
        spent_est = sum(chosen_est[: len(taken)])
        pace = (time.monotonic() - t_start - spent) / spent_est if spent_est > 0 else 1.0
        rest = [(c, float(e)) for c, e in zip(todo, est, strict=True) if c not in chosen_set]
        for case, est_i in rest:
            if stopped or est_i > 0.08 * budget_s:
                continue
            if time.monotonic() + est_i * max(pace, 0.2) > deadline - 0.15 * budget_s:
                break
            sample = measure(case, cfg)
            if sample is not None:
                taken.append((case, sample, est_i))
        # 3. what is left goes to a second look at the noisiest cases: noise from other
        #    work on the machine only ever slows a kernel down, so the reader keeps the
        #    faster of two medians (see calibrate.data.read_rows)
        if not stopped:
            for case, first, est_i in sorted(
                    taken, key=lambda item: (-int(item[1].unstable), -item[1].spread)):
                if not first.unstable and first.spread < 0.5 * cfg.unstable_spread:
                    break
                if time.monotonic() + 1.5 * est_i * max(pace, 0.2) > deadline:
                    continue
                if measure(case, cfg, "repeat=1") is not None:
                    repeats += 1
    finally:
        progress.close()
        end_env = dict(json.loads(epath.read_text(encoding="utf-8")))
        if kind == "cuda":
            end_env["clocks_after"] = _nvml_clocks()
        if failed:
            old_failed = dict(end_env.get("failed", {}))
            old_failed.update(dict(failed))
            end_env["failed"] = old_failed
        epath.write_text(json.dumps(end_env, indent=2) + "\n", encoding="utf-8")
    seconds = time.monotonic() - t_start
    measured = len(taken)
    return RunResult(out=out, env=epath, spec_path=spec_file, measured=measured,
                     planned=len(chosen),
                     skipped_done=len(done),
                     left_out=max(len(todo) - measured - len(failed), 0),
                     failed=tuple(failed), seconds=seconds,
                     unstable=sum(int(smp.unstable) for _, smp, _ in taken),
                     hardware=hw.id, stopped_early=stopped, notes=tuple(notes),
                     repeated=repeats)


def _build(case: Case, device: Any) -> Callable[[], Any]:
    from perfmodel.calibrate.kernels import build_callable

    return build_callable(case, device)
