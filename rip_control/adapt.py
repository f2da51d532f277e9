"""Adapt to the rig from its own data: real -> sim -> real, in one command.

``python -m rip_control.adapt rig_params:=config/rig_shifted_stuck.yaml rig_minutes:=10 \
run_name:=stuck``

It takes the fine-tune runner's ``name:=value`` arguments (:mod:`rip_control.finetune`) and
its own (``--help`` lists both); ``ros2 launch rip_control finetune.launch.py adapt:=true
...`` runs it with the same arguments. Each phase's folder is under ``runs/<run_name>/``:

1. ``0_baseline``, on the rig: the current policy's deployment (``deployment_episodes``
   deterministic episodes of ``deployment_episode_seconds`` from hanging), after the
   excitation episode (:mod:`rip_control.rig.excitation`). Every transition is kept.
2. Identification (:mod:`rip_learner.identify`) from those transitions alone:
   ``identified_rig.yaml`` and its plot in the run folder.
3. ``1_sim_retrain``, the rig disengaged and idle (its time not counted): pre-training in
   simulation at the identified physics (:mod:`rip_learner.pretrain`, ``rig_params`` the
   identified file, randomised as wide as the identification's uncertainty), warm-started
   from the current policy, for at most ``retrain_minutes``.
4. ``2_candidate``, on the rig: the re-trained policy deployed as in phase 1 and judged
   against the prior's deployment by the regression guard's own rule
   (:class:`rip_control.rt.guard.RegressionGuard`, the control node's ``eval_margin`` and
   ``eval_balance_margin``): it drives the rest of the loop only if promoted. Judged as
   re-trained, before any update on the rig can move it.
   With ``reidentify`` (the default) the physics is identified again from the baseline's
   and the candidate's transitions (``reidentified_rig.yaml``, no rig time). When a
   parameter moved by more than the identification counts as determined and the rig budget
   has room for another deployment that takes no fine-tune's place, phases
   ``2_sim_retrain_again`` and ``2_candidate_again`` re-train at the new file (warm from
   the first re-training) and judge that candidate against the policy that goes on, by the
   same rule.
5. ``3_finetune``, on the rig: SAC fine-tuning from the promoted policy (else the prior),
   its critics and the identified simulation's data (prior data) with it, the node's own
   guard on; its training episodes fill the rig-time budget that is left.
6. ``4_deployment``, on the rig: the guard's best policy deployed as in phase 1 (skipped
   when not one fine-tune episode fitted the budget: the policy that goes on was deployed
   in phase 1 or 4 already, and that deployment is the result).

On the emulated rig (no ``serial_port``) one emulator plays the rig for every phase. Only the
emulator's program reads ``rig_params``: its check of the file before anything starts
(``--check``) and the emulator itself, once, at its start, each a process of its own; nothing
but the rig's transitions reaches the identification. ``adapt_summary.json`` in the run
folder records ``rig_seconds`` (engaged or resetting: excitation, evaluations, training
episodes, resets), ``wall_seconds``, ``identified`` (name -> value and uncertainty),
``deployment`` (``prior_balance_s``, ``adapted_balance_s`` and their per-episode lists) and
each phase; ``adapt.png`` plots the balance against the rig time.

The summary is the run's record, rewritten (atomically) as each phase completes: ``status``
``running``, then ``done``, or ``failed``/``interrupted`` with ``error`` naming the phase that
ended so and why; each phase's entry in ``phases`` holds its ``status``, rig and wall seconds
and what later phases read of it. ``resume:=true`` continues a run that did not finish from its
record: the finished phases are read from it, not run again, the folder of the one that did not
finish is set aside (``3_finetune.failed-1``, listed in ``set_aside`` with its rig time) and the
loop goes on from there, its rig time so far counted towards ``rig_minutes``.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import math
import os
from pathlib import Path
import sys
import tempfile
from typing import Any

from rip_control import run_files
from rip_control.adapting import budget, judging, offline, rig_time
from rip_control.adapting.record import (
    AGAIN,
    PHASES,
    PLOT,
    REIDENTIFICATION,
    SUMMARY,
    Adapt,
    balances,
    earlier_record,
    finished_entry,
    mean_of,
)
from rip_control.files import atomic_write_bytes
from rip_control.params import Param, help_text, options_help, parse_args

OPTIONS = (
    Param('rig_minutes', 10.0, 'rig-time budget (engaged or resetting), minutes', 0.5, 1000.0),
    Param(
        'deployment_episodes',
        0,
        'deterministic episodes of each deployment (0: as many as the rig-time plan fits, 2 to 5)',
        0,
        100,
    ),
    Param('deployment_episode_seconds', 10.0, 'length of a deployment episode, s', 1.0, 600.0),
    Param(
        'retrain_minutes',
        12.0,
        'wall-clock budget of the re-training in simulation (the rig idle meanwhile), minutes',
        0.1,
        1000.0,
    ),
    Param('retrain_steps', 150_000, 'most simulated steps of the re-training', 1, 10_000_000),
    Param(
        'identify_minutes',
        0.0,
        'wall-clock limit of each identification (the rig idle meanwhile), minutes (0: '
        "rip_learner.identify's own time_limit_s)",
        0.0,
        1000.0,
    ),
    Param(
        'target_balance_s',
        8.0,
        "a deployment's mean balance that counts as a rescue: the summary's target_rig_seconds "
        'is the rig time at which a deployment or a guard evaluation first reached it',
        0.0,
        600.0,
    ),
    Param(
        'identification',
        '',
        "a rig YAML to re-train at instead of identifying one (e.g. an earlier run's "
        'identified_rig.yaml); empty: identify from the excitation and the deployment',
    ),
    Param(
        'reidentify',
        True,
        "identify again from the baseline's and the candidate's transitions; when the rig "
        "budget has room for a second candidate's deployment, re-train at it and judge that "
        'candidate too: from the prior with the next seed where what goes on falls short of '
        'target_balance_s (another draw), else warm from the first re-training where a '
        'parameter moved by more than the identification counts as determined (it replaces '
        'a promoted first candidate only if its balance is shown better: the 90 % interval '
        'of the difference above 0)',
    ),
    Param(
        'resume',
        False,
        "continue run_name's run that did not finish, from its adapt_summary.json: the finished "
        'phases are read from it, not run again (their rig time counts towards rig_minutes), '
        'the unfinished one runs again; refused when the run is done or the arguments differ '
        'from the recorded ones (all but rig_minutes and serial_port)',
    ),
)


LAUNCH_SWITCH = Param(
    'adapt',
    False,
    'run this loop (rip_control.adapt: identify, re-train in simulation, fine-tune) instead of '
    "one fine-tune; adapt's options are launch arguments then",
)
"""``finetune.launch.py``'s argument that runs the loop under ``ros2 launch``."""


