"""Calibration: measure real kernels with torch, fit the timing model's parameters, and
report the error on shapes the fit never saw.

Modules (torch is imported only inside the functions that time kernels, so importing
this package, or any module in it, never imports torch):

- :mod:`~perfmodel.calibrate.measure`: CUDA-event and host timers, median and spread;
- :mod:`~perfmodel.calibrate.suite`: the designed microbenchmark suite and its budget;
- :mod:`~perfmodel.calibrate.run`: run the suite, write CSV rows and the environment;
- :mod:`~perfmodel.calibrate.cpu`: a spec of this CPU, measured on the spot;
- :mod:`~perfmodel.calibrate.data`: read and check measurement CSVs, predict rows;
- :mod:`~perfmodel.calibrate.fit`: robust least squares on log latency, residual tables;
- :mod:`~perfmodel.calibrate.profile`: write the calibrated profile (spec + calibration);
- :mod:`~perfmodel.calibrate.report`: before/after by family and regime, cross-validated;
- :mod:`~perfmodel.calibrate.public`: fit-on-few, test-on-rest over public measurements;
- :mod:`~perfmodel.calibrate.trace`, :mod:`~perfmodel.calibrate.ncu`: read a torch.profiler
  trace or an Nsight Compute export (:mod:`~perfmodel.calibrate.capture`), mapping operator
  calls to perfmodel ops (:mod:`~perfmodel.calibrate.opmap`);
- :mod:`~perfmodel.calibrate.importer`: those captures as measurement rows and explained.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "TimerConfig": "perfmodel.calibrate.measure",
    "Sample": "perfmodel.calibrate.measure",
    "Case": "perfmodel.calibrate.suite",
    "design_suite": "perfmodel.calibrate.suite",
    "run_suite": "perfmodel.calibrate.run",
    "measure_cpu": "perfmodel.calibrate.cpu",
    "write_cpu_spec": "perfmodel.calibrate.cpu",
    "read_rows": "perfmodel.calibrate.data",
    "dataset_from_rows": "perfmodel.calibrate.data",
    "Dataset": "perfmodel.calibrate.data",
    "FitResult": "perfmodel.calibrate.fit",
    "fit": "perfmodel.calibrate.fit",
    "fit_auto": "perfmodel.calibrate.fit",
    "apply_params": "perfmodel.calibrate.fit",
    "write_calibrated": "perfmodel.calibrate.profile",
    "cross_validate": "perfmodel.calibrate.report",
    "evaluate_public": "perfmodel.calibrate.public",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'perfmodel.calibrate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover
    from perfmodel.calibrate.cpu import measure_cpu as measure_cpu
    from perfmodel.calibrate.cpu import write_cpu_spec as write_cpu_spec
    from perfmodel.calibrate.data import Dataset as Dataset
    from perfmodel.calibrate.data import dataset_from_rows as dataset_from_rows
    from perfmodel.calibrate.data import read_rows as read_rows
    from perfmodel.calibrate.fit import FitResult as FitResult
    from perfmodel.calibrate.fit import apply_params as apply_params
    from perfmodel.calibrate.fit import fit as fit
    from perfmodel.calibrate.fit import fit_auto as fit_auto
    from perfmodel.calibrate.measure import Sample as Sample
    from perfmodel.calibrate.measure import TimerConfig as TimerConfig
    from perfmodel.calibrate.profile import write_calibrated as write_calibrated
    from perfmodel.calibrate.public import evaluate_public as evaluate_public
    from perfmodel.calibrate.report import cross_validate as cross_validate
    from perfmodel.calibrate.run import run_suite as run_suite
    from perfmodel.calibrate.suite import Case as Case
    from perfmodel.calibrate.suite import design_suite as design_suite
