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
from dataclasses import dataclass
import itertools
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
from rip_control.params import Param, options_help, parse_args

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
        "room for a second candidate's deployment, re-train at it and judge that candidate too "
        '(it replaces a promoted first candidate only if its balance is shown better: the 90 % '
        'interval of the difference above 0)',
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
OWN_BY_THE_LOOP = ('rig_seconds', 'episodes')
"""Runner arguments adapt sets itself, phase by phase: refused when typed."""
PHASES = ('0_baseline', '1_sim_retrain', '2_candidate', '3_finetune', '4_deployment')
AGAIN = ('2_sim_retrain_again', '2_candidate_again')
"""The phases of the second re-training and its candidate (``reidentify``)."""
IDENTIFICATION, REIDENTIFICATION = 'identification', 'reidentification'
"""The steps between phases that take no rig time and have no folder (the record's keys)."""
SUMMARY = 'adapt_summary.json'
PLOT = 'adapt.png'
FREE_ON_RESUME = ('rig_minutes', 'resume', 'serial_port', 'runs_dir')
"""What a resume may give otherwise than the record: the budget (counted in full either way),
the rig's port (a cable plugged in again) and the folder the record was found in."""


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


class PhaseInterrupted(KeyboardInterrupt):
    """A phase's runner stopped on a stop signal (the runner took the signal, then ended)."""


