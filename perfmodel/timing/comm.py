"""All-reduce timing: NCCL's protocols and algorithms, engines' custom all-reduce kernels.

Which fabric: a spec whose ``gpu_link`` is not a bridge is a switched (NVSwitch) or fully
connected fabric for any GPU count; a bridge links pairs (2 GPUs), beyond which, and on cards
without a GPU link, traffic crosses PCIe (``host_link``).

NCCL (``algorithm="nccl"``; what nccl-tests measure) picks the fastest of, per protocol p
(LL: low latency, low bandwidth; Simple: full bandwidth, higher fixed cost)::

    t_ring,p = s_arch·(base_p + hop_p·(n−1)) + 2·(n−1)/n·B / (η_p·BW)
    t_nvls   = s_arch·base_nvls + B / (η_nvls·BW)     (NVSwitch on Hopper/Blackwell, n > 2,
                                                        16/32-bit floats)

with BW the link's per-direction bandwidth; over PCIe BW = host-link bandwidth ·
η_pcie · (2/n)^k where the GPUs share the host's fabric (the law of the one PCIe system
measured, 8 × L40S: 20, 5.1 and 1.4 GB/s of ring bandwidth at 2, 4 and 8 GPUs), and
host-link bandwidth · η_pcie at any n where a spec's host link says ``peer_switch`` (PCIe
switches carry each GPU's ring traffic at its own link's rate). Engines (``auto``) run
their own kernels on a switched fabric, the fastest of one-shot, two-shot (buffers up to
:data:`CUSTOM_MAX_BYTES`) and NCCL::

    t_one  = t_launch + τ_link + (n−1)·B / (η_simple·BW)
    t_two  = t_launch + 2·τ_link + 2·(n−1)/n·B / (η_simple·BW)

(τ_link the spec's link latency, one per synchronisation; t_launch the spec's kernel
overhead). Device-memory traffic overlaps the link time: t = max(link, HBM) + launch.
The constants s, base, hop, η and k are ``fitted: aic/comm`` by ``scripts/fit_allreduce.py``
(:mod:`perfmodel.timing.comm_params`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel._errors import PerfmodelError
from perfmodel.dtypes import bytes_per_element
from perfmodel.hardware.spec import HardwareSpec, LinkSpec
from perfmodel.ops.comm import AllReduce
from perfmodel.ops.cost import Array
from perfmodel.timing.comm_params import FITTED
from perfmodel.timing.constants import Constants, bundled_constants
from perfmodel.timing.context import DEFAULT_CONTEXT, RunContext
from perfmodel.timing.core import make_env
from perfmodel.timing.knobs import knobs_for
from perfmodel.timing.prediction import Prediction, make_prediction

__all__ = ["CUSTOM_MAX_BYTES", "DEFAULT_PARAMS", "CommParams", "Fabric", "fabric",
           "predict_allreduce"]

#: Largest buffer engines' custom all-reduce handles before falling back to NCCL, bytes
#: (cited: vLLM ``CustomAllreduce(max_size=8192 * 1024)``,
#: vllm/distributed/device_communicators/custom_all_reduce.py).
CUSTOM_MAX_BYTES = 8.0 * 2**20
#: Per-synchronisation link latency when the spec gives none, s.
DEFAULT_LINK_LATENCY_S = 2e-6
#: Dtypes NVLink SHARP reduces in the switch (cited: NCCL NVLS supports sum on
#: fp16/bf16/fp32, not 8-bit integers).
_NVLS_DTYPES = ("fp16", "bf16", "fp32")
_NVLS_ARCHS = ("hopper", "blackwell")


@dataclass(frozen=True)
class CommParams:
    """Constants of the NCCL model (see the module docstring); times in s, efficiencies
    as fractions of the link's per-direction bandwidth."""

    ll_base_s: float
    ll_hop_s: float
    ll_efficiency: float
    simple_base_s: float
    simple_hop_s: float
    simple_efficiency: float
    nvls_base_s: float
    nvls_efficiency: float
    pcie_efficiency: float
    pcie_exponent: float
    arch_latency_scale: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> CommParams:
        scale = {str(k): float(v) for k, v in dict(d.get("arch_latency_scale", {})).items()}
        return CommParams(**{k: float(v) for k, v in d.items() if k != "arch_latency_scale"},
                          arch_latency_scale=scale)

    def scale(self, arch: str) -> float:
        return float(self.arch_latency_scale.get(arch, 1.0))


