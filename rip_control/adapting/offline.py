"""The steps with the rig idle: identification and re-training, run as the learner's programs."""

from __future__ import annotations

import json
from pathlib import Path
import sys
from typing import Any

from rip_control import run_files
from rip_control.adapting.budget import finetune_fits
from rip_control.adapting.plan import second_candidate_fits
from rip_control.adapting.record import IDENTIFICATION, PHASES, REIDENTIFICATION, Adapt
from rip_control.files import atomic_write_bytes


def identify(opts: dict[str, Any], log: Any = print) -> dict[str, Any]:
    """``python -m rip_learner.identify`` with ``opts``; its record (the rig file's).

    The rig file's ``identification:``: each fitted value (``fitted``), what moved from the
    prior (``moved``), the residuals and the term selection.
    """
    import yaml

    run_program('identify', opts, log)
    doc = yaml.safe_load(Path(opts['out']).read_text())
    return dict(doc.get('identification') or {})


def reidentify(
    run_dir: Path, opts: dict[str, Any], first: Path, log: Any = print
) -> tuple[dict[str, Any], Path]:
    """The second identification: from the baseline's and the candidate's transitions.

    ``opts`` are the first identification's; its result ``first`` is the prior (the start,
    and the value kept for what the data does not determine). Writes
    ``reidentified_rig.yaml`` in ``run_dir``; returns its record (:func:`identify`: what
    ``moved`` from the first) and that path.
    """
    out = run_dir / run_files.REIDENTIFIED_RIG
    buffers = [
        run_dir / name / run_files.EVALUATION_TRANSITIONS for name in (PHASES[0], PHASES[2])
    ]
    again = {**opts, 'buffer': ','.join(map(str, buffers)), 'prior': str(first), 'out': str(out)}
    return identify(again, log), out


def identify_baseline(a: Adapt) -> tuple[Path, dict[str, Any]]:
    """The identification (or the given file): the rig file and the identification's options.

    ``python -m rip_learner.identify`` on the baseline's transitions (:func:`run_program`).
    Recorded as the summary's ``identification`` (the rig file's ``identification:``; ``{}``
    when given) and ``identified``; resuming, read from the record when it finished.
    """
    identified = a.run_dir / run_files.IDENTIFIED_RIG
    opts: dict[str, Any] = {}
    if not a.own['identification']:
        opts = {
            'buffer': str(a.run_dir / PHASES[0] / run_files.EVALUATION_TRANSITIONS),
            'out': str(identified),
            'rate_hz': a.rate,
            'seed': a.seed,
            'max_action_v': float(a.control['max_action_v']),
        }
        if a.own['identify_minutes'] > 0:
            opts['time_limit_s'] = 60.0 * a.own['identify_minutes']
    if IDENTIFICATION in a.earlier:
        a.results.update(identified=a.earlier['identified'])
        a.note(IDENTIFICATION, a.earlier[IDENTIFICATION])
        a.log(f'{IDENTIFICATION}: as recorded ({identified})')
        return identified, opts
    a.begin(IDENTIFICATION, on_rig=False)
    ident_summary: dict[str, Any] = {}
    if a.own['identification']:
        atomic_write_bytes(identified, Path(a.own['identification']).read_bytes())
        a.log(f'identification: given, {a.own["identification"]}')
    else:
        ident_summary = identify(opts, a.log)
    a.step = None
    a.results['identified'] = {
        name: {'value': v['value'], 'std': v['std'], 'determined': v['determined']}
        for name, v in ident_summary.get('fitted', {}).items()
    }
    a.note(IDENTIFICATION, ident_summary)
    return identified, opts


