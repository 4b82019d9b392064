"""Entry point of the ``perfmodel`` command.

Subcommands register themselves from modules listed in ``_COMMANDS``: each module has
``register(subparsers) -> None`` that adds its parser and sets ``func`` (taking the parsed
namespace, returning an exit code). User errors (:class:`PerfmodelError`, ``ValueError``
raised for bad input, unreadable files) print one line on stderr and exit with status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from perfmodel._errors import PerfmodelError, SpecError

__all__ = ["build_parser", "main"]

#: Modules under perfmodel.cli providing subcommands (missing ones are skipped).
_COMMANDS = ("specs", "predict", "validate", "model", "sweep", "plan", "calibrate", "traces")

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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``) and return the exit status.

    Never raises for user errors or ``--help``, so it can be called in-process.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help()
            return 2
        code: int = args.func(args)
        return code
    except SpecError as exc:
        print(f"error: {exc.source}: invalid spec:", file=sys.stderr)
        for line in exc.errors:
            print(f"  - {line}", file=sys.stderr)
        return 2
    except (PerfmodelError, ValueError, FileNotFoundError, IsADirectoryError,
            PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): point stdout at devnull so the interpreter's
        # final flush does not complain again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
