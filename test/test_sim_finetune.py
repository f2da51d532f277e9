"""``python -m rip_bench sim-finetune``: the update and the guard on a simulated rig, for real."""

import json
from pathlib import Path
import subprocess
import sys

from rip_bench.sim_finetune import sim_finetune_table

REPO = Path(__file__).resolve().parent.parent
SHORT = [
    '--episodes', '4', '--episode-seconds', '1', '--eval-episodes', '2', '--eval-seconds', '1',
    '--guard', '2', '--set', 'rip_learner.learning_starts=40',
    '--set', 'rip_learner.critic_warmup_updates=60',
]  # fmt: skip


def _bench(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f'{name}.json'
    proc = subprocess.run(
        [sys.executable, '-m', 'rip_bench', 'sim-finetune',
         '--rig', 'config/rig_shifted_worn.yaml', *SHORT, *extra, '--json', str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert 'deployed: balance' in proc.stdout
    return json.loads(out.read_text())


def test_it_runs_the_shipped_update_with_its_guard_and_tables_the_result(tmp_path):
    doc = _bench(tmp_path, 'shipped')
    (run,) = doc['runs']
    # 4 episodes of 50 transitions, K = 4 after the first 40: every owed update ran.
    assert run['transitions'] == 200 and run['updates'] == 4 * (200 - 40 + 1)
    assert [e['episode'] for e in run['evaluations']] == [1, 3]
    assert {e['verdict'] for e in run['evaluations']} <= {'promoted', 'rejected'}
    table = sim_finetune_table([doc])
    assert '| rig_shifted_worn | sim_50hz | as shipped |' in table
    assert table.count('\n') == 2


def test_a_setting_reaches_the_update(tmp_path):
    # The same seed with the smoothness reference (as shipped) and with CAPS's full term: the
    # first episode is driven by the same starting policy, then the candidates differ.
    two = ('--episodes', '2')  # the first evaluation comes after the second episode
    shipped = _bench(tmp_path, 'on', *two)['runs'][0]
    caps = _bench(tmp_path, 'caps', *two, '--set', 'rip_learner.smoothness_reference=none')
    caps = caps['runs'][0]
    assert shipped['episodes'][0] == caps['episodes'][0]
    assert shipped['evaluations'][0]['return'] != caps['evaluations'][0]['return']
