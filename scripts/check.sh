#!/usr/bin/env bash
# The one test command for a fresh machine: make .venv if missing, install the project with
# every extra, then lint (ruff), type-check (mypy --strict, config in pyproject.toml), build the
# API reference (pdoc) and test (pytest). Exits non-zero on the first failure.
#
#   bash scripts/check.sh            (CI runs it through .ci/run)
#   PYTHON=python3.12 bash scripts/check.sh   to make the venv with another interpreter
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$SECONDS
step() { printf '== %s (%ds)\n' "$1" "$((SECONDS - start))"; }

if [ ! -x .venv/bin/python ]; then
  step "creating .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
py=.venv/bin/python

step "installing"
# -qq: errors only (the machine-wide pip config makes warning-level noise about index paths).
# torch first, pinned: this version resolves to a CPU build on local disk, while a bare
# `torch` requirement (the calibrate extra) could pull a multi-GB CUDA build from the index.
"$py" -m pip install -qq --disable-pip-version-check torch==2.13.0
"$py" -m pip install -qq --disable-pip-version-check -e '.[dev,calibrate,plot]'

step "ruff"
"$py" -m ruff check .

step "mypy"
# pyproject.toml names perfmodel and tests; other folders join once they hold Python files.
targets=(perfmodel tests)
for dir in benchmarks examples scripts; do
  if [ -d "$dir" ] && [ -n "$(find "$dir" -name '*.py' -print -quit)" ]; then
    targets+=("$dir")
  fi
done
"$py" -m mypy "${targets[@]}"

step "api docs"
# The API reference, generated from the docstrings (pdoc) into build/api/: a public module
# that does not import or an annotation that does not resolve fails here (pdoc warns; -W
# makes it an error). tests/test_docs.py checks the docstrings' parameter names and the
# pinned public names against docs/embedding.md.
"$py" -W error::UserWarning -m pdoc --docformat numpy -o build/api \
  perfmodel perfmodel.sweeps perfmodel.planning

step "pytest"
# pyproject's addopts already has -q; a second -q would hide the "N passed" summary line.
"$py" -m pytest

step "all checks passed"
