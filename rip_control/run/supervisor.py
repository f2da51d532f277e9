"""The one run path: drive a fine-tune's control nodes from configure to the safe stop.

:class:`Supervisor` is used in-process by the runner (:mod:`rip_control.finetune`), and as
the ``finetune_supervisor`` program by ``launch/finetune.launch.py``. For each control node:

1. ``configure``;
2. ``activate`` only once the node's own ``transitions`` publisher has matched a subscriber
   (``transitions_subscribers`` in its diagnostics): DDS discovery is per side, and until the
   publisher sees the learner the first ticks would reach no one;
3. watch it: a node that leaves active on a timing violation or a serial stall is
   re-activated (bounded, ``violation_restarts``); one that leaves for any other reason
   fails the run; one the operator deactivated (``ros2 lifecycle set /rip_control
   deactivate``, the operator's stop button) ends the run as a requested stop;
4. when every rig has run its ``episodes`` (or the operator stopped it), deactivate every
   rig (motor off) and wait, bounded, until the learner has received every transition.

The ``finetune_supervisor`` program then exits 0 and the launch file ends the launch (the
learner saves its buffer on the SIGINT that ``ros2 launch`` sends, the emulators power down
last); 1 with the reason when a node failed. On SIGINT/SIGTERM it exits 0 at once: each
control node disengages on its own signal.
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import math
import signal
import sys
import threading
import time
from typing import Any

from rip_control.params import CONTROL_PARAMETERS, Param, parse_options, table_by_name
from rip_control.rt.guard import MISSED, VERDICTS, rejection_reason
from rip_control.run.launching import LAUNCH_ARGUMENT_BY_NAME
from rip_control.signals import StopRequested, StopSignals
from rip_control.telemetry import EPISODE_KINDS

OPTIONS = (
    Param('controls', '/rip_control', 'comma-separated fully qualified control node names'),
    table_by_name(CONTROL_PARAMETERS)['episodes'],  # the control node's own, as it counts them
    Param('learn', True, 'a learner receives the transitions'),
    Param('match_timeout_s', 180.0, 'bound on the wait for the learner to match', 1.0, 3600.0),
    LAUNCH_ARGUMENT_BY_NAME['violation_restarts'].param(),
    LAUNCH_ARGUMENT_BY_NAME['rig_seconds'].param(),
)

_print_lock = threading.Lock()


def say(text: str, file: Any = None) -> None:
    """Print whole lines from any thread (child logs and progress lines never interleave)."""
    with _print_lock:
        print(text, file=file or sys.stdout, flush=True)


class RunFailed(RuntimeError):
    """A process of the run failed; the message says which and why."""


def judged_figures(ep: dict[str, float]) -> tuple[float, float]:
    """The return and balance an ``~/episode`` evaluation message's verdict judged.

    The means over the evaluation's episodes (``eval_score``, ``eval_balance_s``), or the
    episode's own where the message has none (a ``pending`` episode, an older node).
    """
    score, balance = ep.get('eval_score', math.nan), ep.get('eval_balance_s', math.nan)
    if math.isnan(score):
        return ep['return'], ep['balance_s']
    return score, balance


def episode_rejection(ep: dict[str, float]) -> str:
    """The bar an ``~/episode`` evaluation message says its candidate missed ('' if none)."""
    i = int(ep.get('eval_missed', 0))
    missed = MISSED[i] if 0 <= i < len(MISSED) else '?'
    score, balance = judged_figures(ep)
    return rejection_reason(
        missed,
        score,
        ep.get('eval_bar', math.nan),
        balance,
        ep.get('eval_balance_bar_s', math.nan),
        int(ep.get('eval_judged', 0)),
        int(ep.get('eval_planned', 0)),
    )


class RigBudget:
    """The rig-time limit of one rig, checked at the end of each of its episodes.

    The next episode is priced at the dearest estimate: the last episode's rig time (its
    reset included) or the mean over the run's episodes. An excitation episode is a one-off:
    its rig time prices nothing (the first episode after it runs unpriced).
    """

    REPORT_LAG_S = 2.0  # the rig time comes from the 1 Hz reports: a report behind, each way

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.seen = 0  # episodes (training and evaluation) ended at the last check
        self.one_offs_seen = 0  # excitation episodes ended at the last check
        self.one_off_s = 0.0  # their rig time
        self.used_at_last_s = 0.0
        self.cost_s = 0.0  # an episode's rig time, its reset included (the dearest estimate)

    def exhausted(self, mon: RigMonitor) -> str:
        """Why the rig's next episode would not fit ('' if it would, or no episode ended)."""
        used = mon.rig_seconds()
        if used is None:  # no report since an activation yet
            return ''
        ended, one_offs = len(mon.episodes) + len(mon.evaluations), len(mon.excitations)
        if one_offs > self.one_offs_seen:
            self.one_off_s += used - self.used_at_last_s
            self.one_offs_seen, self.used_at_last_s = one_offs, used
            return ''
        if ended <= self.seen:
            return ''
        # The last episode's cost, or the mean over the run's (the one-offs left out) if dearer.
        self.cost_s = max(used - self.used_at_last_s, (used - self.one_off_s) / ended)
        self.seen, self.used_at_last_s = ended, used
        return self.over(used)

    def over(self, used: float) -> str:
        """Why one more episode after ``used`` s would not fit ('' if it would)."""
        if used + self.cost_s + self.REPORT_LAG_S <= self.limit_s:
            return ''
        return (
            f'{used:.0f} s of rig time used and an episode takes about {self.cost_s:.0f} s: the '
            f'next would pass the {self.limit_s:g} s limit (rig_seconds:=)'
        )


