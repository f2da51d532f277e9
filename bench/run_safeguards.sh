#!/usr/bin/env bash
# The fine-tuning safeguards, each measured on and off (about 3 minutes per line): the
# asynchronous fine-tune (10 x 6 s, K = 4, regression guard off so that what the learner
# made is what is deployed) and a deterministic deployment of its last policy, 5 x 10 s.
#   all      critic-first updates, prior data, action smoothness, warm-up (learning_starts)
#   no_*     all but one
#   none     the learner's update with none of them (learning_starts 32: one small batch)
# then the guard on top of all (policy_best deployed). JSON: bench/results/safeguards_*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
source bench/dds_env.sh
export PYTHONPATH=$PWD
RIGS=${RIGS:-"worn heavy"}
ARMS=${ARMS:-"all none no_prior no_critic_first no_smoothness no_warmup guard"}
L=rip_learner
ALL=(--set $L.fast_updates=true --set $L.critic_warmup_updates=1000 --set $L.prior_data=auto
     --set $L.prior_ratio=0.5 --set $L.smoothness=${SMOOTHNESS:-5.0} --set $L.learning_starts=256)
for rig in $RIGS; do
  for arm in $ARMS; do
    extra=("${ALL[@]}")
    guard=0
    case $arm in
      all) ;;
      none) extra=(--set $L.fast_updates=true --set $L.learning_starts=32) ;;
      no_prior) extra+=(--set $L.prior_data=) ;;
      no_critic_first) extra+=(--set $L.critic_warmup_updates=0) ;;
      no_smoothness) extra+=(--set $L.smoothness=0.0) ;;
      no_warmup) extra+=(--set $L.learning_starts=32) ;;
      guard) guard=2 ;;
    esac
    echo "== $rig $arm"
    $PY -m rip_bench v5 --rig config/rig_shifted_$rig.yaml --skip-sync --guard $guard \
      --label "$arm" "${extra[@]}" --json bench/results/safeguards_${rig}_$arm.json \
      --plots /tmp/rip_safeguard_plots
  done
done
$PY -m rip_bench table safeguards bench/results/safeguards_*.json
