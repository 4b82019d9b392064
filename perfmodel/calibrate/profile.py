"""Calibrated profiles: the original spec plus a ``calibration`` block, as YAML.

The profile is the spec *as loaded* (``extends`` resolved, every quantity in SI units)
re-serialised in full, not an ``extends:`` pointer to the original: fitted fractions are
fractions of the peaks in that very file, so they must travel with them, and a later edit
of a bundled spec must not silently change what an old calibration means. The original
file is named, with its SHA-256, under ``calibration.environment``; it is never written.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from perfmodel import __version__
from perfmodel._errors import PerfmodelError
from perfmodel.calibrate.fit import FitResult
from perfmodel.hardware.catalog import load_hardware_file, spec_from_dict, specs_dir
from perfmodel.hardware.spec import HardwareSpec

__all__ = ["calibrated_dict", "file_sha256", "write_calibrated", "write_profile"]


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def calibrated_dict(hw: HardwareSpec, result: FitResult, *, environment: dict[str, str],
                    extra_errors: dict[str, float] | None = None,
                    extra_errors_before: dict[str, float] | None = None,
                    date: str | None = None) -> dict[str, Any]:
    """``hw`` as a plain mapping (SI numbers) with the fitted calibration block."""
    data = hw.model_dump(mode="json", exclude_none=True)
    device = hw.calibration.device if hw.calibration else hw.id
    if not data.get("name", "").endswith("(calibrated)"):
        data["name"] = f"{data['name']} (calibrated)"
    when = date or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    cal = result.calibration(device=device, environment=environment, date=when)
    block = cal.model_dump(mode="json")
    block["error_before"] = {**block["error_before"], **(extra_errors_before or {})}
    block["error_after"] = {**block["error_after"], **(extra_errors or {})}
    data["calibration"] = block
    sources = dict(data.get("sources", {}))
    sources["calibration"] = (f"fitted by perfmodel {__version__} calibrate fit on {when} "
                              f"from {result.n} measured points")
    data["sources"] = sources
    return data


def _is_protected(out: Path, originals: list[Path]) -> str | None:
    target = out.resolve()
    for orig in originals:
        if orig.exists() and target == orig.resolve():
            return f"it is the spec being calibrated ({orig})"
    bundled = specs_dir().resolve()
    if bundled in target.parents:
        return f"it is inside the bundled specs folder ({bundled})"
    return None


def write_calibrated(out: str | Path, hw: HardwareSpec, result: FitResult, *,
                     environment: dict[str, str], source_path: str | Path | None = None,
                     extra_errors: dict[str, float] | None = None,
                     extra_errors_before: dict[str, float] | None = None) -> HardwareSpec:
    """Write the calibrated profile to ``out`` and return it as loaded back.

    Refuses to write over the spec file it came from or into the bundled specs folder.
    The file is written to a temporary name and renamed, so an interrupted write leaves
    no half profile behind.
    """
    out = Path(out)
    originals = [Path(source_path)] if source_path is not None else []
    why = _is_protected(out, originals)
    if why:
        raise PerfmodelError("--out", f"will not write {out}: {why}",
                             "write the calibrated profile to a new file")
    env = dict(environment)
    if source_path is not None and Path(source_path).is_file():
        env.setdefault("base_spec", str(source_path))
        env.setdefault("base_spec_sha256", file_sha256(source_path))
    env.setdefault("perfmodel", __version__)
    data = calibrated_dict(hw, result, environment=env, extra_errors=extra_errors,
                           extra_errors_before=extra_errors_before)
    return write_profile(out, data, "# Calibrated hardware profile written by `perfmodel "
                         "calibrate fit`.\n# The spec as loaded (SI units: FLOP/s, B/s, bytes, "
                         "s, Hz) plus the fitted\n# calibration block; load it with "
                         "perfmodel.load_hardware(path) or --gpu path.\n", originals)


def write_profile(out: str | Path, data: dict[str, Any], header: str,
                  originals: list[Path] | None = None) -> HardwareSpec:
    """Write the profile ``data`` (a spec as a plain mapping) to ``out`` under the comment
    ``header`` and return it as loaded back. Refuses to write over ``originals`` or into
    the bundled specs folder; the data is validated first and written to a temporary
    name, then renamed, so a refused or interrupted write leaves no half profile."""
    out = Path(out)
    why = _is_protected(out, list(originals or []))
    if why:
        raise PerfmodelError("--out", f"will not write {out}: {why}",
                             "write the profile to a new file")
    spec_from_dict(data, source=str(out))  # validate before writing anything
    text = header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return load_hardware_file(out)
