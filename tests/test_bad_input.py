"""Bad input, as a careless or hostile user would give it: the CLI's flags, spec YAML,
measurement CSVs, config.json and the Python API.

Every case states its outcome: a clean error (exit status 2, one ``error:`` line naming the
field, nothing on stdout) or a documented acceptance (exit 0, with the ``warning:`` that
says what was doubted). Around every case: no traceback, no hang (a 20 s alarm), and no
input file changed or lost (each file the case starts with is hashed before and after).

The inputs are collected in tables below; ``test_corpus_size`` pins how many there are, so a
case dropped by accident shows. Caps named in errors live in :mod:`perfmodel._limits`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import perfmodel as pm
from perfmodel._errors import PerfmodelWarning
from perfmodel.cli.main import main
from perfmodel.hardware.catalog import bundled_path
from perfmodel.measurements import BASE_COLUMNS

ALARM_S = 20


@contextlib.contextmanager
def _deadline(seconds: int = ALARM_S) -> Iterator[None]:
    """Fail (instead of hanging) when the block runs past ``seconds``."""
    def fire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"hung: still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------------------ files
H100_YAML = bundled_path("h100-sxm").read_text(encoding="utf-8")
#: The schema without its optional engine columns.
HEADER = ",".join(BASE_COLUMNS)
GEMM_ROW = "h100-sxm,test,H100,gemm,torch.matmul,bf16,1,{m},{n},{k},,,,,,,,,{t},,,"


def _csv(*rows: str, header: str = HEADER) -> str:
    return "\n".join([header, *rows]) + "\n"


#: A calibrated profile (what calibrate fit writes, cut to the fields that matter here).
CAL_YAML = ("extends: h100-sxm\nid: h100-cal\ncalibration:\n  date: '2026-01-01'\n"
            "  device: h100-sxm\n  points: 10\n  params: {gemm/bf16: {overhead_s: 5.0e-6}}\n"
            "  constants: {graph_kernel_s.hopper: 1.5e-6}\n")
GOOD_CSV = _csv(*(GEMM_ROW.format(m=2**i, n=512, k=512, t=5 + 2**i / 100) for i in range(4, 12)))
LLAMA = json.loads((Path(pm.__file__).parent / "models" / "presets" / "llama-2-7b.json")
                   .read_text(encoding="utf-8"))


def _config(**changes: Any) -> str:
    d = {k: v for k, v in LLAMA.items() if not k.startswith("_")}
    for key, value in changes.items():
        if value is _DROP:
            d.pop(key, None)
        else:
            d[key] = value
    return json.dumps(d)


_DROP = object()


def _laughs(levels: int, width: int = 9) -> str:
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def _spec(body: str) -> str:
    """A spec that extends the bundled H100 with ``body`` (YAML lines) on top."""
    return "extends: h100-sxm\nid: test-gpu\nname: Test GPU\n" + body


# ------------------------------------------------------------------------------ cases
@dataclass(frozen=True)
class Case:
    """One input and its outcome: ``code`` 2 with ``expect`` in the error line, or 0 with
    ``expect`` in stdout + stderr (a documented acceptance)."""

    name: str
    argv: tuple[str, ...]
    code: int
    expect: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    absent: str = ""
    """Text that must not be in the output (a value that used to be wrong)."""


def _c(name: str, argv: str | list[str], code: int, expect: str,
       tree: dict[str, str | bytes] | None = None, absent: str = "",
       **files: str | bytes) -> Case:
    """A case; ``files`` name files in the working folder (``m__csv`` is m.csv), ``tree``
    files in subfolders (``{"team/spec.yaml": ...}``)."""
    args = tuple(argv.split()) if isinstance(argv, str) else tuple(argv)
    made = {k.replace("__", "."): v for k, v in files.items()}
    return Case(name, args, code, expect, {**made, **(tree or {})}, absent)


JUNK_SIZES = ("0", "-1", "1.5", "nan", "inf", "-inf", "1e400", "abc", "", "1e30", "0x10")
GEMM = "predict gemm --gpu h100-sxm --m 64 --n 64 --k 64 --dtype bf16"
ATTN = ("predict attention --gpu h100-sxm --batch 1 --heads 32 --kv-heads 8 --seq-q 128 "
        "--head-dim 128 --dtype bf16")
MODEL = "model llama-2-7b --gpu h100-sxm --prompt 512 --gen 16"
SWEEP = "sweep llama-2-7b --gpu h100-sxm --over prompt --values 128:1024:128"
PLAN = ("plan llama-2-7b --gpus h100-sxm --rps 1 --prompt 512 --output 64 --ttft-ms 1000 "
        "--tpot-ms 100")


def _with(base: str, flag: str, value: str) -> list[str]:
    """``base`` with ``flag`` set to ``value`` (replaced if present, else appended)."""
    args = base.split()
    if flag in args:
        i = args.index(flag)
        return [*args[:i], flag, value, *args[i + 2:]]
    return [*args, flag, value]


def _flag_cases() -> list[Case]:
    cases = []
    for flag in ("--m", "--n", "--k", "--batch"):
        for v in JUNK_SIZES:
            cases.append(_c(f"gemm {flag}={v!r}", _with(GEMM, flag, v), 2, flag))
    for flag in ("--heads", "--kv-heads", "--seq-q", "--seq-kv", "--head-dim", "--value-dim"):
        for v in ("0", "-3", "2.5", "nan", "1e400", "x"):
            cases.append(_c(f"attention {flag}={v!r}", _with(ATTN, flag, v), 2, flag))
    for flag in ("--prompt", "--gen", "--batch", "--tp"):
        for v in ("0", "-1", "1.5", "nan", "1e30", "x"):
            cases.append(_c(f"model {flag}={v!r}", _with(MODEL, flag, v), 2, flag))
    for v in ("-1", "1.5", "nan", "x", "1e30"):
        cases.append(_c(f"model --cached-prefix={v!r}", _with(MODEL, "--cached-prefix", v), 2,
                        "--cached-prefix"))
    for flag, v in (("--reserve-fraction", "1"), ("--reserve-fraction", "-0.1"),
                    ("--reserve-fraction", "nan"), ("--reserve-gib", "-1"),
                    ("--reserve-gib", "inf"), ("--reserve-gib", "x")):
        cases.append(_c(f"model {flag}={v!r}", _with(MODEL, flag, v), 2, flag))
    for flag in ("--rps", "--ttft-ms", "--tpot-ms"):
        for v in ("0", "-1", "nan", "inf", "x"):
            cases.append(_c(f"plan {flag}={v!r}", _with(PLAN, flag, v), 2, flag))
    for flag in ("--prompt", "--output"):
        for v in ("0", "1.5", "1e30"):
            cases.append(_c(f"plan {flag}={v!r}", _with(PLAN, flag, v), 2, flag))
    for v in ("0", "-2", "x", "1,,2.5", "1e30", ""):
        cases.append(_c(f"plan --tp={v!r}", _with(PLAN, "--tp", v), 2, "--tp"))
    for v in ("x", "h100-sxm=-1", "h100-sxm=nan", "=2"):
        cases.append(_c(f"plan --price={v!r}", _with(PLAN, "--price", v), 2, "--price"))
    return cases


SWEEP_VALUES = [
    # (values, extra flags, code, expected text)
    ("1:100000000:1", "", 2, "MAX_SWEEP_POINTS"),          # was a hang
    ("1:1e300:1e-300", "", 2, "MAX_SWEEP_POINTS"),
    ("1:1000", "--points 1000000000", 2, "--points"),      # was a 7.45 GiB allocation
    ("1:1000", "--points 0", 2, "--points"),
    ("1:1000", "--points -5", 2, "--points"),
    ("1:1000", "--points 2.5", 2, "--points"),
    ("1,2," * 60000, "", 2, "MAX_SWEEP_POINTS"),
    ("128:4096:0", "", 2, "step must be > 0"),
    ("128:4096:-128", "", 2, "step must be > 0"),
    ("4096:128:128", "", 2, "no values"),
    ("nan:10:1", "", 2, "cannot read"),
    ("1:inf:1", "", 2, "cannot read"),
    ("a,b,c", "", 2, "cannot read"),
    ("", "", 2, "values"),
    ("0,1,2", "", 2, "below 1"),
    ("-5:5", "", 2, "below 1"),
    ("0:10:1", "", 2, "below 1"),
    ("1:2:3:4", "", 2, "cannot read"),
    ("0:100", "--points 10 --log", 2, "--log needs"),
    ("1e12,2e12", "", 2, "MAX_TOKENS"),
    ("1e400", "", 2, "not finite"),
    ("::", "", 2, "cannot read"),
]


def _sweep_cases() -> list[Case]:
    base = SWEEP.split()[:-2]  # without --values
    cases = [_c(f"sweep --values={v[:30]!r} {extra}".strip(),
                [*base, f"--values={v}", *extra.split()], code, expect)
             for v, extra, code, expect in SWEEP_VALUES]
    cases += [
        _c("sweep --rows 0", f"{SWEEP} --rows 0", 2, "--rows"),
        _c("sweep --over bogus", _with(SWEEP, "--over", "bogus"), 2, "--over"),
        _c("sweep --phase decode over prompt", f"{SWEEP} --phase decode", 2, "phase"),
        _c("sweep --over context --phase prefill",
           "sweep llama-2-7b --gpu h100-sxm --over context --values 128,256 --phase prefill",
           2, "phase"),
        _c("sweep --context 0", f"{SWEEP} --context 0", 2, "--context"),
        _c("sweep --tp 3 (does not divide the heads)",
           "sweep llama-2-7b --gpu h100-sxm --over batch --values 1,2 --tp 3", 2, "tp"),
        # accepted: the stop is included only when a step lands on it, never past it
        _c("sweep 128:4096:512 stops at 3712", f"{_with(SWEEP, '--values', '128:4096:512')[0]} "
           + " ".join(_with(SWEEP, "--values", "128:4096:512")[1:]) + " --format csv", 0,
           "\n3712,", absent="\n4224,"),
        # accepted with a warning: past llama-2-7b's 4,096-position window
        _c("sweep past the context window warns",
           "sweep llama-2-7b --gpu h100-sxm --over prompt --values 2048,8192", 0,
           "past llama-2-7b's 4,096-position window"),
        _c("sweep past the context window --strict",
           "sweep llama-2-7b --gpu h100-sxm --over prompt --values 2048,8192 --strict", 2,
           "context"),
    ]
    return cases


def _path_cases() -> list[Case]:
    return [
        _c("--plot ''", [*MODEL.split(), "--plot", ""], 2, "--plot"),
        _c("--plot ' '", [*MODEL.split(), "--plot", " "], 2, "--plot"),
        _c("--plot DIR", f"{MODEL} --plot plots", 2, "is a folder", plots__keep=""),
        _c("--plot DIR/", f"{MODEL} --plot plots/", 2, "is a folder"),
        _c("--plot without suffix", f"{MODEL} --plot chart", 2, "suffix"),
        _c("--plot .txt", f"{MODEL} --plot chart.txt", 2, "suffix"),
        _c("--plot in a missing folder", f"{MODEL} --plot nowhere/chart.png", 2,
           "does not exist"),
        _c("sweep --plot ''", [*SWEEP.split(), "--plot", ""], 2, "--plot"),
        _c("sweep --plot DIR", f"{SWEEP} --plot plots", 2, "is a folder", plots__keep=""),
        _c("plan --plot DIR", f"{PLAN} --plot plots", 2, "is a folder", plots__keep=""),
        _c("plan --plot .jpeg", f"{PLAN} --plot x.jpeg", 2, "suffix"),
        _c("model --plot onto its config.json", "model cfg.json --gpu h100-sxm --prompt 64 "
           "--gen 4 --plot cfg.json", 2, "suffix", cfg__json=_config()),
        _c("calibrate fit --out the CSV", "calibrate fit m.csv --gpu h100-sxm --out m.csv", 2,
           "is the input file", m__csv=GOOD_CSV),
        _c("calibrate fit --out the spec", "calibrate fit m.csv --gpu my.yaml --out my.yaml",
           2, "is the input file", m__csv=GOOD_CSV, my__yaml=_spec("")),
        _c("calibrate fit --out the sidecar", "calibrate fit m.csv --gpu h100-sxm --out "
           "m.csv.env.json", 2, "is the input file", m__csv=GOOD_CSV,
           m__csv__env__json="{}"),
        _c("calibrate fit --out DIR", "calibrate fit m.csv --gpu h100-sxm --out plots", 2,
           "is a folder", m__csv=GOOD_CSV, plots__keep=""),
        _c("calibrate fit --out ''", ["calibrate", "fit", "m.csv", "--out", ""], 2, "--out",
           m__csv=GOOD_CSV),
        _c("calibrate fit --out in a missing folder", "calibrate fit m.csv --gpu h100-sxm "
           "--out nowhere/cal.yaml", 2, "does not exist", m__csv=GOOD_CSV),
        _c("calibrate report --plot DIR", "calibrate report m.csv --gpu h100-sxm --plot plots",
           2, "is a folder", m__csv=GOOD_CSV, plots__keep=""),
        _c("calibrate report --plot the CSV", "calibrate report m.csv --gpu h100-sxm --plot "
           "m.csv", 2, "suffix", m__csv=GOOD_CSV),
        _c("calibrate run --out DIR", "calibrate run --device cpu --out plots", 2,
           "is a folder", plots__keep=""),
        _c("calibrate run --out a spec YAML (not ours: untouched)",
           "calibrate run --device cpu --budget 1s --out my.yaml", 2, "not a measurement CSV",
           my__yaml="id: x\nno newline at the end"),
        _c("calibrate cpu-spec --out DIR", "calibrate cpu-spec --out plots", 2, "is a folder",
           plots__keep=""),
        _c("calibrate --folds -1", "calibrate fit m.csv --gpu h100-sxm --out c.yaml "
           "--folds -1", 2, "--folds", m__csv=GOOD_CSV),
        _c("calibrate --folds 1", "calibrate fit m.csv --gpu h100-sxm --out c.yaml --folds 1",
           2, "--folds", m__csv=GOOD_CSV),
        _c("calibrate report --folds 0", "calibrate report m.csv --gpu h100-sxm --folds 0", 2,
           "--folds", m__csv=GOOD_CSV),
        _c("calibrate report --folds 10000", "calibrate report m.csv --folds 10000", 2,
           "--folds", m__csv=GOOD_CSV),
        _c("calibrate run --budget 0", "calibrate run --device cpu --budget 0 --out x.csv", 2,
           "--budget"),
        _c("calibrate run --budget forever", "calibrate run --device cpu --budget forever "
           "--out x.csv", 2, "--budget"),
        _c("calibrate run --threads 0", "calibrate run --device cpu --threads 0 --out x.csv", 2,
           "--threads"),
        _c("calibrate fit --residual bogus", "calibrate fit m.csv --gpu h100-sxm --out c.yaml "
           "--residual bogus", 2, "--residual", m__csv=GOOD_CSV),
        _c("calibrate fit --prior -1", "calibrate fit m.csv --gpu h100-sxm --out c.yaml "
           "--prior -1", 2, "--prior", m__csv=GOOD_CSV),
        _c("calibrate fit --prior nan", "calibrate fit m.csv --gpu h100-sxm --out c.yaml "
           "--prior nan", 2, "--prior", m__csv=GOOD_CSV),
        _c("calibrate public --max-fit-rows 0", "calibrate public m.csv --max-fit-rows 0", 2,
           "--max-fit-rows", m__csv=GOOD_CSV),
        _c("calibrate fit on a folder", "calibrate fit plots --gpu h100-sxm --out c.yaml", 2,
           "is a folder", plots__keep=""),
        _c("calibrate fit missing CSV", "calibrate fit none.csv --gpu h100-sxm --out c.yaml", 2,
           "file not found"),
        _c("calibrate transfer a plain spec", "calibrate transfer my.yaml --to b200 --out o.yaml",
           2, "not a calibrated profile", my__yaml=H100_YAML),
        _c("calibrate transfer --out the profile", "calibrate transfer cal.yaml --to b200 "
           "--out cal.yaml", 2, "is the input file", cal__yaml=CAL_YAML),
        _c("calibrate transfer --to another vendor", "calibrate transfer cal.yaml --to mi300x "
           "--out o.yaml", 2, "amd device", cal__yaml=CAL_YAML),
        _c("calibrate transfer --to a calibrated profile", "calibrate transfer cal.yaml --to "
           "cal.yaml --out o.yaml", 2, "calibrated profile already", cal__yaml=CAL_YAML),
        _c("calibrate transfer --to nowhere", "calibrate transfer cal.yaml --to h999 "
           "--out o.yaml", 2, "h999", cal__yaml=CAL_YAML),
        _c("calibrate transfer: missing profile", "calibrate transfer none.yaml --to b200 "
           "--out o.yaml", 2, "file not found"),
        _c("model: a folder without config.json", "model plots --gpu h100-sxm --prompt 8 "
           "--gen 2", 2, "no such file", plots__keep=""),
        _c("model: missing config", "model none.json --gpu h100-sxm --prompt 8 --gen 2", 2,
           "no such file"),
        _c("--gpu a folder", "predict gemm --gpu plots.yaml --m 8 --n 8 --k 8 --dtype bf16", 2,
           "not a regular file", plots__yaml__keep=""),
        _c("--gpu /dev/null.yaml", "predict gemm --gpu /dev/zero --m 8 --n 8 --k 8 "
           "--dtype bf16", 2, "gpu"),
        _c("--gpu a missing YAML", "predict gemm --gpu nope.yaml --m 8 --n 8 --k 8 "
           "--dtype bf16", 2, "file not found"),
        _c("validate a folder", "validate plots", 2, "is a folder", plots__keep=""),
        _c("calibrate import --out the trace", "calibrate import t.json --out t.json "
           "--append", 2, "is the input file", t__json='{"traceEvents": []}'),
        _c("calibrate import --out DIR", "calibrate import t.json --out plots", 2,
           "is a folder", t__json='{"traceEvents": []}', plots__keep=""),
        _c("calibrate import: not a trace", "calibrate import t.json --out o.csv", 2,
           "traceEvents", t__json="{}"),
        _c("calibrate import: JSON nested 100,000 deep", "calibrate import t.json --out o.csv",
           2, "too large", t__json="[" * 100_000 + "]" * 100_000),
        _c("calibrate import: binary", "calibrate import t.json --out o.csv", 2, "t.json",
           t__json=b"\xff\xfe\x00"),
        _c("calibrate import: missing", "calibrate import none.json --out o.csv", 2,
           "file not found"),
        _c("explain-trace: not a trace", "explain-trace t.json --gpu h100-sxm", 2,
           "traceEvents", t__json='{"traceEvents": 5}'),
        _c("explain-trace: events of junk", "explain-trace t.json --gpu h100-sxm", 2, "t.json",
           t__json='{"traceEvents": [{"ph": "X", "name": "gemm", "dur": "x", "cat": 7}]}'),
        _c("explain-trace: not an Nsight table", "explain-trace n.csv --gpu h100-sxm", 2,
           "Nsight", n__csv="a,b\n1,2\n"),
    ]


def _model_cases() -> list[Case]:
    return [
        _c("model: prompt past the window warns", "model llama-2-7b --gpu h100-sxm --prompt "
           "32768 --gen 16", 0, "past llama-2-7b's 4,096-position window"),
        _c("model: prompt past the window --strict", "model llama-2-7b --gpu h100-sxm "
           "--prompt 32768 --gen 16 --strict", 2, "context"),
        _c("model: prompt + gen past the window warns", "model llama-2-7b --gpu h100-sxm "
           "--prompt 4000 --gen 200", 0, "4,199 tokens"),
        _c("model: cached prefix is part of the prompt", f"{MODEL} --cached-prefix 256", 0,
           "prefill of 1×256 tokens (256 of 512 cached)"),
        _c("model: TPOT contexts with a cached prefix", f"{MODEL} --cached-prefix 256", 0,
           "contexts 513..527"),
        # the KV cache after the last step holds P + G - 1 = 512 + 16 - 1 tokens, cached or not
        _c("model: final context with a cached prefix", f"{MODEL} --cached-prefix 256 --json",
           0, '"context_len": 527.0', absent='"context_len": 783.0'),
        _c("model: cached prefix = prompt", f"{MODEL} --cached-prefix 512", 2,
           "--cached-prefix"),
        _c("model: cached prefix > prompt", f"{MODEL} --cached-prefix 9999", 2,
           "--cached-prefix"),
        _c("model: unknown preset", "model llama-9 --gpu h100-sxm --prompt 8 --gen 2", 2,
           "unknown model"),
        _c("model: unknown gpu", "model llama-2-7b --gpu nope --prompt 8 --gen 2", 2,
           "unknown hardware"),
        _c("model: 65 GPUs", ["model", "llama-2-7b", "--gpu", ",".join(["h100-sxm"] * 65),
                              "--prompt", "8", "--gen", "2"], 2, "64"),
        _c("model: missing --prompt", "model llama-2-7b --gpu h100-sxm --gen 2", 2, "--prompt"),
        _c("model: bad dtype", f"{MODEL} --weight-dtype bf17", 2, "weight_dtype"),
        _c("model: bad attention impl", f"{MODEL} --attention-impl fast", 2, "impl"),
        _c("model: --tp 3", f"{MODEL} --tp 3", 2, "tp"),
        _c("plan: past the window warns",
           _with(PLAN, "--prompt", "8192"), 0, "past llama-2-7b's 4,096-position window"),
        _c("plan: past the window --strict",
           [*_with(PLAN, "--prompt", "8192"), "--strict"], 2, "context"),
        _c("predict: unknown op", "predict conv --gpu h100-sxm", 2, "usage"),
        _c("predict: no gpu", "predict gemm --m 8 --n 8 --k 8 --dtype bf16", 2, "--gpu"),
        _c("predict: unknown dtype", "predict gemm --gpu h100-sxm --m 8 --n 8 --k 8 "
           "--dtype bf17", 2, "--dtype"),
        _c("predict: dtype the GPU lacks", "predict gemm --gpu v100-sxm2-32gb --m 8 --n 8 "
           "--k 8 --dtype bf16", 2, "bf16"),
        _c("predict: kv-heads not dividing", _with(ATTN, "--kv-heads", "5"), 2, "--kv-heads"),
        _c("predict: unknown impl", [*ATTN.split(), "--impl", "turbo"], 2, "--impl"),
        _c("predict: flash3 before Ampere", [*_with(ATTN, "--gpu", "v100-sxm2-32gb"),
                                             "--dtype", "fp16", "--impl", "flash3"], 2,
           "impl"),
        _c("predict: flash4 before Hopper", [*_with(ATTN, "--gpu", "a100-80gb-sxm"),
                                             "--impl", "flash4"], 2, "impl"),
        _c("predict: --num-splits 0", [*ATTN.split(), "--num-splits", "0"], 2, "--num-splits"),
        _c("predict: allreduce over 1 GPU", "predict allreduce --gpu h100-sxm --numel 8 "
           "--gpus 1", 2, "--gpus"),
        _c("predict: elementwise reads 1e9", "predict elementwise --gpu h100-sxm --numel 8 "
           "--reads 1e9", 2, "--reads"),
        _c("predict: --compare with an unknown id", "predict gemm --compare h100-sxm,nope "
           "--m 8 --n 8 --k 8 --dtype bf16", 2, "--compare"),
        _c("predict: m at the 2^53 cap is finite", "predict gemm --gpu h100-sxm --m "
           "9007199254740992 --n 8 --k 8 --dtype bf16 --json", 0, '"latency_s"'),
        _c("predict: m above the cap", "predict gemm --gpu h100-sxm --m 9007199254740994 --n 8 "
           "--k 8 --dtype bf16", 2, "cap"),
        _c("specs show: unknown", "specs show nope", 2, "unknown hardware"),
        _c("specs: no subcommand", "specs", 2, ""),
        _c("unknown command", "frobnicate", 2, "usage"),
        _c("unknown flag", f"{MODEL} --frobnicate", 2, "usage"),
        _c("no arguments", [], 2, ""),
    ]


SPEC_CASES: list[tuple[str, str | bytes, str]] = [
    # (name, file contents, expected text in the error)
    ("empty file", "", "empty"),
    ("only a comment", "# nothing\n", "empty"),
    ("a list", "- a\n- b\n", "mapping"),
    ("a scalar", "hello\n", "mapping"),
    ("billion laughs, 9 levels", _laughs(9), "aliases"),
    ("billion laughs, 10 levels", _laughs(10), "aliases"),
    ("billion laughs, wide", _laughs(4, width=200), "aliases"),
    ("billion laughs in a field", _spec("notes: &a [x, x]\nsources: " + "{k: *a}\n"), "sources"),
    # a field whose error quotes its value: the value once expanded is 9^8 = 43 M strings
    ("billion laughs echoed by an error", _laughs(8) + _spec("name: *l7\n"), "aliases"),
    ("billion laughs as a number", _laughs(8) + _spec("tdp: *l7\n"), "aliases"),
    ("alias inside itself", "a: &a [*a]\n", "alias"),
    ("mapping alias inside itself", "a: &a {b: *a}\n", "alias"),
    ("flow nesting 5,000 deep", "a: " + "[" * 5000 + "]" * 5000 + "\n", "levels deep"),
    ("block nesting 400 deep", "".join(" " * i + f"k{i}:\n" for i in range(400)),
     "levels deep"),
    ("python tag", "!!python/object/apply:os.system ['echo hi']\n", "tag"),
    ("python name tag", _spec("notes: !!python/name:os.system\n"), "tag"),
    ("custom tag", _spec("tdp: !watts 700\n"), "tag"),
    ("duplicate key", _spec("tdp: 700 W\ntdp: 800 W\n"), "duplicate key 'tdp'"),
    ("malformed YAML", "id: [unclosed\n", "malformed YAML"),
    ("tab indentation", "memory:\n\tcapacity: 80 GiB\n", "malformed YAML"),
    ("not UTF-8", b"id: \xff\xfe\xfa\n", "not UTF-8"),
    ("UTF-16", "id: x\n".encode("utf-16"), "not UTF-8"),
    ("NUL bytes", b"id: x\x00\x00\n", "spec"),
    ("binary garbage", bytes(range(256)) * 4, "spec"),
    ("unknown field", _spec("colour: green\n"), "unknown field 'colour'"),
    ("typo of a field", _spec("memroy: {capacity: 80 GiB}\n"), "did you mean 'memory'"),
    ("10,000 unknown fields", "".join(f"f{i}: {i}\n" for i in range(10000)),
     "more problems not shown"),
    ("100 kB string value", _spec("vendor: " + "x" * 100_000 + "\n"), "vendor"),
    ("100 kB key", _spec("k" * 100_000 + ": 1\n"), "malformed YAML"),
    ("efficiency as a percentage", _spec("efficiency: {memory: 88}\nsources: {efficiency: me}\n"),
     "write 0.88 or '88 %'"),
    ("efficiency compute 85", _spec("efficiency: {compute: {default: 85}}\n"
                                    "sources: {efficiency: me}\n"), "write 0.85"),
    ("efficiency 0", _spec("efficiency: {memory: 0}\nsources: {efficiency: me}\n"),
     "efficiency.memory"),
    ("efficiency -0.5", _spec("efficiency: {memory: -0.5}\nsources: {efficiency: me}\n"),
     "efficiency.memory"),
    ("efficiency 2", _spec("efficiency: {memory: 2}\nsources: {efficiency: me}\n"),
     "efficiency.memory"),
    ("bandwidth in bytes", _spec("memory: {bandwidth: 3.35 TB}\n"), "bandwidth"),
    ("capacity as a rate", _spec("memory: {capacity: 80 GB/s}\n"), "capacity"),
    ("ambiguous KB", _spec("memory: {l2: 50000 KB}\n"), "ambiguous"),
    ("TFLOPS/s", _spec("peaks: {bf16: {peak: 989 TFLOPS/s}}\n"), "twice"),
    ("sparse string", _spec("peaks: {bf16: {peak: 1979 TFLOP/s sparse}}\n"), "sparse"),
    ("sparse peak caught by FLOPs/clock", _spec("peaks: {bf16: {peak: 1978.9 TFLOP/s}}\n"),
     "sparse"),
    ("negative capacity", _spec("memory: {capacity: -80 GiB}\n"), "capacity"),
    ("zero SMs", _spec("compute: {units: 0}\n"), "compute.units"),
    ("fractional SMs", _spec("compute: {units: 1.5}\n"), "compute.units"),
    ("SMs as words", _spec("compute: {units: many}\n"), "compute.units"),
    ("NaN bandwidth", _spec("memory: {bandwidth: .nan}\n"), "bandwidth"),
    ("infinite peak", _spec("peaks: {bf16: {peak: .inf}}\n"), "peak"),
    ("1e400 peak", _spec("peaks: {bf16: {peak: 1e400 FLOP/s}}\n"), "peak"),
    ("boolean clock", _spec("compute: {boost_clock: true}\n"), "boost_clock"),
    ("list for a number", _spec("tdp: [700, W]\n"), "tdp"),
    ("mapping for a string", _spec("name: {a: b}\n"), "name"),
    ("unknown dtype", _spec("peaks: {bf17: {peak: 1 TFLOP/s}}\n"), "bf17"),
    ("two spellings of a dtype", _spec("peaks: {fp16: {peak: 1 TFLOP/s}, half: {peak: 1 "
                                       "TFLOP/s}}\n"), "keep one"),
    ("upper-case id", _spec("").replace("id: test-gpu", "id: Test GPU"), "id"),
    ("launch year 1900", _spec("launch_year: 1900\n"), "launch_year"),
    ("unknown vendor", _spec("vendor: acme\n"), "vendor"),
    ("citation of no block", _spec("sources: {memroy: me}\n"), "sources.memroy"),
    ("no citation", "id: x\nname: x\nvendor: nvidia\narch: hopper\ncompute: {units: 1, "
     "boost_clock: 1 GHz}\npeaks: {bf16: {peak: 1 TFLOP/s}}\nmemory: {type: HBM, capacity: "
     "1 GiB, bandwidth: 1 TB/s}\nsources: {}\n", "no citation"),
    ("extends /etc/passwd", "extends: /etc/passwd\n", "not a .yaml file in a spec folder"),
    ("extends /proc/self/environ", "extends: /proc/self/environ\n", "spec folder"),
    ("extends ../outside.yaml", "extends: ../outside.yaml\n", "spec folder"),
    ("extends ~/x.yaml", "extends: ~/x.yaml\n", "spec folder"),
    ("extends a missing file", "extends: missing.yaml\n", "no file"),
    ("extends an unknown id", "extends: h999\n", "unknown hardware"),
    ("extends a number", "extends: 5\n", "extends"),
    ("extends itself", "extends: spec.yaml\nid: x\n", "cycle"),
    ("extends a non-YAML file beside it", "extends: ./notes.txt\n", "spec folder"),
    ("calibration residual table of junk", _spec("calibration: {date: x, device: x, points: "
                                                 "-1}\n"), "calibration.points"),
    ("calibration residual table of 3,000 rows",
     _spec("calibration: {date: x, device: x, points: 1, residuals: {'gemm/bf16#gp': ["
           + ", ".join(["[1, 2, 3, 4, 0.1]"] * 3000) + "]}}\n"), "MAX_RESIDUAL_ROWS"),
    ("calibration residual table holding a NaN (every prediction it touches would be NaN)",
     _spec("calibration: {date: x, device: x, points: 1, residuals: {'gemm/bf16#gp': "
           "[[1, 1, 1, 1, .nan], [12, 12, 12, 0, 0.1]]}}\n"), "calibration.residuals.gemm/bf16#gp"),
    ("calibration constant of infinity",
     _spec("calibration: {date: x, device: x, points: 1, constants: {graph_kernel_s: .inf}}\n"),
     "calibration.constants.graph_kernel_s"),
    ("calibration parameter of NaN",
     _spec("calibration: {date: x, device: x, points: 1, params: {gemm/bf16: "
           "{compute_fraction: .nan}}}\n"), "calibration.params.gemm/bf16.compute_fraction"),
]


SIBLINGS: dict[str, str | bytes] = {"team/spec.yaml": "extends: ../lib/base.yaml\nid: test-gpu\n",
                                    "lib/base.yaml": _spec("")}


def _spec_cases() -> list[Case]:
    cases = [_c(f"spec: {name}", "specs validate spec.yaml", 2, expect, spec__yaml=text)
             for name, text, expect in SPEC_CASES]
    cases += [
        _c("spec via --gpu: billion laughs", "predict gemm --gpu spec.yaml --m 8 --n 8 --k 8 "
           "--dtype bf16", 2, "aliases", spec__yaml=_laughs(10)),
        _c("spec via specs show: billion laughs", "specs show spec.yaml", 2, "aliases",
           spec__yaml=_laughs(10)),
        _c("spec: extends through a symlink out", "specs validate spec.yaml", 2, "spec folder",
           spec__yaml="extends: link.yaml\n", link__yaml="@symlink:/etc/hostname"),
        # documented acceptances
        _c("spec: sparse figure without FLOPs/clock warns", "specs validate spec.yaml", 0,
           "bf16 not cross-checked",
           spec__yaml=_spec("peaks: {bf16: {peak: 1979 TFLOP/s, flops_per_clock_per_unit: "
                            "null, sparse_peak: null}}\n")),
        _c("spec: ... and --strict refuses it", "specs validate --strict spec.yaml", 2,
           "not cross-checked",
           spec__yaml=_spec("peaks: {bf16: {peak: 1979 TFLOP/s, flops_per_clock_per_unit: "
                            "null, sparse_peak: null}}\n")),
        # the same figure beside the sparse_peak it inherits: the two agree, so it is sparse
        _c("spec: sparse figure equal to its sparse_peak", "specs validate spec.yaml", 2,
           "2:4-sparse figure",
           spec__yaml=_spec("peaks: {bf16: {peak: 1979 TFLOP/s, flops_per_clock_per_unit: "
                            "null}}\n")),
        _c("spec: extends a sibling with --spec-dir", "--spec-dir lib specs validate "
           "team/spec.yaml", 0, "ok: test-gpu", tree=SIBLINGS),
        _c("spec: extends a sibling without --spec-dir", "specs validate team/spec.yaml", 2,
           "spec folder", tree=SIBLINGS),
        _c("spec: extends a file in its own folder", "specs validate spec.yaml", 0,
           "ok: test-gpu", spec__yaml="extends: base.yaml\nid: test-gpu\n",
           base__yaml=_spec("")),
        _c("spec: a full copy of a bundled spec", "specs validate spec.yaml", 0, "ok: h100-sxm",
           spec__yaml=H100_YAML),
        _c("spec: BOM and CRLF", "specs validate spec.yaml", 0, "ok: test-gpu",
           spec__yaml="\ufeff" + _spec("").replace("\n", "\r\n")),
    ]
    return cases


CSV_CASES: list[tuple[str, str | bytes, str]] = [
    ("empty", "", "empty"),
    ("header only", HEADER + "\n", "no usable rows"),
    ("no op column", "dtype,measured_us\nbf16,5\n", "missing column(s) op"),
    ("semicolons", HEADER.replace(",", ";") + "\n", "missing column"),
    ("a 5 MB field", _csv(GEMM_ROW.format(m=8, n=8, k=8, t=5).replace("torch.matmul",
                                                                     "x" * 5_000_000)),
     "field longer than"),
    ("a quote left open", _csv('h100-sxm,"test,H100,gemm,,bf16,1,8,8,8,,,,,,,,,5,,,'),
     "m.csv"),
    ("NUL bytes", GOOD_CSV.replace("torch.matmul", "torch\x00matmul"), "NUL"),
    ("latin-1 bytes", GOOD_CSV.encode("utf-8") + "é,\n".encode("latin-1"), "not UTF-8"),
    ("binary", bytes(range(256)) * 100, "m.csv"),
    ("UTF-16", GOOD_CSV.encode("utf-16"), "m.csv"),
    ("truncated line", _csv("h100-sxm,test,H100,gemm,torch.matmul,bf16,1,8"), "m.csv"),
    ("extra fields", _csv(GEMM_ROW.format(m=8, n=8, k=8, t=5) + ",x,y"), "m.csv"),
    ("time 0", _csv(GEMM_ROW.format(m=8, n=8, k=8, t=0)), "measured_us"),
    ("time -1", _csv(GEMM_ROW.format(m=8, n=8, k=8, t=-1)), "measured_us"),
    ("time nan", _csv(GEMM_ROW.format(m=8, n=8, k=8, t="nan")), "measured_us"),
    ("time inf", _csv(GEMM_ROW.format(m=8, n=8, k=8, t="inf")), "measured_us"),
    ("time words", _csv(GEMM_ROW.format(m=8, n=8, k=8, t="fast")), "measured_us"),
    ("m = 0", _csv(GEMM_ROW.format(m=0, n=8, k=8, t=5)), "column m"),
    ("m = 1.5", _csv(GEMM_ROW.format(m=1.5, n=8, k=8, t=5)), "column m"),
    ("m = -3", _csv(GEMM_ROW.format(m=-3, n=8, k=8, t=5)), "column m"),
    ("m = 1e30", _csv(GEMM_ROW.format(m="1e30", n=8, k=8, t=5)), "m"),
    ("m words", _csv(GEMM_ROW.format(m="big", n=8, k=8, t=5)), "column m"),
    ("m missing", _csv(GEMM_ROW.format(m="", n=8, k=8, t=5)), "column m"),
    ("unknown op", _csv(GEMM_ROW.format(m=8, n=8, k=8, t=5).replace(",gemm,", ",conv,")),
     "op"),
    ("empty dtype", _csv(GEMM_ROW.format(m=8, n=8, k=8, t=5).replace(",bf16,", ",,")),
     "dtype"),
]


def _csv_cases() -> list[Case]:
    cases = []
    for name, text, expect in CSV_CASES:
        cases.append(_c(f"validate csv: {name}", "validate m.csv --gpu h100-sxm", 2, expect,
                        m__csv=text))
        cases.append(_c(f"calibrate fit csv: {name}", "calibrate fit m.csv --gpu h100-sxm "
                        "--out cal.yaml", 2, expect, m__csv=text))
    cases += [
        # documented acceptance: a byte-order mark, as Excel writes "CSV UTF-8"
        _c("validate csv: UTF-8 BOM", "validate m.csv --gpu h100-sxm --json", 0, '"overall"',
           m__csv="\ufeff" + GOOD_CSV),
        _c("calibrate report csv: UTF-8 BOM, CRLF", "calibrate report m.csv --gpu h100-sxm "
           "--residual off --prior 0.1 --folds 2 --json", 0, '"device"',
           m__csv=("\ufeff" + GOOD_CSV).replace("\n", "\r\n")),
        _c("calibrate fit: two devices in the spec column", "calibrate fit m.csv --out c.yaml",
           2, "--gpu", m__csv=_csv(GEMM_ROW.format(m=8, n=8, k=8, t=5),
                                   GEMM_ROW.format(m=8, n=8, k=8, t=5).replace(
                                       "h100-sxm", "a100-80gb-sxm"))),
        _c("calibrate fit: CSV of another GPU", "calibrate fit m.csv --gpu a100-80gb-sxm "
           "--out c.yaml", 2, "m.csv", m__csv=GOOD_CSV),
    ]
    return cases


CONFIG_CASES: list[tuple[str, str | bytes, str]] = [
    ("Mamba", json.dumps({"architectures": ["MambaForCausalLM"], "model_type": "mamba",
                          "hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280,
                          "state_size": 16, "num_attention_heads": 12,
                          "intermediate_size": 1536}), "mamba"),
    ("Mamba without model_type", json.dumps({"architectures": ["MambaForCausalLM"],
                                             "hidden_size": 768, "num_hidden_layers": 24,
                                             "vocab_size": 50280, "num_attention_heads": 12,
                                             "intermediate_size": 1536}), "architectures"),
    ("Mamba by its keys", json.dumps({"hidden_size": 768, "num_hidden_layers": 24,
                                      "vocab_size": 50280, "num_attention_heads": 12,
                                      "intermediate_size": 1536, "ssm_cfg": {}}), "ssm_cfg"),
    ("Mamba-2", _config(model_type="mamba2", architectures=["Mamba2ForCausalLM"]), "mamba"),
    ("Jamba", _config(model_type="jamba", architectures=["JambaForCausalLM"]), "jamba"),
    ("RWKV", _config(model_type="rwkv", architectures=["RwkvForCausalLM"]), "rwkv"),
    ("Falcon-H1", _config(model_type="falcon_h1"), "falcon_h1"),
    ("RecurrentGemma", _config(model_type="recurrent_gemma"), "recurrent_gemma"),
    ("T5", _config(model_type="t5", architectures=["T5ForConditionalGeneration"],
                   is_encoder_decoder=True), "t5"),
    ("BERT", _config(model_type="bert", architectures=["BertForMaskedLM"]), "bert"),
    ("encoder-decoder flag", _config(is_encoder_decoder=True), "encoder-decoder"),
    ("DeepSeek MLA without its head widths", _config(kv_lora_rank=512), "kv_lora_rank"),
    ("DeepSeek-V4 compressed attention", _config(o_lora_rank=1024, compress_ratios=[0, 2]),
     "o_lora_rank"),
    ("Kimi Linear delta-attention layers",
     _config(model_type="kimi_linear", linear_attn_config={"kda_layers": [1, 2, 3]}),
     "linear_attn_config"),
    ("Qwen3-Next linear-attention layers",
     _config(model_type="qwen3_next", layer_types=["linear_attention"] * 3
             + ["full_attention"]), "layer_types"),
    ("GPT-2 learned positions", _config(model_type="gpt2", n_positions=1024), "positions"),
    ("missing hidden_size", _config(hidden_size=_DROP), "hidden_size"),
    ("hidden_size words", _config(hidden_size="big"), "hidden_size"),
    ("hidden_size 4096.5", _config(hidden_size=4096.5), "hidden_size"),
    ("hidden_size 1e30", _config(hidden_size=1e30), "hidden_size"),
    ("10^9 layers", _config(num_hidden_layers=10**9), "MAX_LAYERS"),
    ("10^30 vocab", _config(vocab_size=10**30), "vocab_size"),
    ("negative heads", _config(num_attention_heads=-32), "num_heads"),
    ("heads not dividing hidden", _config(num_attention_heads=33), "num_heads"),
    ("kv heads not dividing", _config(num_key_value_heads=5), "num_kv_heads"),
    ("layers as true", _config(num_hidden_layers=True), "num_layers"),
    ("layers null", _config(num_hidden_layers=None), "num_hidden_layers"),
    ("unknown activation", _config(hidden_act="swoosh"), "hidden_act"),
    ("experts per token > experts", _config(num_local_experts=4, num_experts_per_tok=8),
     "experts_per_token"),
    ("experts words", _config(num_local_experts="eight"), "num_local_experts"),
    ("window layers words", _config(model_type="qwen2", use_sliding_window=True,
                                    max_window_layers="x", sliding_window=4096),
     "max_window_layers"),
    ("text_config a list", _config(text_config=[1], hidden_size=_DROP), "text_config"),
    ("quantization_config a list", _config(quantization_config=[1]), "quantization_config"),
    ("a JSON list", "[1, 2, 3]", "JSON object"),
    ("invalid JSON", "{hidden_size: 4096", "not valid JSON"),
    ("empty", "", "not valid JSON"),
    ("not UTF-8", b'{"hidden_size": "\xff"}', "not UTF-8"),
    ("nesting 100,000 deep", "[" * 100_000 + "]" * 100_000, "cfg.json"),
    ("a 5,000-digit integer", '{"hidden_size": ' + "9" * 5000 + "}", "cfg.json"),
    ("max positions 0", _config(max_position_embeddings=0), "max_position_embeddings"),
]


def _config_cases() -> list[Case]:
    cases = [_c(f"config.json: {name}", "model cfg.json --gpu h100-sxm --prompt 64 --gen 4",
                2, expect, cfg__json=text) for name, text, expect in CONFIG_CASES]
    cases += [
        _c("config.json: unknown model_type warns", "model cfg.json --gpu h100-sxm --prompt 64 "
           "--gen 4", 0, "model_type 'frobnet' is not one of the known",
           cfg__json=_config(model_type="frobnet")),
        _c("config.json: unknown model_type --strict", "model cfg.json --gpu h100-sxm "
           "--prompt 64 --gen 4 --strict", 2, "model_type",
           cfg__json=_config(model_type="frobnet")),
        _c("config.json: BOM accepted", "model cfg.json --gpu h100-sxm --prompt 64 --gen 4", 0,
           "TTFT", cfg__json="\ufeff" + _config()),
    ]
    return cases


CLI_CASES: list[Case] = [*_flag_cases(), *_sweep_cases(), *_path_cases(), *_model_cases(),
                         *_spec_cases(), *_csv_cases(), *_config_cases()]


def _write_files(tmp: Path, files: dict[str, str | bytes]) -> dict[Path, str]:
    """Create the case's files; return path -> sha256 of each regular file made."""
    made: dict[Path, str] = {}
    for name, content in files.items():
        if name.endswith(".keep"):  # a folder
            (tmp / name.removesuffix(".keep")).mkdir(parents=True, exist_ok=True)
            continue
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("@symlink:"):
            path.symlink_to(content.removeprefix("@symlink:"))
            continue
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8", newline="")
        else:
            path.write_bytes(content)
        made[path] = hashlib.sha256(path.read_bytes()).hexdigest()
    if "notes.txt" not in files:
        (tmp / "notes.txt").write_text("id: x\n", encoding="utf-8")
    return made