class Adapt:
    """The loop's state: what each phase measured, and the rig time so far.

    It keeps the run's record (``adapt_summary.json``) while :meth:`recording`; resuming, the
    earlier record's finished phases are read back (:meth:`replay`) instead of run.
    """

    def __init__(self, own: dict[str, Any], runner: dict[str, str], stream: bool) -> None:
        from rip_control.run.launching import CONTROL, RunnerInput

        self.own, self.runner, self.stream = own, runner, stream
        for name in OWN_BY_THE_LOOP:
            if name in runner:
                raise ValueError(
                    f'{name}:={runner[name]}: adapt sets it for each phase (the budget is '
                    'rig_minutes:=, the deployments deployment_episodes:=)'
                )
        # The user's input, parsed once: an unknown argument or a bad value refused by name.
        self.input = RunnerInput.parse(runner)
        self.control = self.input.nodes[CONTROL]  # typed, the params file included
        self.rate = float(self.control['rate_hz'])
        self.name = str(self.control['run_name'])
        self.run_dir = Path(str(self.control['runs_dir'])) / self.name
        self.seed = int(self.control['seed'])
        self.typed = dict(runner)  # as given (the emulated rig changes ``runner``)
        self.t0 = time.monotonic()
        self.rig_s = 0.0
        self.budget_s = 60.0 * own['rig_minutes'] if own else math.nan
        self.phases: list[dict[str, Any]] = []
        self.curve: list[tuple[float, float, str]] = []  # (rig s, balance s, what)
        self.results: dict[str, Any] = {}  # the summary's keys known so far
        self.earlier: dict[str, Any] = {}  # the record resumed
        self.set_aside: list[dict[str, Any]] = []  # earlier attempts at unfinished phases
        self.step: dict[str, Any] | None = None  # the phase or step running
        self.error: dict[str, Any] | None = None
        self.keeping = False  # the record is kept (rewritten as phases complete)

    def log(self, line: str) -> None:
        """One progress line."""
        print(f'adapt: {line}', flush=True)

    # -- the record ------------------------------------------------------------------------

    def summary(self, status: str) -> dict[str, Any]:
        """The record as it stands: the summary's keys known so far, and ``status``."""
        return {
            'command': 'python -m rip_control.adapt',
            'status': status,
            **({'error': self.error} if self.error else {}),
            'options': self.own,
            'arguments': self.runner,
            'typed_arguments': self.typed,
            'rig_params': "(the emulator's)" if not self.runner.get('rig_params') else '',
            'rate_hz': self.rate,
            'seed': self.seed,
            'rig_seconds': self.rig_s,
            'rig_budget_s': self.budget_s,
            'wall_seconds': self.earlier.get('wall_seconds', 0.0) + time.monotonic() - self.t0,
            **self.results,
            'phases': self.phases,
            'set_aside': self.set_aside,
            'curve': [{'rig_s': r, 'balance_s': b, 'what': w} for r, b, w in self.curve],
            'pid': os.getpid(),
        }

    def save(self, status: str = 'running') -> dict[str, Any]:
        """Write the record (atomically) if :meth:`recording`, or ``done``; return it."""
        summary = self.summary(status)
        if self.keeping or status == 'done':
            text = json.dumps(summary, indent=1) + '\n'
            atomic_write_bytes(self.run_dir / SUMMARY, text.encode())
        return summary

    def note(self, key: str, value: Any) -> None:
        """One of the summary's keys, known now: recorded."""
        self.results[key] = value
        self.save()

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Keep the record: ``running`` from now on, and how the loop ended if it raised."""
        if self.earlier:
            _set_aside(self)
        self.keeping = True
        self.save()
        try:
            yield
        except BaseException as exc:
            self.save(self.failed(exc))
            raise

    def failed(self, exc: BaseException) -> str:
        """Record how the step running ended (``failed`` or ``interrupted``); that status."""
        status = 'interrupted' if isinstance(exc, KeyboardInterrupt) else 'failed'
        text = str(exc) or type(exc).__name__
        step = self.step or {}
        if step:
            rig_s = step['rig_seconds']
            self.phases.append(
                {
                    'phase': step['phase'],
                    'status': status,
                    'rig_seconds': rig_s,
                    'wall_seconds': time.monotonic() - step['t0'],
                    'error': text,
                }
            )
            self.rig_s += _known(rig_s)
        after = next((p['phase'] for p in reversed(self.phases) if _done(p)), None)
        self.error = {'phase': step.get('phase'), 'after': after, 'status': status, 'error': text}
        return status

    # -- phases and steps ------------------------------------------------------------------

    def replay(self, name: str) -> dict[str, Any] | None:
        """Resuming: the earlier record's entry of ``name`` if it finished, as this run's."""
        entry = _finished(self.earlier, name)
        if entry is not None:
            self.phases.append(entry)
            self.rig_s += _known(entry['rig_seconds'])
            self.log(f'{name}: as recorded ({entry["rig_seconds"]:.0f} s of rig time)')
        return entry

    def begin(self, name: str, on_rig: bool) -> None:
        """A phase or step starts (its rig time unknown until it ends, if on the rig)."""
        self.step = {'phase': name, 't0': time.monotonic(), 'rig_seconds': None if on_rig else 0.0}

    def finish(self, rig_seconds: float, **measured: Any) -> dict[str, Any]:
        """The phase running finished: its entry (with ``measured``), recorded."""
        assert self.step is not None
        entry = {
            'phase': self.step['phase'],
            'status': 'done',
            'rig_seconds': rig_seconds,
            'wall_seconds': time.monotonic() - self.step['t0'],
            **measured,
        }
        self.phases.append(entry)
        self.rig_s += _known(rig_seconds)
        self.step = None
        self.save()
        return entry

    def phase(self, name: str, args: dict[str, str], job: Any, keep: Any) -> dict[str, Any]:
        """Run one runner phase in ``runs/<run_name>/<name>``; count its rig time.

        Its entry in the record holds what ``keep(result)`` takes of the runner's result;
        resuming, the earlier record's entry when that phase finished.
        """
        entry = self.replay(name)
        if entry is not None:
            return entry
        self.begin(name, on_rig=True)
        run = job({**self.runner, **args, 'run_name': f'{self.name}/{name}'})
        rig_s = _rig_seconds(run.get('run', run), self.rate)
        assert self.step is not None
        self.step['rig_seconds'] = None if math.isnan(rig_s) else rig_s
        if run.get('failure') or run.get('interrupted'):
            if run.get('interrupted'):
                raise PhaseInterrupted(f'phase {name} was interrupted')
            raise RuntimeError(f'phase {name} failed: {run.get("failure")}')
        entry = self.finish(rig_s, **keep(run))
        self.log(f'{name}: {rig_s:.0f} s of rig time (total {self.rig_s:.0f} s)')
        return entry

    def deploy(self, name: str, policy: Path, excitation: bool) -> dict[str, Any]:
        """A deployment phase (after the excitation, if asked): its policy and episodes."""
        from rip_control.evaluate import evaluate

        args = {
            'policy': str(policy),
            'episodes': str(self.own['deployment_episodes']),
            'episode_seconds': str(self.own['deployment_episode_seconds']),
        }
        if excitation:
            args['excitation_episodes'] = '1'
        report = self.phase(
            name,
            args,
            lambda a: _with_run(evaluate(a, stream_logs=self.stream)),
            lambda report: {'policy': str(policy), 'episodes': _episodes(report)},
        )
        mean = _mean(balances(report))
        # Resuming, a finished phase's point where the record has it (rig time set aside since
        # then would move it).
        earlier = [c['rig_s'] for c in self.earlier.get('curve', []) if c['what'] == name]
        replayed = earlier and _finished(self.earlier, name)
        self.curve.append((earlier[0] if replayed else self.rig_s, mean, name))
        self.log(f'{name}: balance {mean:.2f} s mean over {len(report["episodes"])} episodes')
        return report


def _done(entry: dict[str, Any]) -> bool:
    return entry.get('status', 'done') == 'done'


def _finished(record: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The entry of phase ``name`` in ``record`` if it finished."""
    return next((p for p in record.get('phases', []) if p['phase'] == name and _done(p)), None)


