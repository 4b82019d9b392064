"""perfmodel: predict how long GPU work takes, and why, before anyone rents the GPU.

Public names are re-exported here and imported lazily on first use, so
``import perfmodel`` stays cheap (no numpy/pydantic work until needed, never torch)::

    import perfmodel as pm
    hw = pm.load_hardware("h100-sxm")
    p = pm.predict(pm.Gemm(m=4096, n=4096, k=4096, dtype="bf16"), hw)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "PerfmodelError": "perfmodel._errors",
    "PerfmodelWarning": "perfmodel._errors",
    "SpecError": "perfmodel._errors",
    "parse_quantity": "perfmodel._units",
    "format_quantity": "perfmodel._units",
    "DTYPES": "perfmodel.dtypes",
    "bytes_per_element": "perfmodel.dtypes",
    "HardwareSpec": "perfmodel.hardware.spec",
    "load_hardware": "perfmodel.hardware.catalog",
    "list_hardware": "perfmodel.hardware.catalog",
    "Cost": "perfmodel.ops.cost",
    "Gemm": "perfmodel.ops.gemm",
    "Attention": "perfmodel.ops.attention",
    "Norm": "perfmodel.ops.elementwise",
    "Elementwise": "perfmodel.ops.elementwise",
    "Activation": "perfmodel.ops.elementwise",
    "Rotary": "perfmodel.ops.elementwise",
    "Softmax": "perfmodel.ops.elementwise",
    "Embedding": "perfmodel.ops.elementwise",
    "AllReduce": "perfmodel.ops.comm",
    "Prediction": "perfmodel.timing",
    "predict": "perfmodel.timing",
    "RunContext": "perfmodel.timing.context",
    "engine_call": "perfmodel.timing.engine_call",
    "validate": "perfmodel.validation",
    "read_measurements": "perfmodel.measurements",
    "TransformerConfig": "perfmodel.models.config",
    "load_model": "perfmodel.models.config",
    "list_models": "perfmodel.models.config",
    "predict_model": "perfmodel.models.predict",
    "ModelPrediction": "perfmodel.models.predict",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise
        # A planned module that this build does not have yet: an attribute error, so that
        # hasattr() and getattr(..., default) behave.
        raise AttributeError(
            f"perfmodel.{name} is not available: module {module_name} is not in this build"
        ) from None
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


# Names for type checkers and IDEs, in the `X as X` re-export form. Add a line here when the
# module of a name in _EXPORTS lands (tests/test_import.py checks that they agree).
if TYPE_CHECKING:  # pragma: no cover
    from perfmodel._errors import PerfmodelError as PerfmodelError
    from perfmodel._errors import PerfmodelWarning as PerfmodelWarning
    from perfmodel._errors import SpecError as SpecError
    from perfmodel._units import format_quantity as format_quantity
    from perfmodel._units import parse_quantity as parse_quantity
    from perfmodel.dtypes import DTYPES as DTYPES
    from perfmodel.dtypes import bytes_per_element as bytes_per_element
    from perfmodel.hardware.catalog import list_hardware as list_hardware
    from perfmodel.hardware.catalog import load_hardware as load_hardware
    from perfmodel.hardware.spec import HardwareSpec as HardwareSpec
    from perfmodel.measurements import read_measurements as read_measurements
    from perfmodel.models.config import TransformerConfig as TransformerConfig
    from perfmodel.models.config import list_models as list_models
    from perfmodel.models.config import load_model as load_model
    from perfmodel.models.predict import ModelPrediction as ModelPrediction
    from perfmodel.models.predict import predict_model as predict_model
    from perfmodel.ops.attention import Attention as Attention
    from perfmodel.ops.comm import AllReduce as AllReduce
    from perfmodel.ops.cost import Cost as Cost
    from perfmodel.ops.elementwise import Activation as Activation
    from perfmodel.ops.elementwise import Elementwise as Elementwise
    from perfmodel.ops.elementwise import Embedding as Embedding
    from perfmodel.ops.elementwise import Norm as Norm
    from perfmodel.ops.elementwise import Rotary as Rotary
    from perfmodel.ops.elementwise import Softmax as Softmax
    from perfmodel.ops.gemm import Gemm as Gemm
    from perfmodel.timing import Prediction as Prediction
    from perfmodel.timing import predict as predict
    from perfmodel.timing.context import RunContext as RunContext
    from perfmodel.timing.engine_call import engine_call as engine_call
    from perfmodel.validation import validate as validate
