"""The soak benchmark in miniature: once warm, no process's memory, files or threads grow.

The run crosses the firmware clock's wrap and the replay buffer's eviction point, and every
transition reaches the learner.

The hours-long runs are ``python -m rip_bench soak --minutes 120 ...`` (their JSON in
``bench/results/soak_*.json``); this is the same code for 45 s, with a buffer of 400
transitions so that it fills (and evicts) 8 s in.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from rip_control.procs import child_env

pytestmark = [pytest.mark.alone, pytest.mark.ros, pytest.mark.slow]

#: Growth a process may show in the ~20 s after the warm-up (RSS pages touched late, an
#: allocator's arenas). So short a window catches only a gross leak (more than about 15 MiB a
#: minute); a slow one is what the two-hour soaks' slopes show (bench/results/soak_*rig.json).
RSS_GROWTH_MIB = 6.0


def test_a_short_soak_crosses_the_wrap_and_the_eviction_with_flat_memory(tmp_path):
    params = tmp_path / 'params.yaml'
    # A small buffer, to fill and evict within the run; the control node's rules as the other
    # tests relax them (test/conftest.py says why: this VM's host pauses a vCPU now and then).
    control = {'max_strikes': 5, 'max_serial_errors': 10}
    params.write_text(
        yaml.safe_dump(
            {
                'rip_learner': {'ros__parameters': {'buffer_size': 400}},
                'rip_control': {'ros__parameters': control},
            }
        )
    )
    out = tmp_path / 'soak.json'
    proc = subprocess.run(
        [
            sys.executable, '-m', 'rip_bench', 'soak', '--minutes', '0.75', '--rigs', '1',
            '--sample-s', '3', '--warmup-s', '21', '--wrap-after-s', '25',
            '--set', f'params_file:={params}', '--json', str(out),
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert not doc['failure'], doc['failure']
    # Every transition reached the learner, the buffer filled and evicted, and the control
    # node read the rig's clock on both sides of its wrap (the emulator saw it) without a
    # jump: one would have ended the run (failure above).
    assert doc['transitions_published'] == doc['transitions_received'] > 400, doc
    assert doc['buffer_evicted'] > 0, doc
    assert doc['clock_wraps_read'] == [1], doc['clock_wraps_read']
    assert max(e['episode'] for e in doc['episodes']) >= 3, doc['episodes']
    names = set(doc['processes'])
    assert {'runner', 'learner_node', 'ros.control_node', 'rt.process'} <= names, names
    for name, p in doc['processes'].items():
        late = p['after_warmup']
        assert late['samples'] >= 5, (name, p)
        assert late['rss_mib_growth'] <= RSS_GROWTH_MIB, (name, p)
        # (a file open for a checkpoint, a thread of the executor: one or two come and go)
        assert late['fds_max_minus_min'] <= 2 and late['threads_max_minus_min'] <= 2, (name, p)
    assert (tmp_path / 'soak.png').exists()  # named after the record, beside it
