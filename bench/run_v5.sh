#!/usr/bin/env bash
# V5 under bench/results/ (about 12 minutes per rig): the simulation-only policy, the same
# policy after the asynchronous fine-tune, and after the synchronous one, each deployed on a
# shifted rig. With --pretrain it first re-makes policies/sim_50hz/ from scratch (~5 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( ($$ % 100) + 100 ))}
export PYTHONPATH=$PWD
if [[ "${1:-}" == "--pretrain" ]]; then
  $PY -m rip_learner.pretrain rate:=50 out:=policies/sim_50hz
fi
for rig in worn heavy; do
  $PY -m rip_control.bench v5 --rig config/rig_shifted_$rig.yaml \
    --json bench/results/v5_$rig.json --plots bench/results
done
$PY -m rip_control.bench v5-table bench/results/v5_worn.json bench/results/v5_heavy.json
