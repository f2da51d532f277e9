#!/usr/bin/env bash
# Regenerate the learning-side benchmarks under bench/results/ (about 4 minutes):
# V4 end to end, the synchronous SB3 learn() baseline, SB3 train() throughput, 2 and 3 rigs
# on one learner, and the bag round trip.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
source bench/dds_env.sh
export PYTHONPATH=$PWD
$PY -m rip_bench e2e --rate 50 --episodes 10 --episode-seconds 6 --gradient-steps 4 \
  --json bench/results/v4_e2e_50hz.json
$PY -m rip_bench sync-baseline --rate 50 --gradient-steps 4 --seconds 40 \
  --json bench/results/sync_baseline_50hz_k4.json
$PY -m rip_bench learner-throughput --seconds 10 --json bench/results/learner_throughput.json
$PY -m rip_bench e2e --rigs 2 --episodes 10 --episode-seconds 6 --gradient-steps 4 \
  --json bench/results/e2e_2rigs_50hz.json
$PY -m rip_bench e2e --rigs 3 --episodes 10 --episode-seconds 6 --gradient-steps 4 \
  --json bench/results/e2e_3rigs_50hz.json || true  # at the edge of 2 cores: keep the JSON either way
$PY -m rip_bench bag-roundtrip --json bench/results/bag_roundtrip.json
