"""Output paths, checked before any work starts: never an input file, never a folder,
never a name the writer would silently change (a chart without a known suffix)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from perfmodel._errors import PerfmodelError
from perfmodel._limits import clip_message

__all__ = ["PLOT_SUFFIXES", "check_output", "check_plot_target", "plot_path"]

#: Chart formats (matplotlib writes these without extra packages).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def plot_path(text: str) -> str:
    """``--plot`` (argparse type): a file name ending in .png, .svg or .pdf, not a folder."""
    shown = clip_message(repr(text), 80)
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path; name the chart file, e.g. chart.png")
    path = Path(text).expanduser()
    if path.is_dir() or text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{shown} is a folder; name a file in it, e.g. "
                                         f"{Path(text) / 'chart.png'}")
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise argparse.ArgumentTypeError(f"{shown} has no chart suffix; end it in "
                                         f"{', '.join(PLOT_SUFFIXES)}")
    return text


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str | Path, flag: str, inputs: tuple[str | Path | None, ...] = (),
                 ) -> Path:
    """``path`` if it can be written: not a folder, its folder exists, and it is none of
    ``inputs`` (the files the command reads: writing there would lose them).

    Called before the command does its work, so a bad ``--out`` costs nothing.
    """
    text = str(path)
    shown = clip_message(repr(text), 80)
    if not text.strip():
        raise PerfmodelError(flag, "empty path", "name the file to write")
    out = Path(text).expanduser()
    if out.is_dir() or text.endswith(("/", os.sep)):
        raise PerfmodelError(flag, f"{shown} is a folder", "name a file to write in it")
    parent = out.parent
    if not parent.is_dir():
        raise PerfmodelError(flag, f"folder {clip_message(str(parent), 80)} does not exist",
                             "create it first or pick another path")
    if (out.exists() and not os.access(out, os.W_OK)) or not os.access(parent, os.W_OK):
        raise PerfmodelError(flag, f"{shown} cannot be written (permission denied)",
                             "pick a path you can write")
    for item in inputs:
        if item is None:
            continue
        src = Path(str(item)).expanduser()
        if _same_file(out, src) or out.resolve() == src.resolve():
            raise PerfmodelError(flag, f"{shown} is the input file {clip_message(str(item), 80)}"
                                 "; writing it would destroy the input",
                                 "write the output to another path")
    return out


def check_plot_target(plot: str | None, *inputs: str | None) -> None:
    """``--plot``: writable, and none of the command's input files."""
    if plot is not None:
        check_output(plot, "--plot", inputs)
