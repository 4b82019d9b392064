"""Entry point of the ``perfmodel`` command.

Subcommands register themselves from modules listed in ``_COMMANDS``: each module has
``register(subparsers) -> None`` that adds its parser and sets ``func`` (taking the parsed
namespace, returning an exit code). User errors (:class:`PerfmodelError`, ``ValueError``
raised for bad input, unreadable files) print one line on stderr and exit with status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from perfmodel._errors import PerfmodelError, PerfmodelWarning, SpecError
from perfmodel._limits import clip_message

__all__ = ["build_parser", "main"]

#: Modules under perfmodel.cli providing subcommands (missing ones are skipped).
_COMMANDS = ("specs", "predict", "validate", "model", "sweep", "plan", "serve", "calibrate",
             "traces")

_EPILOG = """examples:
  perfmodel specs list
  perfmodel predict gemm --gpu h100-sxm --m 4096 --n 4096 --k 4096 --dtype bf16
  perfmodel model llama-2-7b --gpu a100-80gb-sxm --prompt 2048 --gen 256
  perfmodel validate measurements.csv --json
"""


class UsageError(PerfmodelError):
    """Bad command-line usage (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError("usage", message, f"see '{self.prog} --help'")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="perfmodel",
        description="Predict how long GPU work takes, and why, from hardware specs.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from perfmodel import __version__

    parser.add_argument("--version", action="version", version=f"perfmodel {__version__}")
    parser.add_argument("--spec-dir", action="append", metavar="DIR",
                        help="a folder whose YAML files a spec's 'extends:' may name (besides "
                        "the bundled catalogue and the spec's own folder); repeatable")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"perfmodel.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"perfmodel.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def _line(text: object) -> str:
    """One line of at most a few hundred characters (values echoed back are cut)."""
    return clip_message(str(text), _MESSAGE_CHARS)


#: Characters of the one-line error message (the echoed input is what gets cut).
_MESSAGE_CHARS = 400


def _os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc.__class__.__name__}"


def _run(args: argparse.Namespace) -> int:
    """Run the command; PerfmodelWarnings are printed after it as ``warning:`` lines, or
    (``--strict``) raised as errors when issued."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PerfmodelWarning)
        if getattr(args, "strict", False):
            warnings.simplefilter("error", PerfmodelWarning)
        code: int = args.func(args)
    seen: set[str] = set()
    for w in caught:
        ours = issubclass(w.category, PerfmodelWarning)
        text = _line(w.message if ours else f"{w.category.__name__}: {w.message}")
        if text not in seen:
            seen.add(text)
            hint = " (--strict refuses it)" if ours and hasattr(args, "strict") else ""
            print(f"warning: {text}{hint}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``) and return the exit status.

    Never raises for user errors or ``--help``, so it can be called in-process. Exit status:
    0 success, 2 bad input (one ``error:`` line on stderr; a spec with several problems
    lists them below it), 3 an internal error (a bug: one line, set PERFMODEL_TRACEBACK=1
    for the traceback), 130 interrupted.
    """
    parser = build_parser()
    notes = _NoteHandler()
    log = logging.getLogger("perfmodel")
    log.addHandler(notes)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        return _main(parser, argv)
    finally:
        log.removeHandler(notes)
        log.setLevel(level)


class _NoteHandler(logging.Handler):
    """Prints the library's notes (``perfmodel`` logger) on stderr as they come."""

    def emit(self, record: logging.LogRecord) -> None:
        print(record.getMessage(), file=sys.stderr)


def _main(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    try:
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help(sys.stderr)
            return 2
        from perfmodel.hardware.catalog import allow_spec_dirs

        with allow_spec_dirs(*(args.spec_dir or ())):
            return _run(args)
    except SpecError as exc:
        if len(exc.errors) == 1:
            print(f"error: {_line(f'{exc.source}: invalid spec: {exc.errors[0]}')}",
                  file=sys.stderr)
            return 2
        print(f"error: {_line(exc.source)}: invalid spec:", file=sys.stderr)
        for line in exc.errors:
            print(f"  - {_line(line)}", file=sys.stderr)
        return 2
    except (PerfmodelError, PerfmodelWarning, ValueError, csv.Error) as exc:
        print(f"error: {_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            # The reader went away (e.g. `| head`): point stdout at devnull so the
            # interpreter's final flush does not complain again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
        print(f"error: {_line(_os_error(exc))}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (MemoryError, RecursionError) as exc:
        print(f"error: the input is too large to handle ({exc.__class__.__name__}); "
              "pass smaller sizes or files", file=sys.stderr)
        return 2
    except Exception as exc:
        if os.environ.get("PERFMODEL_TRACEBACK"):
            raise
        print(f"error: internal error, please report it: "
              f"{_line(f'{exc.__class__.__name__}: {exc}')} "
              "(PERFMODEL_TRACEBACK=1 shows where)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
