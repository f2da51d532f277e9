#!/usr/bin/env bash
# `make demo` five times in a row, as a user would type it, each continuing the one before
# (its buffer, its best-evaluated policy), in a fresh runs folder. Each run's summary.json is
# kept as bench/results/demo_run<i>.json; the README's table: python -m rip_bench table demo.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
source bench/dds_env.sh
RUNS=$(mktemp -d /tmp/rip_demos_XXXX)
for i in 1 2 3 4 5; do
  echo "== make demo, run $i of 5 (runs_dir:=$RUNS)"
  make demo DEMO_ARGS="runs_dir:=$RUNS"
  cp "$RUNS/demo/summary.json" "bench/results/demo_run$i.json"
done
PYTHONPATH=$PWD $PY -m rip_bench table demo bench/results/demo_run{1,2,3,4,5}.json
