#!/usr/bin/env bash
# The smoothness term three ways, on simulated shifted rigs (bench sim-finetune: the learner's
# update and the regression guard as config/finetune.yaml sets them, 3 seeds x 10 x 6 s,
# then the best policy deployed 5 x 10 s; about a minute per seed). JOBS at a time (2: one
# per core): the results do not depend on speed (the simulation waits for the updates).
#   initial  as shipped: only the chatter beyond the starting policy's own
#   caps     CAPS's full term (smoothness_reference: none)
#   off      no smoothness term
# JSON: bench/results/sim_finetune_<rig>_<prior>_<setting>.json; table: python -m
# rip_bench table sim-finetune bench/results/sim_finetune_*.json
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/dds_env.sh
PY=${PY:-.venv/bin/python}
export PYTHONPATH=$PWD
RIGS=${RIGS:-"worn heavy"}
PRIORS=${PRIORS:-"sim_50hz sim_50hz_wide"}
SETTINGS=${SETTINGS:-"initial caps off"}
L=rip_learner
mkdir -p runs/sim_finetune  # the logs
jobs=()
files=()
for rig in $RIGS; do
  for prior in $PRIORS; do
    for setting in $SETTINGS; do
      case $setting in
        initial) extra=() ;;
        caps) extra=(--set $L.smoothness_reference=none) ;;
        off) extra=(--set $L.smoothness=0.0) ;;
        *) echo "unknown setting $setting (initial, caps, off)" >&2; exit 2 ;;
      esac
      name=sim_finetune_${rig}_${prior}_${setting}
      files+=(bench/results/$name.json)
      jobs+=("$PY -m rip_bench sim-finetune --rig config/rig_shifted_$rig.yaml \
        --policy policies/$prior/policy.safetensors --seeds 0 1 2 --label $setting \
        ${extra[*]:-} --json bench/results/$name.json > runs/sim_finetune/$name.log 2>&1")
    done
  done
done
printf '%s\n' "${jobs[@]}" | xargs -d '\n' -P "${JOBS:-2}" -n 1 bash -c
$PY -m rip_bench table sim-finetune "${files[@]}"