def retrain(
    a: Adapt,
    name: str,
    rig_file: Path,
    init: Path,
    k: int,
    randomization: str,
    seed: int | None = None,
) -> dict[str, Any]:
    """Pre-train in simulation at ``rig_file``, warm from ``init``, the rig idle (no rig time).

    Its result, also in its entry of the record (``retrain``); resuming, read from there.

    :param seed: of the training (default: the run's).
    """
    done = a.replay(name)
    if done is not None:
        return dict(done['retrain'])
    a.begin(name, on_rig=False)
    out = a.run_dir / name
    popts = {
        'rate': a.rate,
        'out': str(out),
        'rig_params': str(rig_file),
        'init': str(init),
        'randomization': randomization,
        'steps': a.own['retrain_steps'],
        'time_limit_s': 60.0 * a.own['retrain_minutes'],
        'target_balance_s': a.own['target_balance_s'],  # a re-training stops where rescued
        'seed': a.seed if seed is None else seed,
        'action_history': k,
        # warm: no curriculum from scratch, a short random start, and a stop at the first
        # evaluation after the start's that reaches the target (the stuck rig's re-training
        # met it at 15000 steps and had lost it by the 30000 a run from scratch waits for)
        'balance_steps': 0,
        'ramp_steps': 0,
        'random_steps': 1000,
        'min_steps': 2,
    }
    run_program('pretrain', popts, a.log, prefix='retrain: ')
    result = json.loads((out / run_files.PRETRAIN_RECORD).read_text())
    kept = {k: result[k] for k in ('steps', 'wall_s', 'stopped_by', 'best')}
    return dict(a.finish(0.0, retrain=kept)['retrain'])


def identify_again(a: Adapt, opts: dict[str, Any], first: Path, budget_s: float) -> dict[str, Any]:
    """The second identification, if the budget has room for a second candidate; recorded."""
    done: dict[str, Any] = {'identified': None, 'moved': None, 'retrain': None, 'candidate': None}
    left, deployment_s = budget_s - a.rig_s, a.full_deployment_s()
    now, after = finetune_fits(a, budget_s), finetune_fits(a, budget_s - deployment_s)
    if not second_candidate_fits(left, deployment_s, now, after):
        done['why'] = f'not run: {max(left, 0):.0f} s of rig time are left, and ' + (
            f'a second candidate would need {deployment_s:.0f} s'
            if left < deployment_s
            else f"a second candidate's {deployment_s:.0f} s would leave no room for the "
            'fine-tune that fits them'
        )
        a.log(f'identification again: {done["why"]}')
        a.note(REIDENTIFICATION, done)
        return done
    a.begin(REIDENTIFICATION, on_rig=False)
    found, out = reidentify(a.run_dir, opts, first, log=a.log)
    done['identified'] = found['fitted']
    done.update(seconds_of_data=found['seconds_of_data'], wall_s=found['wall_s'])
    done['moved'] = shifted = found['moved']
    if shifted:
        done['why'] = f'{", ".join(shifted)} moved: re-trained at {out.name}'
    else:
        done['why'] = 'no parameter moved by more than it counts as determined'
    a.log(f'identification again: {done["why"]}')
    a.step = None
    a.note(REIDENTIFICATION, dict(done))
    return done


def run_program(executable: str, options: dict[str, Any], log: Any, prefix: str = '') -> None:
    """Run one of the learner's programs to its end (``python -m``), its lines in the log.

    Identification and re-training run as the programs a user runs by hand, each a process
    of its own, as the runner starts the learner node: nothing of ``rip_learner`` is imported
    here. A stop signal here stops it too (SIGINT: its own clean exit) before it goes on.

    :param executable: a key of :data:`rip_control.run.launching.EXECUTABLES`.
    :param options: its ``name:=value`` options (what is not given: its defaults).
    :raises RuntimeError: it ended with another status than 0, naming its last lines.
    """
    import subprocess
    import threading

    from rip_control.procs import child_env, die_with_parent, signals_blocked, stop_process
    from rip_control.run.launching import EXECUTABLES

    def text(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    cmd = [sys.executable, '-m', EXECUTABLES[executable]]
    cmd += [f'{name}:={text(value)}' for name, value in options.items()]
    with signals_blocked():
        proc = subprocess.Popen(
            cmd,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only, no locks taken
        )
    tail: list[str] = []

    def pump() -> None:  # reads and reaps; signals never raise in this thread
        assert proc.stdout is not None
        for line in proc.stdout:
            tail[:] = (tail + [line.rstrip()])[-5:]
            log(prefix + line.rstrip())
        proc.wait()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        while reader.is_alive():
            reader.join(0.5)
    except BaseException:
        stop_process(proc)
        reader.join(2.0)
        raise
    if proc.returncode != 0:
        raise RuntimeError(
            f'{EXECUTABLES[executable]} exited with status {proc.returncode}: '
            + ' | '.join(tail[-3:])
        )
