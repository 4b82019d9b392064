#!/usr/bin/env bash
# GPU check of perfmodel's calibration: on a machine with an NVIDIA GPU and torch, measure the
# designed suite for a few minutes, fit the timing model, and print the before/after table
# (after = leave-shape-out cross-validated, i.e. on shapes the fit never saw).
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
#   OUT       output folder (default ./gpu_check_out): CSV, environment, calibrated profile,
#             report JSON, scatter plot
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

echo "== done in $(( $(date +%s) - start )) s; files in $OUT"
ls -l "$OUT"