DEFAULT_PARAMS = CommParams.from_dict(FITTED)


@dataclass(frozen=True)
class Fabric:
    """Per element of the GPU-count array: which fabric carries the all-reduce."""

    switched: npt.NDArray[np.bool_]
    """True where a switched/full NVLink (or Infinity Fabric) fabric connects the GPUs."""
    bandwidth: Array
    """Per-direction bandwidth each GPU gets, B/s (PCIe already shared, before η)."""
    latency_s: Array
    """Spec link latency per synchronisation, s."""
    names: tuple[str, str]
    """(GPU link name, host link name)."""


def _lat(link: LinkSpec | None) -> float:
    return float(link.latency) if link is not None and link.latency is not None \
        else DEFAULT_LINK_LATENCY_S


def fabric(spec: HardwareSpec, gpus: Array, params: CommParams = DEFAULT_PARAMS) -> Fabric:
    """The fabric per GPU count: switched NVLink, a bridge (2 GPUs), else PCIe (shared, or
    each GPU at its link's rate behind PCIe switches: ``LinkSpec.peer_switch``)."""
    n = np.asarray(gpus, dtype=np.float64)
    gl, hl = spec.interconnect.gpu_link, spec.interconnect.host_link
    if gl is None and hl is None:
        raise PerfmodelError("hw.interconnect", f"{spec.id} has no GPU or host link in its spec",
                             "add interconnect.gpu_link (or host_link) to the spec")
    bridge = gl is not None and "bridge" in gl.name.lower()
    if gl is None:
        on_link = np.zeros(n.shape, dtype=bool)
    elif bridge and hl is not None:
        on_link = n <= 2
    else:
        on_link = np.ones(n.shape, dtype=bool)
    switched = on_link & (gl is not None) & (not bridge)
    share = 1.0 if hl is not None and hl.peer_switch \
        else (2.0 / np.maximum(n, 2.0)) ** params.pcie_exponent
    pcie_bw = (hl.bandwidth_per_direction if hl is not None else 0.0) * params.pcie_efficiency \
        * share
    link_bw = gl.bandwidth_per_direction if gl is not None else 0.0
    bw = np.where(on_link, link_bw, pcie_bw)
    lat = np.where(on_link, _lat(gl), _lat(hl))
    return Fabric(switched=np.asarray(switched), bandwidth=np.asarray(bw, dtype=np.float64),
                  latency_s=np.asarray(lat, dtype=np.float64),
                  names=(gl.name if gl else "", hl.name if hl else ""))


_NAMES = ("nccl_ring_ll", "nccl_ring", "nccl_nvls", "one_shot", "two_shot")


def _candidates(spec: HardwareSpec, op: AllReduce, params: CommParams,
                fab: Fabric) -> list[tuple[int, Array, Array, str]]:
    """(name index, fixed time, link-transfer time, cost algorithm) of every algorithm
    ``op.algorithm`` allows on this fabric; infinite where one does not apply."""
    n = np.asarray(op.gpus, dtype=np.float64)
    data = np.asarray(op.numel, dtype=np.float64) * bytes_per_element(op.dtype)
    ring = 2.0 * (n - 1.0) / n * data
    s = params.scale(spec.arch)
    bw = np.maximum(fab.bandwidth, 1.0)
    algo = op.algorithm
    out: list[tuple[int, Array, Array, str]] = []
    if algo in ("auto", "nccl", "ring"):
        if algo != "ring":
            out.append((0, s * (params.ll_base_s + params.ll_hop_s * (n - 1.0)),
                        ring / (params.ll_efficiency * bw), "ring"))
        out.append((1, s * (params.simple_base_s + params.simple_hop_s * (n - 1.0)),
                    ring / (params.simple_efficiency * bw), "ring"))
    nvls_ok = (spec.vendor == "nvidia" and spec.arch in _NVLS_ARCHS
               and op.dtype in _NVLS_DTYPES)
    if algo in ("auto", "nccl", "nvls"):
        ok = fab.switched & (n > 2) & nvls_ok
        if algo == "nvls" and not np.all(ok):
            raise PerfmodelError("algorithm", "NVLS needs NVSwitch-connected Hopper or "
                                 "Blackwell GPUs, more than 2 of them, and fp16/bf16/fp32",
                                 "use algorithm='nccl' or 'auto'")
        out.append((2, np.where(ok, s * params.nvls_base_s, np.inf),
                    data / (params.nvls_efficiency * bw), "nvls"))
    for idx, name, syncs in ((3, "one_shot", 1.0), (4, "two_shot", 2.0)):
        if algo not in ("auto", name):
            continue
        ok = fab.switched | (n <= 2)
        if algo == "auto":
            ok = fab.switched & (data <= CUSTOM_MAX_BYTES)
        elif not np.all(ok):
            raise PerfmodelError("algorithm", f"{name} needs GPUs on one NVLink/NVSwitch "
                                 "fabric (peer access to every GPU)",
                                 "use algorithm='nccl' or 'auto'")
        link = op.cost_of(name).link_bytes
        out.append((idx, np.where(ok, syncs * fab.latency_s, np.inf),
                    link / (params.simple_efficiency * bw), name))
    return out


