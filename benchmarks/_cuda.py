"""The GPU a device benchmark measures, shared by the scripts in this folder that need one."""

from __future__ import annotations

import sys
from typing import Any


def cuda_target(gpu: str | None) -> tuple[Any, str, str]:
    """(torch device, device name, spec id) of the first CUDA device; ``gpu`` overrides the
    spec id resolved from the device name. Exits with a message when torch sees no GPU."""
    import torch

    from perfmodel.hardware.catalog import resolve_id

    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to torch")
    name = torch.cuda.get_device_name(0)
    return torch.device("cuda:0"), name, gpu or resolve_id(name)
