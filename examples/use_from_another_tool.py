"""Using perfmodel from another tool: a toy request router that picks a batch size.

    python examples/use_from_another_tool.py

A scheduler, simulator or autotuner imports perfmodel and asks many questions at once:
here, for every batch size from 1 to 256, the decode step time of Mistral-7B at a 4k
context on two GPUs, in one vectorised call per GPU; then the largest batch whose step
time stays under a latency budget and whose KV cache fits. It also reads a model the tool
got as a Hugging Face config.json (written to a temporary folder here, no hub access), and
passes results on as JSON.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

import perfmodel as pm

BUDGET_S = 0.020  # per decode step


def best_batch(config: pm.TransformerConfig, gpu: str) -> dict[str, object]:
    batches = np.arange(1, 257)
    r = pm.predict_model(config, gpu, phase="decode", batch=batches, context_len=4096)
    step = np.asarray(r.tpot_s)
    ok = (step <= BUDGET_S) & np.asarray(r.memory.fits)
    if not ok.any():
        return {"gpu": gpu, "batch": None}
    i = int(np.flatnonzero(ok)[-1])
    return {"gpu": gpu, "batch": int(batches[i]), "step_ms": round(float(step[i]) * 1e3, 3),
            "tokens_per_s": round(float(batches[i] / step[i]), 1),
            "kv_cache_gb": round(float(np.asarray(r.memory.kv_cache_bytes)[i]) / 1e9, 2)}


def main() -> None:
    # a config.json as a tool would find it next to a checkpoint
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps({
            "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "vocab_size": 32000, "hidden_act": "silu", "rms_norm_eps": 1e-5,
            "max_position_embeddings": 32768, "sliding_window": 4096,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "architectures": ["MistralForCausalLM"]}))
        config = pm.load_model(path)
    print(f"read a {config.num_layers}-layer model with {config.num_kv_heads} KV heads and a "
          f"{config.sliding_window}-token window from config.json")
    plan = [best_batch(config, gpu) for gpu in ("a100-80gb-sxm", "h100-sxm")]
    print(json.dumps({"budget_s": BUDGET_S, "choices": plan}, indent=2))


if __name__ == "__main__":
    main()
