"""Hardware specs: the pydantic model and the catalogue of bundled YAML files."""

from perfmodel.hardware.catalog import list_hardware, load_hardware, load_hardware_file
from perfmodel.hardware.spec import HardwareSpec

__all__ = ["HardwareSpec", "list_hardware", "load_hardware", "load_hardware_file"]
