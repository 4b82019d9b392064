"""Request sources: closed loop at a concurrency (benchmark clients), open-loop Poisson
arrivals, or a trace; prompt and output lengths fixed, uniform in [a·L, L], or from the
trace.

A :class:`Workload` holds, per request, the prompt and output token counts and, for open
loop and traces, the time the client sends it (s from the start). Closed loop: the first
``concurrency`` requests are sent at t = 0 and each completion sends the next (what
benchmark clients with a maximum concurrency do), so send times are decided by the
simulation.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from perfmodel._errors import PerfmodelError

__all__ = ["MAX_SIM_REQUESTS", "Workload", "closed_loop", "lengths", "poisson", "read_trace"]

#: Most requests one simulation takes (about a minute of simulation at 1k/1k on one core).
MAX_SIM_REQUESTS = 10_000_000

Kind = Literal["closed", "poisson", "trace"]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Workload:
    """Requests to serve. ``send_s`` is None for a closed loop (decided as it runs)."""

    kind: Kind
    prompt: Ints
    output: Ints
    send_s: npt.NDArray[np.float64] | None = None
    concurrency: int = 0
    rate: float = 0.0

    @property
    def requests(self) -> int:
        return int(self.prompt.size)

    def describe(self) -> str:
        lens = (f"prompt {_span(self.prompt)}, output {_span(self.output)} tokens")
        if self.kind == "closed":
            return (f"closed loop at concurrency {self.concurrency}, {self.requests} "
                    f"requests, {lens}")
        if self.kind == "poisson":
            return (f"Poisson arrivals at {self.rate:g} requests/s, {self.requests} "
                    f"requests, {lens}")
        return f"trace of {self.requests} requests, {lens}"

    def shares(self, parts: int) -> list[npt.NDArray[np.intp]]:
        """Indices of the requests each of ``parts`` replicas gets, for the replicas that
        get any, round robin: request i to replica i mod parts; in a closed loop client j
        to replica j mod parts and request i to client i mod C, so a replica without a
        client gets no request (C < parts leaves parts − C replicas idle)."""
        index = np.arange(self.prompt.size)
        owner = (index % max(self.concurrency, 1) if self.kind == "closed" else index) % parts
        out = [np.flatnonzero(owner == r) for r in range(parts)]
        return [sl for sl in out if sl.size]

    def split(self, parts: int) -> list[Workload]:
        """The workload of each replica that gets requests (:meth:`shares`)."""
        out = []
        for r, sl in enumerate(self.shares(parts)):
            conc = self.concurrency // parts + (1 if r < self.concurrency % parts else 0)
            out.append(Workload(self.kind, self.prompt[sl], self.output[sl],
                                None if self.send_s is None else self.send_s[sl],
                                conc if self.kind == "closed" else 0, self.rate / parts))
        return out


def _span(x: Ints) -> str:
    lo, hi = int(np.min(x)), int(np.max(x))
    return f"{lo}" if lo == hi else f"{lo}-{hi} (mean {float(np.mean(x)):.0f})"


def _whole(value: float, name: str, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer)) \
            or not math.isfinite(float(value)) or float(value) != int(value) or value < 1:
        raise PerfmodelError(name, f"must be a whole number ≥ 1, got {value!r}", fix)
    if value > MAX_SIM_REQUESTS and name in ("requests", "concurrency"):
        raise PerfmodelError(name, f"{int(value):,} is above the cap of {MAX_SIM_REQUESTS:,}",
                             "simulate fewer requests (percentiles settle within thousands)")
    if value > 2**31 and name in ("prompt", "gen"):
        raise PerfmodelError(name, f"{int(value):,} tokens is above the cap of 2³¹", fix)
    return int(value)


def lengths(n: int, longest: int, spread: float, rng: np.random.Generator,
            name: str) -> Ints:
    """``n`` lengths: all ``longest`` when ``spread`` is 1, else uniform integers in
    [round(spread·longest), longest] (benchmark clients' random range)."""
    longest = _whole(longest, name, f"e.g. --{name} 1024")
    if not (isinstance(spread, (int, float)) and 0.0 < spread <= 1.0):
        raise PerfmodelError("length_spread", f"must be in (0, 1], got {spread!r}",
                             "1 for fixed lengths, e.g. 0.8 for uniform in [0.8·L, L]")
    if spread == 1.0:
        return np.full(n, longest, dtype=np.int64)
    lo = max(1, round(spread * longest))
    return rng.integers(lo, longest + 1, size=n, dtype=np.int64)


def closed_loop(concurrency: int, requests: int, prompt: int, output: int,
                spread: float = 1.0, seed: int = 0) -> Workload:
    """``requests`` requests by ``concurrency`` clients that each send the next request as
    soon as their previous one completes."""
    c = _whole(concurrency, "concurrency", "e.g. --concurrency 64")
    n = _whole(requests, "requests", "e.g. --requests 1000")
    rng = np.random.default_rng(seed)
    return Workload("closed", lengths(n, prompt, spread, rng, "prompt"),
                    lengths(n, output, spread, rng, "gen"), None, min(c, n))


def poisson(rate: float, requests: int, prompt: int, output: int, spread: float = 1.0,
            seed: int = 0) -> Workload:
    """Open loop: exponential gaps of mean 1/``rate`` s, the first request at t = 0."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) \
            or not math.isfinite(rate) or rate <= 0:
        raise PerfmodelError("rate", f"must be a positive number of requests/s, got {rate!r}",
                             "e.g. --rate 4")
    n = _whole(requests, "requests", "e.g. --requests 1000")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return Workload("poisson", lengths(n, prompt, spread, rng, "prompt"),
                    lengths(n, output, spread, rng, "gen"), np.cumsum(gaps), 0, float(rate))


_TIME_KEYS = ("arrival_s", "timestamp_s", "time_s", "arrival", "timestamp", "time")
_PROMPT_KEYS = ("prompt_tokens", "input_tokens", "prompt", "input_len", "input_length")
_OUTPUT_KEYS = ("output_tokens", "gen_tokens", "output", "output_len", "output_length")


def _pick(row: dict[str, str], keys: tuple[str, ...], where: str) -> str:
    for k in keys:
        if k in row and str(row[k]).strip() != "":
            return str(row[k])
    raise PerfmodelError(where, f"no {keys[0]} field (accepted names: {', '.join(keys)})",
                         "columns arrival_s, prompt_tokens, output_tokens")


def read_trace(path: str | Path) -> Workload:
    """A trace file: CSV with a header, or JSON lines, with per request the arrival time in
    s (``arrival_s``), ``prompt_tokens`` and ``output_tokens``. Times must be finite, ≥ 0
    and non-decreasing; token counts whole numbers ≥ 1."""
    p = Path(path)
    if not p.is_file():
        raise PerfmodelError(str(path), "trace file not found",
                             "pass a CSV or JSON-lines file with arrival_s, prompt_tokens, "
                             "output_tokens")
    text = p.read_text(encoding="utf-8", errors="replace")
    rows: list[dict[str, str]]
    if text.lstrip().startswith("{"):
        rows = []
        for i, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append({k: str(v) for k, v in json.loads(line).items()})
                except (json.JSONDecodeError, AttributeError):
                    raise PerfmodelError(f"{path}:{i}", "not a JSON object",
                                         "one JSON object per line") from None
    else:
        rows = [dict(r) for r in csv.DictReader(text.splitlines())]
    if len(rows) > MAX_SIM_REQUESTS:
        raise PerfmodelError(str(path), f"{len(rows):,} requests is above the cap of "
                             f"{MAX_SIM_REQUESTS:,}", "split the trace")
    if not rows:
        raise PerfmodelError(str(path), "the trace has no requests",
                             "one line per request: arrival_s, prompt_tokens, output_tokens")
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    for i, row in enumerate(rows, start=2):
        where = f"{path}:{i}"
        fields = [_pick(row, keys, where) for keys in (_TIME_KEYS, _PROMPT_KEYS, _OUTPUT_KEYS)]
        try:
            t, pr, out = (float(x) for x in fields)
        except ValueError:
            raise PerfmodelError(where, "a field is not a number", "fix the line") from None
        if not math.isfinite(t) or t < 0:
            raise PerfmodelError(where, f"arrival time {t!r} must be finite and ≥ 0",
                                 "times in seconds from the start of the trace")
        if times and t < times[-1]:
            raise PerfmodelError(where, f"arrival time {t:g} s is before the previous "
                                 f"{times[-1]:g} s: the trace must be sorted by time",
                                 "sort the trace by arrival time")
        for value, name in ((pr, "prompt_tokens"), (out, "output_tokens")):
            if not math.isfinite(value) or value < 1 or value != int(value):
                raise PerfmodelError(where, f"{name} must be a whole number ≥ 1, got "
                                     f"{value!r}", "e.g. 1024")
        times.append(t)
        prompts.append(int(pr))
        outputs.append(int(out))
    return Workload("trace", np.asarray(prompts, dtype=np.int64),
                    np.asarray(outputs, dtype=np.int64), np.asarray(times, dtype=np.float64))
