"""Random junk into the CLI's argument parsers and the spec loader: exit status 0 or 2,
an ``error:`` line (or a spec's list of problems), never a traceback or a hang.

Examples are bounded and derandomized (the same inputs on every run), so the file stays
fast and a failure reproduces.
"""

from __future__ import annotations

import contextlib
import os
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel._errors import PerfmodelError, PerfmodelWarning
from perfmodel.cli.main import main
from perfmodel.hardware.catalog import bundled_path, load_hardware_file

FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@contextlib.contextmanager
def _deadline(seconds: int = 20) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"hung: still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _check(code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err
    assert code in (0, 2), f"exit {code}: {err}"
    if code == 2:
        lines = err.strip().splitlines()
        assert lines, "no error message"
        assert lines[0].startswith(("error:", "usage:")), lines[0]
        assert all(len(line) <= 600 for line in lines)
        # one line per message (``specs validate`` gives one per file), a spec's problems
        # listed under it, or help text after a usage line
        assert all(x.startswith(("error:", "  - ", "warning:")) for x in lines) or (
            lines[0].startswith("usage:")), err


JUNK = st.one_of(
    st.sampled_from(["0", "-1", "1.5", "nan", "inf", "-inf", "1e400", "1e30", "", " ", "x",
                     "0x10", "1_000", "٣", "１２", "--", "-", "=", ",", ":", "1:2:3:4", "a,b",
                     "h100-sxm", "llama-2-7b", "bf16", "fp8", "auto", "9" * 50, "..", "/",
                     "x.yaml", "x.json", "x.csv", "\x00", "é", "1e-300", "-0"]),
    st.integers(min_value=-10**20, max_value=10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)

COMMANDS: dict[str, tuple[list[str], list[str]]] = {
    # command prefix -> (its flags, positional values worth trying)
    "predict gemm": (["--gpu", "--compare", "--m", "--n", "--k", "--batch", "--dtype",
                      "--out-dtype", "--shared-b", "--bias", "--json", "--strict"], []),
    "predict attention": (["--gpu", "--batch", "--heads", "--kv-heads", "--seq-q", "--seq-kv",
                           "--head-dim", "--value-dim", "--causal", "--dtype", "--kv-dtype",
                           "--impl", "--num-splits", "--json"], []),
    "predict elementwise": (["--gpu", "--numel", "--reads", "--writes", "--flops-per-element",
                             "--sfu-per-element", "--dtype"], []),
    "predict allreduce": (["--gpu", "--numel", "--gpus", "--dtype"], []),
    "model": (["--gpu", "--batch", "--prompt", "--gen", "--cached-prefix", "--tp",
               "--weight-dtype", "--dtype", "--kv-dtype", "--attention-impl",
               "--reserve-fraction", "--reserve-gib", "--json", "--strict", "--plot", "--list"],
              ["llama-2-7b", "mixtral-8x7b", "x.json"]),
    "sweep": (["--gpu", "--over", "--values", "--points", "--log", "--phase", "--batch",
               "--prompt", "--context", "--gen", "--tp", "--format", "--rows", "--plot",
               "--strict"], ["llama-2-7b", "phi-3-mini"]),
    "plan": (["--gpus", "--rps", "--prompt", "--output", "--ttft-ms", "--tpot-ms", "--tp",
              "--price", "--json", "--plot", "--strict"], ["llama-2-7b"]),
    "specs show": (["--json", "--strict"], ["h100-sxm", "x.yaml", "nope"]),
    "specs validate": (["--json", "--strict"], ["x.yaml", "nope.yaml"]),
    "validate": (["--gpu", "--json", "--markdown", "--verbose", "--bundled"], ["x.csv"]),
    "calibrate fit": (["--gpu", "--out", "--residual", "--prior", "--folds", "--json"],
                      ["x.csv"]),
    "calibrate report": (["--gpu", "--folds", "--residual", "--prior", "--plot", "--json"],
                         ["x.csv"]),
    "calibrate import": (["--out", "--gpu", "--append", "--dtype", "--causal", "--json",
                          "--allow-other-gpu"], ["x.json", "x.csv"]),
    "explain-trace": (["--gpu", "--dtype", "--causal", "--json", "--allow-other-gpu"],
                      ["x.json", "x.csv"]),
}


@st.composite
def _argv(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    flags, positionals = COMMANDS[command]
    argv = command.split()
    with_positional: bool = draw(st.booleans())
    if positionals and with_positional:
        argv.append(draw(st.sampled_from(positionals)))
    for _ in range(draw(st.integers(min_value=0, max_value=7))):
        argv.append(draw(st.sampled_from(flags)))
        if draw(st.integers(min_value=0, max_value=4)):
            argv.append(draw(JUNK))
    return argv


@FUZZ
@given(argv=_argv())
def test_cli_parsers_never_crash(argv: list[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.csv").write_text("op,dtype,measured_us\ngemm,bf16,5\n", encoding="utf-8")
    (tmp_path / "x.json").write_text('{"model_type": "mamba"}', encoding="utf-8")
    (tmp_path / "x.yaml").write_text("extends: h100-sxm\nid: x\nname: x\n", encoding="utf-8")
    capsys.readouterr()
    with _deadline():
        code = main(argv)
    out, err = capsys.readouterr()
    _check(code, out, err)
    assert sorted(os.listdir(tmp_path)) >= ["x.csv", "x.json", "x.yaml"]


# ------------------------------------------------------------------------- spec loader
H100 = yaml.safe_load(bundled_path("h100-sxm").read_text(encoding="utf-8"))

LEAF = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**30, max_value=10**30),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
                 st.sampled_from(["80 GiB", "3.35 TB/s", "989 TFLOP/s", "1.83 GHz", "700 W",
                                  "3 us", "85 %", "sparse", "1e400 B", "KB", "h100-sxm",
                                  "/etc/passwd", "../x.yaml"]))
VALUE = st.recursive(LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def _paths(d: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(d, dict):
        for k, v in d.items():
            out += _paths(v, (*prefix, k))
    return out


PATHS = _paths(H100)


def _set(d: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = dict(d)
    if len(path) == 1:
        out[path[0]] = value
    else:
        inner = out.get(path[0])
        out[path[0]] = _set(dict(inner) if isinstance(inner, dict) else {}, path[1:], value)
    return out


def _load(path: Path) -> None:
    """Load a spec: only PerfmodelError (SpecError) or a PerfmodelWarning may come out."""
    try:
        load_hardware_file(path)
    except PerfmodelError as exc:
        text = str(exc)
        assert "Traceback" not in text
        for line in getattr(exc, "errors", [text]):
            assert len(line) <= 600, line[:200]


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), VALUE), min_size=1, max_size=3))
def test_spec_loader_on_mutated_specs(edits: list[tuple[tuple[Any, ...], Any]],
                                      tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The H100 spec with up to three fields replaced by random values."""
    data: dict[str, Any] = H100
    for path, value in edits:
        data = _set(data, path, value)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    with _deadline(), warnings.catch_warnings():
        warnings.simplefilter("ignore", PerfmodelWarning)
        _load(spec)
    capsys.readouterr()
    with _deadline():
        code = main(["specs", "validate", str(spec)])
    out, err = capsys.readouterr()
    _check(code, out, err)


YAML_TOKENS = st.sampled_from(["a", ":", " ", "\n", "-", "[", "]", "{", "}", ",", "&x", "*x",
                               "!!python/object:os.system", "!tag", "'", '"', "#", "|", ">",
                               "<<", "extends", "id", "peaks", "1e400", "\t", "? ", "%YAML",
                               "---", "...", "\x00", "\ufeff", "é", "~"])


@FUZZ
@given(text=st.one_of(st.text(max_size=200),
                      st.lists(YAML_TOKENS, max_size=60).map("".join)))
def test_spec_loader_on_random_text(text: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    with _deadline(), warnings.catch_warnings():
        warnings.simplefilter("ignore", PerfmodelWarning)
        _load(spec)
    capsys.readouterr()
    with _deadline():
        code = main(["specs", "validate", str(spec)])
    out, err = capsys.readouterr()
    _check(code, out, err)
    assert code == 2 or "ok:" in out
