"""The loop's record and state: each phase's entry, the rig time so far, resuming."""

from __future__ import annotations

from collections.abc import Callable, Iterator
import contextlib
import itertools
import json
import math
import os
from pathlib import Path
import time
from typing import Any

from rip_control.adapting.plan import Plan
from rip_control.files import atomic_write_bytes

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


def phase_rig_seconds(run: dict[str, Any], rate_hz: float) -> float:
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
        self.plan: Plan | None = None  # the rig-time plan (adapting.budget.plan_for)
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
            # Of it, resetting between episodes (the phases' resets, as their nodes counted).
            'reset_seconds': round(sum(p.get('reset_seconds', 0.0) for p in self.phases), 2),
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
            self.rig_s += known_seconds(rig_s)
        after = next((p['phase'] for p in reversed(self.phases) if is_done(p)), None)
        self.error = {'phase': step.get('phase'), 'after': after, 'status': status, 'error': text}
        return status

    # -- phases and steps ------------------------------------------------------------------

    def replay(self, name: str) -> dict[str, Any] | None:
        """Resuming: the earlier record's entry of ``name`` if it finished, as this run's."""
        entry = finished_entry(self.earlier, name)
        if entry is not None:
            self.phases.append(entry)
            self.rig_s += known_seconds(entry['rig_seconds'])
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
        self.rig_s += known_seconds(rig_seconds)
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
        rig_s = phase_rig_seconds(run.get('run', run), self.rate)
        assert self.step is not None
        self.step['rig_seconds'] = None if math.isnan(rig_s) else rig_s
        if run.get('failure') or run.get('interrupted'):
            if run.get('interrupted'):
                raise PhaseInterrupted(f'phase {name} was interrupted')
            raise RuntimeError(f'phase {name} failed: {run.get("failure")}')
        entry = self.finish(rig_s, **keep(run))
        self.log(f'{name}: {rig_s:.0f} s of rig time (total {self.rig_s:.0f} s)')
        return entry

    def last_deployment(self) -> dict[str, Any]:
        """The entry of the newest deployment phase (the newest with a list of episodes)."""
        return next(p for p in reversed(self.phases) if isinstance(p.get('episodes'), list))

    def full_deployment_s(self) -> float:
        """A deployment of the plan's episodes, priced at the last one's rig time per episode.

        The last deployment may have run fewer (its sequential rule or the budget ended it
        early); what must be kept for the next is a whole one.
        """
        last = self.last_deployment()
        ran = max(len(last['episodes']), 1)
        planned = self.plan.episodes if self.plan is not None else ran
        return last['rig_seconds'] / ran * max(planned, ran)

    def deploy(
        self,
        name: str,
        policy: Path,
        excitation: bool,
        reserve_s: float = 0.0,
        stop_when: Callable[[list[Any]], str] | None = None,
    ) -> dict[str, Any]:
        """A deployment phase (after the excitation, if asked): its policy and episodes.

        The plan's episodes, under the rig-time limit that leaves ``reserve_s`` of the budget
        for what must come after: the runner ends the deployment early rather than pass it
        (at the end of an episode, when the next would not fit), and when ``stop_when`` of
        its episodes so far says they decide it (a candidate's certain rejection,
        :func:`rip_control.adapting.judging.certain_rejection`).
        """
        from rip_control.evaluate import evaluate

        assert self.plan is not None, 'deploy() before the plan'
        limit = self.budget_s - self.rig_s - reserve_s
        args = {
            'policy': str(policy),
            'episodes': str(self.plan.episodes),
            'episode_seconds': str(self.own['deployment_episode_seconds']),
            'rig_seconds': f'{max(limit, 1.0):.1f}',
        }
        if excitation:
            args['excitation_episodes'] = '1'
        report = self.phase(
            name,
            args,
            lambda a: _with_run(evaluate(a, stream_logs=self.stream, stop_when=stop_when)),
            lambda report: {
                'policy': str(policy),
                'episodes': _episodes(report),
                'reset_seconds': reset_seconds(report),
                **(
                    {'stopped': report['stopped_decided']} if report.get('stopped_decided') else {}
                ),
            },
        )
        mean = mean_of(balances(report))
        # Resuming, a finished phase's point where the record has it (rig time set aside since
        # then would move it).
        earlier = [c['rig_s'] for c in self.earlier.get('curve', []) if c['what'] == name]
        replayed = earlier and finished_entry(self.earlier, name)
        self.curve.append((earlier[0] if replayed else self.rig_s, mean, name))
        self.log(f'{name}: balance {mean:.2f} s mean over {len(report["episodes"])} episodes')
        return report


def is_done(entry: dict[str, Any]) -> bool:
    """Whether a phase's entry finished (an entry without a status did: older records)."""
    return entry.get('status', 'done') == 'done'


def finished_entry(record: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The entry of phase ``name`` in ``record`` if it finished."""
    return next((p for p in record.get('phases', []) if p['phase'] == name and is_done(p)), None)


def known_seconds(rig_s: float | None) -> float:
    """Rig seconds, 0 where not known (a phase that failed before its trace was read)."""
    return 0.0 if rig_s is None or math.isnan(rig_s) else rig_s


def _episodes(report: dict[str, Any]) -> list[dict[str, Any]]:
    """What the loop keeps of an evaluation report's episodes: the return and the measures."""
    from rip_control.run.evaluation import DEPLOYMENT_MEASURES

    kept = ('ret', 'duration_s', *DEPLOYMENT_MEASURES)
    return [{k: e[k] for k in kept if k in e} for e in report['episodes']]


def mean_of(values: list[float]) -> float:
    """The mean, NaN of nothing."""
    return sum(values) / len(values) if values else math.nan


def _with_run(report: dict[str, Any]) -> dict[str, Any]:
    """An evaluation report with what :meth:`Adapt.phase` reads where it reads it."""
    return {**report, 'run': {'ticks': report.get('ticks')}}


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
    finished = {p['phase'] for p in before.get('phases', []) if is_done(p)}
    unfinished = {p['phase']: p for p in before.get('phases', []) if not is_done(p)}
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
    a.rig_s = sum(known_seconds(e['rig_seconds']) for e in a.set_aside)
    error = before.get('error') or {}
    kept = [p['phase'] for p in before.get('phases', []) if is_done(p)]
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


def reset_seconds(run: dict[str, Any]) -> float:
    """The rig seconds a runner phase spent resetting, as its summary says (0: not said)."""
    return float(run.get('reset_seconds') or 0.0)
