#!/usr/bin/env bash
# GPU check of perfmodel's calibration: on a machine with an NVIDIA GPU and torch, measure the
# designed suite for a few minutes, fit the timing model, and print the before/after table
# (after = leave-shape-out cross-validated, i.e. on shapes the fit never saw); then fit the
# calibration in parts (device figures, kernel-family constants, residual), carry its family
# part onto this GPU's own spec and onto a neighbouring GPU's spec (calibrate transfer), and
# print before/after on this GPU's rows: spec only, the family part carried (device figures
# at the spec's values), the whole calibration in-sample and held out. Last, record a
# torch.profiler trace (and an Nsight Compute export where ncu works) of an inference-shaped
# workload and explain it kernel by kernel (explain-trace).
#
#   benchmarks/gpu_check.sh                 run the check (GPU machine; ~5 minutes)
#   benchmarks/gpu_check.sh --fetch-wheels  on a machine with pip and network: download the
#                                           wheels perfmodel needs beyond torch/numpy/scipy/
#                                           yaml (pydantic and its deps) into .whl/, for a GPU
#                                           machine that has no registry access
#
# Environment:
#   BUDGET    measuring budget (default 4m; fit and report add well under a minute)
#   GPU_SPEC  spec id or YAML (default: resolved from the device name, e.g. h200-sxm)
#   OUT       output folder (default ./gpu_check_out): CSV, environment, calibrated profiles,
#             transferred profiles, report JSON, scatter plot
#   TRANSFER_TO  spec to carry the calibration to (default: a neighbouring architecture's:
#             Ampere and Ada -> h100-sxm, Hopper -> b200, Blackwell -> h200-sxm)
#   PYTHON    interpreter (default python3)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WHEELS="$ROOT/.whl"
# pydantic and what it needs (a newer typing_extensions than a CUDA image may have)
WHEEL_PINS=(pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0
            typing_inspection==0.4.5 typing_extensions==4.16.0)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    mkdir -p "$WHEELS"
    if [[ -d "$ROOT/.git" ]] && ! grep -qs '^/.whl/$' "$ROOT/.git/info/exclude"; then
        mkdir -p "$ROOT/.git/info" && echo "/.whl/" >> "$ROOT/.git/info/exclude"
    fi
    # CPython 3.12 on x86-64 Linux (the GPU image); pydantic_core is the only binary wheel
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$WHEELS" "${WHEEL_PINS[@]}"
    ls -l "$WHEELS"
    exit 0
fi

