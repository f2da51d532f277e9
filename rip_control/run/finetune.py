"""Standalone runner of the whole fine-tune, for machines with rclpy but no ``ros2 launch``.

``python -m rip_control.run.finetune rate:=50 episodes:=10 run_name:=demo``

It takes the same ``name:=value`` arguments as ``launch/finetune.launch.py`` and starts the
same processes with the same parameters (:mod:`rip_control.run.launching` holds the plan both
use): the rig emulator when ``serial_port`` is empty, the learner node, and the control node,
whose lifecycle it drives (configure, activate). It streams their logs with a prefix and
prints one line per episode. When the episodes are done, or on Ctrl-C, it stops in the safe
order: the control node is deactivated first (motor off), then the learner is stopped (its
buffer is saved), then the emulator. It then writes plots and a summary into
``runs/<run_name>/``. The exit status is non-zero when any process failed, with the reason.

``resume_buffer:=auto`` continues from ``runs/<run_name>/replay_buffer.safetensors`` when it
exists, and ``policy:=auto`` from ``runs/<run_name>/policy_best.safetensors`` (the regression
guard's best-evaluated actor; ``policy_latest`` with the guard off), with the run's latest
critics, else from the pre-trained policy shipped for the rate
(``policies/sim_50hz/``): what ``make demo`` does, so a second demo continues the first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
import json
import math
import os
from pathlib import Path
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from rip_control.files import atomic_write_bytes
from rip_control.rig.emulator_process import (
    EmulatorProcess,
    child_env,
    die_with_parent,
    stop_process,
)
from rip_control.rt.gate import BEST_POLICY_FILE, MISSED, VERDICTS, rejection_reason
from rip_control.run.launching import (
    CONTROL,
    LEARNER,
    RIG_REMAPS,
    ProcessSpec,
    arguments_help,
    ensure_loopback_dds,
    launch_values,
    node_parameters,
    packaged_policy,
    parse_args,
)
from rip_control.signals import StopSignals
from rip_learner.buffer_store import BUFFER_FILE, check_run_dir_is_free

POLICY_LATEST = 'policy_latest.safetensors'
STOPPING_NOTE = (
    'stopping in the safe order (motor first, then learner, then emulator); please wait'
)
_print_lock = threading.Lock()


def _rejection_reason(ep: dict[str, float]) -> str:
    """The bar an ``~/episode`` evaluation message says its candidate missed ('' if none)."""
    i = int(ep.get('eval_missed', 0))
    missed = MISSED[i] if 0 <= i < len(MISSED) else '?'
    return rejection_reason(
        missed,
        ep['return'],
        ep.get('eval_bar', math.nan),
        ep['balance_s'],
        ep.get('eval_balance_bar_s', math.nan),
    )


def _finite_or_none(x: float | None) -> float | None:
    """``x`` for a JSON summary: None where it is missing or not finite."""
    return x if x is not None and math.isfinite(x) else None


def _say(text: str, file: Any = None) -> None:
    """Print whole lines from any thread (child logs and progress lines never interleave)."""
    with _print_lock:
        print(text, file=file or sys.stdout, flush=True)


class RunFailed(RuntimeError):
    """A process of the run failed; the message says which and why."""


def plan(
    args: dict[str, str], pid: int | None = None, learn: bool = True
) -> tuple[list[ProcessSpec], dict[str, Any]]:
    """The processes the fine-tune runs, with their parameters, as the launch file would.

    :param learn: False plans a deployment (:mod:`rip_control.run.evaluate`): no learner, the
        control node acting deterministically with the given policy and nothing else.
    :returns: (process specs in start order, resolved argument values).
    """
    params = node_parameters(args)
    values = launch_values(args)
    rigs = int(values['rigs'])
    specs = []
    control, learner = params[CONTROL], params[LEARNER]
    # What the run reports under: the control node's rate and run folder.
    values.update(
        rate=control['rate_hz'], run_name=control['run_name'], runs_dir=control['runs_dir']
    )
    ports = [x.strip() for x in str(control.get('serial_port') or '').split(',') if x.strip()]
    if ports and len(ports) != rigs:
        raise ValueError(f'serial_port lists {len(ports)} port(s) but rigs:={rigs}')
    link = values['emulator_link']
    if 'emulator_link' not in args and pid is not None:
        link = f'/tmp/rip_rig_{pid}'  # one per runner: concurrent runs never share a rig
    run_dir = Path(str(learner.get('runs_dir', 'runs'))) / str(learner['run_name'])
    if learner.get('resume_buffer') == 'auto':
        candidate = run_dir / BUFFER_FILE
        learner['resume_buffer'] = str(candidate) if candidate.exists() else ''
    rate_hz = float(control['rate_hz'])
    if control.get('policy') == 'auto':
        guarded = int(control.get('eval_every_episodes', 0)) > 0 and rigs == 1
        control['policy'] = str(resolve_auto_policy(run_dir, rate_hz, guarded))
    elif not control.get('policy') and not control.get('allow_random_policy'):
        control['policy'] = str(shipped_policy(rate_hz))
    learner['policy'] = control['policy']
    preflight(control, learner, values, ports, learn)
    if learn:  # refused here, before anything starts, as the learner itself would refuse it
        check_run_dir_is_free(run_dir, str(learner.get('resume_buffer') or ''))
    else:
        control.update(stochastic_actions=False, allow_random_policy=False, eval_every_episodes=0)
    controls = []
    for i in range(rigs):
        one = rigs == 1
        rig = dict(control)
        if ports:
            rig['serial_port'] = ports[i]
        else:
            rig_link = link if one else f'{link}_{i}'
            # --events: engage/disengage lines with their cause in the log; a grace so that,
            # when a launch signals every process at once, the host's disengage comes first.
            emu_args = ['--link', rig_link, '--events', '--stop-grace-ms', '500']
            if values['rig_params']:
                emu_args += ['--params', values['rig_params']]
            label = 'emulator' if one else f'emulator{i}'
            specs.append(ProcessSpec(label, 'rig_emulator', args=emu_args))
            rig['serial_port'] = rig_link
        if not one:
            rig['run_name'] = f'{control["run_name"]}/rig{i}'
            rig['seed'] = int(control.get('seed', 0)) + i  # exploration differs per rig
            # Distinct FIFO priorities: equal-priority FIFO threads on one CPU do not
            # time-slice, so one's final spin-wait to its deadline would hold another off.
            # (Spreading the rigs over both CPUs of this 2-core machine measured worse: the
            # one on CPU 0 tripped its watchdog among the emulators and the learner.)
            rig['fifo_priority'] = max(1, int(control.get('fifo_priority', 80)) - i)
        controls.append(
            ProcessSpec(
                'control' if one else f'control{i}',
                'control_node',
                'rip_control',
                namespace='' if one else f'rig{i}',
                params=rig,
                remaps={} if one else dict(RIG_REMAPS),
            )
        )
    if learn:
        specs.append(ProcessSpec('learner', 'learner_node', 'rip_learner', params=learner))
    specs.extend(controls)
    return specs, values


def resolve_auto_policy(run_dir: Path, rate_hz: float, guarded: bool = True) -> Path:
    """``policy:=auto``: the run's best-evaluated policy, else its latest, else the shipped one.

    The best is what the regression guard kept (:data:`BEST_POLICY_FILE`): a run whose last
    updates made the policy worse resumes from before them. With the guard off
    (``guarded`` False: ``eval_every_episodes`` 0, or several rigs, whose bests are each
    rig's own) the latest is taken: it is what the run went on to learn.

    :raises ValueError: no pre-trained policy ships for ``rate_hz`` (it names the command
        that makes one).
    """
    best = run_dir / BEST_POLICY_FILE
    if guarded and best.exists():
        return best
    latest = run_dir / POLICY_LATEST
    return latest if latest.exists() else shipped_policy(rate_hz, f'{latest} does not exist and ')


def shipped_policy(rate_hz: float, why: str = '') -> Path:
    """The pre-trained policy shipped for ``rate_hz`` (``policies/sim_<rate>hz/``).

    :raises ValueError: none ships for that rate; the message says how to make one.
    """
    packaged = packaged_policy(rate_hz)
    if packaged.exists():
        return packaged
    raise ValueError(
        f'rate:={rate_hz:g}: {why}no pre-trained policy ships for {rate_hz:g} Hz '
        f'({packaged}); make one with python -m rip_learner.pretrain rate:={rate_hz:g} '
        f'out:={packaged.parent}, or pass policy:=PATH trained at {rate_hz:g} Hz'
    )


def preflight(
    control: dict[str, Any],
    learner: dict[str, Any],
    values: dict[str, Any],
    ports: list[str],
    learn: bool,
) -> None:
    """Refuse, before any process starts, what a process would refuse after starting.

    Serial ports, files and the rate of the initial policy and of a resumed buffer; each
    error names the argument, the value and what is accepted. Reads only; writes nothing.
    """
    for port in ports:
        if not os.path.exists(port):
            raise ValueError(
                f'serial_port:={port}: no such device (is the rig plugged in and powered? '
                'leave serial_port empty to use the emulator)'
            )
    if values['rig_params']:
        from rip_control.rig.dynamics import PendulumParams

        try:
            PendulumParams.from_yaml(values['rig_params'])
        except (OSError, ValueError, TypeError) as exc:
            raise ValueError(f'rig_params:={values["rig_params"]}: {exc}') from None
    rate_hz = float(control['rate_hz'])
    if float(learner['rate_hz']) != rate_hz:
        raise ValueError(
            f'params_file: rip_control runs at {rate_hz:g} Hz but rip_learner at '
            f'{float(learner["rate_hz"]):g} Hz; set both with rate:=R'
        )
    if control.get('policy'):
        from rip_control.policy import PolicyRejected, load_actor_file
        from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

        try:
            load_actor_file(
                control['policy'], rate_hz=rate_hz, obs_size=OBS_SIZE, action_size=ACTION_SIZE
            )
        except PolicyRejected as exc:
            hint = ''
            if 'trained at' in str(exc):
                hint = (
                    f'; pass a policy trained at {rate_hz:g} Hz, or make one with '
                    f'python -m rip_learner.pretrain rate:={rate_hz:g} out:=DIR'
                )
            raise ValueError(f'policy:={control["policy"]}: {exc}{hint}') from None
    resume = str(learner.get('resume_buffer') or '') if learn else ''
    if resume:
        from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
        from rip_learner.buffer_store import BufferRejected, load

        try:  # the learner's own checks: format, checksum, rate, sizes, finite values
            load(resume, rate_hz=rate_hz, obs_size=OBS_SIZE, action_size=ACTION_SIZE)
        except BufferRejected as exc:
            raise ValueError(f'resume_buffer:={resume}: {exc}') from None
    for bag in str(learner.get('resume_bag') or '').split(','):
        if learn and bag.strip() and not Path(bag.strip()).exists():
            raise ValueError(f'resume_bag: {bag.strip()} does not exist')


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
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: bool) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail = (self.tail + [line.rstrip()])[-20:]
            if stream:
                _say(f'[{self.spec.label}] {line.rstrip()}')

    def stop(self, sig: int = signal.SIGINT, timeout_s: float = 30.0) -> int:
        code = stop_process(self.proc, sig, timeout_s)
        self._thread.join(timeout=2.0)
        return code


class _Monitor:
    """Subscribes to what the runner reports: episode summaries and learner diagnostics."""

    def __init__(self, node: Any, control_fqn: str, label: str = '') -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from std_msgs.msg import Float64MultiArray

        self.label = label
        self.control_status_name = f'{control_fqn.lstrip("/")}: control loop'
        self.episodes: list[dict[str, float]] = []  # training episodes
        self.evaluations: list[dict[str, float]] = []  # the regression guard's
        self.learner: dict[str, str] = {}
        self.control: dict[str, str] = {}
        self.control_message = ''
        self.activated = False
        self.restarts = 0  # re-activations after a timing violation, since the last episode
        self.restarts_total = 0
        self.serial_errors_earlier = 0  # in activations before the current one
        self._episodes_at_trip = 0
        node.create_subscription(
            Float64MultiArray, f'{control_fqn}/episode', self._on_episode, 100
        )
        node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 10)

    def _on_episode(self, msg: Any) -> None:
        ep = {d.label: float(v) for d, v in zip(msg.layout.dim, msg.data, strict=False)}
        prefix = f'[{self.label}] ' if self.label else ''
        if ep.get('evaluation'):
            self.evaluations.append(ep)
            verdict = VERDICTS[int(ep['verdict'])] if 0 <= ep['verdict'] < len(VERDICTS) else '?'
            reason = _rejection_reason(ep)
            if reason:
                verdict += f' ({reason})'
            _say(
                f'{prefix}evaluation {int(ep["episode"]):3d}: return {ep["return"]:8.2f}, balance '
                f'{ep["balance_s"]:5.2f} s, policy v{int(ep["policy_version"])} {verdict}; live '
                f'v{int(ep["live_version"])}, best v{int(ep["best_version"])} '
                f'({ep["best_score"]:.2f})'
            )
            return
        ep['learner_updates'] = float(self.learner.get('gradient_steps_done', 0))
        ep['buffer_size'] = float(self.learner.get('buffer_size', 0))
        ep['violations'] = float(self.control.get('violations', 0))
        self.episodes.append(ep)
        line = (
            f'episode {int(ep["episode"]):3d}: return {ep["return"]:8.2f}, balance '
            f'{ep["balance_s"]:5.2f} s, tick {ep["dt_mean_ms"]:.3f} ± {ep["dt_std_ms"]:.3f} ms, '
            f'violations {int(ep["violations"])}, '
        )
        if self.learner:
            line += (
                f'learner updates {int(ep["learner_updates"])}, buffer {int(ep["buffer_size"])}, '
            )
        _say(prefix + line + f'policy v{int(ep["policy_version"])}')

    def _on_diag(self, msg: Any) -> None:
        for st in msg.status:
            values = {kv.key: kv.value for kv in st.values}
            if st.name.endswith(': learner'):
                self.learner = values
            elif st.name == self.control_status_name:
                self.control = values
                self.control_message = st.message
                if values.get('lifecycle_state') == 'active':
                    self.activated = True

    def serial_errors_now(self) -> int:
        """The failed ticks the control node reported for its current activation."""
        try:
            return int(float(self.control.get('serial_errors', 0)))
        except ValueError:
            return 0

    def control_left_active(self) -> bool:
        """The control node was active and is not any more (the runner did not ask)."""
        return self.activated and self.control.get('lifecycle_state') not in (None, 'active')


def check_still_active(
    fqn: str, mon: _Monitor, driver: Any, restarts_allowed: int, say: Callable[[str], None]
) -> None:
    """Act on a control node that left active on its own (the runner and the supervisor).

    A timing violation is the 3-strike rule doing its job, and a serial failure (replies
    missing on consecutive ticks) a stall the rig may recover from: the motor is off and the
    unconfirmed transitions were withdrawn, so the rig is re-activated (a new episode from a
    reset, which engages it again), each time said out loud. Only ``restarts_allowed`` trips
    in a row with no episode finished between them end the run: then it is structurally
    broken, not a passing hiccup. Anything else (a vanished rig, a lost real-time process)
    ends the run at once.

    :raises RunFailed: naming the node and the reason.
    """
    if not mon.control_left_active():
        return
    # The report that says so holds the activation's final counters; the calls below spin the
    # runner's node, and a newer report (of the next activation) may replace it meanwhile.
    serial_errors = mon.serial_errors_now()
    if driver.state(timeout_s=2.0) == 'active':
        mon.control = {}  # a stale report from before the activation
        return
    reason = mon.control_message or 'no reason given'
    if len(mon.episodes) > mon._episodes_at_trip:
        mon.restarts = 0  # an episode finished since the last trip
    mon._episodes_at_trip = len(mon.episodes)
    recoverable = 'TimingViolation' in reason or 'SerialFailure' in reason
    if recoverable and mon.restarts < restarts_allowed:
        mon.restarts += 1
        mon.restarts_total += 1
        say(
            f'{fqn}: {reason.removeprefix("stopped: ")}; motor disengaged, its unconfirmed '
            f'transitions withdrawn; re-activating (trip {mon.restarts} of at most '
            f'{restarts_allowed} in a row without a finished episode, violation_restarts:=N)'
        )
        if not driver.change('activate'):
            raise RunFailed(f'{fqn} refused to re-activate after a timing violation')
        mon.serial_errors_earlier += serial_errors
        mon.control = {}
        return
    if recoverable and restarts_allowed:
        reason += f' ({mon.restarts} restarts in a row without a finished episode)'
    raise RunFailed(f'{fqn} left active on its own: {reason} (motor disengaged)')


def run(
    args: dict[str, str],
    stream_logs: bool = True,
    learn: bool = True,
    observe: Callable[[Any], Callable[[], bool]] | None = None,
    complete: Callable[[int], bool] | None = None,
) -> dict[str, Any]:
    """Run the fine-tune; return the summary (also written to the run folder).

    :param learn: False deploys the policy without a learner (see :func:`plan`).
    :param observe: called with the runner's node before anything starts, to add
        subscriptions (the evaluation's transition recorder); it returns a readiness check
        (its subscription matched the control node's publisher) that the runner waits for,
        bounded, between configuring and activating the control node.
    :param complete: ``complete(episodes)`` tells whether the observer has received all of
        them; after the last episode summary the runner waits for it (at most 5 s).
    """
    # First, before any moment a signal could fall into; a stop an entry point's own
    # StopSignals recorded before this is taken over.
    stops = StopSignals(repeat_note=STOPPING_NOTE).install()
    _ACTIVE_STOPS.append(stops)
    try:
        return _run(args, stops, stream_logs, learn, observe, complete)
    finally:
        _ACTIVE_STOPS.remove(stops)
        stops.restore()


def _run(
    args: dict[str, str],
    stops: StopSignals,
    stream_logs: bool,
    learn: bool,
    observe: Callable[[Any], Callable[[], bool]] | None,
    complete: Callable[[int], bool] | None,
) -> dict[str, Any]:
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from rip_control.ros.lifecycle_driver import LifecycleDriver

    rng, domain = ensure_loopback_dds()
    specs, values = plan(args, pid=os.getpid(), learn=learn)
    restarts = int(values['violation_restarts'])
    control_specs = [s for s in specs if s.executable == 'control_node']
    control_spec = control_specs[0]
    learner_spec = next((s for s in specs if s.label == 'learner'), None)
    run_dir = Path(str(values['runs_dir'])) / str(values['run_name'])
    run_dir.mkdir(parents=True, exist_ok=True)
    for spec in control_specs:
        spec_dir = Path(str(spec.params['runs_dir'])) / str(spec.params['run_name'])
        spec_dir.mkdir(parents=True, exist_ok=True)
        spec.params['tick_trace'] = str(spec_dir / 'ticks.npz')
    episodes = int(control_spec.params.get('episodes', 0))
    resumed = str(learner_spec.params.get('resume_buffer', '')) if learner_spec else ''
    what = (
        f'K={learner_spec.params.get("gradient_steps")}, '
        + (f'resuming buffer {resumed}' if resumed else 'fresh buffer')
        if learner_spec
        else f'no learning, deterministic policy {control_spec.params.get("policy")}'
    )
    print(
        f'{"fine-tune" if learn else "evaluation"} {values["run_name"]!r}: '
        f'{control_spec.params["rate_hz"]} Hz, {episodes or "unlimited"} episodes x '
        f'{control_spec.params["episode_seconds"]} s'
        + (f' on each of {len(control_specs)} rigs' if len(control_specs) > 1 else '')
        + f', DDS {rng} domain {domain}, {what}',
        flush=True,
    )
    # Ctrl-C must reach our own stop path as KeyboardInterrupt with the context still up
    # (rclpy's handler would shut the context down under the safe-stop sequence).
    rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node(f'rip_finetune_{os.getpid()}')
    children: list[_Child] = []
    emulators: list[EmulatorProcess] = []
    failure = ''
    interrupted = False
    many = len(control_specs) > 1
    drivers = [LifecycleDriver(node, spec.fqn) for spec in control_specs]
    monitors = [_Monitor(node, spec.fqn, spec.namespace if many else '') for spec in control_specs]
    monitor = monitors[0]
    observer_ready = observe(node) if observe is not None else None
    started = time.monotonic()
    done_at: float | None = None
    try:
        with stops.interruptible():  # the first signal raises here, once
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
            if learner_spec is not None:
                _wait_for_learner(node, children, timeout_s=180.0)
            for spec, driver in zip(control_specs, drivers, strict=True):
                if not driver.wait_for_services(30.0):
                    raise RunFailed(f'{spec.fqn} never offered its lifecycle services')
                if not driver.change('configure'):
                    raise RunFailed(f'{spec.fqn} refused to configure (see [{spec.label}] log)')
            if observer_ready is not None:
                _wait_until(node, observer_ready, 10.0, 'no transitions publisher matched')
            # Matching is discovered by each side on its own: the learner may see the publisher
            # before the publisher sees the learner, and until then transitions reach nobody.
            # The control node's own count (in its diagnostics) is the one that matters.
            _wait_until(
                node,
                lambda: all(
                    int(m.control.get('transitions_subscribers', 0)) > 0 for m in monitors
                ),
                15.0,
                'a control node never matched a subscriber to its transitions',
            )
            for spec, driver, mon in zip(control_specs, drivers, monitors, strict=True):
                if not driver.change('activate'):
                    raise RunFailed(f'{spec.fqn} refused to activate (see [{spec.label}] log)')
                mon.activated = True  # from now on, leaving active on its own is a failure
                mon.control = {}  # what came before activating says nothing now
            while True:
                stops.check()
                rclpy.spin_once(node, timeout_sec=0.1)
                for child in children:
                    if child.proc.poll() is not None:
                        raise RunFailed(
                            f'{child.spec.label} exited with status {child.proc.returncode}: '
                            + ' | '.join(child.tail[-3:])
                        )
                for spec, mon, driver in zip(control_specs, monitors, drivers, strict=True):
                    # The diagnostics hint (they may predate the activation); the node's own
                    # lifecycle service decides.
                    check_still_active(spec.fqn, mon, driver, restarts, _say)
                if episodes and all(len(m.episodes) >= episodes for m in monitors):
                    if complete is None or complete(episodes):
                        if learner_spec is not None:
                            _hand_over_to_learner(node, drivers, monitors)
                        break
                    if done_at is None:
                        done_at = time.monotonic()
                    elif time.monotonic() - done_at > 5.0:
                        print('the observer missed part of the last episode', flush=True)
                        break
    except KeyboardInterrupt:
        interrupted = True
        print('interrupted: stopping (motor first, then learner, then emulator)', flush=True)
    except RunFailed as exc:
        failure = str(exc)
        print(f'FAILED: {failure}', file=sys.stderr, flush=True)
    finally:
        # Outside the interruptible block: a second Ctrl-C cannot abort the ordered stop.
        codes = _shutdown(drivers, children, emulators)
        node.destroy_node()
        rclpy.try_shutdown()
    for label, code in codes.items():
        if code not in (0, -signal.SIGINT) and not failure:
            child = next(c for c in children if c.spec.label == label)
            failure = f'{label} exited with status {code}: ' + ' | '.join(child.tail[-3:])
    wall = time.monotonic() - started
    if many:
        per_rig, rig_dirs = [], []
        for spec, mon in zip(control_specs, monitors, strict=True):
            rig_dir = Path(str(spec.params['runs_dir'])) / str(spec.params['run_name'])
            rig_dirs.append((spec.namespace, rig_dir))
            print(f'\n[{spec.namespace}]', end='')
            per_rig.append({'rig': spec.namespace, **_summarise(rig_dir, mon, values, '', wall)})
        summary = {**per_rig[0], 'run_dir': str(run_dir), 'rigs': per_rig}
        summary['episodes'] = min(r['episodes'] for r in per_rig)
        _merge_timing(run_dir, rig_dirs)
    else:
        summary = _summarise(run_dir, monitor, values, resumed, wall)
    summary.update(
        resumed_buffer=resumed or None,
        failure=failure,
        interrupted=interrupted,
        exit_codes=codes,
        policy=str(control_spec.params.get('policy', '')) or None,
    )
    atomic_write_bytes(run_dir / 'summary.json', (json.dumps(summary, indent=2) + '\n').encode())
    return summary


_ACTIVE_STOPS: list[StopSignals] = []  # the running run()'s, for its waits


def check_stop() -> None:
    """In the runner's waits: raise a stop whose own raise Python swallowed (see signals)."""
    if _ACTIVE_STOPS:
        _ACTIVE_STOPS[-1].check()


def _wait_for_learner(node: Any, children: list[_Child], timeout_s: float) -> None:
    """Block (bounded) until the learner subscribes to ``transitions``.

    Otherwise the first episode's transitions are lost while it still imports torch.
    """
    import rclpy

    deadline = time.monotonic() + timeout_s
    while node.count_subscribers('/transitions') == 0:
        check_stop()
        for child in children:
            if child.proc.poll() is not None:
                raise RunFailed(
                    f'{child.spec.label} exited with status {child.proc.returncode} while '
                    'starting: ' + ' | '.join(child.tail[-3:])
                )
        if time.monotonic() > deadline:
            raise RunFailed(f'the learner did not subscribe to transitions within {timeout_s:g} s')
        rclpy.spin_once(node, timeout_sec=0.1)


def _hand_over_to_learner(
    node: Any, drivers: list[Any], monitors: list[_Monitor], timeout_s: float = 30.0
) -> tuple[int, int] | None:
    """Deactivate every rig (motor off), then let the learner catch up before it is stopped.

    Waits (bounded) until the learner has received every transition the rigs published, so
    stopping it loses none in flight; if it has not by the deadline, says how many it got.

    :returns: (transitions published, transitions the learner received), or None if the
        rigs never reported inactive.
    """
    import rclpy

    for driver, mon in zip(drivers, monitors, strict=True):
        if driver.state(timeout_s=2.0) == 'active':
            driver.change('deactivate', timeout_s=5.0)
        mon.control = {}  # counts from after the deactivation only

    def counts() -> tuple[int, int] | None:
        if not all(m.control.get('lifecycle_state') == 'inactive' for m in monitors):
            return None
        published = sum(int(m.control.get('transitions_published', 0)) for m in monitors)
        return published, int(monitors[0].learner.get('transitions_received', 0))

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = counts()
        if got is not None and got[1] >= got[0]:
            return got
        rclpy.spin_once(node, timeout_sec=0.05)
    got = counts()
    if got is not None:
        _say(f'the learner received {got[1]} of the {got[0]} transitions published')
    return got


def _wait_until(node: Any, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Spin (bounded) until ``ready()``; :class:`RunFailed` naming ``what`` otherwise."""
    import rclpy

    deadline = time.monotonic() + timeout_s
    while not ready():
        check_stop()
        if time.monotonic() > deadline:
            raise RunFailed(f'{what} within {timeout_s:g} s')
        rclpy.spin_once(node, timeout_sec=0.05)


def _shutdown(
    drivers: list[Any], children: list[_Child], emulators: list[EmulatorProcess]
) -> dict[str, int]:
    """Stop in the safe order; return each child's exit status.

    Every control node is deactivated (motor off), then ended; then the learner (it saves);
    then the emulators.
    """
    codes: dict[str, int] = {}
    for driver in drivers:
        try:
            if driver.state(timeout_s=2.0) == 'active':
                driver.change('deactivate', timeout_s=5.0)
        except (TimeoutError, RuntimeError) as exc:
            print(
                f'could not deactivate {driver.target} ({exc}); stopping it by signal', flush=True
            )
    controls = [c for c in children if c.spec.executable == 'control_node']
    others = [c for c in children if c.spec.executable != 'control_node']
    for child in controls:
        # SIGINT also disengages (the node's own exit path) if deactivate did not answer.
        codes[child.spec.label] = child.stop(signal.SIGINT, timeout_s=15.0)
    for child in others:
        codes[child.spec.label] = child.stop(signal.SIGINT, timeout_s=60.0)
    for emulator in emulators:
        emulator.stop()
    return codes


def _merge_timing(run_dir: Path, rigs: list[tuple[str, Path]]) -> None:
    """``run_dir/timing.csv``: every rig's per-episode rows, a ``rig`` column first."""
    header, rows = '', []
    for rig, rig_dir in rigs:
        path = rig_dir / 'timing.csv'
        if not path.exists():
            continue
        lines = path.read_text().splitlines()
        if not lines:
            continue
        header = header or 'rig,' + lines[0]
        rows += [f'{rig},{line}' for line in lines[1:] if line]
    if header:
        atomic_write_bytes(run_dir / 'timing.csv', ('\n'.join([header, *rows]) + '\n').encode())


def _summarise(
    run_dir: Path, monitor: _Monitor, values: dict[str, Any], resumed: str, wall_s: float
) -> dict[str, Any]:
    import numpy as np

    eps, evs = monitor.episodes, monitor.evaluations
    summary: dict[str, Any] = {
        'run_dir': str(run_dir),
        'rate_hz': float(values['rate']),
        'episodes': len(eps),
        'wall_seconds': round(wall_s, 1),
        'resumed_buffer': resumed or None,
        'episode_returns': [e['return'] for e in eps],
        'balance_s': [e['balance_s'] for e in eps],
        'policy_versions': [int(e['policy_version']) for e in eps],
        'evaluations': [
            {
                'episode': int(e['episode']),
                'policy_version': int(e['policy_version']),
                'return': e['return'],
                'balance_s': e['balance_s'],
                'verdict': VERDICTS[int(e['verdict'])],
                # The bars it was judged against (None for the baseline, which sets them)
                # and, for a rejection, the one it missed.
                'bar': _finite_or_none(e.get('eval_bar')),
                'balance_bar_s': _finite_or_none(e.get('eval_balance_bar_s')),
                'rejected_for': _rejection_reason(e),
            }
            for e in monitor.evaluations
        ],
        'live_policy_version': int(evs[-1]['live_version']) if evs else None,
        'best_policy_version': int(evs[-1]['best_version']) if evs else None,
        'best_eval_return': evs[-1]['best_score'] if evs else None,
        'learner': monitor.learner,
        # The control node's last report: what it published, and what reached nobody.
        'transitions_published': int(monitor.control.get('transitions_published', 0)),
        'transitions_unmatched': int(monitor.control.get('transitions_unmatched', 0)),
        # Re-activations after a timing violation (each one a trip of the 3-strike rule).
        'violation_restarts': monitor.restarts_total,
        # Failed ticks over every activation; in an episode each one cuts it short.
        'serial_errors': monitor.serial_errors_earlier + monitor.serial_errors_now(),
    }
    trace = run_dir / 'ticks.npz'
    if trace.exists():
        from rip_control.stats import overrun_causes, tick_stats

        with np.load(trace, allow_pickle=False) as z:
            stats = tick_stats(z['dt_s'][1:], z['overrun_s'][1:], float(values['rate']))
            stats['n_violations'] = int(z['violations'])
            stats.update(
                overrun_causes(
                    z['overrun_s'][1:], z['prev_work_s'][1:], 1.0 / float(values['rate'])
                )
            )
            summary['ticks'] = stats
            _plots(run_dir, z['dt_s'][1:], float(values['rate']), eps)
    rate = summary.get('ticks', {}).get('measured_rate_hz', float('nan'))
    lines = [f'run folder      {run_dir}']
    if monitor.learner:
        lines.append(
            f'buffer          {"resumed from " + resumed if resumed else "fresh"}; now '
            f'{monitor.learner.get("buffer_size", "?")} transitions'
        )
    lines.append(
        f'episodes        {len(eps)}, returns ' + ', '.join(f'{e["return"]:.1f}' for e in eps)
    )
    lines.append(
        f'tick rate       {rate:.4f} Hz (target {values["rate"]}), violations '
        f'{summary.get("ticks", {}).get("n_violations", "?")}'
        + (
            f' in the last activation; re-activated {monitor.restarts_total} time(s) after '
            'earlier ones'
            if monitor.restarts_total
            else ''
        )
    )
    if monitor.learner:
        lines.append(
            f'learner         {monitor.learner.get("gradient_steps_done", "?")} updates, '
            f'{monitor.learner.get("updates_per_transition", "?")} per transition, policy '
            f'v{monitor.learner.get("policy_version_published", "?")}'
        )
    lines.append(f'policy versions used per episode: {summary["policy_versions"]}')
    if evs:
        verdicts = Counter(VERDICTS[int(e['verdict'])] for e in evs)
        lines.append(
            f'regression guard: {len(evs)} evaluation(s) ({dict(verdicts)}); live policy '
            f'v{summary["live_policy_version"]}, best v{summary["best_policy_version"]} '
            f'(evaluation return {summary["best_eval_return"]:.2f}, {BEST_POLICY_FILE})'
        )
    print('\n== summary ==\n' + '\n'.join(lines), flush=True)
    return summary


def _plots(run_dir: Path, dt_s: Any, rate_hz: float, eps: list[dict[str, float]]) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist((np.asarray(dt_s) - 1.0 / rate_hz) * 1e3, bins=100)
    ax.set_xlabel('tick dt - period (ms)')
    ax.set_ylabel('ticks')
    ax.set_yscale('log')
    ax.set_title(f'control tick interval at {rate_hz:g} Hz ({len(dt_s)} ticks)')
    fig.tight_layout()
    fig.savefig(run_dir / 'tick_dt_hist.png', dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([e['episode'] for e in eps], [e['return'] for e in eps], 'o-', label='return')
    ax.set_xlabel('episode')
    ax.set_ylabel('episode return')
    ax2 = ax.twinx()
    ax2.plot([e['episode'] for e in eps], [e['balance_s'] for e in eps], 's--', color='C1')
    ax2.set_ylabel('longest balance (s)', color='C1')
    ax.set_title('fine-tune: per-episode return')
    fig.tight_layout()
    fig.savefig(run_dir / 'episode_returns.png', dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``name:=value`` arguments as in the launch file; ``--quiet`` hides logs."""
    StopSignals().install()  # first; run() takes over a stop recorded before it starts
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ('-h', '--help') for a in argv):
        print(__doc__)
        print(arguments_help())
        return 0
    return run_command('finetune', argv, lambda args, stream: run(args, stream_logs=stream))


def run_command(
    prog: str, argv: list[str], job: Callable[[dict[str, str], bool], dict[str, Any]]
) -> int:
    """``name:=value`` arguments (``--quiet`` hides child logs) to ``job``; the exit status.

    0 done, 1 a process failed (with the reason), 2 bad arguments, 130 interrupted.
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