def _known(rig_s: float | None) -> float:
    """Rig seconds, 0 where not known (a phase that failed before its trace was read)."""
    return 0.0 if rig_s is None or math.isnan(rig_s) else rig_s


def _episodes(report: dict[str, Any]) -> list[dict[str, Any]]:
    """What the loop keeps of an evaluation report's episodes: the return and the measures."""
    from rip_control.run.evaluation import DEPLOYMENT_MEASURES

    kept = ('ret', 'duration_s', *DEPLOYMENT_MEASURES)
    return [{k: e[k] for k in kept if k in e} for e in report['episodes']]


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
    """Run the loop (see the module docstring); return the summary written beside it.

    :raises ValueError: a bad argument, or a run folder that holds a record this call may not
        start or continue (``resume``), before anything runs and nothing written.
    """
    from rip_control.finetune import run as finetune_run
    from rip_control.run.launching import resolve_auto_policy, shipped_policy

    a = Adapt(own, runner, stream)
    a.earlier = earlier_record(a)
    budget_s = 60.0 * own['rig_minutes']
    a.run_dir.mkdir(parents=True, exist_ok=True)
    prior = Path(runner['policy']) if runner.get('policy') else shipped_policy(a.rate)
    with emulated_rig(a), a.recording():
        return _loop(a, own, prior, budget_s, finetune_run, resolve_auto_policy)


def earlier_record(a: Adapt) -> dict[str, Any]:
    """The record ``resume`` continues (``{}`` for a new run), refused by name where it may not.

    A new run is refused where a record is (it would mix two runs' phases); a resume where
    none is, where it is ``done``, where its process still runs, or where the arguments differ
    from the recorded ones (all but :data:`FREE_ON_RESUME`).
    """
    path = a.run_dir / SUMMARY
    record = json.loads(path.read_text()) if path.exists() else None
    status = (record or {}).get('status', 'done')
    if not a.own['resume']:
        if record is not None:
            raise ValueError(
                f'run_name:={a.name}: {path} records an earlier run ({status}); continue it '
                'with resume:=true (unless done), or choose another run_name'
            )
        return {}
    if record is None:
        raise ValueError(f'resume:=true: no run {a.name!r} to continue ({path} does not exist)')
    if status == 'done':
        raise ValueError(f'resume:=true: the run {a.name!r} is done ({path}); nothing to resume')
    if status == 'running' and _alive(record.get('pid')):
        raise ValueError(
            f'resume:=true: the run {a.name!r} is running (process {record["pid"]}, {path})'
        )
    differ = _differences(a, record)
    if differ:
        raise ValueError(
            f'resume:=true: {"; ".join(differ)}: the finished phases of {a.name!r} ran with '
            f'the recorded values ({path}); resume with them, or choose another run_name'
        )
    return record


def _alive(pid: int | None) -> bool:
    if not pid or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _differences(a: Adapt, record: dict[str, Any]) -> list[str]:
    """``name:=given`` (recorded ``value``) for each value that differs from the record's.

    Adapt's options, the launch values and both nodes' parameters (the params file's
    included), each made from the recorded arguments and from the given ones.
    """
    from rip_control.run.launching import RunnerInput

    def values(typed: dict[str, str]) -> dict[str, Any]:
        inp = RunnerInput.parse(typed)
        return {**inp.values, **{k: v for n in inp.nodes.values() for k, v in n.items()}}

    recorded = {**record.get('options', {}), **values(record.get('typed_arguments', {}))}
    recorded.update(rate_hz=record.get('rate_hz'), seed=record.get('seed'))
    given = {**a.own, **values(a.typed)}
    return [
        f'{name}:={given.get(name)} (recorded {value})'
        for name, value in recorded.items()
        if name not in FREE_ON_RESUME and given.get(name) != value
    ]