OUT="${OUT:-$ROOT/gpu_check_out}"
BUDGET="${BUDGET:-4m}"
mkdir -p "$OUT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# pydantic missing (a bare CUDA image): install the carried wheels into a private folder
if ! "$PYTHON" -c "import pydantic" 2>/dev/null; then
    if compgen -G "$WHEELS/*.whl" >/dev/null; then
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target /tmp/perfmodel-site "$WHEELS"/*.whl
        export PYTHONPATH="$PYTHONPATH:/tmp/perfmodel-site"
    else
        echo "pydantic is not installed and no wheels in $WHEELS:" \
             "run 'benchmarks/gpu_check.sh --fetch-wheels' on a machine with pip" >&2
        exit 2
    fi
fi

"$PYTHON" - <<'EOF'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit("no CUDA device visible to torch: this check needs an NVIDIA GPU")
p = torch.cuda.get_device_properties(0)
print(f"device: {torch.cuda.get_device_name(0)}, {p.multi_processor_count} SMs, "
      f"{p.total_memory / 2**30:.0f} GiB; torch {torch.__version__}, CUDA {torch.version.cuda}")
EOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv || true

PM=("$PYTHON" -m perfmodel)
SPEC_ARGS=()
[[ -n "${GPU_SPEC:-}" ]] && SPEC_ARGS=(--gpu "$GPU_SPEC")
CSV="$OUT/gpu.csv"
start=$(date +%s)

echo "== calibrate run --device cuda --budget $BUDGET"
"${PM[@]}" calibrate run --device cuda --budget "$BUDGET" --out "$CSV" "${SPEC_ARGS[@]}"

echo "== calibrate fit"
"${PM[@]}" calibrate fit "$CSV" "${SPEC_ARGS[@]}" --out "$OUT/calibrated.yaml"

echo "== calibrate report (before = spec defaults; after = held out, 5-fold over shapes)"
"${PM[@]}" calibrate report "$CSV" --gpu "$OUT/calibrated.yaml" --plot "$OUT/scatter.png"
"${PM[@]}" calibrate report "$CSV" --gpu "$OUT/calibrated.yaml" --json > "$OUT/report.json"

echo "== calibrate fit --fit parts (device figures, kernel-family constants, residual)"
"${PM[@]}" calibrate fit "$CSV" "${SPEC_ARGS[@]}" --fit parts --out "$OUT/parts.yaml"

# the plain spec this GPU was measured as (GPU_SPEC, else the CSV's spec column)
SPEC_ID="${GPU_SPEC:-$("$PYTHON" - "$CSV" <<'EOF'
import csv, sys
with open(sys.argv[1], newline="", encoding="utf-8-sig") as fh:
    print(next(r["spec"] for r in csv.DictReader(fh) if r.get("spec")))
EOF
)}"
if [[ -z "${TRANSFER_TO:-}" ]]; then
    TRANSFER_TO="$("$PYTHON" - "$SPEC_ID" <<'EOF'
import sys
import perfmodel as pm
arch = pm.load_hardware(sys.argv[1]).arch
print({"ampere": "h100-sxm", "ada": "h100-sxm", "hopper": "b200"}.get(arch, "h200-sxm"))
EOF
)"
fi

echo "== calibrate transfer: the family part onto $SPEC_ID itself and onto $TRANSFER_TO"
"${PM[@]}" calibrate transfer "$OUT/parts.yaml" --to "$SPEC_ID" --out "$OUT/self-transfer.yaml"
"${PM[@]}" calibrate transfer "$OUT/parts.yaml" --to "$TRANSFER_TO" \
    --out "$OUT/transfer-$(basename "${TRANSFER_TO%.yaml}").yaml"

echo "== before / after on this GPU's rows (median / p90 APE)"
"$PYTHON" - "$CSV" "$SPEC_ID" "$OUT" <<'EOF'
import sys
from pathlib import Path

import numpy as np

from perfmodel.calibrate.data import dataset_from_rows, read_rows
from perfmodel.calibrate.report import cross_validate
from perfmodel.cli.calibrate import _parts_fitter
from perfmodel.hardware.catalog import load_hardware

csv_path, spec_id, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
rows, _ = read_rows(csv_path)
data = dataset_from_rows(rows)
spec = load_hardware(spec_id)
cv = cross_validate(data, spec, folds=5, residual="gp", fitter=_parts_fitter)
lines = {
    "spec only": data.predict(spec),
    "family part carried, device figures at the spec's":
        data.predict(load_hardware(str(out / "self-transfer.yaml"))),
    "whole calibration, in-sample": data.predict(load_hardware(str(out / "parts.yaml"))),
    "whole calibration, held out (5-fold over shapes)": cv.heldout_s,
}
groups = ["all", *sorted({r.family for r in rows})]
print(f"{'':52s} " + " ".join(f"{g:>17s}" for g in groups))
for name, pred in lines.items():
    cells = []
    for g in groups:
        mask = np.asarray([g in ("all", r.family) for r in rows])
        ape = np.abs(pred[mask] / data.measured_s[mask] - 1.0)
        cells.append(f"{100 * np.median(ape):5.1f}% / {100 * np.percentile(ape, 90):5.1f}%")
    print(f"{name:52s} " + " ".join(f"{c:>17s}" for c in cells))
EOF

echo "== your own traces: a torch.profiler trace of an inference-shaped workload (bf16 GEMMs,"
echo "   causal prefill and GQA decode SDPA; benchmarks/gpu_traces.py), read by explain-trace"
"$PYTHON" "$ROOT/benchmarks/gpu_traces.py" "$OUT/traces"
"${PM[@]}" explain-trace "$OUT/traces/trace.json" --gpu "$SPEC_ID"
"${PM[@]}" calibrate import "$OUT/traces/trace.json" --gpu "$SPEC_ID" --out "$OUT/traces/rows.csv"
# Nsight Compute where it can read the counters (not under every VM runtime): the same
# workload under emit_nvtx, exported raw; NVTX ranges hold shapes but neither dtype nor
# is_causal, so both are given (the workload's prefill call is causal; decode is the same
# either way)
if command -v ncu >/dev/null; then
    if timeout 300 ncu --clock-control none --csv --page raw --nvtx \
            --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,device__attribute_display_name \
            "$PYTHON" "$ROOT/benchmarks/gpu_traces.py" "$OUT/traces" --nvtx --repeat 1 \
            > "$OUT/traces/ncu.csv" 2> "$OUT/traces/ncu.err"; then
        "${PM[@]}" explain-trace "$OUT/traces/ncu.csv" --gpu "$SPEC_ID" --dtype bf16 --causal \
            || true
    else
        echo "ncu could not profile here (see $OUT/traces/ncu.err)"
    fi
else
    echo "ncu not found: Nsight Compute export skipped"
fi

echo "== done in $(( $(date +%s) - start )) s; files in $OUT"
ls -l "$OUT"
