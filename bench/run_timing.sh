#!/usr/bin/env bash
# Regenerate the timing benchmark results committed under bench/results/ (about 12 minutes).
# Run on an otherwise idle machine: `bash bench/run_timing.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( ($$ % 100) + 100 ))}
export PYTHONPATH=$PWD
B="$PY -m rip_control.bench timing --baseline rclpy-timer"
for rate in 50 100 500; do
  $B --rate "$rate" --seconds 60 --load sac --json "bench/results/timing_${rate}hz_sac.json"
done
# V1 (no load) and V2 (a busy process per core), 50 Hz, weights at 10 Hz throughout
$B --rate 50 --seconds 30 --load none --json bench/results/timing_50hz_none.json
$B --rate 50 --seconds 30 --load hog --json bench/results/timing_50hz_hog.json
# What the tuning buys: 100 Hz under SAC load without SCHED_FIFO, and without GIL/GC tuning,
# and the measured-worse option of raising the process's other threads to SCHED_FIFO 10
$PY -m rip_control.bench timing --rate 100 --seconds 30 --load sac \
  --node-param fifo_priority:=0 --json bench/results/timing_100hz_sac_no_fifo.json
$PY -m rip_control.bench timing --rate 100 --seconds 30 --load sac \
  --node-param fifo_priority:=0 --node-param switch_interval_us:=5000 \
  --node-param gc_off:=false --json bench/results/timing_100hz_sac_untuned.json
$PY -m rip_control.bench timing --rate 100 --seconds 30 --load sac \
  --node-param gil_holders_fifo_priority:=10 --json bench/results/timing_100hz_sac_holders_fifo.json
