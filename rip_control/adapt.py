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
   (:class:`rip_control.rt.gate.PolicyGate`, the control node's ``eval_margin`` and
   ``eval_balance_margin``): it drives the rest of the loop only if promoted. Judged as
   re-trained, before any update on the rig can move it.
   With ``reidentify`` (the default) the physics is identified again from the baseline's
   and the candidate's transitions (``reidentified_rig.yaml``, no rig time). When a
   parameter moved by more than the identification counts as determined and the rig budget
   has room for another deployment, phases ``2_sim_retrain_again`` and ``2_candidate_again``
   re-train at the new file (warm from the first re-training) and judge that candidate
   against the policy that goes on, by the same rule.
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
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import json
import math
import os
from pathlib import Path
import sys
import tempfile
import time
from typing import Any

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.params import Param, options_help, parse_args, table_by_name

OPTIONS = (
    Param('rig_minutes', 10.0, 'rig-time budget (engaged or resetting), minutes', 0.5, 1000.0),
    Param('deployment_episodes', 5, 'deterministic episodes of each deployment', 1, 100),
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
        'identification',
        '',
        "a rig YAML to re-train at instead of identifying one (e.g. an earlier run's "
        'identified_rig.yaml); empty: identify from the excitation and the deployment',
    ),
    Param(
        'reidentify',
        True,
        "identify again from the baseline's and the candidate's transitions; when a parameter "
        'moved by more than the identification counts as determined and the rig budget has '
        "room for a second candidate's deployment, re-train at it and judge that candidate too",
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
OWN_BY_THE_LOOP = ('rig_seconds', 'episodes')
"""Runner arguments adapt sets itself, phase by phase: refused when typed."""
PHASES = ('0_baseline', '1_sim_retrain', '2_candidate', '3_finetune', '4_deployment')
AGAIN = ('2_sim_retrain_again', '2_candidate_again')
"""The phases of the second re-training and its candidate (``reidentify``)."""
SUMMARY = 'adapt_summary.json'
PLOT = 'adapt.png'


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
    from rip_control.run.launching import LAUNCH_ARGUMENT_BY_NAME, node_parameters

    argv = [
        f'{name}:={value}'
        for name, value in runner_given.items()
        if value != LAUNCH_ARGUMENT_BY_NAME[name].default
    ]
    argv += [f'{name}:={value}' for name, value in own_given.items() if value != '']
    _, runner = split_arguments(argv)
    node_parameters(runner)  # every runner argument typed and range-checked, the file too
    return argv


def _rig_seconds(run: dict[str, Any], rate_hz: float) -> float:
    """The rig time of one runner phase: every tick the control loop ran (resets included).

    Over every activation: a timing violation or a serial stall re-activates the rig, and the
    tick trace is the last activation's.
    """
    ticks = run.get('ticks') or {}
    if ticks.get('n_ticks') is None:
        return math.nan
    return float(ticks['n_ticks'] + 1 + ticks.get('n_ticks_earlier_activations', 0)) / rate_hz


def balances(report: dict[str, Any]) -> list[float]:
    """Each episode's longest balance, s, of an evaluation report."""
    return [float(e['longest_balance_s']) for e in report['episodes']]


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


class Adapt:
    """The loop's state: what each phase measured, and the rig time so far."""

    def __init__(self, own: dict[str, Any], runner: dict[str, str], stream: bool) -> None:
        from rip_control.run.launching import CONTROL, launch_values, node_parameters

        self.own, self.runner, self.stream = own, runner, stream
        for name in OWN_BY_THE_LOOP:
            if name in runner:
                raise ValueError(
                    f'{name}:={runner[name]}: adapt sets it for each phase (the budget is '
                    'rig_minutes:=, the deployments deployment_episodes:=)'
                )
        launch_values(runner)  # refuses an unknown argument or a bad value, by name
        self.control = node_parameters(runner)[CONTROL]  # typed, the params file included
        self.rate = float(self.control['rate_hz'])
        self.name = str(self.control['run_name'])
        self.run_dir = Path(str(self.control['runs_dir'])) / self.name
        self.seed = int(self.control['seed'])
        self.t0 = time.monotonic()
        self.rig_s = 0.0
        self.phases: list[dict[str, Any]] = []
        self.curve: list[tuple[float, float, str]] = []  # (rig s, balance s, what)

    def log(self, line: str) -> None:
        """One progress line."""
        print(f'adapt: {line}', flush=True)

    def phase(self, name: str, args: dict[str, str], job: Any) -> dict[str, Any]:
        """Run one runner phase in ``runs/<run_name>/<name>``; count its rig time."""
        t0 = time.monotonic()
        run = job({**self.runner, **args, 'run_name': f'{self.name}/{name}'})
        if run.get('failure') or run.get('interrupted'):
            raise RuntimeError(
                f'phase {name} '
                + ('was interrupted' if run.get('interrupted') else 'failed')
                + (f': {run.get("failure")}' if run.get('failure') else '')
            )
        rig_s = _rig_seconds(run.get('run', run), self.rate)
        self.rig_s += rig_s
        self.phases.append(
            {'phase': name, 'rig_seconds': rig_s, 'wall_seconds': time.monotonic() - t0}
        )
        self.log(f'{name}: {rig_s:.0f} s of rig time (total {self.rig_s:.0f} s)')
        return run

    def deploy(self, name: str, policy: Path, excitation: bool) -> dict[str, Any]:
        """A deployment phase (after the excitation, if asked); its evaluation report."""
        from rip_control.evaluate import evaluate

        args = {
            'policy': str(policy),
            'episodes': str(self.own['deployment_episodes']),
            'episode_seconds': str(self.own['deployment_episode_seconds']),
        }
        if excitation:
            args['excitation_episodes'] = '1'
        report = self.phase(name, args, lambda a: _with_run(evaluate(a, stream_logs=self.stream)))
        each = balances(report)
        mean = _mean(each)
        self.curve.append((self.rig_s, mean, name))
        self.log(f'{name}: balance {mean:.2f} s mean over {len(each)} episodes')
        return report


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _judge(a: Adapt, prior: dict[str, Any], candidate: dict[str, Any]) -> Any:
    """The regression guard's verdict on the candidate's deployment against the prior's.

    The guard's own rule and margins (the control node's ``eval_margin`` and
    ``eval_balance_margin``), fed each deployment's mean return and mean longest balance
    instead of one evaluation episode's.
    """
    from rip_control.rt.gate import PolicyGate

    gate: PolicyGate[Any] = PolicyGate(
        every=1,
        margin=float(a.control['eval_margin']),
        balance_margin=float(a.control['eval_balance_margin']),
    )

    def scores(report: dict[str, Any]) -> tuple[float, float]:
        return _mean([float(e['ret']) for e in report['episodes']]), _mean(balances(report))

    before, after = _Version(0), _Version(1)
    gate.start(before)
    gate.next_episode(before)  # the baseline: the prior
    gate.judge(*scores(prior))
    gate.finish_training()
    is_evaluation, judged = gate.next_episode(after)
    assert is_evaluation and judged is after
    return gate.judge(*scores(candidate))


class _Version:
    """What the gate needs of an actor: a version."""

    def __init__(self, version: int) -> None:
        self.version = version


def _with_run(report: dict[str, Any]) -> dict[str, Any]:
    """An evaluation report with what :meth:`Adapt.phase` reads where it reads it."""
    return {**report, 'run': {'ticks': report.get('ticks')}}


def adapt(own: dict[str, Any], runner: dict[str, str], stream: bool = True) -> dict[str, Any]:
    """Run the loop (see the module docstring); return the summary written beside it."""
    from rip_control.finetune import run as finetune_run
    from rip_control.run.launching import resolve_auto_policy, shipped_policy

    a = Adapt(own, runner, stream)
    budget_s = 60.0 * own['rig_minutes']
    a.run_dir.mkdir(parents=True, exist_ok=True)
    prior = Path(runner['policy']) if runner.get('policy') else shipped_policy(a.rate)
    with emulated_rig(a):
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
    from rip_control.policy import load_actor_file
    from rip_control.rig.env import ACTION_SIZE, obs_size
    from rip_control.run.launching import launch_values, recorded_action_history, set_by_user
    from rip_learner import identify, pretrain

    k_prior = recorded_action_history(str(prior), 0)
    if set_by_user(a.runner, launch_values(a.runner), 'action_history'):
        k = int(a.control['action_history'])  # the user's, for every phase
    else:  # new pre-trainings' default; a warm start cannot take inputs away
        k = max(k_prior, int(table_by_name(pretrain.OPTIONS)['action_history'].default))

    a.log(f'{a.run_dir}: policy {prior}, rig-time budget {budget_s:.0f} s')
    # 1. baseline deployment, after the excitation
    base = a.deploy(PHASES[0], prior, excitation=not own['identification'])
    prior_balances = balances(base)
    # 2. identification, from the transitions alone
    identified = a.run_dir / run_files.IDENTIFIED_RIG
    ident_summary: dict[str, Any] = {}
    opts: dict[str, Any] = {}
    if own['identification']:
        atomic_write_bytes(identified, Path(own['identification']).read_bytes())
        a.log(f'identification: given, {own["identification"]}')
    else:
        data = a.run_dir / PHASES[0] / run_files.EVALUATION_TRANSITIONS
        opts = {
            **{p.name: p.default for p in identify.OPTIONS},
            'buffer': str(data),
            'out': str(identified),
            'rate_hz': a.rate,
            'seed': a.seed,
        }
        opts['max_action_v'] = float(a.control['max_action_v'])
        result, _ = identify.run(opts, log=lambda line: a.log(line))
        ident_summary = result.summary()
    # 3. re-training in simulation, the rig idle
    randomization = 'identified' if not own['identification'] else 'standard'
    if own['identification'] and 'identification:' not in identified.read_text():
        randomization = 'standard'
    retrain = _retrain(a, PHASES[1], identified, prior, k, randomization)
    # 4. the candidate on the rig, judged by the guard's rule against the prior's deployment
    live = load_actor_file(
        prior,
        rate_hz=a.rate,
        obs_size=obs_size(k_prior),
        action_size=ACTION_SIZE,
        action_history=k_prior,
    )
    version = live.version + VERSION_GAP
    candidate = _versioned(
        a.run_dir / PHASES[1] / run_files.POLICY, a.run_dir / 'candidate', version, a.rate
    )
    judged = a.deploy(PHASES[2], candidate, excitation=False)
    verdict = _judge(a, base, judged)
    _log_verdict(a, PHASES[2], verdict, 're-trained', 'prior')
    start, start_report = (candidate, judged) if verdict.kind == 'promoted' else (prior, base)
    # 4b. identification again, from every deployment so far; a second candidate if it moved
    again: dict[str, Any] = {
        'why': 'not run: '
        + ('identification:= given' if own['identification'] else 'reidentify:=false')
    }
    if own['reidentify'] and not own['identification']:
        again = _again(
            a, opts, identified, k, randomization, version + VERSION_GAP, budget_s, start_report
        )
        if again.get('verdict') == 'promoted':
            start, start_report = Path(again['policy']), again.pop('report')
        again.pop('report', None)
    # 5. fine-tune on the rig from it, the guard on
    fine = finetune_within_budget(a, budget_s, start, finetune_run)
    if fine:
        # 6. the deployment of what the fine-tune's guard kept
        deployed = resolve_auto_policy(a.run_dir / PHASES[3], a.rate, True)
        final = a.deploy(PHASES[4], deployed, excitation=False)
    else:  # not one episode fitted: what goes on is deployed and measured already
        deployed, final = start, start_report
    adapted = balances(final)
    summary = {
        'command': 'python -m rip_control.adapt',
        'options': own,
        'arguments': a.runner,
        'rig_params': "(the emulator's)" if not a.runner.get('rig_params') else '',
        'rate_hz': a.rate,
        'seed': a.seed,
        'rig_seconds': a.rig_s,
        'rig_budget_s': budget_s,
        'wall_seconds': time.monotonic() - a.t0,
        'identified': {
            name: {'value': v['value'], 'std': v['std'], 'determined': v['determined']}
            for name, v in ident_summary.get('identified', {}).items()
        },
        'identification': ident_summary,
        'retrain': {
            'steps': retrain['steps'],
            'wall_s': retrain['wall_s'],
            'stopped_by': retrain['stopped_by'],
            'best': retrain['best'],
        },
        'candidate': {
            'policy_version': version,
            'verdict': verdict.kind,
            'reason': verdict.reason,
            'balance_s': _mean(balances(judged)),
            'episodes_s': balances(judged),
        },
        'reidentification': again,
        'finetune': {
            'start': {candidate: 'candidate', prior: 'prior'}.get(start, 'candidate_again'),
            'episodes': fine.get('episodes'),
            'evaluations': fine.get('evaluations', []),
            'live_policy_version': fine.get('live_policy_version'),
        },
        'deployed_policy': str(deployed),
        'deployment': {
            'episodes': own['deployment_episodes'],
            'episode_seconds': own['deployment_episode_seconds'],
            'prior_balance_s': _mean(prior_balances),
            'adapted_balance_s': _mean(adapted),
            'prior_episodes_s': prior_balances,
            'adapted_episodes_s': adapted,
        },
        'phases': a.phases,
        'curve': [{'rig_s': r, 'balance_s': b, 'what': w} for r, b, w in a.curve],
    }
    atomic_write_bytes(a.run_dir / SUMMARY, (json.dumps(summary, indent=1) + '\n').encode())
    _plot(a.run_dir / PLOT, summary)
    d: dict[str, Any] = summary['deployment']  # type: ignore[assignment]
    a.log(
        f'done: balance {d["prior_balance_s"]:.2f} s -> {d["adapted_balance_s"]:.2f} s '
        f'(mean of {d["episodes"]} x {d["episode_seconds"]:g} s from hanging) in '
        f'{a.rig_s:.0f} s of rig time, {summary["wall_seconds"]:.0f} s wall; '
        f'{a.run_dir / SUMMARY}'
    )
    return summary


def _retrain(
    a: Adapt, name: str, rig_file: Path, init: Path, k: int, randomization: str
) -> dict[str, Any]:
    """Pre-train in simulation at ``rig_file``, warm from ``init``, the rig idle (no rig time)."""
    from rip_learner import pretrain

    t0 = time.monotonic()
    popts = {
        **{p.name: p.default for p in pretrain.OPTIONS},
        'rate': a.rate,
        'out': str(a.run_dir / name),
        'rig_params': str(rig_file),
        'init': str(init),
        'randomization': randomization,
        'steps': a.own['retrain_steps'],
        'time_limit_s': 60.0 * a.own['retrain_minutes'],
        'seed': a.seed,
        'action_history': k,
        # warm: no curriculum from scratch, a short random start
        'balance_steps': 0,
        'ramp_steps': 0,
        'learning_starts': 1000,
    }
    result = pretrain.pretrain(popts, log=lambda line: a.log(f'retrain: {line}'))
    a.phases.append({'phase': name, 'rig_seconds': 0.0, 'wall_seconds': time.monotonic() - t0})
    return {
        'steps': result['steps'],
        'wall_s': result['wall_s'],
        'stopped_by': result['stopped_by'],
        'best': result['best'],
    }


def _log_verdict(a: Adapt, name: str, verdict: Any, promoted: str, otherwise: str) -> None:
    went_on = promoted if verdict.kind == 'promoted' else otherwise
    a.log(
        f'{name}: {verdict.kind}'
        + (f' ({verdict.reason})' if verdict.reason else '')
        + f': the loop goes on from the {went_on} policy'
    )


def moved(estimates: list[Any]) -> dict[str, dict[str, float]]:
    """The parameters a second identification moved from its prior (the first's values).

    Those determined and moved by more than the identification counts as determined
    (:meth:`rip_learner.identify.Fitted.tolerance`): name -> ``from``, ``to``, ``tolerance``.
    """
    from rip_learner.identify import FITTED

    by_name = {f.name: f for f in FITTED}
    out = {}
    for e in estimates:
        tolerance = by_name[e.name].tolerance(e.prior)
        if e.determined and abs(e.value - e.prior) > tolerance:
            out[e.name] = {'from': e.prior, 'to': e.value, 'tolerance': tolerance}
    return out


def reidentify(
    run_dir: Path, opts: dict[str, Any], first: Path, log: Any = print
) -> tuple[Any, Path]:
    """The second identification: from the baseline's and the candidate's transitions.

    ``opts`` are the first identification's; its result ``first`` is the prior (the start,
    and the value kept for what the data does not determine). Writes
    ``reidentified_rig.yaml`` in ``run_dir``; returns the result and that path.
    """
    from rip_learner import buffer_store, identify

    rate = float(opts['rate_hz'])
    records: list[Any] = []
    parts = []
    for name in (PHASES[0], PHASES[2]):
        path = run_dir / name / run_files.EVALUATION_TRANSITIONS
        arrays, meta = buffer_store.load(path, rate_hz=rate, obs_size=None, action_size=None)
        # Each phase numbers its episodes from 0: the later phase's are the newer ones.
        offset = 1 + max((r.episode for r in records), default=-1)
        arrays = {**arrays, 'episodes': arrays['episodes'] + offset}
        records += identify.records_from_arrays(arrays, 1.0 / rate, float(opts['max_action_v']))
        parts.append(f'{path} ({meta.count} transitions)')
    out = run_dir / run_files.REIDENTIFIED_RIG
    return identify.run_records(
        records,
        'replay buffers ' + ' and '.join(parts),
        {**opts, 'prior': str(first), 'out': str(out), 'buffer': '', 'run': ''},
        log=log,
    )


def _again(
    a: Adapt,
    opts: dict[str, Any],
    first: Path,
    k: int,
    randomization: str,
    version: int,
    budget_s: float,
    against: dict[str, Any],
) -> dict[str, Any]:
    """Identify again from the baseline's and the candidate's transitions; maybe re-train.

    A second candidate is re-trained (warm from the first re-training) and deployed only when
    a parameter :func:`moved` and the rig budget has room for its deployment besides the final
    one's reserve, and judged against ``against`` (the deployment of the policy that goes on)
    by the guard's rule. Returns what happened (and, when deployed, ``report``).
    """
    done: dict[str, Any] = {'identified': None, 'moved': None, 'retrain': None, 'candidate': None}
    needed = (1.0 + RESERVE_FACTOR) * a.phases[-1]['rig_seconds']
    if budget_s - a.rig_s < needed:
        done['why'] = (
            f'not run: {max(budget_s - a.rig_s, 0):.0f} s of rig time are left, and a second '
            f'candidate would need {needed:.0f} s with the final deployment'
        )
        a.log(f'identification again: {done["why"]}')
        return done
    result, out = reidentify(a.run_dir, opts, first, log=a.log)
    found = result.summary()
    done['identified'] = found['identified']
    done.update(seconds_of_data=found['seconds_of_data'], wall_s=found['wall_s'])
    done['moved'] = shifted = moved(result.estimates)
    if shifted:
        done['why'] = f'{", ".join(shifted)} moved: re-trained at {out.name}'
    else:
        done['why'] = 'no parameter moved by more than it counts as determined'
    a.log(f'identification again: {done["why"]}')
    if shifted:
        init = a.run_dir / PHASES[1] / run_files.POLICY
        done['retrain'] = _retrain(a, AGAIN[0], out, init, k, randomization)
        policy = _versioned(
            a.run_dir / AGAIN[0] / run_files.POLICY,
            a.run_dir / 'candidate_again',
            version,
            a.rate,
        )
        report = a.deploy(AGAIN[1], policy, excitation=False)
        done['report'] = report
        done['policy'] = str(policy)
        verdict = _judge(a, against, report)
        _log_verdict(a, AGAIN[1], verdict, 'second re-trained', 'same')
        done['verdict'] = verdict.kind
        done['candidate'] = {
            'policy_version': version,
            'verdict': verdict.kind,
            'reason': verdict.reason,
            'balance_s': _mean(balances(report)),
            'episodes_s': balances(report),
        }
    return done


def finetune_within_budget(
    a: Adapt, budget_s: float, start: Path, finetune_run: Any
) -> dict[str, Any]:
    """Fine-tune on the rig from ``start`` until the rig-time budget is spent.

    The budget less what the final deployment will take (``RESERVE_FACTOR`` times the last
    deployment's). One runner run (its critics and prior data beside ``start``), the
    node's guard on, ended by the runner's own rig-time limit (``rig_seconds``) at the end of
    the episode past which the next would not fit: every activation counted, so a trip's
    re-run episode is paid from the budget too. Returns its summary (``{}`` when not one
    training episode with the guard's baseline evaluation fits).
    """
    deployment = a.phases[-1]
    reserve = RESERVE_FACTOR * deployment['rig_seconds']
    left = budget_s - a.rig_s - reserve
    # An episode's cost, its reset included: the last deployment's, for the fine-tune's length.
    per_deployment = deployment['rig_seconds'] / int(a.own['deployment_episodes'])
    per_episode = (
        per_deployment
        - float(a.own['deployment_episode_seconds'])
        + float(a.control['episode_seconds'])
    )
    from rip_control.run.supervisor import RigBudget

    lag = RigBudget.REPORT_LAG_S  # the runner's stop rule keeps this margin too
    if _episodes_that_fit(left - lag, per_episode, int(a.control['eval_every_episodes'])) < 1:
        a.log(f'fine-tune: {max(left, 0):.0f} s of rig time left: not one episode fits')
        return {}
    a.log(f'fine-tune: until {left:.0f} s of rig time are spent (rig_seconds:={left:.1f})')
    fine = a.phase(
        PHASES[3],
        {'policy': str(start), 'episodes': '0', 'rig_seconds': f'{left:.1f}'},
        lambda run_args: finetune_run(run_args, stream_logs=a.stream),
    )
    for e in fine.get('evaluations', []):
        a.log(f'fine-tune: evaluation of v{e.get("policy_version")}: {e.get("verdict")}')
    return fine


VERSION_GAP = 1000
"""The re-trained policy's version over the prior's: above any version a fine-tune from the
prior publishes, so ``timing.csv`` and the guard's evaluations tell which one a policy came
from."""
RESERVE_FACTOR = 1.1  # the final deployment's rig time, over the candidate's deployment's


def _episodes_that_fit(left_s: float, per_episode_s: float, every: int) -> int:
    """Training episodes that fit ``left_s`` of rig time.

    ``n`` training episodes come with the guard's evaluations: its baseline at the start and
    one after every ``every`` training episodes (none with the guard off), each about
    ``per_episode_s`` with its reset.
    """
    n = 0
    while True:
        m = n + 1
        evaluations = (1 + m // every) if every > 0 else 0
        if (m + evaluations) * per_episode_s > left_s:
            return n
        n = m


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
    """Command line: adapt's options and the runner's ``name:=value`` arguments."""
    from rip_control.signals import StopSignals

    stop = StopSignals().install()
    try:
        with stop.interruptible():
            from rip_control.run.launching import arguments_help

            argv = list(sys.argv[1:] if argv is None else argv)
            if any(x in ('-h', '--help') for x in argv):
                print(__doc__)
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