def _set_aside(a: Adapt) -> None:
    """Resuming: take the earlier attempts' records and set their folders aside.

    Each phase that did not finish (its folder renamed ``<phase>.failed-<n>``: the runner
    refuses a run folder whose buffer it would overwrite) is listed in ``set_aside`` with its
    rig time, which counts towards the budget.
    """
    before = a.earlier
    finished = {p['phase'] for p in before.get('phases', []) if _done(p)}
    unfinished = {p['phase']: p for p in before.get('phases', []) if not _done(p)}
    a.set_aside = list(before.get('set_aside', []))
    for name in dict.fromkeys((*PHASES, *AGAIN, *unfinished)):
        if name in finished or not ((a.run_dir / name).is_dir() or name in unfinished):
            continue
        entry = {'phase': name, 'status': 'unfinished', 'rig_seconds': None}
        entry.update(unfinished.get(name, {}))
        folder = a.run_dir / name
        if folder.is_dir():
            n = next(
                n for n in itertools.count(1) if not (a.run_dir / f'{name}.failed-{n}').exists()
            )
            entry['folder'] = f'{name}.failed-{n}'
            folder.rename(a.run_dir / entry['folder'])
        a.set_aside.append(entry)
    a.rig_s = sum(_known(e['rig_seconds']) for e in a.set_aside)
    error = before.get('error') or {}
    kept = [p['phase'] for p in before.get('phases', []) if _done(p)]
    a.log(
        f'resuming {a.run_dir} ({before.get("status")}'
        + (f' in {error["phase"]}: {error.get("error")}' if error.get('phase') else '')
        + f'): finished {", ".join(kept) or "none"}'
        + (
            '; set aside: ' + ', '.join(e.get('folder', e['phase']) for e in a.set_aside)
            if a.set_aside
            else ''
        )
        + f' ({a.rig_s:.0f} s of rig time); the finished are read from the record, not run'
    )


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
    # 1. baseline deployment, after the excitation
    base = a.deploy(PHASES[0], prior, excitation=not own['identification'])
    a.note('deployment', _deployment(own, base, None))
    # 2. identification, from the transitions alone
    identified, opts = _identify(a)
    # 3. re-training in simulation, the rig idle
    randomization = 'identified' if not own['identification'] else 'standard'
    if own['identification'] and 'identification:' not in identified.read_text():
        randomization = 'standard'
    a.note('retrain', _retrain(a, PHASES[1], identified, prior, k, randomization))
    # 4. the candidate on the rig, judged by the guard's rule against the prior's deployment
    version, candidate, judged = _candidate(a, prior, k_prior)
    verdict = _judge(a, base, judged)
    _log_verdict(a, PHASES[2], verdict, 're-trained', 'prior')
    a.note('candidate', _candidate_record(version, verdict, judged))
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
        )
        if again.get('verdict') == 'promoted':
            start, start_report = Path(again['policy']), again.pop('report')
        again.pop('report', None)
    a.note(REIDENTIFICATION, again)
    # 5. fine-tune on the rig from it, the guard on
    fine = finetune_within_budget(a, budget_s, start, finetune_run)
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
        deployed = resolve_auto_policy(a.run_dir / PHASES[3], a.rate, True)
        final = a.deploy(PHASES[4], deployed, excitation=False)
    else:  # not one episode fitted: what goes on is deployed and measured already
        deployed, final = start, start_report
    a.results['deployed_policy'] = str(deployed)
    a.results['deployment'] = _deployment(own, base, final)
    a.results['finetune_gain_s'] = _gain(final, start_report) if fine else None
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


