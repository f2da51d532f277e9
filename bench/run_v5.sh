#!/usr/bin/env bash
# V5 under bench/results/ (about 10 minutes per rig): the simulation-only policy, the same
# policy after the asynchronous fine-tune, and after the synchronous one (SB3 learn() with the
# learner's own update), each deployed on a shifted rig. Both fine-tunes read one parameter
# file (config/finetune.yaml), seed 0. Then the [256, 256] scenario, where the synchronous
# loop cannot keep 50 Hz: a [256, 256] policy is pre-trained into runs/sim_50hz_256/ first
# if it is not there (at most 10 minutes). With --pretrain it first re-makes
# policies/sim_50hz/ from scratch (~5 minutes).
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
if [[ ! -f runs/sim_50hz_256/policy.safetensors ]]; then
  $PY -m rip_learner.pretrain rate:=50 'hidden_sizes:=[256,256]' torch_threads:=2 \
    time_limit_s:=600 out:=runs/sim_50hz_256
fi
$PY -m rip_control.bench v5 --rig config/rig_shifted_worn.yaml --hidden 256,256 \
  --policy runs/sim_50hz_256/policy.safetensors --label 256x256 \
  --json bench/results/v5_worn_256.json --plots bench/results/v5_256
$PY -m rip_control.bench v5-table bench/results/v5_worn.json bench/results/v5_heavy.json \
  bench/results/v5_worn_256.json
