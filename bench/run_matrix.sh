#!/usr/bin/env bash
# The fine-tune as shipped (config/finetune.yaml: safeguards and regression guard on) over
# 3 seeds x 3 rigs, against its goals (about 35 minutes): bench/results/matrix.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
source bench/dds_env.sh
export PYTHONPATH=$PWD
$PY -m rip_bench matrix --seeds 0 1 2 --min-balance rig_shifted_worn=8 \
  --rigs config/rig_qube_servo2.yaml config/rig_shifted_worn.yaml config/rig_shifted_heavy.yaml \
  --json bench/results/matrix.json
