"""Pipeline parallelism: how a model splits into stages and what crosses between them.

A model split into ``pp`` stages holds at most ⌈L/pp⌉ of its L layers on each stage's
GPUs. Each stage hands its output, the hidden states of the tokens it processed (T·h at the
activation dtype), to the next stage's GPU over the GPU link, peer to peer:

    t_send = latency + T·h·s_a / BW

with the latency and per-direction bandwidth of the 2-GPU fabric
(:func:`perfmodel.timing.comm.fabric`: NVLink, a bridge, or PCIe, shared or behind
switches). A single batch crosses pp − 1 stage boundaries per pass; an engine keeping pp
micro-batches in flight (:mod:`perfmodel.serving`) pays pp sends per micro-batch cycle.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._limits import check_whole
from perfmodel.dtypes import bytes_per_element
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig
from perfmodel.ops.cost import Array
from perfmodel.timing.comm import fabric

__all__ = ["check_stages", "stage_layer_share", "stage_layers", "stage_send_bytes",
           "stage_send_s"]


def check_stages(cfg: TransformerConfig, pp: Any) -> int:
    """``pp`` as a stage count: a whole number from 1 to the model's layer count."""
    stages = check_whole(pp, "pp", "e.g. --pp 2")
    if stages > cfg.num_layers:
        raise PerfmodelError("pp", f"{stages} pipeline stages for the {cfg.num_layers} layers of "
                             f"{cfg.name}: a stage holds at least one layer",
                             f"use --pp {cfg.num_layers} or fewer")
    return stages


def stage_layers(cfg: TransformerConfig, pp: int) -> int:
    """Layers of the largest of ``pp`` stages, ⌈L/pp⌉."""
    return math.ceil(cfg.num_layers / pp)


def stage_layer_share(cfg: TransformerConfig, pp: int) -> float:
    """The largest stage's share of the layers, ⌈L/pp⌉/L (of their weights, of a
    sequence's KV cache)."""
    return stage_layers(cfg, pp) / cfg.num_layers


def stage_send_bytes(cfg: TransformerConfig, tokens: Any, activation_dtype: str) -> Array:
    """Bytes of one stage-to-stage send of ``tokens`` tokens' hidden states, T·h·s_a."""
    return np.asarray(tokens, dtype=np.float64) * cfg.hidden_size \
        * bytes_per_element(activation_dtype)


def stage_send_s(cfg: TransformerConfig, hw: HardwareSpec, tokens: Any,
                 activation_dtype: str) -> Array:
    """One stage-to-stage send of ``tokens`` tokens' hidden states, s (module docstring)."""
    link = fabric(hw, np.asarray([2.0]))
    size = stage_send_bytes(cfg, tokens, activation_dtype)
    return np.asarray(link.latency_s[0] + size / link.bandwidth[0], dtype=np.float64)