def _deployment(
    own: dict[str, Any], prior: dict[str, Any], adapted: dict[str, Any] | None
) -> dict[str, Any]:
    """The summary's ``deployment``: the prior's deployment, and the adapted's once deployed.

    The mean balances and their per-episode lists, and each deployment's measures with their
    90 % intervals (:func:`rip_control.run.evaluation.deployment_measures`).
    """
    from rip_control.run.evaluation import deployment_measures

    out: dict[str, Any] = {
        'episodes': own['deployment_episodes'],
        'episode_seconds': own['deployment_episode_seconds'],
        'prior_balance_s': _mean(balances(prior)),
    }
    if adapted is not None:
        out['adapted_balance_s'] = _mean(balances(adapted))
    out['prior_episodes_s'] = balances(prior)
    if adapted is not None:
        out['adapted_episodes_s'] = balances(adapted)
    out['prior_measures'] = deployment_measures(prior['episodes'])
    if adapted is not None:
        out['adapted_measures'] = deployment_measures(adapted['episodes'])
    return out


def _gain(final: dict[str, Any], start: dict[str, Any]) -> dict[str, Any]:
    """What the fine-tune on the rig added, with its 90 % interval.

    The final deployment's balance over the deployment of the policy the fine-tune started
    from: two samples of one rig.
    """
    from rip_control.run.evaluation import difference_interval

    return difference_interval(balances(final), balances(start))


def _identify(a: Adapt) -> tuple[Path, dict[str, Any]]:
    """The identification (or the given file): the rig file and the identification's options.

    ``python -m rip_learner.identify`` on the baseline's transitions (:func:`_program`).
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


def identify(opts: dict[str, Any], log: Any = print) -> dict[str, Any]:
    """``python -m rip_learner.identify`` with ``opts``; its record (the rig file's).

    The rig file's ``identification:``: each fitted value (``fitted``), what moved from the
    prior (``moved``), the residuals and the term selection.
    """
    import yaml

    _program('identify', opts, log)
    doc = yaml.safe_load(Path(opts['out']).read_text())
    return dict(doc.get('identification') or {})


def _program(executable: str, options: dict[str, Any], log: Any, prefix: str = '') -> None:
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


def _candidate(a: Adapt, prior: Path, k_prior: int) -> tuple[int, Path, dict[str, Any]]:
    """The re-trained policy, versioned ``VERSION_GAP`` over the prior, deployed on the rig."""
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
    return version, candidate, a.deploy(PHASES[2], candidate, excitation=False)


def _recorded_policy(a: Adapt, name: str) -> Path | None:
    """Resuming: the policy deployment ``name`` deployed, if it finished (else ``None``)."""
    entry = _finished(a.earlier, name)
    return Path(entry['policy']) if entry else None


def _candidate_record(version: int, verdict: Any, report: dict[str, Any]) -> dict[str, Any]:
    """The summary's record of a candidate: its version, the guard's verdict, its balances.

    With its deployment's measures and their 90 % intervals.
    """
    from rip_control.run.evaluation import deployment_measures

    return {
        'policy_version': version,
        'verdict': verdict.kind,
        'reason': verdict.reason,
        'balance_s': _mean(balances(report)),
        'episodes_s': balances(report),
        'measures': deployment_measures(report['episodes']),
    }


def _finish(a: Adapt) -> dict[str, Any]:
    """The record ``done``, its plot, and the closing line; the summary."""
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
    return summary


def _retrain(
    a: Adapt, name: str, rig_file: Path, init: Path, k: int, randomization: str
) -> dict[str, Any]:
    """Pre-train in simulation at ``rig_file``, warm from ``init``, the rig idle (no rig time).

    Its result, also in its entry of the record (``retrain``); resuming, read from there.
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
        'seed': a.seed,
        'action_history': k,
        # warm: no curriculum from scratch, a short random start
        'balance_steps': 0,
        'ramp_steps': 0,
        'random_steps': 1000,
    }
    _program('pretrain', popts, a.log, prefix='retrain: ')
    result = json.loads((out / run_files.PRETRAIN_RECORD).read_text())
    kept = {k: result[k] for k in ('steps', 'wall_s', 'stopped_by', 'best')}
    return dict(a.finish(0.0, retrain=kept)['retrain'])