def _run_case(case: Case, tmp: Path, monkeypatch: pytest.MonkeyPatch,
              capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.chdir(tmp)
    made = _write_files(tmp, case.files)
    capsys.readouterr()
    with _deadline():
        code = main(list(case.argv))
    out, err = capsys.readouterr()
    for path, digest in made.items():  # no input lost or changed
        assert path.is_file(), f"{case.name}: {path.name} was removed"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, (
            f"{case.name}: {path.name} was changed")
    return code, out, err


def _check_outcome(case: Case, code: int, out: str, err: str) -> None:
    assert "Traceback" not in err + out, f"{case.name}: traceback\n{err}"
    assert code != 3, f"{case.name}: internal error: {err}"
    assert code == case.code, f"{case.name}: exit {code}, expected {case.code}\n{err}"
    if code == 2:
        lines = err.strip().splitlines()
        assert lines, f"{case.name}: no error message"
        assert lines[0].startswith(("error:", "usage")) or case.expect == "", (
            f"{case.name}: {lines[0]}")
        # one line, or a spec's list of problems under one header line
        assert len(lines) == 1 or all(x.startswith("  - ") for x in lines[1:]) or (
            case.expect == ""), f"{case.name}: {len(lines)} lines:\n{err}"
        assert all(len(x) <= 600 for x in lines), f"{case.name}: a line of {max(map(len, lines))}"
        assert len(err) <= 25 * 600, f"{case.name}: {len(err):,} characters of error text"
        assert case.expect in err, f"{case.name}: {case.expect!r} not in\n{err}"
    else:
        assert case.expect in out + err, f"{case.name}: {case.expect!r} not in\n{out}\n{err}"
    if case.absent:
        assert case.absent not in out + err, f"{case.name}: {case.absent!r} in the output"


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.name for c in CLI_CASES])
def test_cli_input(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run_case(case, tmp_path, monkeypatch, capsys)
    _check_outcome(case, code, out, err)


def test_calibrate_run_leaves_a_foreign_out_file_untouched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``calibrate run --out`` on a file it did not write: refused before it trims the
    file's last line (it used to drop a last line without a newline first)."""
    case = next(c for c in CLI_CASES if c.name.startswith("calibrate run --out a spec YAML"))
    _, _, err = _run_case(case, tmp_path, monkeypatch, capsys)
    assert (tmp_path / "my.yaml").read_text(encoding="utf-8").endswith("at the end")
    assert "left untouched" in err


# ------------------------------------------------------------------------------ Python API
H100 = pm.load_hardware("h100-sxm")
LLAMA_CFG = pm.load_model("llama-2-7b")


def _gemm(**kw: Any) -> Callable[[], Any]:
    return lambda: pm.predict(pm.Gemm(**{"m": 64, "n": 64, "k": 64, **kw}), H100)


def _attn(**kw: Any) -> Callable[[], Any]:
    base = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_q": 128, "head_dim": 128}
    return lambda: pm.predict(pm.Attention(**{**base, **kw}), H100)


def _model(**kw: Any) -> Callable[[], Any]:
    base: dict[str, Any] = {"phase": "generate", "prompt_len": 512, "gen_len": 16}
    return lambda: pm.predict_model(LLAMA_CFG, H100, **{**base, **kw})


API_ERRORS: list[tuple[str, Callable[[], Any], str]] = [
    # (name, call, the field the error must name)
    *[(f"Gemm(m={v!r})", _gemm(m=v), "m") for v in
      (float("nan"), float("inf"), -1, 0, 1.5, "4", None, [], 1e30, [[1, 2], [3]], b"4",
       {"a": 1}, complex(1, 1), 2**53 + 2)],
    ("Gemm arrays that do not broadcast", _gemm(m=np.ones(3), n=np.ones(4)), "shape"),
    ("Gemm dtype bf17", _gemm(dtype="bf17"), "dtype"),
    ("Gemm out_dtype 7", _gemm(out_dtype=7), "dtype"),
    ("Gemm fp8 on V100", lambda: pm.predict(pm.Gemm(8, 8, 8, dtype="fp8"),
                                            pm.load_hardware("v100-sxm2-32gb")), "dtype"),
    *[(f"Attention({k}={v!r})", _attn(**{k: v}), k) for k, v in
      (("seq_q", 0), ("seq_q", float("nan")), ("heads", 1e30), ("head_dim", -128),
       ("kv_heads", 5), ("batch", "one"))],
    ("Attention impl turbo", _attn(impl="turbo"), "impl"),
    ("Attention num_splits 0", _attn(num_splits=0), "num_splits"),
    ("Norm hidden 0", lambda: pm.predict(pm.Norm(8, 0), H100), "hidden"),
    ("Norm kind weird", lambda: pm.predict(pm.Norm(8, 8, kind="weird"), H100), "kind"),
    ("Elementwise reads -1", lambda: pm.predict(pm.Elementwise(8, reads=-1), H100), "reads"),
    ("AllReduce gpus 1.5", lambda: pm.predict(pm.AllReduce(8, gpus=1.5), H100), "gpus"),
    ("predict a string", lambda: pm.predict("gemm", H100), "op"),  # type: ignore[arg-type]
    ("predict on an unknown GPU", lambda: pm.predict(pm.Gemm(8, 8, 8), "h999"), "gpu"),
    ("predict on a missing YAML", lambda: pm.predict(pm.Gemm(8, 8, 8), "nope.yaml"),
     "nope.yaml"),
    ("load_hardware(123)", lambda: pm.load_hardware(123), "gpu"),  # type: ignore[arg-type]
    ("load_hardware('')", lambda: pm.load_hardware(""), "gpu"),
    ("parse_quantity kind 'speed'", lambda: pm.parse_quantity("3 TB/s", "speed"), "kind"),  # type: ignore[arg-type]
    ("parse_quantity None", lambda: pm.parse_quantity(None, "bytes", "capacity"), "capacity"),
    ("parse_quantity 1e999", lambda: pm.parse_quantity("1e999 TB/s", "bandwidth", "bw"), "bw"),
    ("parse_quantity 100 kB of text", lambda: pm.parse_quantity("x" * 100_000, "bytes", "c"),
     "c"),
    ("format_quantity kind 'speed'", lambda: pm.format_quantity(1.0, "speed"), "kind"),  # type: ignore[arg-type]
    ("load_model unknown", lambda: pm.load_model("llama-9"), "model"),
    ("load_model a missing file", lambda: pm.load_model("none.json"), "model"),
    ("predict_model prompt 1e30", _model(prompt_len=1e30), "prompt_len"),
    ("predict_model prompt nan", _model(prompt_len=float("nan")), "prompt_len"),
    ("predict_model prompt 0", _model(prompt_len=0), "prompt_len"),
    ("predict_model gen 1.5", _model(gen_len=1.5), "gen_len"),
    ("predict_model batch 0", _model(batch=0), "batch"),
    ("predict_model batch 2^30", _model(batch=2**30), "batch"),
    ("predict_model tp 3", _model(tp=3), "tp"),
    ("predict_model tp 1e9", _model(tp=1e9), "tp"),
    ("predict_model cached_prefix = prompt", _model(cached_prefix=512), "cached_prefix"),
    ("predict_model cached_prefix -1", _model(cached_prefix=-1), "cached_prefix"),
    ("predict_model phase x", _model(phase="x"), "phase"),
    ("predict_model decode without context", _model(phase="decode"), "context_len"),
    ("predict_model decode_points 1", _model(decode_points=1), "decode_points"),
    ("predict_model reserve 1.5", _model(reserve_fraction=1.5), "reserve"),
    ("predict_model context past the window, strict", _model(prompt_len=8192, strict=True),
     "context"),
    ("predict_model prompt as text", _model(prompt_len="512"), "prompt_len"),
    ("sweep over x", lambda: pm.sweeps.sweep(LLAMA_CFG, H100, "x", [1, 2]), "over"),  # type: ignore[arg-type]
    ("sweep no values", lambda: pm.sweeps.sweep(LLAMA_CFG, H100, "prompt", []), "values"),
    ("parse_values huge", lambda: pm.sweeps.parse_values("1:1e12:1"), "values"),
    ("Workload prompt 1.5", lambda: pm.planning.Workload(1, 1.5, 8, 1, 1), "prompt_len"),  # type: ignore[arg-type]
    ("Workload rps nan", lambda: pm.planning.Workload(float("nan"), 8, 8, 1, 1),
     "requests_per_s"),
    ("plan tp_options nan", lambda: pm.planning.plan(
        LLAMA_CFG, [H100], pm.planning.Workload(1, 8, 8, 1, 1),
        tp_options=[float("nan")]),  # type: ignore[list-item]
     "tp_options"),
    ("read_measurements missing", lambda: pm.read_measurements("none.csv"), "none.csv"),
    ("read_measurements a folder", lambda: pm.read_measurements("."), "."),
]


def _import_submodules() -> None:
    import perfmodel.planning
    import perfmodel.sweeps  # noqa: F401


@pytest.mark.parametrize(("name", "call", "field_name"), API_ERRORS,
                         ids=[a[0] for a in API_ERRORS])
def test_api_input(name: str, call: Callable[[], Any], field_name: str, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    _import_submodules()
    monkeypatch.chdir(tmp_path)
    with _deadline(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no overflow or NaN on the way
        with pytest.raises(pm.PerfmodelError) as info:
            call()
    assert field_name in str(info.value), f"{name}: {info.value}"
    assert len(str(info.value)) <= 600
    assert "\n" not in str(info.value)


API_ACCEPTED: list[tuple[str, Callable[[], Any], str]] = [
    # (name, call, what is documented about it)
    ("a context past the window predicts, with a warning", _model(prompt_len=8192),
     "warns PerfmodelWarning and says so in assumptions"),
    ("sizes at the 2^53 cap stay finite", _gemm(m=2**53, n=2**53, k=2**53), "finite"),
    ("attention at the cap stays finite", _attn(batch=2**53, seq_q=2**53, heads=2**53,
                                                kv_heads=2**53, head_dim=2**53), "finite"),
    ("numpy integer sizes", _gemm(m=np.int64(64), n=np.uint16(64)), "finite"),
    ("float sizes that are whole", _gemm(m=64.0), "finite"),
    ("a cached prefix of all but one token", _model(cached_prefix=511), "finite"),
]


@pytest.mark.parametrize(("name", "call", "documented"), API_ACCEPTED,
                         ids=[a[0] for a in API_ACCEPTED])
def test_api_accepts(name: str, call: Callable[[], Any], documented: str) -> None:
    with _deadline(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    latency = np.asarray(result.latency_s, dtype=np.float64)
    assert np.all(np.isfinite(latency)), name
    assert np.all(latency > 0), name
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], name
    ours = [w for w in caught if issubclass(w.category, PerfmodelWarning)]
    if "warning" in documented or "warns" in documented:
        assert ours, f"{name}: no PerfmodelWarning"
        assert any("window" in a for a in result.assumptions)
    else:
        assert not ours, f"{name}: {ours[0].message}"


def test_corpus_size() -> None:
    """The corpus: how many inputs, by kind (a dropped case changes these numbers)."""
    counts = {"cli": len(CLI_CASES), "api": len(API_ERRORS) + len(API_ACCEPTED)}
    assert counts["cli"] + counts["api"] >= 316
    accepted = [c for c in CLI_CASES if c.code == 0] + list(API_ACCEPTED)
    assert len(accepted) < 40  # documented acceptances are the exception
    assert len({c.name for c in CLI_CASES}) == len(CLI_CASES)
