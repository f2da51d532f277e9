"""rip_control.adapt's record and ``resume:=true``: a run that faulted goes on where it stopped.

The record is rewritten as each phase completes and says how the run ended; a resume reads
the finished phases from it and runs only what did not finish.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
import signal
import subprocess
import time

import pytest
from ros2_cli import argv

from rip_control import adapt as adapt_module
from rip_control.adapt import main, split_arguments
from rip_control.adapting.record import AGAIN, PHASES, SUMMARY, Adapt
from rip_control.procs import child_env

pytestmark = pytest.mark.alone

REPO = Path(__file__).resolve().parent.parent
ADAPT = (
    'python -m rip_control.adapt rig_params:=config/rig_shifted_stuck.yaml rig_minutes:=10 '
    'run_name:=stuck'
)
RESUME = (
    'python -m rip_control.adapt rig_params:=config/rig_shifted_stuck.yaml rig_minutes:=10 '
    'run_name:=stuck resume:=true'
)


NOMINAL = 'config/rig_qube_servo2.yaml'  # its resets are short: the test is


def _short(command: str, runs: Path) -> list[str]:
    """``command`` on the nominal rig, with arguments appended to keep it short.

    One short episode per deployment, the identification given, a short re-training, and a
    budget with room for one fine-tune episode (and the guard's evaluations): the reset after
    a fallen evaluation episode takes about 3 s (its brake), twice the deployments' own, from
    which adapt prices the fine-tune's, so 36 s (at 30 s one run in two fitted none).
    """
    return argv(command.replace('config/rig_shifted_stuck.yaml', NOMINAL)) + [
        'rig_minutes:=0.6',
        f'identification:={NOMINAL}',
        'retrain_minutes:=0.2',
        'retrain_steps:=600',
        'deployment_episodes:=1',
        'deployment_episode_seconds:=2',
        'episode_seconds:=2',
        f'runs_dir:={runs}',
        '--quiet',
    ]


def _files(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob('*'))
        if p.is_file()
    }


def _pull_the_cable_in_the_fine_tune(proc: subprocess.Popen, timeout_s: float) -> str:
    """Read the output until the fine-tune's rig is active; then kill the emulated rig.

    A cable pulled a second into the fine-tune's first episode: the rig time it ran counts.
    """
    assert proc.stdout is not None
    deadline, seen = time.monotonic() + timeout_s, []
    patterns = ['adapt: fine-tune: until', '/rip_control active']
    for line in proc.stdout:
        seen.append(line)
        if patterns[0] in line:
            patterns.pop(0)
            if not patterns:
                break
        assert time.monotonic() < deadline, ''.join(seen)
    else:
        pytest.fail(f'no {patterns[0]!r}:\n' + ''.join(seen))
    time.sleep(1.0)
    # adapt's emulated rig: the emulator serving the link named after adapt's process id
    link = f'rip_adapt_{proc.pid}'
    rigs = [pid for pid, cmd in _commands() if 'rip_control.rig.emulator' in cmd and link in cmd]
    assert len(rigs) == 1, rigs
    os.kill(rigs[0], signal.SIGKILL)
    return ''.join(seen)


def _commands() -> list[tuple[int, str]]:
    """Each process's id and command line."""
    out = []
    for proc in Path('/proc').glob('[0-9]*'):
        try:
            out.append((int(proc.name), (proc / 'cmdline').read_bytes().replace(b'\0', b' ')))
        except OSError:  # ended meanwhile
            continue
    return [(pid, cmd.decode(errors='replace')) for pid, cmd in out]


@pytest.mark.readme(RESUME)
def test_a_run_faulted_in_the_fine_tune_is_recorded_and_resumed_without_its_finished_phases(
    tmp_path,
) -> None:
    """The real command, the emulated rig, a real fault: the rig's process killed in phase 3.

    The faulted run exits 1 and its record names the phase and what the finished phases
    measured; ``resume:=true`` runs the fine-tune again (from the policy that went on, with
    the budget that is left) and the final deployment, and nothing of phases 0-2.
    """
    runs = tmp_path / 'runs'
    out = runs / 'stuck'
    started = time.monotonic()
    proc = subprocess.Popen(
        _short(ADAPT, runs),
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        text = _pull_the_cable_in_the_fine_tune(proc, 120)
        text += proc.communicate(timeout=90)[0]
    finally:
        proc.kill()
    assert proc.returncode == 1, text[-4000:]
    first = json.loads((out / SUMMARY).read_text())
    assert first['status'] == 'failed', first
    assert first['error']['phase'] == PHASES[3] and first['error']['after'] == PHASES[2]
    assert first['error']['error'] in text, text[-3000:]
    assert [(p['phase'], p['status']) for p in first['phases']] == [
        *((name, 'done') for name in PHASES[:3]),
        (PHASES[3], 'failed'),
    ]
    # What the finished phases measured: the deployments' episodes, the re-training, the
    # candidate's verdict.
    assert len(first['phases'][0]['episodes']) == 1 and first['candidate']['verdict']
    assert first['retrain']['steps'] > 0 and first['deployment']['prior_episodes_s']
    kept = {name: _files(out / name) for name in PHASES[:3]}
    fault_s = time.monotonic() - started

    proc2 = subprocess.run(
        _short(RESUME, runs),
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=150,
    )
    text2 = proc2.stdout + proc2.stderr
    assert proc2.returncode == 0, text2[-4000:]
    assert f'adapt: resuming {out} (failed in {PHASES[3]}' in text2, text2[-4000:]
    assert all(f"'stuck/{name}'" not in text2 for name in PHASES[:3]), text2[-4000:]
    s = json.loads((out / SUMMARY).read_text())
    assert s['status'] == 'done' and 'error' not in s, s
    assert [p['phase'] for p in s['phases']] == list(PHASES)
    assert s['phases'][:3] == first['phases'][:3]  # the first run's, rig seconds and all
    assert {name: _files(out / name) for name in PHASES[:3]} == kept
    # The faulted attempt set aside, its folder kept under another name, its rig time counted.
    (aside,) = s['set_aside']
    assert aside['phase'] == PHASES[3] and aside['status'] == 'failed', aside
    assert (out / aside['folder']).is_dir() and aside['folder'] == f'{PHASES[3]}.failed-1'
    assert 1.0 <= aside['rig_seconds'] < 10.0, aside
    spent = [p['rig_seconds'] for p in s['phases']] + [aside['rig_seconds']]
    assert s['rig_seconds'] == pytest.approx(sum(spent))
    # Phase 3 again from the policy that went on, then the final deployment of its best.
    went_on = 'candidate' if s['candidate']['verdict'] == 'promoted' else 'prior'
    assert s['finetune']['start'] == went_on and s['finetune']['episodes'] >= 1, s['finetune']
    assert s['phases'][3]['policy'] == s['phases'][2 if went_on == 'candidate' else 0]['policy']
    assert s['deployed_policy'] == s['phases'][4]['policy']
    assert len(s['deployment']['adapted_episodes_s']) == 1
    # The measures of each deployment, and what the fine-tune added over where it started
    # (one episode each: a mean, no interval).
    measured = s['deployment']['adapted_measures']['longest_balance_s']
    assert measured['mean'] == s['deployment']['adapted_balance_s'] and measured['n'] == 1
    assert set(s['deployment']['prior_measures']) >= {'balanced_after_swing_up', 'swing_up_s'}
    assert s['candidate']['measures']['longest_balance_s']['mean'] == s['candidate']['balance_s']
    start = (
        s['candidate']
        if went_on == 'candidate'
        else {'balance_s': s['deployment']['prior_balance_s']}
    )
    gain = s['finetune_gain_s']
    assert gain['mean'] == pytest.approx(s['deployment']['adapted_balance_s'] - start['balance_s'])
    assert s['options']['resume'] is True and first['options']['resume'] is False
    print(f'fault run {fault_s:.0f} s, resume {time.monotonic() - started - fault_s:.0f} s')


# ---- the refusals, and the record of a failure, without a rig ---------------------------


def _loop(tmp_path: Path, *typed: str) -> Adapt:
    own, runner = split_arguments(['run_name:=r', f'runs_dir:={tmp_path}', *typed])
    return Adapt(own, runner, stream=False)


def _record(tmp_path: Path, status: str, *typed: str) -> Path:
    """The record of a run whose baseline took 12.5 s of rig time, then failed or was done."""
    loop = _loop(tmp_path, *typed)
    with contextlib.suppress(RuntimeError), loop.recording():
        loop.begin(PHASES[0], on_rig=True)
        loop.finish(12.5, policy='p', episodes=[])
        if status == 'done':
            loop.save('done')
        else:
            raise RuntimeError('phase 1_sim_retrain failed')
    return loop.run_dir / SUMMARY


@pytest.mark.parametrize(
    ('status', 'typed', 'refused'),
    [
        (None, ['resume:=true'], r'no run .r. to continue'),
        ('done', ['resume:=true'], r'the run .r. is done'),
        ('failed', ['resume:=true', 'seed:=3'], r'seed:=3 \(recorded 0\)'),
        ('failed', ['resume:=true', 'rate:=100'], r'rate_hz:=100.0 \(recorded 50.0\)'),
        ('failed', ['resume:=true', 'rig_params:=config/rig_shifted_worn.yaml'], 'rig_params'),
        ('failed', ['resume:=true', 'policy:=other.safetensors'], 'policy:=other'),
        ('failed', [], r'records an earlier run \(failed\); continue it with resume:=true'),
    ],
)
def test_a_resume_is_refused_by_name_where_it_would_not_continue_that_run(
    tmp_path, capsys, status, typed, refused
) -> None:
    """Exit status 2 and the reason, before anything runs, the record left as it was."""
    import re

    if status is not None:
        path = _record(tmp_path, status)
        before = path.read_bytes()
    assert main([f'runs_dir:={tmp_path}', 'run_name:=r', *typed]) == 2
    assert re.search(refused, capsys.readouterr().err), refused
    if status is not None:
        assert path.read_bytes() == before


def test_a_resume_may_change_the_budget_and_the_port_and_counts_what_was_spent(tmp_path):
    """``rig_minutes`` and ``serial_port`` may differ; the rig time so far is counted."""
    _record(tmp_path, 'failed')
    loop = _loop(tmp_path, 'resume:=true', 'rig_minutes:=20', 'serial_port:=/dev/ttyACM1')
    loop.earlier = adapt_module.earlier_record(loop)
    (loop.run_dir / PHASES[1]).mkdir()  # an unfinished phase's folder: set aside
    with loop.recording():
        assert loop.replay(PHASES[0]) is not None and loop.replay(PHASES[1]) is None
    assert loop.rig_s == 12.5
    s = json.loads((loop.run_dir / SUMMARY).read_text())
    assert s['status'] == 'running'
    assert s['set_aside'] == [
        {
            'phase': PHASES[1],
            'status': 'unfinished',
            'rig_seconds': None,
            'folder': f'{PHASES[1]}.failed-1',
        }
    ]
    assert not (loop.run_dir / PHASES[1]).exists()


@pytest.mark.parametrize(
    ('exc', 'status'),
    [(RuntimeError('serial link lost'), 'failed'), (KeyboardInterrupt(), 'interrupted')],
)
def test_any_exit_after_the_phases_started_leaves_the_record_naming_the_phase(
    tmp_path, exc, status
) -> None:
    """The phase that ended so, its error, and what the finished phases measured."""
    loop = _loop(tmp_path)
    with pytest.raises(type(exc)), loop.recording():
        loop.begin(PHASES[0], on_rig=True)
        loop.finish(20.0, episodes=[{'ret': 1.0, 'longest_balance_s': 0.5}])
        loop.begin(AGAIN[0], on_rig=False)
        raise exc
    s = json.loads((loop.run_dir / SUMMARY).read_text())
    assert s['status'] == status
    assert s['error'] == {
        'phase': AGAIN[0],
        'after': PHASES[0],
        'status': status,
        'error': str(exc) or 'KeyboardInterrupt',
    }
    assert [(p['phase'], p['status']) for p in s['phases']] == [
        (PHASES[0], 'done'),
        (AGAIN[0], status),
    ]
    assert s['phases'][0]['episodes'] == [{'ret': 1.0, 'longest_balance_s': 0.5}]
    assert s['rig_seconds'] == 20.0
