"""Standalone runner of the whole fine-tune, for machines with rclpy but no ``ros2 launch``.

``python -m rip_control.finetune rate:=50 episodes:=10 run_name:=demo``

It takes the same ``name:=value`` arguments as ``launch/finetune.launch.py`` and starts the
same processes with the same parameters (:func:`rip_control.run.launching.plan` is the plan
both use): the rig emulator when ``serial_port`` is empty, the learner node, and the control
node, whose lifecycle :class:`~rip_control.run.supervisor.Supervisor` drives, as it does under
the launch file. It streams their logs with a prefix and prints one line per episode. When
the episodes are done, on the operator's ``deactivate`` or on Ctrl-C, it stops in the safe
order: the control node is deactivated first (motor off), then the learner is stopped (its
buffer is saved), then the emulator. It then writes plots and a summary into
``runs/<run_name>/``. Exit status: 0 done or stopped by the operator, 1 a process failed
(with the reason), 2 bad arguments, 130 interrupted.

``resume_buffer:=auto`` continues from ``runs/<run_name>/replay_buffer.safetensors`` when it
exists, and ``policy:=auto`` from ``runs/<run_name>/policy_best.safetensors`` (the regression
guard's best-evaluated actor; ``policy_latest`` with the guard off), with the run's latest
critics, else from the pre-trained policy shipped for the rate
(``policies/sim_50hz/``): what ``make demo`` does, so a second demo continues the first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import json
import os
from pathlib import Path
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.params import help_text, parse_args
from rip_control.procs import child_env, die_with_parent, ensure_loopback_dds, stop_process
from rip_control.rig.emulator_process import EmulatorProcess
from rip_control.ros.node_params import security_named
from rip_control.run.launching import ProcessSpec, arguments_help, plan
from rip_control.run.summary import merge_timing, summarise
from rip_control.run.supervisor import RunFailed, Supervisor, say
from rip_control.signals import StopSignals

STOPPING_NOTE = (
    'stopping in the safe order (motor first, then learner, then emulator); please wait'
)


class _Child:
    """A child process whose output is streamed with a prefix."""

    def __init__(self, spec: ProcessSpec, stream: bool) -> None:
        self.spec = spec
        self.proc = subprocess.Popen(
            spec.command(),
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only, no locks taken
        )
        self.tail: list[str] = []
        self.exit_code: int | None = None  # set by the pump thread once the child has ended
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: bool) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail = (self.tail + [line.rstrip()])[-20:]
            if stream:
                say(f'[{self.spec.label}] {line.rstrip()}')
        # Reaped here, not by polling from the main thread: a stop signal raised inside
        # Popen.poll() between taking its waitpid lock and its try block leaves the lock
        # held, and the stop path's wait() then blocks for ever (seen: a runner hung after
        # SIGTERM with its learner a zombie). Signals never raise in this thread.
        self.exit_code = self.proc.wait()

    def failure(self) -> str:
        """Why it ended ('' while it runs): what the pump thread recorded, no system call."""
        if self.exit_code is None:
            return ''
        tail = ' | '.join(self.tail[-3:])
        return f'{self.spec.label} exited with status {self.exit_code}: {tail}'

    def stop(self, sig: int = signal.SIGINT, timeout_s: float = 30.0) -> int:
        code = stop_process(self.proc, sig, timeout_s)
        self._thread.join(timeout=2.0)
        return code


def run(
    args: dict[str, str],
    stream_logs: bool = True,
    learn: bool = True,
    observe: Callable[[Any, str], Callable[[], bool]] | None = None,
    complete: Callable[[int], bool] | None = None,
    decided: Callable[[int, float], str] | None = None,
) -> dict[str, Any]:
    """Run the fine-tune; return the summary (also written to the run folder).

    :param learn: False deploys the policy without a learner (see
        :func:`~rip_control.run.launching.plan`).
    :param observe: called with the runner's node and the run's identity (``run_id``) before
        anything starts, to add
        subscriptions (the evaluation's transition recorder); it returns a readiness check
        (its subscription matched the control node's publisher) that the runner waits for,
        bounded, between configuring and activating the control node.
    :param complete: ``complete(episodes)`` tells whether the observer has received all of
        them; after the last episode summary the runner waits for it (at most 5 s).
    :param decided: ``decided(ended, rate_hz)``: why the episodes ended so far decide the run
        ('' while they do not); the run then ends before its next episode
        (:meth:`~rip_control.run.supervisor.Supervisor.run_episodes`).
    """
    # First, before any moment a signal could fall into; a stop an entry point's own
    # StopSignals recorded before this is taken over.
    stops = StopSignals(repeat_note=STOPPING_NOTE).install()
    try:
        return _run(args, stops, stream_logs, learn, observe, complete, decided)
    finally:
        stops.restore()


@dataclass(frozen=True)
class _RunPlan:
    """The planned processes, and what the runner reads of them."""

    specs: list[ProcessSpec]
    values: dict[str, Any]
    control_specs: list[ProcessSpec]  # one per rig
    learner_spec: ProcessSpec | None  # None: a deployment, no learning
    rate_hz: float
    run_dir: Path
    episodes: int  # 0: unlimited
    resumed: str  # the replay buffer the learner resumes ('' for a fresh one)

    @property
    def control_spec(self) -> ProcessSpec:
        """The first rig's control node (the run's rate, episodes and policy)."""
        return self.control_specs[0]


def _plan_run(args: dict[str, str], learn: bool) -> _RunPlan:
    """Plan the processes; create the run folders and point each rig's tick trace there."""
    specs, values = plan(args, pid=os.getpid(), learn=learn)
    control_specs = [s for s in specs if s.executable == 'control_node']
    control_spec = control_specs[0]
    learner_spec = next((s for s in specs if s.label == 'learner'), None)
    rate_hz = float(control_spec.params['rate_hz'])
    run_dir = Path(str(values['runs_dir'])) / str(values['run_name'])
    run_dir.mkdir(parents=True, exist_ok=True)
    for spec in control_specs:
        spec_dir = Path(str(spec.params['runs_dir'])) / str(spec.params['run_name'])
        spec_dir.mkdir(parents=True, exist_ok=True)
        spec.params['tick_trace'] = str(spec_dir / run_files.TICK_TRACE)
    episodes = int(control_spec.params['episodes'])
    resumed = str(learner_spec.params.get('resume_buffer', '')) if learner_spec else ''
    return _RunPlan(
        specs, values, control_specs, learner_spec, rate_hz, run_dir, episodes, resumed
    )


def _announce(run: _RunPlan, learn: bool, dds: str) -> None:
    """Print the run's one-line description: rate, episodes, rig, DDS, learning."""
    control_spec, learner_spec, values = run.control_spec, run.learner_spec, run.values
    what = (
        f'K={learner_spec.params.get("gradient_steps")}, '
        + (f'resuming buffer {run.resumed}' if run.resumed else 'fresh buffer')
        if learner_spec
        else f'no learning, deterministic policy {control_spec.params.get("policy")}'
    )
    rig = (
        f'serial {control_spec.params["serial_port"]}'
        if not any(s.executable == 'rig_emulator' for s in run.specs)
        else f'emulated rig ({values["rig_firmware"]} firmware)'
    )
    print(
        f'{"fine-tune" if learn else "evaluation"} {values["run_name"]!r}: '
        f'{run.rate_hz:g} Hz, {run.episodes or "unlimited"} episodes x '
        f'{control_spec.params["episode_seconds"]} s'
        + (f' on each of {len(run.control_specs)} rigs' if len(run.control_specs) > 1 else '')
        + f', {rig}, {dds}, {what}',
        flush=True,
    )


def _run(
    args: dict[str, str],
    stops: StopSignals,
    stream_logs: bool,
    learn: bool,
    observe: Callable[[Any, str], Callable[[], bool]] | None,
    complete: Callable[[int], bool] | None,
    decided: Callable[[int, float], str] | None = None,
) -> dict[str, Any]:
    """Start the processes, run the episodes, stop in the safe order; the run's summary."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    rng, domain = ensure_loopback_dds()
    run = _plan_run(args, learn)
    _announce(run, learn, f'DDS {rng} domain {domain}')
    # Ctrl-C must reach our own stop path as KeyboardInterrupt with the context still up
    # (rclpy's handler would shut the context down under the safe-stop sequence).
    with security_named():  # SROS2 asked for and refused: a named error before anything starts
        rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)
        node = rclpy.create_node(f'rip_finetune_{os.getpid()}')
    children: list[_Child] = []
    emulators: list[EmulatorProcess] = []
    failure = ''
    interrupted = False

    def check() -> None:
        stops.check()  # a stop whose own raise Python swallowed (see signals)
        for child in children:
            if child.failure():
                raise RunFailed(child.failure())

    sup = Supervisor(
        node,
        [s.fqn for s in run.control_specs],
        run.learner_spec is not None,
        int(run.values['violation_restarts']),
        say,
        check,
    )
    run_id = str(run.control_spec.params.get('run_id', ''))
    observer_ready = observe(node, run_id) if observe is not None else None
    started = time.monotonic()
    try:
        with stops.interruptible():  # the first signal raises here, once
            _start_processes(run.specs, stops, stream_logs, children, emulators)
            # The learner imports torch first: the match waits for it, bounded.
            sup.start(30.0, 180.0, observer_ready)
            sup.run_episodes(
                run.episodes,
                complete,
                float(run.values['rig_seconds']),
                None if decided is None else lambda n: decided(n, run.rate_hz),
            )
            sup.hand_over()
    except KeyboardInterrupt:
        interrupted = True
        print('interrupted: stopping (motor first, then learner, then emulator)', flush=True)
    except RunFailed as exc:
        failure = str(exc)
        print(f'FAILED: {failure}', file=sys.stderr, flush=True)
    finally:
        # Outside the interruptible block: a second Ctrl-C cannot abort the ordered stop.
        sup.deactivate_all()
        codes = _shutdown(children, emulators)
        node.destroy_node()
        rclpy.try_shutdown()
    failure = failure or _exit_failure(codes, children)
    summary = _summarise_run(run, sup, time.monotonic() - started)
    return _conclude(run, sup, summary, failure, interrupted, codes)


def _start_processes(
    specs: list[ProcessSpec],
    stops: StopSignals,
    stream_logs: bool,
    children: list[_Child],
    emulators: list[EmulatorProcess],
) -> None:
    """Start the plan's processes in order, each listed where the stop path finds it."""
    for spec in specs:
        if spec.executable == 'rig_emulator':
            link = spec.args[spec.args.index('--link') + 1]
            emulators.append(EmulatorProcess(link, spec.args[2:]))
            emulators[-1].start()  # listed first: a signal while it starts still stops it
            print(f'[{spec.label}] {emulators[-1].ready_line.strip()}', flush=True)
        else:
            # A Ctrl-C during the fork is held back until the child is on the list.
            with stops.held():
                children.append(_Child(spec, stream_logs))


def _exit_failure(codes: dict[str, int], children: list[_Child]) -> str:
    """The first child that ended with a failing status, named with its last lines ('' none)."""
    for label, code in codes.items():
        if code not in (0, -signal.SIGINT):
            child = next(c for c in children if c.spec.label == label)
            return f'{label} exited with status {code}: ' + ' | '.join(child.tail[-3:])
    return ''


def _summarise_run(run: _RunPlan, sup: Supervisor, wall: float) -> dict[str, Any]:
    """Each rig's summary (printed, plots written); several rigs' merged into one."""
    if len(run.control_specs) == 1:
        return summarise(run.run_dir, sup.monitors[0], run.rate_hz, run.resumed, wall)
    per_rig, rig_dirs = [], []
    for spec, mon in zip(run.control_specs, sup.monitors, strict=True):
        rig_dir = Path(str(spec.params['runs_dir'])) / str(spec.params['run_name'])
        rig_dirs.append((spec.namespace, rig_dir))
        print(f'\n[{spec.namespace}]', end='')
        per_rig.append({'rig': spec.namespace, **summarise(rig_dir, mon, run.rate_hz, '', wall)})
    summary = {**per_rig[0], 'run_dir': str(run.run_dir), 'rigs': per_rig}
    summary['episodes'] = min(r['episodes'] for r in per_rig)
    merge_timing(run.run_dir, rig_dirs)
    return summary


def _conclude(
    run: _RunPlan,
    sup: Supervisor,
    summary: dict[str, Any],
    failure: str,
    interrupted: bool,
    codes: dict[str, int],
) -> dict[str, Any]:
    """Say an operator's stop; add how the run ended to the summary and write it."""
    stopped_by = sup.stopped_by_operator
    if stopped_by and not failure:
        print(
            f'stopped by the operator after {summary["episodes"]} episodes '
            f'({stopped_by} deactivated); motor off, learner stopped (its buffer saved)',
            flush=True,
        )
    summary.update(
        resumed_buffer=run.resumed or None,
        failure=failure,
        interrupted=interrupted,
        stopped_by_operator=stopped_by or None,
        stopped_for_rig_time=sup.stopped_for_rig_time or None,
        stopped_decided=sup.stopped_decided or None,
        exit_codes=codes,
        policy=str(run.control_spec.params.get('policy', '')) or None,
    )
    atomic_write_bytes(
        run.run_dir / run_files.SUMMARY, (json.dumps(summary, indent=2) + '\n').encode()
    )
    return summary


def _shutdown(children: list[_Child], emulators: list[EmulatorProcess]) -> dict[str, int]:
    """Stop in the safe order (the rigs already deactivated); return each child's status.

    Every control node is ended (SIGINT also disengages, the node's own exit path, if the
    deactivate did not answer); then the learner (it saves); then the emulators.
    """
    codes: dict[str, int] = {}
    controls = [c for c in children if c.spec.executable == 'control_node']
    others = [c for c in children if c.spec.executable != 'control_node']
    for child in controls:
        codes[child.spec.label] = child.stop(signal.SIGINT, timeout_s=15.0)
    for child in others:
        codes[child.spec.label] = child.stop(signal.SIGINT, timeout_s=60.0)
    for emulator in emulators:
        emulator.stop()
    return codes


def main(argv: list[str] | None = None) -> int:
    """Command line: ``name:=value`` arguments as in the launch file; ``--quiet`` hides logs."""
    StopSignals().install()  # first; run() takes over a stop recorded before it starts
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ('-h', '--help') for a in argv):
        print(help_text(__doc__))
        print(arguments_help())
        return 0
    return run_command('finetune', argv, lambda args, stream: run(args, stream_logs=stream))


def run_command(
    prog: str, argv: list[str], job: Callable[[dict[str, str], bool], dict[str, Any]]
) -> int:
    """``name:=value`` arguments (``--quiet`` hides child logs) to ``job``; the exit status.

    0 done (or stopped by the operator), 1 a process failed (with the reason), 2 bad
    arguments, 130 interrupted.
    """
    quiet = '--quiet' in argv
    argv = [a for a in argv if a != '--quiet']
    try:
        summary = job(parse_args(argv), not quiet)
    except ValueError as exc:
        print(f'{prog}: {exc}', file=sys.stderr)
        return 2
    if summary['failure']:
        print(f'{prog} failed: {summary["failure"]}', file=sys.stderr)
        return 1
    return 130 if summary['interrupted'] else 0


if __name__ == '__main__':
    sys.exit(main())
