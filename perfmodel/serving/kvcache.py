"""The paged KV-cache pool of one replica, sized by the memory model.

Per GPU (tensor parallelism divides the KV heads, :mod:`perfmodel.models.memory`):

    of_total:  pool = f·capacity − weights − activations(budget tokens) − context
    of_free:   pool = f·(capacity − weights − activations(budget tokens) − context)

with f the engine's memory fraction (vLLM ``gpu_memory_utilization``, SGLang
``mem_fraction_static``: of the whole GPU; TensorRT-LLM ``free_gpu_memory_fraction``: of
what is free after loading), activations those of one step of the token budget, and
context = :data:`perfmodel.models.memory.DEFAULT_RESERVE_BYTES` (CUDA context, workspaces,
CUDA graphs). Blocks = ⌊pool / (block_size · KV bytes per token)⌋; sliding-window layers are
counted like full ones (an upper bound on their cache). Under data-parallel attention
(``parallel="dep"``) the pool is one GPU's, for the sequences of its own attention rank: KV
unsplit, the GPU's weights of that layout, and the tokens the other ranks gather to it
beside its own budget's activations.

Under pipeline parallelism (``pp`` stages, each a GPU, or a TP group, holding ⌈L/pp⌉
layers) the engine keeps ``pp`` micro-batches in flight, each simulated as a replica with
its own pool: a stage GPU's pool (its weights: the largest stage's,
:func:`perfmodel.models.memory.weight_bytes`) holds the KV of its layers for every
micro-batch, so a micro-batch's pool is that GPU's pool over pp · ⌈L/pp⌉/L of a token's
all-layer KV bytes (one GPU's pool for the whole model's KV when the layers divide).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel._limits import check_whole
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.config import TransformerConfig
from perfmodel.models.graph import Dtypes
from perfmodel.models.memory import (
    DEFAULT_RESERVE_BYTES,
    activation_bytes,
    gathered_bytes,
    kv_cache_bytes,
    weight_bytes,
)
from perfmodel.models.pipeline import stage_layer_share
from perfmodel.serving.engines import EngineConfig

__all__ = ["KVPool", "kv_pool"]


@dataclass(frozen=True)
class KVPool:
    """KV-cache pool of one replica (bytes per GPU)."""

    blocks: int
    block_size: int
    bytes_per_token: float
    pool_bytes: float
    weights_bytes: float
    activation_bytes: float
    capacity_bytes: float
    given: bool = False
    """True when the block count was given, not sized from memory."""

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    def explain(self) -> str:
        if self.given:
            return f"KV cache: {self.blocks} blocks of {self.block_size} tokens (given)"
        gb = 1e9
        return (f"KV cache: {self.blocks:,} blocks of {self.block_size} tokens = "
                f"{self.tokens:,} tokens ({self.pool_bytes / gb:.1f} GB per GPU after "
                f"weights {self.weights_bytes / gb:.1f} GB and activations "
                f"{self.activation_bytes / gb:.2f} GB of {self.capacity_bytes / gb:.1f} GB)")


def kv_pool(cfg: TransformerConfig, hw: HardwareSpec, tp: int, dtypes: Dtypes,
            engine: EngineConfig, blocks: int | None = None, parallel: str = "tp",
            pp: int = 1) -> KVPool:
    """Size the pool (see the module docstring); ``blocks`` overrides the count."""
    w = float(weight_bytes(cfg, tp, dtypes, parallel, pp))
    budget = float(engine.max_num_batched_tokens)
    gathered = 0.0
    if parallel == "dep":  # one attention rank's pool (module docstring)
        gathered = float(gathered_bytes(cfg, budget, tp, dtypes))
        tp = 1
    # a token's KV on this GPU's stage, times the micro-batches sharing the GPU (module doc)
    per_token = float(kv_cache_bytes(cfg, 1.0, 1.0, tp, dtypes.kv)) \
        * (pp * stage_layer_share(cfg, pp))
    act = float(activation_bytes(cfg, 1.0, budget, tp, dtypes)) + gathered
    cap = float(hw.memory.capacity)
    f = engine.memory_fraction
    if engine.memory_rule == "of_free":
        pool = f * (cap - w - act - DEFAULT_RESERVE_BYTES)
    else:
        pool = f * cap - w - act - DEFAULT_RESERVE_BYTES
    if blocks is not None:
        blocks = check_whole(blocks, "kv_blocks", "e.g. kv_blocks=4096")
        return KVPool(blocks, engine.block_size, per_token, blocks * engine.block_size
                      * per_token, w, act, cap, given=True)
    n = max(math.floor(pool / (engine.block_size * per_token)), 0) if pool > 0 else 0
    return KVPool(n, engine.block_size, per_token, max(pool, 0.0), w, act, cap)