def _log_verdict(a: Adapt, name: str, verdict: Any, promoted: str, otherwise: str) -> None:
    went_on = promoted if verdict.kind == 'promoted' else otherwise
    a.log(
        f'{name}: {verdict.kind}'
        + (f' ({verdict.reason})' if verdict.reason else '')
        + f': the loop goes on from the {went_on} policy'
    )


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
) -> dict[str, Any]:
    """Identify again from the baseline's and the candidate's transitions; maybe re-train.

    A second candidate is re-trained (warm from the first re-training) and deployed only when
    a parameter :func:`moved` and the rig budget has room for its deployment besides the final
    one's reserve, and judged against ``against`` (the deployment of the policy that goes on)
    by the guard's rule. When what goes on is the first re-trained policy
    (``replaces_candidate``), the second must also be shown better (:func:`_shown_better`):
    two re-trainings at nearly the same physics differ by the draw, and within the guard's
    margins the second would replace a measured 9.31 s with 8.85 s (the sticky gap rig, seed
    1). Returns what happened (and, when deployed, ``report``). The decision is recorded as
    soon as made; resuming, it is read from the record.
    """
    done = dict(a.earlier.get(REIDENTIFICATION) or {}) or _identify_again(a, opts, first, budget_s)
    if not done.get('moved'):
        return done
    init = a.run_dir / PHASES[1] / run_files.POLICY
    out = a.run_dir / run_files.REIDENTIFIED_RIG
    done['retrain'] = _retrain(a, AGAIN[0], out, init, k, randomization)
    best = (done['retrain'] or {}).get('best') or {}
    if best.get('step', math.inf) <= 1:  # its start, the first re-trained policy, is its best
        done['why'] += (
            '; the re-training found nothing better than its start (the first re-trained '
            'policy) in simulation: no second candidate to deploy'
        )
        a.log(f'identification again: {done["why"]}')
        return done
    policy = _recorded_policy(a, AGAIN[1]) or _versioned(
        a.run_dir / AGAIN[0] / run_files.POLICY, a.run_dir / 'candidate_again', version, a.rate
    )
    report = a.deploy(AGAIN[1], policy, excitation=False)
    verdict = _judge(a, against, report)
    if verdict.kind == 'promoted' and replaces_candidate:
        verdict = _shown_better(verdict, report, against)
    _log_verdict(a, AGAIN[1], verdict, 'second re-trained', 'same')
    done.update(policy=str(policy), verdict=verdict.kind)
    done['candidate'] = _candidate_record(version, verdict, report)
    return {**done, 'report': report}


@dataclass(frozen=True)
class _NotShownBetter:
    """A guard's promotion overruled: the second candidate did not show it is better."""

    reason: str
    kind: str = 'rejected'


def _shown_better(verdict: Any, report: dict[str, Any], against: dict[str, Any]) -> Any:
    """``verdict`` if ``report``'s balance beats ``against``'s with its 90 % interval above 0.

    Otherwise a rejection that gives the difference and its interval (Welch's t over the two
    deployments' episodes, :func:`rip_control.run.evaluation.difference_interval`; with one
    episode each there is no interval, and nothing is shown).
    """
    from rip_control.run.evaluation import difference_interval

    d = difference_interval(balances(report), balances(against))
    if d['ci90_low'] is not None and d['ci90_low'] > 0.0:
        return verdict
    shown = (
        f', 90 % interval {d["ci90_low"]:+.2f} to {d["ci90_high"]:+.2f} s'
        if d['ci90_low'] is not None
        else ' (one episode each: no interval)'
    )
    return _NotShownBetter(
        f'not shown better than the first re-trained policy: balance {d["mean"]:+.2f} s{shown}'
    )


