"""Charts: a roofline of a model's ops, sweep charts, a GPU comparison.

matplotlib is an optional extra (``pip install perfmodel[plot]``), imported inside the
functions that draw. Each ``plot_*`` function writes the file and returns a :class:`Chart`
with exactly the data it drew (series, axis labels and scales), so charts can be checked
without looking at pixels. The ``*_data`` functions prepare that data without matplotlib.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel._errors import PerfmodelError
from perfmodel._units import format_capacity
from perfmodel.hardware.catalog import load_hardware
from perfmodel.hardware.spec import HardwareSpec
from perfmodel.models.predict import ModelPrediction
from perfmodel.ops.cost import Array
from perfmodel.sweeps import GROUPS, SweepResult

__all__ = ["BOTTLENECK_COLORS", "Chart", "ComparisonData", "RooflineData", "RooflinePoint",
           "comparison_data", "plan_comparison_data", "plot_gpu_comparison", "plot_roofline",
           "plot_serve_timeline", "plot_sweep", "roofline_data"]

BOTTLENECK_COLORS = {"compute": "#d62728", "memory": "#1f77b4", "latency": "#7f7f7f"}
_GROUP_COLORS = {"attention": "#ff7f0e", "mlp": "#2ca02c", "qkv_o_proj": "#9467bd",
                 "lm_head": "#8c564b", "allreduce": "#e377c2", "small_ops": "#bcbd22"}


@dataclass(frozen=True)
class Chart:
    """What a plot function drew: ``series`` maps a label to its (x, y) as plotted."""

    path: Path
    title: str
    x_label: str
    y_label: str
    x_scale: str
    y_scale: str
    series: dict[str, tuple[Array, Array]]
    annotations: dict[str, float] = field(default_factory=dict)
    panels: int = 1


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PerfmodelError("plot", "matplotlib is not installed",
                             "pip install perfmodel[plot]") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig: Any, path: str | Path) -> Path:
    out = Path(path)
    if out.parent and not out.parent.exists():
        raise PerfmodelError("plot", f"folder {out.parent} does not exist",
                             "create it or pick another path")
    fig.savefig(out, dpi=130, bbox_inches="tight")
    _pyplot().close(fig)
    return out


# --------------------------------------------------------------------------- roofline
@dataclass(frozen=True)
class RooflinePoint:
    name: str
    phase: str
    intensity: float
    """FLOP/byte."""
    flops_per_s: float
    """Achieved: the op's FLOPs over its predicted time."""
    bottleneck: str
    share: float


@dataclass(frozen=True)
class RooflineData:
    hardware: str
    title: str
    bandwidth: float
    """Datasheet memory bandwidth, B/s."""
    ceilings: dict[str, float]
    """Dense peak per dtype, FLOP/s."""
    points: tuple[RooflinePoint, ...]


