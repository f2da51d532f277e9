#!/usr/bin/env bash
# The C firmware's figures in the README (about 20 minutes, on an otherwise idle machine):
# serial round trips of both firmwares (idle and under SAC load), and the 500 Hz control loop
# under SAC load against each firmware, three runs each, alternating.
#   bash bench/run_firmware.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
source bench/dds_env.sh
export PYTHONPATH=$PWD
make --no-print-directory firmware-host
R=bench/results
$PY -m rip_bench serial-roundtrip --rate 500 --seconds 20 --repeats 3 \
  --json $R/serial_roundtrip.json
$PY -m rip_bench serial-roundtrip --rate 500 --seconds 20 --repeats 3 --load sac \
  --json $R/serial_roundtrip_sac.json
for run in 1 2 3; do
  for fw in c python; do
    $PY -m rip_bench timing --rate 500 --seconds 120 --load sac --firmware "$fw" \
      --json "$R/timing_500hz_sac_${fw}fw_run${run}.json"
  done
done