def _identify_again(
    a: Adapt, opts: dict[str, Any], first: Path, budget_s: float
) -> dict[str, Any]:
    """The second identification, if the budget has room for a second candidate; recorded."""
    done: dict[str, Any] = {'identified': None, 'moved': None, 'retrain': None, 'candidate': None}
    needed = (1.0 + RESERVE_FACTOR) * a.phases[-1]['rig_seconds']
    if budget_s - a.rig_s < needed:
        done['why'] = (
            f'not run: {max(budget_s - a.rig_s, 0):.0f} s of rig time are left, and a second '
            f'candidate would need {needed:.0f} s with the final deployment'
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


def finetune_within_budget(
    a: Adapt, budget_s: float, start: Path, finetune_run: Any
) -> dict[str, Any]:
    """Fine-tune on the rig from ``start`` until the rig-time budget is spent.

    The budget less what the final deployment will take (``RESERVE_FACTOR`` times the last
    deployment's). One runner run (its critics and prior data beside ``start``), the
    node's guard on, ended by the runner's own rig-time limit (``rig_seconds``) at the end of
    the episode past which the next would not fit: every activation counted, so a trip's
    re-run episode is paid from the budget too. Returns its summary (``{}`` when not one
    training episode with the guard's baseline evaluation fits). Resuming, its record's entry
    when it finished.
    """
    done = a.replay(PHASES[3])
    if done is not None:
        return done
    deployment = a.phases[-1]
    reserve = RESERVE_FACTOR * deployment['rig_seconds']
    left = budget_s - a.rig_s - reserve
    guard = _guard_settings(a)
    # An episode's cost, its reset included: the last deployment's, for each episode's length.
    per_deployment = deployment['rig_seconds'] / int(a.own['deployment_episodes'])
    reset = per_deployment - float(a.own['deployment_episode_seconds'])
    training = float(a.control['episode_seconds'])
    evaluation = float(guard['eval_episode_seconds']) or training
    per_evaluation = int(guard['eval_episodes']) * (reset + evaluation)
    # The runner's stop rule prices the next episode at the dearest one so far (RigBudget):
    # after the guard's baseline, a training episode costs an evaluation episode's.
    every = int(a.control['eval_every_episodes'])
    per_episode = reset + (max(training, evaluation) if every > 0 else training)
    from rip_control.run.supervisor import RigBudget

    lag = RigBudget.REPORT_LAG_S  # the runner's stop rule keeps this margin too
    if _episodes_that_fit(left - lag, per_episode, every, per_evaluation) < 1:
        a.log(f'fine-tune: {max(left, 0):.0f} s of rig time left: not one episode fits')
        return {}
    a.log(
        f'fine-tune: until {left:.0f} s of rig time are spent (rig_seconds:={left:.1f}); the '
        f'guard judges each candidate on {guard["eval_episodes"]} evaluation episodes'
        + (f' of {guard["eval_episode_seconds"]} s' if guard['eval_episode_seconds'] else '')
    )
    fine = a.phase(
        PHASES[3],
        {
            'policy': str(start),
            'episodes': '0',
            'rig_seconds': f'{left:.1f}',
            **{k: str(v) for k, v in guard.items()},
        },
        lambda run_args: finetune_run(run_args, stream_logs=a.stream),
        lambda run: {
            'policy': str(start),
            **{k: run[k] for k in ('episodes', 'evaluations', 'live_policy_version') if k in run},
        },
    )
    for e in fine.get('evaluations', []):
        if e.get('verdict') != 'pending':
            a.log(f'fine-tune: evaluation of v{e.get("policy_version")}: {e.get("verdict")}')
    return fine


VERSION_GAP = 1000
"""The re-trained policy's version over the prior's: above any version a fine-tune from the
prior publishes, so ``timing.csv`` and the guard's evaluations tell which one a policy came
from."""
RESERVE_FACTOR = 1.1  # the final deployment's rig time, over the candidate's deployment's


FINETUNE_EVAL_EPISODES = 3
"""The fine-tune's guard judges a candidate on this many evaluation episodes, each as long
as a deployment's (unless typed: ``eval_episodes:=``, ``eval_episode_seconds:=``). One
episode of the node's default length spreads wider than the differences it judges, and caps
balance at ~5 s: a fine-tuned policy could never rate above a re-trained one at that cap."""


def _guard_settings(a: Adapt) -> dict[str, Any]:
    """The fine-tune's guard evaluations: :data:`FINETUNE_EVAL_EPISODES` of a deployment's length.

    Each setting the user's where typed (the params file included).
    """
    ours = {
        'eval_episodes': FINETUNE_EVAL_EPISODES,
        'eval_episode_seconds': a.own['deployment_episode_seconds'],
    }
    return {
        name: a.control[name] if a.input.set_by_user(name) else value
        for name, value in ours.items()
    }


def _episodes_that_fit(
    left_s: float, per_episode_s: float, every: int, per_evaluation_s: float | None = None
) -> int:
    """Training episodes that fit ``left_s`` of rig time.

    ``n`` training episodes, each about ``per_episode_s`` with its reset, come with the
    guard's evaluations: its baseline at the start and one after every ``every`` training
    episodes (none with the guard off), each about ``per_evaluation_s`` (default: one
    episode's).
    """
    per_evaluation_s = per_episode_s if per_evaluation_s is None else per_evaluation_s
    n = 0
    while True:
        m = n + 1
        evaluations = (1 + m // every) if every > 0 else 0
        if m * per_episode_s + evaluations * per_evaluation_s > left_s:
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
