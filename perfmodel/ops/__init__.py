"""Op cost formulas: pure functions of shapes and dtypes, no hardware knowledge."""

from perfmodel.ops.attention import IMPLS, Attention, causal_pairs
from perfmodel.ops.comm import AllReduce
from perfmodel.ops.cost import Cost
from perfmodel.ops.elementwise import Activation, Elementwise, Embedding, Norm, Rotary, Softmax
from perfmodel.ops.gemm import Gemm

Op = Gemm | Attention | Elementwise | Norm | Activation | Rotary | Softmax | Embedding | AllReduce

__all__ = [
    "IMPLS", "Activation", "AllReduce", "Attention", "Cost", "Elementwise", "Embedding", "Gemm",
    "Norm", "Op", "Rotary", "Softmax", "causal_pairs",
]