def predict_allreduce(op: AllReduce, spec: HardwareSpec, ctx: RunContext | None = None,
                      consts: Constants | None = None,
                      params: CommParams = DEFAULT_PARAMS) -> Prediction:
    """Predict ``op`` on ``spec`` (see the module docstring): the fastest allowed
    algorithm, t = fixed + max(link transfer, device-memory traffic, additions) (+ the
    kernel launch for custom kernels under ``ctx``; NCCL's is inside its fitted base).
    ``details["algorithm"]`` names the choice per element. The per-call floor of
    :func:`perfmodel.predict` is added there."""
    dtype = op.dtype if op.dtype in spec.peaks else "fp32"
    k = knobs_for(spec, "comm", dtype if dtype in spec.peaks else next(iter(spec.peaks)))
    launch_s = make_env(k, ctx or DEFAULT_CONTEXT,
                        consts if consts is not None else bundled_constants(),
                        spec.arch).kernel_s
    n = np.asarray(op.gpus, dtype=np.float64)
    multi = n > 1
    fab = fabric(spec, n, params)
    fixed_l, body_l, comp_l, cost_l, idx_l = [], [], [], [], []
    for idx, fixed, transfer, algo in _candidates(spec, op, params, fab):
        c = op.cost_of(algo)
        hbm = np.where(c.bytes_hbm > 0, c.bytes_hbm / k.achievable_bandwidth, 0.0)
        launch = c.launches * launch_s if idx >= 3 else 0.0
        fixed_l.append(fixed + launch)
        body_l.append(np.maximum(transfer, hbm))
        comp_l.append(c.vector_flops / k.vector_op_rate)
        cost_l.append(c)
        idx_l.append(idx)
    shape = np.broadcast_shapes(*(np.shape(x) for x in fixed_l + body_l + comp_l))
    fixed = np.stack([np.broadcast_to(x, shape) for x in fixed_l])
    body = np.stack([np.broadcast_to(x, shape) for x in body_l])
    comp = np.stack([np.broadcast_to(x, shape) for x in comp_l])
    total = fixed + np.maximum(body, comp)
    pick = np.argmin(total, axis=0)[None]

    def take(stack: Array) -> Array:
        return np.asarray(np.take_along_axis(stack, pick, axis=0)[0], dtype=np.float64)

    def field_(name: str) -> Array:
        return take(np.stack([np.broadcast_to(np.asarray(getattr(c, name), dtype=np.float64),
                                              shape) for c in cost_l]))

    zero = np.where(multi, 1.0, 0.0)
    overhead = take(fixed) * zero
    memory = take(body) * zero
    compute = take(comp) * zero
    latency = np.maximum(memory, compute) + overhead
    link_b, flops = field_("link_bytes"), field_("vector_flops")
    label = np.asarray(_NAMES)[np.asarray(idx_l)[pick[0]]]
    label = np.where(multi, label, "none")
    details: dict[str, Any] = {"link": fab.names[0] or fab.names[1], "kernels": zero,
                               "algorithm": _label(label)}
    return make_prediction(
        op="allreduce", hardware=spec.id, dtype=op.dtype, compute_s=compute, memory_s=memory,
        overhead_s=overhead, latency_s=latency, flops=flops, bytes_=link_b, bytes_min=link_b,
        peak=k.vector_op_rate * 2.0, bandwidth=float(np.max(fab.bandwidth)),
        ridge_point=k.rate / k.achievable_bandwidth, details=details,
    )


def _label(x: Any) -> Any:  # a str for scalar inputs, an array of str otherwise
    arr = np.asarray(x)
    return str(arr) if arr.ndim == 0 else arr
