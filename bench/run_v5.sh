#!/usr/bin/env bash
# V5 under bench/results/ (about 9 minutes per rig and seed): the simulation-only policy, the
# same policy after the asynchronous fine-tune, and after the synchronous one (SB3 learn()
# with the learner's own update), each deployed on a rig. Both fine-tunes read one parameter
# file (config/finetune.yaml). RIGS (default: nominal worn heavy; mild is bench/rigs/) and SEEDS (default: 0 1 2)
# select; each run writes bench/results/v5_<rig>_seed<seed>.json, seed 0's plots go to
# bench/results/, the others' to bench/results/v5_seed<seed>/. With WIDE=1 it then runs the
# [256, 256] scenario, where the synchronous loop cannot keep 50 Hz: a [256, 256] policy is
# pre-trained into runs/sim_50hz_256/ first if it is not there (at most 10 minutes). With
# --pretrain it first re-makes policies/sim_50hz/ from scratch (~5 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
RIGS=${RIGS:-nominal worn heavy}
SEEDS=${SEEDS:-0 1 2}
source bench/dds_env.sh
export PYTHONPATH=$PWD
if [[ "${1:-}" == "--pretrain" ]]; then
  $PY -m rip_learner.pretrain rate:=50 out:=policies/sim_50hz
fi
rig_file() {  # the shipped rigs by name; bench/rigs/ holds the benchmarks' own (e.g. mild)
  if [[ "$1" == nominal ]]; then echo config/rig_qube_servo2.yaml
  elif [[ -f "config/rig_shifted_$1.yaml" ]]; then echo "config/rig_shifted_$1.yaml"
  else echo "bench/rigs/rig_$1.yaml"; fi
}
FAILED=()
files=()
for seed in $SEEDS; do
  for rig in $RIGS; do
    plots=bench/results
    [[ "$seed" == 0 ]] || plots=bench/results/v5_seed$seed
    out=bench/results/v5_${rig}_seed$seed.json
    echo "== V5: $rig rig, seed $seed ($(date +%T))"
    # A failed run is reported at the end; the others still run.
    if $PY -m rip_bench v5 --rig "$(rig_file "$rig")" --seed "$seed" \
        --json "$out" --plots "$plots"; then
      files+=("$out")
    else
      FAILED+=("$rig/seed$seed")
    fi
  done
done
if [[ "${WIDE:-0}" == 1 ]]; then
  if [[ ! -f runs/sim_50hz_256/policy.safetensors ]]; then
    $PY -m rip_learner.pretrain rate:=50 'hidden_sizes:=[256,256]' torch_threads:=2 \
      time_limit_s:=600 out:=runs/sim_50hz_256
  fi
  $PY -m rip_bench v5 --rig config/rig_shifted_worn.yaml --hidden 256,256 \
    --policy runs/sim_50hz_256/policy.safetensors --label 256x256 \
    --json bench/results/v5_worn_256.json --plots bench/results/v5_256
fi
if (( ${#files[@]} )); then
  $PY -m rip_bench table v5-seeds "${files[@]}"
fi
if (( ${#FAILED[@]} )); then
  echo "failed: ${FAILED[*]}" >&2
  exit 1
fi