def roofline_data(pred: ModelPrediction, hw: HardwareSpec | str | None = None,
                  note: str = "") -> RooflineData:
    """The ops of a model prediction (each phase) placed on the GPU's roofline. Ops without
    FLOPs (embedding gather, copies) have no place on it and are left out. ``note`` (e.g.
    that the context is past the model's window) is added to the title."""
    spec = load_hardware(hw if hw is not None else pred.hardware)
    points = []
    for phase in (pred.prefill, pred.decode):
        if phase is None:
            continue
        for row in phase.ops:
            flops, nbytes = float(np.mean(row.flops)), float(np.mean(row.bytes))
            lat = float(np.mean(row.latency_s))
            if flops <= 0 or nbytes <= 0 or lat <= 0:
                continue
            points.append(RooflinePoint(row.name, phase.phase, flops / nbytes, flops / lat,
                                        str(np.asarray(row.bottleneck).flat[0]),
                                        float(np.mean(row.share))))
    ceilings: dict[str, float] = {dt: p.peak for dt, p in spec.peaks.items()
                if dt in ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")}
    title = (f"{pred.model} on {spec.id}: ops on the roofline "
             f"(batch {float(np.mean(pred.batch)):g}, prompt {float(np.mean(pred.prompt_len)):g})")
    if note:
        title += f"\n{note}"
    return RooflineData(spec.id, title, spec.memory.bandwidth, ceilings, tuple(points))


def plot_roofline(data: RooflineData, path: str | Path) -> Chart:
    """Log-log roofline: memory slope, one ceiling per dtype, the ops as points (circles
    for prefill, triangles for decode) coloured by bottleneck."""
    plt = _pyplot()
    xs = [p.intensity for p in data.points] or [1.0]
    ridge = max(data.ceilings.values(), default=1e12) / data.bandwidth
    x = np.geomspace(min(min(xs), 1.0) / 3.0, max(max(xs), ridge) * 4.0, 200)
    series: dict[str, tuple[Array, Array]] = {}
    fig, ax = plt.subplots(figsize=(9, 6))
    mem = data.bandwidth * x / 1e12
    ax.plot(x, mem, color="black", lw=1.5, label=f"memory {data.bandwidth / 1e12:.2f} TB/s")
    series["memory slope"] = (x, mem)
    merged: dict[float, list[str]] = {}
    for dt, peak in data.ceilings.items():
        merged.setdefault(peak, []).append(dt)
    for peak, dts in sorted(merged.items(), key=lambda kv: -kv[0]):
        y = np.minimum(data.bandwidth * x, peak) / 1e12
        unit = "TOP/s" if all(d.startswith("int") for d in dts) else "TFLOP/s"
        name = "/".join(dts)
        ax.plot(x, y, lw=1.0, ls="--", label=f"{name} peak {peak / 1e12:.0f} {unit}")
        series[f"{name} ceiling"] = (x, y)
    for phase, marker in (("prefill", "o"), ("decode", "^")):
        for bn, color in BOTTLENECK_COLORS.items():
            pts = [p for p in data.points if p.phase == phase and p.bottleneck == bn]
            if not pts:
                continue
            px = np.array([p.intensity for p in pts])
            py = np.array([p.flops_per_s for p in pts]) / 1e12
            ax.scatter(px, py, marker=marker, color=color, s=40, zorder=3,
                       label=f"{phase}: {bn}-bound")
            series[f"{phase} {bn}"] = (px, py)
    for phase in ("prefill", "decode"):
        # label the ops that matter (≥ 2 % of their pass); neighbours share one label
        clusters: list[tuple[float, float, list[str]]] = []
        for p in sorted((p for p in data.points if p.phase == phase and p.share >= 0.02),
                        key=lambda p: -p.share):
            lx, ly = np.log10(p.intensity), np.log10(p.flops_per_s / 1e12)
            near = next((c for c in clusters if abs(c[0] - lx) < 0.15 and abs(c[1] - ly) < 0.15),
                        None)
            if near is None:
                clusters.append((lx, ly, [p.name]))
            else:
                near[2].append(p.name)
        for lx, ly, names in clusters:
            ax.annotate(", ".join(names), (10**lx, 10**ly), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.text(ridge, float(np.min(mem)), f" datasheet ridge {ridge:.0f} FLOP/B\n (peak / "
            "bandwidth; predictions use achievable rates)", fontsize=7, color="grey",
            va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    xl, yl = "arithmetic intensity (FLOP/byte)", "performance (TFLOP/s)"
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.set_title(data.title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    out = _save(fig, path)
    return Chart(out, data.title, xl, yl, "log", "log", series, {"ridge_flop_per_byte": ridge})


# --------------------------------------------------------------------------- sweep
def plot_sweep(result: SweepResult, path: str | Path) -> Chart:
    """Stacked time by op group along the sweep, crossovers as vertical lines; below it,
    memory per GPU against capacity."""
    plt = _pyplot()
    x = result.values
    unit = {"prefill": "prefill (TTFT)", "decode": "decode step",
            "generate": "request (end-to-end)"}[result.phase]
    fig, (ax, axm) = plt.subplots(2, 1, figsize=(9, 7), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1.3]})
    labels = [g for g in GROUPS if np.any(result.groups[g] > 0)]
    ys = [result.groups[g] * 1e3 for g in labels]
    ax.stackplot(x, *ys, labels=[g.replace("_", " ") for g in labels],
                 colors=[_GROUP_COLORS[g] for g in labels], alpha=0.85)
    series = {g: (x, y) for g, y in zip(labels, ys, strict=True)}
    annotations = {}
    for c in result.crossovers:
        if c.value is None:
            continue
        annotations[c.name] = c.value
        ax.axvline(c.value, color="black", ls=":", lw=1)
        ax.text(c.value, ax.get_ylim()[1] * 0.97, " " + c.name.replace("_", " "), rotation=90,
                va="top", fontsize=7)
    if result.window is not None and result.over in ("prompt", "context") \
            and float(np.max(x)) > result.window:
        # the model's context window: points right of it are past what it was trained for
        annotations["model_window"] = float(result.window)
        for a in (ax, axm):
            a.axvspan(result.window, float(np.max(x)), color="#d62728", alpha=0.08, lw=0)
            a.axvline(result.window, color="#d62728", ls="--", lw=1)
        ax.text(result.window, ax.get_ylim()[1] * 0.97,
                f" model window {result.window:,} ", rotation=90, va="top", ha="right",
                fontsize=7, color="#d62728")
    log_x = float(np.max(x)) / max(float(np.min(x)), 1e-30) >= 30
    for a in (ax, axm):
        a.set_xscale("log" if log_x else "linear")
        a.grid(True, which="both", alpha=0.3)
    yl = f"time per {unit} (ms)"
    ax.set_ylabel(yl)
    title = (f"{result.model} on {result.hardware}: {unit} time by op vs "
             f"{result.x_label.split(' (')[0]}")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    gb = result.memory_bytes / 1e9
    cap_bytes = result.prediction.memory.capacity_bytes
    cap = cap_bytes / 1e9
    axm.plot(x, gb, color="black", lw=1.5, label="weights + KV + activations + reserve")
    axm.axhline(cap, color="red", ls="--", lw=1, label=f"capacity {format_capacity(cap_bytes)}")
    if float(np.max(gb)) / max(float(np.min(gb)), 1e-9) >= 30:
        axm.set_yscale("log")
    axm.set_ylabel("memory per GPU (10⁹ B)")
    axm.set_xlabel(result.x_label)
    axm.legend(fontsize=7, loc="upper left")
    series["memory"] = (x, gb)
    out = _save(fig, path)
    return Chart(out, title, result.x_label, yl, "log" if log_x else "linear", "linear",
                 series, annotations, panels=2)


# --------------------------------------------------------------------------- GPUs
@dataclass(frozen=True)
class ComparisonData:
    title: str
    gpus: tuple[str, ...]
    metrics: dict[str, Array]
    """Axis label (with unit) -> one value per GPU (NaN where not defined)."""


def comparison_data(preds: list[ModelPrediction], note: str = "") -> ComparisonData:
    """TTFT, TPOT and throughput of one model on several GPUs (one prediction each); a GPU
    whose memory the model does not fit is marked in its label; ``note`` joins the title."""
    if not preds:
        raise PerfmodelError("preds", "nothing to compare", "pass predictions")

    def col(attr: str, scale: float) -> Array:
        return np.array([float(np.mean(getattr(p, attr))) * scale for p in preds])
    p0 = preds[0]
    title = (f"{p0.model}: batch {float(np.mean(p0.batch)):g}, prompt "
             f"{float(np.mean(p0.prompt_len)):g}, generate {float(np.mean(p0.gen_len)):g}, "
             f"TP {float(np.mean(p0.tp)):g}")
    if note:
        title += f"\n{note}"
    names = tuple(p.hardware + ("" if bool(np.all(p.memory.fits)) else " (does not fit)")
                  for p in preds)
    return ComparisonData(title, names, {
        "TTFT (ms)": col("ttft_s", 1e3), "TPOT (ms)": col("tpot_s", 1e3),
        "throughput (tokens/s)": col("tokens_per_s", 1.0)})


def plan_comparison_data(plan: Any) -> ComparisonData:
    """GPUs needed, output tokens/s per GPU and cost per million output tokens of a
    :class:`perfmodel.planning.Plan` (infeasible GPUs as NaN)."""
    ranked = plan.ranked()

    def col(attr: str) -> Array:
        return np.array([float(getattr(g.best, attr)) if g.best is not None
                         and getattr(g.best, attr) is not None else np.nan for g in ranked])
    wl = plan.workload
    title = (f"{plan.model}: {wl.requests_per_s:g} req/s, {wl.prompt_len} in / "
             f"{wl.output_len} out, TTFT ≤ {wl.ttft_target_s * 1e3:g} ms, "
             f"TPOT ≤ {wl.tpot_target_s * 1e3:g} ms")
    return ComparisonData(title, tuple(g.gpu for g in ranked), {
        "GPUs needed": col("gpus"), "output tokens/s per GPU": col("tokens_per_s_per_gpu"),
        "USD per million output tokens": col("usd_per_million_output_tokens")})


def plot_gpu_comparison(data: ComparisonData, path: str | Path) -> Chart:
    """One horizontal bar panel per metric, GPUs on the vertical axis."""
    plt = _pyplot()
    n = len(data.metrics)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 0.5 * len(data.gpus) + 2.2), sharey=True)
    axes = np.atleast_1d(axes)
    pos = np.arange(len(data.gpus))
    series = {}
    for ax, (label, values) in zip(axes, data.metrics.items(), strict=True):
        shown = np.where(np.isfinite(values), values, 0.0)
        ax.barh(pos, shown, color="#1f77b4")
        for i, v in enumerate(values):
            text = (f" {v:,.0f}" if abs(v) >= 100 else f" {v:.3g}") if np.isfinite(v) \
                else " n/a"
            ax.text(shown[i], i, text, va="center", fontsize=8)
        ax.set_xlim(0.0, max(float(np.max(shown)), 1e-30) * 1.18)
        ax.set_xlabel(label)
        ax.grid(True, axis="x", alpha=0.3)
        series[label] = (pos.astype(np.float64), np.asarray(values, dtype=np.float64))
    axes[0].set_yticks(pos)
    axes[0].set_yticklabels(data.gpus)
    axes[0].set_ylabel("GPU")
    axes[0].invert_yaxis()
    fig.suptitle(data.title, fontsize=10)
    out = _save(fig, path)
    return Chart(out, data.title, " | ".join(data.metrics), "GPU", "linear", "category",
                 series, panels=n)