RUNNER_DEFAULTS = {'run_name': 'adapt'}


def split_arguments(argv: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Adapt's own options (typed) and the runner's arguments (text), from ``name:=value``."""
    given = parse_args(argv)
    own_names = {p.name for p in OPTIONS}
    own = {p.name: p.default for p in OPTIONS}
    for name in list(given):
        if name in own_names:
            own[name] = next(p for p in OPTIONS if p.name == name).convert(given.pop(name))
    return own, {**RUNNER_DEFAULTS, **given}


def launch_argv(runner_given: dict[str, str], own_given: dict[str, str]) -> list[str]:
    """The ``adapt`` command's arguments from ``finetune.launch.py``'s values (``adapt:=true``).

    Every argument the user typed (a value other than the launch file's default), the
    runner's and adapt's own. A bad one is refused here, naming it, before any process starts.
    """
    from rip_control.run.launching import LAUNCH_ARGUMENT_BY_NAME, RunnerInput

    argv = [
        f'{name}:={value}'
        for name, value in runner_given.items()
        if value != LAUNCH_ARGUMENT_BY_NAME[name].default
    ]
    argv += [f'{name}:={value}' for name, value in own_given.items() if value != '']
    _, runner = split_arguments(argv)
    RunnerInput.parse(runner)  # every runner argument typed and range-checked, the file too
    return argv


def _versioned(src: Path, dst_dir: Path, version: int, rate_hz: float) -> Path:
    """The candidate's actor and critics copied to ``dst_dir`` under ``version``.

    ``VERSION_GAP`` above the prior's; its prior data (the identified simulation's) beside it,
    where the learner looks.
    """
    from safetensors.numpy import load, save

    from rip_control.policy import encode_actor, load_actor_file, read_metadata
    from rip_control.rig.env import ACTION_SIZE, obs_size

    k = int(read_metadata(src.read_bytes()).get('action_history', '0'))
    actor = load_actor_file(
        src, rate_hz=rate_hz, obs_size=obs_size(k), action_size=ACTION_SIZE, action_history=k
    )
    meta = actor.meta.__class__(**{**actor.meta.__dict__, 'version': version})
    extra = {
        k: v for k, v in read_metadata(src.read_bytes()).items() if k not in meta.to_metadata()
    }
    dst_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(dst_dir / run_files.POLICY, encode_actor(meta, actor.tensors, extra))
    ckpt = src.with_name(run_files.CHECKPOINT)
    data = ckpt.read_bytes()
    md = {**read_metadata(data), 'policy_version': str(version)}
    atomic_write_bytes(dst_dir / run_files.CHECKPOINT, save(load(data), metadata=md))
    prior = src.with_name(run_files.PRIOR_DATA)
    if prior.exists():
        atomic_write_bytes(dst_dir / run_files.PRIOR_DATA, prior.read_bytes())
    return dst_dir / run_files.POLICY


def adapt(own: dict[str, Any], runner: dict[str, str], stream: bool = True) -> dict[str, Any]:
    """Run the loop (see the module docstring); return the summary written beside it.

    :raises ValueError: a bad argument, or a run folder that holds a record this call may not
        start or continue (``resume``), before anything runs and nothing written.
    """
    from rip_control.finetune import run as finetune_run
    from rip_control.run.launching import resolve_auto_policy, shipped_policy

    a = Adapt(own, runner, stream)
    a.plan = budget.plan_for(a)  # a budget too small is refused here, before anything runs
    a.earlier = earlier_record(a)
    budget_s = 60.0 * own['rig_minutes']
    a.run_dir.mkdir(parents=True, exist_ok=True)
    prior = Path(runner['policy']) if runner.get('policy') else shipped_policy(a.rate)
    with emulated_rig(a), a.recording():
        return _loop(a, own, prior, budget_s, finetune_run, resolve_auto_policy)


@contextlib.contextmanager
def emulated_rig(a: Adapt) -> Iterator[None]:
    """One emulated rig for every phase (when no ``serial_port`` is given), as a physical rig.

    Its physics file is read by the emulator, once, and by nothing else: ``rig_params`` is
    taken out of the runner's arguments, which name the emulator's link instead.
    """
    from rip_control.rig.emulator_process import EmulatorProcess

    if a.runner.get('serial_port'):
        yield
        return
    link = Path(tempfile.gettempdir()) / f'rip_adapt_{os.getpid()}'
    emu_args = ['--events', '--stop-grace-ms', '500', '--seed', str(a.seed)]
    if a.runner.get('rig_params'):
        emu_args += ['--params', a.runner['rig_params']]
    emulator = EmulatorProcess(link, emu_args).start()
    try:
        a.runner = {k: v for k, v in a.runner.items() if k != 'rig_params'}
        a.runner['serial_port'] = str(link)
        a.log(f'emulated rig: {emulator.ready_line}')
        yield
    finally:
        emulator.stop()


def _loop(
    a: Adapt,
    own: dict[str, Any],
    prior: Path,
    budget_s: float,
    finetune_run: Any,
    resolve_auto_policy: Any,
) -> dict[str, Any]:
    a.own, a.budget_s = own, budget_s
    k_prior, k = _action_histories(a, prior)
    a.log(f'{a.run_dir}: policy {prior}, rig-time budget {budget_s:.0f} s')
    assert a.plan is not None
    for line in a.plan.lines():
        a.log(line)
    a.note('plan', a.plan.record())
    # 1. baseline deployment, after the excitation; room kept for the candidate's
    base = a.deploy(
        PHASES[0], prior, excitation=not own['identification'], reserve_s=a.plan.deployment_s
    )
    a.note('deployment', judging.deployment_record(own, a.plan.episodes, base, None))
    # 2. identification, from the transitions alone
    identified, opts = offline.identify_baseline(a)
    # 3. re-training in simulation, the rig idle
    randomization = 'identified' if not own['identification'] else 'standard'
    if own['identification'] and 'identification:' not in identified.read_text():
        randomization = 'standard'
    a.note('retrain', offline.retrain(a, PHASES[1], identified, prior, k, randomization))
    # 4. the candidate on the rig, judged by the guard's rule against the prior's deployment
    version, candidate, judged = _candidate(a, prior, k_prior, base)
    verdict = judging.judge(a, base, judged)
    judging.log_verdict(a, PHASES[2], verdict, 're-trained', 'prior')
    a.note('candidate', judging.candidate_record(version, verdict, judged))
    start, start_report = (candidate, judged) if verdict.kind == 'promoted' else (prior, base)
    # 4b. identification again, from every deployment so far; a second candidate if it moved
    again: dict[str, Any] = {
        'why': 'not run: '
        + ('identification:= given' if own['identification'] else 'reidentify:=false')
    }
    if own['reidentify'] and not own['identification']:
        again = _again(
            a,
            opts,
            identified,
            k,
            randomization,
            version + VERSION_GAP,
            budget_s,
            start_report,
            replaces_candidate=verdict.kind == 'promoted',
            prior=prior,
        )
        if again.get('verdict') == 'promoted':
            start, start_report = Path(again['policy']), again.pop('report')
        again.pop('report', None)
    a.note(REIDENTIFICATION, again)
    # 5. fine-tune on the rig from it, the guard on
    fine = budget.finetune_within_budget(a, budget_s, start, finetune_run)
    a.note(
        'finetune',
        {
            'start': {candidate: 'candidate', prior: 'prior'}.get(start, 'candidate_again'),
            'episodes': fine.get('episodes'),
            'evaluations': fine.get('evaluations', []),
            'live_policy_version': fine.get('live_policy_version'),
        },
    )
    if fine:
        # 6. the deployment of what the fine-tune's guard kept
        start_s = a.rig_s - float(a.phases[-1]['rig_seconds'])
        for p in rig_time.guard_points(a.run_dir / PHASES[3], start_s, a.rate):
            a.curve.append((p['rig_s'], p['balance_s'], p['what']))
        deployed = resolve_auto_policy(a.run_dir / PHASES[3], a.rate, True)
        final = a.deploy(PHASES[4], deployed, excitation=False)
    else:  # not one episode fitted: what goes on is deployed and measured already
        deployed, final = start, start_report
    a.results['deployed_policy'] = str(deployed)
    a.results['deployment'] = judging.deployment_record(own, a.plan.episodes, base, final)
    a.results['finetune_gain_s'] = judging.gain(final, start_report) if fine else None
    return _finish(a)


def _action_histories(a: Adapt, prior: Path) -> tuple[int, int]:
    """The prior's ``action_history`` and the re-trainings' (the user's, if typed)."""
    from rip_control.params import PRETRAIN_ACTION_HISTORY
    from rip_control.run.launching import recorded_action_history

    k_prior = recorded_action_history(str(prior), 0)
    if a.input.set_by_user('action_history'):
        return k_prior, int(a.control['action_history'])  # the user's, for every phase
    # new pre-trainings' default; a warm start cannot take inputs away
    return k_prior, max(k_prior, int(PRETRAIN_ACTION_HISTORY.default))


def _candidate(
    a: Adapt, prior: Path, k_prior: int, base: dict[str, Any]
) -> tuple[int, Path, dict[str, Any]]:
    """The re-trained policy, versioned ``VERSION_GAP`` over the prior, deployed on the rig.

    Its deployment ends early once the guard's rule certainly rejects it against ``base``.
    """
    from rip_control.policy import load_actor_file
    from rip_control.rig.env import ACTION_SIZE, obs_size

    live = load_actor_file(
        prior,
        rate_hz=a.rate,
        obs_size=obs_size(k_prior),
        action_size=ACTION_SIZE,
        action_history=k_prior,
    )
    version = live.version + VERSION_GAP
    candidate = _recorded_policy(a, PHASES[2]) or _versioned(
        a.run_dir / PHASES[1] / run_files.POLICY, a.run_dir / 'candidate', version, a.rate
    )
    stop = judging.certain_rejection(a, base)
    return version, candidate, a.deploy(PHASES[2], candidate, excitation=False, stop_when=stop)


def _recorded_policy(a: Adapt, name: str) -> Path | None:
    """Resuming: the policy deployment ``name`` deployed, if it finished (else ``None``)."""
    entry = finished_entry(a.earlier, name)
    return Path(entry['policy']) if entry else None


def _finish(a: Adapt) -> dict[str, Any]:
    """The record ``done``, its plot, and the closing line; the summary."""
    a.results['rig_time_split'] = rig_time.split(a.run_dir, a.phases, a.rate)
    curve = [{'rig_s': r, 'balance_s': b} for r, b, _ in a.curve]
    a.results['target_rig_seconds'] = rig_time.target_rig_seconds(
        curve, float(a.own['target_balance_s'])
    )
    summary = a.summary('done')
    _plot(a.run_dir / PLOT, summary)
    summary = a.save('done')
    d: dict[str, Any] = summary['deployment']
    ci = d['adapted_measures'].get('longest_balance_s', {})
    interval = (
        f', 90 % interval {ci["ci90_low"]:.2f}-{ci["ci90_high"]:.2f} s'
        if ci.get('ci90_low') is not None
        else ''
    )
    a.log(
        f'done: balance {d["prior_balance_s"]:.2f} s -> {d["adapted_balance_s"]:.2f} s '
        f'(mean of {d["episodes"]} x {d["episode_seconds"]:g} s from hanging{interval}) in '
        f'{a.rig_s:.0f} s of rig time, {summary["wall_seconds"]:.0f} s wall; '
        f'{a.run_dir / SUMMARY}'
    )
    parts = summary['rig_time_split']
    target, reached = float(a.own['target_balance_s']), summary['target_rig_seconds']
    a.log(
        'rig time: '
        + ', '.join(f'{k.removesuffix("_s")} {v:.0f} s' for k, v in parts.items())
        + f'; {target:g} s of balance first reached '
        + (f'at {reached:.0f} s of rig time' if reached is not None else 'in no deployment')
    )
    return summary


def _again(
    a: Adapt,
    opts: dict[str, Any],
    first: Path,
    k: int,
    randomization: str,
    version: int,
    budget_s: float,
    against: dict[str, Any],
    replaces_candidate: bool = False,
    prior: Path | None = None,
) -> dict[str, Any]:
    """Identify again from the baseline's and the candidate's transitions; maybe re-train.

    Where the rig budget has room for a second candidate's deployment
    (:func:`~rip_control.adapting.plan.second_candidate_fits`), a second candidate is
    re-trained and deployed, and judged against ``against`` (the deployment of the policy
    that goes on) by the guard's rule:

    - when ``against`` falls short of ``target_balance_s``: from ``prior`` with the next seed,
      at the physics identified again (another draw: on a rig outside the model a
      re-training's outcome is one; issue 41's independent rig H got a 0.72 s candidate from
      one run of a command and 8.60 s from the next);
    - else when a parameter moved (the identification's ``moved``): warm from the first
      re-training, at the moved physics.

    When what goes on is the first re-trained policy (``replaces_candidate``), the second
    must also be shown better (:func:`~rip_control.adapting.judging.shown_better`): two
    re-trainings at nearly the same physics differ by the draw, and within the guard's
    margins the second would replace a measured 9.31 s with 8.85 s (the sticky gap rig, seed
    1). Returns what happened (and, when deployed, ``report``). The decision is recorded as
    soon as made; resuming, it is read from the record.
    """
    done = dict(a.earlier.get(REIDENTIFICATION) or {}) or offline.identify_again(
        a, opts, first, budget_s
    )
    if done.get('identified') is None:  # not run: the budget had no room
        return done
    balance, target = mean_of(balances(against)), float(a.own['target_balance_s'])
    if prior is not None and balance < target:  # another draw
        init, seed, start = prior, a.seed + 1, 'the prior'
        done['why'] += (
            f'; what goes on balanced {balance:.2f} s, short of the {target:g} s target: '
            f'another draw, re-trained from the prior with seed {seed}'
        )
        a.log(f'identification again: {done["why"]}')
    elif done.get('moved'):
        init, seed = a.run_dir / PHASES[1] / run_files.POLICY, a.seed
        start = 'the first re-trained policy'
    else:
        return done
    done.update(retrain_from=str(init), retrain_seed=seed)
    rig = a.run_dir / run_files.REIDENTIFIED_RIG  # (moved or not: from more data)
    done['retrain'] = offline.retrain(a, AGAIN[0], rig, init, k, randomization, seed=seed)
    best = (done['retrain'] or {}).get('best') or {}
    if best.get('step', math.inf) <= 1:  # its start is its best
        done['why'] += (
            f'; the re-training found nothing better than its start ({start}) in '
            'simulation: no second candidate to deploy'
        )
        a.log(f'identification again: {done["why"]}')
        return done
    policy = _recorded_policy(a, AGAIN[1]) or _versioned(
        a.run_dir / AGAIN[0] / run_files.POLICY, a.run_dir / 'candidate_again', version, a.rate
    )
    stop = judging.certain_rejection(a, against)
    report = a.deploy(AGAIN[1], policy, excitation=False, stop_when=stop)
    verdict = judging.judge(a, against, report)
    if verdict.kind == 'promoted' and replaces_candidate:
        verdict = judging.shown_better(verdict, report, against)
    judging.log_verdict(a, AGAIN[1], verdict, 'second re-trained', 'same')
    done.update(policy=str(policy), verdict=verdict.kind)
    done['candidate'] = judging.candidate_record(version, verdict, report)
    return {**done, 'report': report}


VERSION_GAP = 1000
"""The re-trained policy's version over the prior's: above any version a fine-tune from the
prior publishes, so ``timing.csv`` and the guard's evaluations tell which one a policy came
from."""


def _plot(path: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    pts = summary['curve']
    ax.plot([p['rig_s'] / 60 for p in pts], [p['balance_s'] for p in pts], 'o-')
    for p in pts:
        ax.annotate(p['what'][2:], (p['rig_s'] / 60, p['balance_s']), fontsize=8)
    ax.set(
        xlabel='rig time (min)',
        ylabel='deployment balance, mean (s)',
        title=f'adapt: {summary["deployment"]["prior_balance_s"]:.2f} s -> '
        f'{summary["deployment"]["adapted_balance_s"]:.2f} s',
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Command line: adapt's options and the runner's ``name:=value`` arguments.

    Exit status 0 done, 1 a phase failed, 2 a bad argument or a refused resume, 130
    interrupted; once the phases started, the record says which phase ended how.
    """
    from rip_control.signals import StopSignals

    stop = StopSignals().install()
    try:
        with stop.interruptible():
            from rip_control.run.launching import arguments_help

            argv = list(sys.argv[1:] if argv is None else argv)
            if any(x in ('-h', '--help') for x in argv):
                print(help_text(__doc__))
                print('adapt options (name:=value):\n' + options_help(OPTIONS))
                print(arguments_help(defaults=RUNNER_DEFAULTS))
                return 0
            quiet = '--quiet' in argv
            argv = [x for x in argv if x != '--quiet']
            try:
                own, runner = split_arguments(argv)
                adapt(own, runner, stream=not quiet)
            except ValueError as exc:
                print(f'adapt: {exc}', file=sys.stderr)
                return 2
            except RuntimeError as exc:
                print(f'adapt failed: {exc}', file=sys.stderr)
                return 1
            return 0
    except KeyboardInterrupt:
        print('adapt: interrupted', file=sys.stderr, flush=True)
        return 130


if __name__ == '__main__':
    sys.exit(main())