class RigMonitor:
    """What one control node reports: its episode summaries, its and the learner's diagnostics.

    :param node: the supervising node (the subscriptions are made on it).
    :param control_fqn: the control node's fully qualified name.
    :param label: prefix of its progress lines ('' with a single rig).
    """

    def __init__(self, node: Any, control_fqn: str, label: str = '') -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from std_msgs.msg import Float64MultiArray

        from rip_control.ros.qos import DIAGNOSTICS, EPISODE, EPISODE_QOS, STATUS_QOS

        self.fqn = control_fqn
        self.label = label
        self.control_status_name = f'{control_fqn.lstrip("/")}: control loop'
        self.episodes: list[dict[str, float]] = []  # training episodes
        self.evaluations: list[dict[str, float]] = []  # the regression guard's
        self.excitations: list[dict[str, float]] = []  # the identification's input
        self.learner: dict[str, str] = {}
        self.control: dict[str, str] = {}
        self.control_message = ''
        self.activated = False
        self.restarts = 0  # re-activations after a timing violation, since the last episode
        self.restarts_total = 0
        self.serial_errors_earlier = 0  # in activations before the current one
        self.ticks_earlier = 0  # control ticks of the activations before the current one
        self._episodes_at_trip = 0
        node.create_subscription(
            Float64MultiArray,
            f'{control_fqn}/{EPISODE.removeprefix("~/")}',
            self._on_episode,
            EPISODE_QOS,
        )
        node.create_subscription(DiagnosticArray, DIAGNOSTICS, self._on_diag, STATUS_QOS)

    def _on_episode(self, msg: Any) -> None:
        ep = {d.label: float(v) for d, v in zip(msg.layout.dim, msg.data, strict=False)}
        prefix = f'[{self.label}] ' if self.label else ''
        kind = int(ep.get('kind', 0))
        kind_name = EPISODE_KINDS[kind] if 0 <= kind < len(EPISODE_KINDS) else '?'
        if kind_name == 'excitation':
            self.excitations.append(ep)
            say(
                f'{prefix}excitation {int(ep["episode"]):3d}: {int(ep["n_ticks"])} ticks, tick '
                f'{ep["dt_mean_ms"]:.3f} ± {ep["dt_std_ms"]:.3f} ms'
                + (', ended at the arm limit' if ep.get('terminated') else '')
            )
            return
        if kind_name == 'evaluation':
            self.evaluations.append(ep)
            verdict = VERDICTS[int(ep['verdict'])] if 0 <= ep['verdict'] < len(VERDICTS) else '?'
            reason = episode_rejection(ep)
            if reason:
                verdict += f' ({reason})'
            if not math.isnan(ep.get('eval_score', math.nan)) and verdict != 'pending':
                score, balance = judged_figures(ep)
                if (score, balance) != (ep['return'], ep['balance_s']):
                    verdict += f' on the means: return {score:.2f}, balance {balance:.2f} s'
            say(
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
        say(prefix + line + f'policy v{int(ep["policy_version"])}')

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
        return self._count('serial_errors')

    def ticks_now(self) -> int:
        """The ticks the control node reported for its current activation."""
        return self._count('ticks')

    def _count(self, key: str) -> int:
        try:
            return int(float(self.control.get(key, 0)))
        except ValueError:
            return 0

    def rig_seconds(self) -> float | None:
        """Rig time so far, s: every tick of every activation (engaged or resetting).

        From the node's 1 Hz reports: up to a report behind; None before the first report of
        an activation.
        """
        if 'ticks' not in self.control:
            return None
        try:
            rate = float(self.control.get('target_rate_hz', 0.0))
        except ValueError:
            return None
        return (self.ticks_earlier + self.ticks_now()) / rate if rate > 0 else None

    def ended(self) -> int:
        """Episodes of every kind that have ended (training, evaluation, excitation)."""
        return len(self.episodes) + len(self.evaluations) + len(self.excitations)

    def left_active(self) -> bool:
        """The control node was active and is not any more (the supervisor did not ask)."""
        return self.activated and self.control.get('lifecycle_state') not in (None, 'active')


class Supervisor:
    """Drives the control nodes of one run through their lifecycle; see the module docstring.

    :param node: the supervising rclpy node (spun here while waiting).
    :param controls: the control nodes' fully qualified names.
    :param learn: a learner receives the transitions (hand over to it at the end).
    :param restarts: re-activations allowed after a timing violation or serial stall, in a
        row without a finished episode.
    :param say: where progress lines go.
    :param check: called on every spin; raises to abort (a child process that died, a
        signal Python swallowed).
    """

    def __init__(
        self,
        node: Any,
        controls: list[str],
        learn: bool,
        restarts: int,
        say: Callable[[str], object] = say,
        check: Callable[[], None] = lambda: None,
    ) -> None:
        from rip_control.ros.lifecycle_driver import LifecycleDriver

        many = len(controls) > 1
        self.node = node
        self.learn = learn
        self.restarts = restarts
        self.say = say
        self.check = check
        self.drivers = [LifecycleDriver(node, fqn) for fqn in controls]
        self.monitors = [
            RigMonitor(node, fqn, fqn.strip('/').split('/')[0] if many else '') for fqn in controls
        ]
        self.stopped_by_operator = ''  # the node the operator deactivated, if one was
        self.stopped_for_rig_time = ''  # why the rig-time limit ended the run, if it did
        self.stopped_decided = ''  # why the caller's verdict ended the run early, if it did
        self.budgets: dict[str, RigBudget] = {}  # the rig-time limit of each rig, if any

    def wait_until(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Spin (bounded) until ``ready()``; :class:`RunFailed` naming ``what`` otherwise."""
        import rclpy

        deadline = time.monotonic() + timeout_s
        while not ready():
            self.check()
            if time.monotonic() > deadline:
                raise RunFailed(f'{what} within {timeout_s:g} s')
            rclpy.spin_once(self.node, timeout_sec=0.05)

    def start(
        self,
        services_timeout_s: float,
        match_timeout_s: float,
        observer_ready: Callable[[], bool] | None = None,
    ) -> None:
        """Configure every node, wait for its transitions to match, activate it.

        :param observer_ready: a subscription of the caller's own that must match the
            control node's publisher first (the evaluation's recorder).
        :raises RunFailed: naming the node and the reason.
        """
        for driver in self.drivers:
            self.wait_until(
                functools.partial(driver.wait_for_services, 0.5),
                services_timeout_s,
                f'{driver.target} never offered its lifecycle services',
            )
            if not driver.change('configure'):
                raise RunFailed(f'{driver.target} refused to configure (see its log)')
        if observer_ready is not None:
            self.wait_until(observer_ready, 10.0, 'no transitions publisher matched')
        if self.learn or observer_ready is not None:
            # The control node's own count (in its diagnostics) is the one that matters: each
            # side discovers the match on its own.
            self.wait_until(
                lambda: all(
                    int(m.control.get('transitions_subscribers', 0)) > 0 for m in self.monitors
                ),
                match_timeout_s,
                'a control node never matched a subscriber to its transitions',
            )
        for driver, mon in zip(self.drivers, self.monitors, strict=True):
            if not driver.change('activate'):
                raise RunFailed(f'{driver.target} refused to activate (see its log)')
            mon.activated = True  # from now on, leaving active on its own is news
            mon.control = {}  # what came before activating says nothing now
            self.node.get_logger().info(f'{driver.target} active')

    def run_episodes(
        self,
        episodes: int,
        complete: Callable[[int], bool] | None = None,
        rig_seconds: float = 0.0,
        decided: Callable[[int], str] | None = None,
    ) -> None:
        """Watch until every rig has run ``episodes`` (0: until stopped) or the operator stops.

        :param complete: ``complete(episodes)`` tells whether the caller's observer has
            received all of them; after the last episode summary it is waited for (5 s).
        :param rig_seconds: the rig-time limit (0: none): at the end of an episode, a rig
            whose next one would take it past the limit ends the run.
        :param decided: ``decided(ended)`` says why the episodes that ended already decide
            what the run measures ('' while they do not): the run ends before the next
            (one rig; the caller's sequential rule, e.g. a certain rejection).
        :raises RunFailed: a node left active for a reason that ends the run.
        """
        import rclpy

        done_at: float | None = None
        self.budgets = {m.fqn: RigBudget(rig_seconds) for m in self.monitors if rig_seconds > 0}
        while not self.stopped_by_operator:
            self.check()
            rclpy.spin_once(self.node, timeout_sec=0.1)
            for driver, mon in zip(self.drivers, self.monitors, strict=True):
                self._check_still_active(driver, mon)
            if self.stopped_for_rig_time:  # a trip with no room left to re-run its episode
                return
            for mon in self.monitors:
                budget = self.budgets.get(mon.fqn)
                if budget is None:
                    continue
                why = budget.exhausted(mon)
                if why:
                    self.stopped_for_rig_time = why
                    self.say(f'{mon.fqn}: {why}; stopping the run')
                    return
            ended = len(self.monitors[0].episodes)
            if decided is not None and 0 < ended < episodes:
                self.stopped_decided = decided(ended)
                if self.stopped_decided:
                    self.say(f'{self.stopped_decided}; stopping the run')
                    return
            if episodes and all(len(m.episodes) >= episodes for m in self.monitors):
                if complete is None or complete(episodes):
                    return
                if done_at is None:
                    done_at = time.monotonic()
                elif time.monotonic() - done_at > 5.0:
                    self.say('the observer missed part of the last episode')
                    return
        mon = next(m for m in self.monitors if m.fqn == self.stopped_by_operator)
        self.say(
            f'{self.stopped_by_operator} deactivated by the operator after '
            f'{len(mon.episodes)} episode(s): stopping the run in the safe order'
        )

    def _check_still_active(self, driver: Any, mon: RigMonitor) -> None:
        """Act on a control node that left active without being asked to.

        A timing violation is the 3-strike rule doing its job, and a serial failure (replies
        missing on consecutive ticks) a stall the rig may recover from: the motor is off and
        the unconfirmed transitions were withdrawn, so the rig is re-activated (a new episode
        from a reset), each time said out loud. Only ``restarts`` trips in a row with no
        episode finished between them end the run. A deactivate with no fault is the
        operator's stop button. Anything else (a vanished rig, a lost real-time process)
        ends the run at once.

        :raises RunFailed: naming the node and the reason.
        """
        if not mon.left_active():
            return
        # The report that says so holds the activation's final counters; the calls below spin
        # the node, and a newer report (of the next activation) may replace it meanwhile.
        serial_errors, ticks = mon.serial_errors_now(), mon.ticks_now()
        reason = mon.control_message or 'no reason given'
        state = driver.state(timeout_s=2.0)
        if state == 'active':
            mon.control = {}  # a stale report from before the activation
            return
        if state == 'inactive' and mon.control.get('fault') == 'none':
            # No fault: someone asked for it (the operator's stop button).
            if mon.control.get('motor_confirmed_off') != 'True':
                raise RunFailed(
                    f'{mon.fqn} was deactivated but the rig did not confirm the disengage'
                )
            self.stopped_by_operator = mon.fqn
            return
        if len(mon.episodes) > mon._episodes_at_trip:
            mon.restarts = 0  # an episode finished since the last trip
        mon._episodes_at_trip = len(mon.episodes)
        recoverable = 'TimingViolation' in reason or 'SerialFailure' in reason
        budget, used = self.budgets.get(mon.fqn), mon.rig_seconds()
        if recoverable and budget is not None and used is not None and budget.over(used):
            # Re-activating would re-run the episode the trip cut short: it does not fit.
            self.stopped_for_rig_time = budget.over(used)
            self.say(
                f'{mon.fqn}: {reason.removeprefix("stopped: ")}; motor disengaged; '
                f'{self.stopped_for_rig_time}; not re-activating'
            )
            return  # this activation stays the last: the summary's trace counts its ticks
        if recoverable and mon.restarts < self.restarts:
            mon.restarts += 1
            mon.restarts_total += 1
            self.say(
                f'{mon.fqn}: {reason.removeprefix("stopped: ")}; motor disengaged, its '
                f'unconfirmed transitions withdrawn; re-activating (trip {mon.restarts} of at '
                f'most {self.restarts} in a row without a finished episode, '
                'violation_restarts:=N)'
            )
            if not driver.change('activate'):
                raise RunFailed(f'{mon.fqn} refused to re-activate after a timing violation')
            mon.serial_errors_earlier += serial_errors
            mon.ticks_earlier += ticks
            mon.control = {}
            return
        if recoverable and self.restarts:
            reason += f' ({mon.restarts} restarts in a row without a finished episode)'
        raise RunFailed(f'{mon.fqn} left active on its own: {reason} (motor disengaged)')

    def hand_over(self, timeout_s: float = 30.0) -> tuple[int, int] | None:
        """Deactivate every rig (motor off), then let the learner catch up before it stops.

        Waits (bounded) until the learner has received every transition the rigs published,
        so stopping it loses none in flight; if it has not by the deadline, says how many it
        got.

        :returns: (transitions published, transitions the learner received), or None without
            a learner or if the rigs never reported inactive.
        """
        import rclpy

        self.deactivate_all()
        if not self.learn:
            return None
        for mon in self.monitors:
            mon.control = {}  # counts from after the deactivation only

        def counts() -> tuple[int, int] | None:
            if not all(m.control.get('lifecycle_state') == 'inactive' for m in self.monitors):
                return None
            published = sum(int(m.control.get('transitions_published', 0)) for m in self.monitors)
            return published, int(self.monitors[0].learner.get('transitions_received', 0))

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = counts()
            if got is not None and got[1] >= got[0]:
                return got
            rclpy.spin_once(self.node, timeout_sec=0.05)
        got = counts()
        if got is not None:
            self.say(f'the learner received {got[1]} of the {got[0]} transitions published')
        return got

    def deactivate_all(self) -> None:
        """Every rig that is still active is deactivated (motor off); failures are said."""
        for driver in self.drivers:
            try:
                if driver.state(timeout_s=2.0) == 'active':
                    driver.change('deactivate', timeout_s=5.0)
            except (TimeoutError, RuntimeError) as exc:
                self.say(f'could not deactivate {driver.target} ({exc}); stopping it by signal')


def main(argv: list[str] | None = None) -> int:
    """The ``finetune_supervisor`` program: configure, activate, watch, hand over.

    Exit status: 0 done (or stopped by the operator or a signal), 1 a node failed, 2 bad
    arguments.
    """
    # First, before anything a signal could interrupt. A signal is only recorded: raised
    # between two bytecodes of rclpy's executor it once left half a Task behind (a traceback
    # from its finaliser) and, swallowed there, a supervisor watching forever. Every wait
    # polls it instead (within 0.1 s) and the program ends through its own path.
    stop = StopSignals().install()

    def check() -> None:
        if stop.requested:
            raise StopRequested(stop.signum or signal.SIGINT)

    try:
        return _main(list(sys.argv[1:] if argv is None else argv), check)
    except KeyboardInterrupt:  # each control node disengages on its own signal
        return 0


def _main(argv: list[str], check: Callable[[], None]) -> int:
    """The program's work; ``check`` (called by every wait) raises once a stop came."""
    import os

    ros_args = argv[argv.index('--ros-args') :] if '--ros-args' in argv else []
    argv = argv[: len(argv) - len(ros_args)]
    try:
        opts = parse_options(argv, OPTIONS)
    except ValueError as exc:
        print(f'finetune_supervisor: {exc}', file=sys.stderr)
        return 2
    import rclpy

    from rip_control.ros.node_params import SecurityRefused, init_rclpy, security_named

    controls = [c.strip() for c in str(opts['controls']).split(',') if c.strip()]
    try:
        widened = init_rclpy(['--ros-args', *ros_args[1:]])
        with security_named(['--ros-args', *ros_args[1:]]):
            node = rclpy.create_node(f'rip_supervisor_{os.getpid()}')
    except SecurityRefused as exc:
        print(f'finetune_supervisor: {exc}', file=sys.stderr)
        return 2
    log = node.get_logger()
    if widened:
        log.warning(widened)
    sup = Supervisor(node, controls, opts['learn'], opts['violation_restarts'], log.info, check)
    try:
        sup.start(60.0, opts['match_timeout_s'])
        sup.run_episodes(opts['episodes'], rig_seconds=opts['rig_seconds'])
        got = sup.hand_over()
        if got is not None:
            unmatched = sum(int(m.control.get('transitions_unmatched', 0)) for m in sup.monitors)
            log.info(
                f'transitions published {got[0]}, unmatched {unmatched}, '
                f'received by the learner {got[1]}'
            )
        if sup.stopped_by_operator:
            done = min(len(m.episodes) for m in sup.monitors)
            log.info(f'stopped by the operator after {done} episodes; motors off')
        elif got is not None and got[1] < got[0]:
            log.warning(
                f'episodes done, motors off; the learner received {got[1]} of the {got[0]} '
                'transitions published'
            )
        else:
            log.info(
                'episodes done, motors off'
                + (', learner has every transition' if got is not None else '')
            )
        return 0
    except RunFailed as exc:
        log.error(f'FAILED: {exc}')
        sup.deactivate_all()
        return 1
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    sys.exit(main())