# --------------------------------------------------------------------------- serving
def plot_serve_timeline(result: Any, path: str | Path) -> Chart:
    """A serving run over time: running and waiting requests, decoding sequences, and the
    KV cache used (fraction of the pool); below, each request's TTFT against its send
    time."""
    plt = _pyplot()
    tl = result.timeline
    t = np.asarray(tl["t_s"])
    order = np.argsort(t, kind="stable")
    t = t[order]
    fig, (ax, axk, axr) = plt.subplots(3, 1, figsize=(9, 8), sharex=True,
                                       gridspec_kw={"height_ratios": [2.2, 1.2, 1.6]})
    series: dict[str, tuple[Array, Array]] = {}
    for key, color in (("running", "#1f77b4"), ("decoding", "#2ca02c"),
                       ("waiting", "#d62728")):
        y = np.asarray(tl[key])[order]
        ax.step(t, y, where="post", color=color, lw=1.2, label=key)
        series[key] = (t, y)
    ax.set_ylabel("requests")
    ax.legend(fontsize=8, loc="upper right")
    kv = np.asarray(tl["kv_blocks"])[order] / max(result.kv_blocks, 1) * 100.0
    axk.step(t, kv, where="post", color="#9467bd", lw=1.2)
    axk.set_ylabel("KV cache used (%)")
    axk.set_ylim(0, max(100.0, float(np.max(kv)) if kv.size else 100.0) * 1.05)
    series["kv_used_percent"] = (t, kv)
    send = np.asarray(result.send_s)
    ttft = np.asarray(result.ttft_s) * 1e3
    axr.scatter(send, ttft, s=4, color="#ff7f0e", alpha=0.6)
    axr.set_ylabel("TTFT (ms)")
    axr.set_xlabel("time (s)")
    series["ttft_ms"] = (send, ttft)
    for a in (ax, axk, axr):
        a.grid(True, alpha=0.3)
    title = (f"{result.model} on {result.replicas}×{result.tp} {result.hardware} "
             f"({result.engine}): {result.workload}")
    ax.set_title(title, fontsize=9)
    out = _save(fig, path)
    return Chart(out, title, "time (s)", "requests", "linear", "linear", series, panels=3)
