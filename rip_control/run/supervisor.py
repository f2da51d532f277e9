"""Drives a launched fine-tune from start to end, as the runner does: ``finetune_supervisor``.

``launch/finetune.launch.py`` starts it once every rig emulator has announced itself ready
(so no control node configures before its rig answers). For each control node it:

1. calls ``configure``;
2. calls ``activate`` only once the node's own ``transitions`` publisher has matched a
   subscriber (``transitions_subscribers`` in the node's diagnostics): DDS discovery is per
   side, and until the publisher sees the learner the first ticks would reach no one;
3. when every rig has run its ``episodes``, deactivates every rig (motor off) and waits,
   bounded, until the learner has received every transition they published.

Then it exits 0, and the launch file ends the launch: the learner saves its buffer on the
SIGINT that ``ros2 launch`` sends, the emulators power down last. It exits 1 with the reason
when a node refuses a transition, leaves active on its own (a watchdog trip, a vanished rig)
or never matches the learner. On SIGINT/SIGTERM (Ctrl-C on the launch reaches every process
at once) it exits 0 at once: each control node disengages on its own signal.

Arguments (``name:=value``): ``controls:=/rip_control[,/rig1/rip_control...]`` (the nodes'
fully qualified names), ``episodes:=N`` (0: run until stopped), ``learn:=true|false``.
"""

from __future__ import annotations

import sys
from typing import Any

from rip_control.params import Param, parse_options
from rip_control.signals import StopSignals

OPTIONS = (
    Param('controls', '/rip_control', 'comma-separated fully qualified control node names'),
    Param('episodes', 0, 'episodes each rig runs (0: until stopped)', 0, 1_000_000),
    Param('learn', True, 'a learner receives the transitions'),
    Param('match_timeout_s', 180.0, 'bound on the wait for the learner to match', 1.0, 3600.0),
    Param('violation_restarts', 5, 're-activations after a timing violation, per rig', 0, 1000),
)


def supervise(
    node: Any,
    controls: list[str],
    episodes: int,
    learn: bool,
    match_s: float,
    restarts: int = 0,
) -> None:
    """Configure, activate on match, run the episodes, hand over to the learner.

    :raises RunFailed: naming the node and the reason.
    """
    import rclpy

    from rip_control.ros.lifecycle_driver import LifecycleDriver
    from rip_control.run.finetune import (
        RunFailed,
        _hand_over_to_learner,
        _Monitor,
        _wait_until,
        check_still_active,
    )

    many = len(controls) > 1
    drivers = [LifecycleDriver(node, fqn) for fqn in controls]
    monitors = [
        _Monitor(node, fqn, fqn.strip('/').split('/')[0] if many else '') for fqn in controls
    ]
    for fqn, driver in zip(controls, drivers, strict=True):
        if not driver.wait_for_services(60.0):
            raise RunFailed(f'{fqn} never offered its lifecycle services')
        if not driver.change('configure'):
            raise RunFailed(f'{fqn} refused to configure (see its log)')
    if learn:
        _wait_until(
            node,
            lambda: all(int(m.control.get('transitions_subscribers', 0)) > 0 for m in monitors),
            match_s,
            'a control node never matched the learner to its transitions',
        )
    for fqn, driver, mon in zip(controls, drivers, monitors, strict=True):
        if not driver.change('activate'):
            raise RunFailed(f'{fqn} refused to activate (see its log)')
        mon.activated = True
        mon.control = {}
        node.get_logger().info(f'{fqn} active')
    while not (episodes and all(len(m.episodes) >= episodes for m in monitors)):
        rclpy.spin_once(node, timeout_sec=0.1)
        for fqn, mon, driver in zip(controls, monitors, drivers, strict=True):
            check_still_active(fqn, mon, driver, restarts, node.get_logger().warning)
    if learn:
        got = _hand_over_to_learner(node, drivers, monitors)
        unmatched = sum(int(m.control.get('transitions_unmatched', 0)) for m in monitors)
        if got is not None:
            node.get_logger().info(
                f'transitions published {got[0]}, unmatched {unmatched}, '
                f'received by the learner {got[1]}'
            )
    else:
        for driver in drivers:
            driver.change('deactivate', timeout_s=5.0)


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done (or stopped by a signal), 1 a node failed, 2 bad arguments."""
    stop = StopSignals().install()  # first, before anything a signal could interrupt
    try:
        with stop.interruptible():
            return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # each control node disengages on its own signal
        return 0


def _main(argv: list[str]) -> int:
    import os

    ros_args = argv[argv.index('--ros-args') :] if '--ros-args' in argv else []
    argv = argv[: len(argv) - len(ros_args)]
    try:
        opts = parse_options(argv, OPTIONS)
    except ValueError as exc:
        print(f'finetune_supervisor: {exc}', file=sys.stderr)
        return 2
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from rip_control.run.finetune import RunFailed

    controls = [c.strip() for c in str(opts['controls']).split(',') if c.strip()]
    rclpy.init(args=['--ros-args', *ros_args[1:]], signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node(f'rip_supervisor_{os.getpid()}')
    try:
        supervise(
            node,
            controls,
            opts['episodes'],
            opts['learn'],
            opts['match_timeout_s'],
            opts['violation_restarts'],
        )
        node.get_logger().info('episodes done, motors off, learner has every transition')
        return 0
    except RunFailed as exc:
        node.get_logger().error(f'FAILED: {exc}')
        return 1
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    sys.exit(main())
