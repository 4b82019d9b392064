"""Data shipped inside the package: a small, cited subset of public GPU kernel measurements.

``bundled_measurements()`` lists the CSV files (schema of :mod:`perfmodel.measurements`), so
``perfmodel validate --bundled`` works on a fresh install. Provenance and licence of each
file are in ``measurements/README.md`` beside them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["bundled_measurements", "measurements_dir"]


def measurements_dir() -> Path:
    """Folder holding the bundled measurement CSVs and their README."""
    return Path(__file__).resolve().parent / "measurements"


def bundled_measurements() -> list[Path]:
    """Paths of the bundled measurement CSVs, sorted by name."""
    return sorted(measurements_dir().glob("*.csv"))
