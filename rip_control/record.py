"""Record the ``transitions`` topic into a rosbag2 bag, for machines without ``ros2 bag``.

``python -m rip_control.record out:=runs/demo/transitions_bag rate:=50``

Subscribes with the control node's QoS (reliable, volatile, depth 1000) and takes each
message serialised, exactly as ``ros2 bag record /transitions`` would, into a standard rosbag2
directory (MCAP storage, ``metadata.yaml``) with the rate in its ``custom_data``
(:mod:`rip_control.bags`). It stops on Ctrl-C / SIGTERM, after ``duration_s`` or after
``max_messages``, and always closes the bag so ``metadata.yaml`` is written. The learner
imports such bags with ``resume_bag:=PATH``; ``ros2 bag play`` replays them into a learner on
a full ROS 2 install.
"""

from __future__ import annotations

from collections.abc import Callable
import os
from pathlib import Path
import sys
import time
from typing import Any

from rip_control.bags import TOPIC
from rip_control.params import ACTION_HISTORY, Param, help_requested, parse_options
from rip_control.procs import ensure_loopback_dds
from rip_control.signals import StopSignals

OPTIONS = (
    Param('out', 'transitions_bag', 'bag directory to create (must not exist)'),
    Param(
        'rate', 50.0, 'control rate of the recorded transitions, Hz (bag metadata)', 1.0, 1000.0
    ),
    ACTION_HISTORY,  # the recorded node's: the bag's observation size
    Param('topic', TOPIC, 'topic to record'),
    Param('duration_s', 0.0, 'stop after this long (0: until Ctrl-C)', 0.0, 1e9),
    Param('max_messages', 0, 'stop after this many transitions (0: no limit)', 0, 10**12),
)


DRAIN_S = 1.0  # at most this long taking what was received before the stop
DRAIN_SPIN_S = 0.01  # ... each spin waiting this long: nothing in it ends the drain


def record(
    opts: dict[str, Any], stop: StopSignals, log: Any = print, ros_teardown: bool = True
) -> int:
    """Record until ``stop`` is requested (or the limits); return the messages written.

    ``stop`` is installed by the caller before anything else: a signal at any moment from
    then on ends the loop (or skips it), and the bag is closed whatever the moment.

    :param ros_teardown: destroy the executor and node and shut rclpy down after the bag is
        closed. The command line skips it and ends the process instead: twice in full test
        runs a recorder stopped a moment after it started died in that teardown (SIGSEGV,
        inside rclpy/DDS), after its bag was closed; nothing of the recorder needs it.
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions
    from std_msgs.msg import Float32MultiArray

    from rip_control.bags import BagWriter
    from rip_control.rig.env import ACTION_SIZE, obs_size
    from rip_control.ros.node_params import security_named
    from rip_control.ros.qos import TRANSITIONS_QOS

    if Path(opts['out']).exists():
        raise FileExistsError(f'bag {opts["out"]} exists already; not overwriting it')
    writer: BagWriter | None = None
    node = executor = None
    failed: list[OSError] = []  # a write the disk refused: recording ends there
    try:
        # No rclpy handlers: the loop below polls ``stop`` (rclpy's would shut the context
        # down under the subscription).
        with security_named([]):  # SROS2 asked for and refused: a named error, exit 2
            rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)
            node = rclpy.create_node('rip_record')
        # The bag only once the node exists: a refused start leaves no bag behind.
        bag = BagWriter(opts['out'], opts['rate'], obs_size(opts['action_history']), ACTION_SIZE)
        writer = bag
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        on_message = _writing_into(bag, failed)
        sub = node.create_subscription(
            Float32MultiArray, opts['topic'], on_message, TRANSITIONS_QOS, raw=True
        )
        log(f'recording {opts["topic"]} at {opts["rate"]:g} Hz into {opts["out"]} (Ctrl-C stops)')
        _spin_until_stopped(opts, stop, executor, sub, bag, failed, log)
        _drain(stop, executor, bag, failed)
    finally:
        try:
            if writer is not None:
                writer.close()
                log(f'closed {opts["out"]}: {writer.count} transitions')
        except OSError as exc:
            failed.append(exc)
        if ros_teardown:
            if executor is not None:
                executor.shutdown()
            if node is not None:
                node.destroy_node()
            rclpy.try_shutdown()
    count = writer.count if writer is not None else 0
    if failed:
        raise _record_failed(failed, count, opts['out'])
    return count


def _writing_into(bag: Any, failed: list[OSError]) -> Callable[[bytes], None]:
    """The subscription's callback: each message into ``bag``, until a write is refused."""

    def on_message(data: bytes) -> None:
        if failed:
            return
        try:
            bag.write(data, time.time_ns())
        except OSError as exc:
            failed.append(exc)

    return on_message


def _spin_until_stopped(
    opts: dict[str, Any],
    stop: StopSignals,
    executor: Any,
    sub: Any,
    bag: Any,
    failed: list[OSError],
    log: Any,
) -> None:
    """Take messages until a stop, a refused write, ``duration_s`` or ``max_messages``."""
    matched = 0
    start = time.monotonic()
    last_note = start
    while not stop.requested and not failed:
        executor.spin_once(timeout_sec=0.1)
        count = sub.get_publisher_count()
        if count != matched:
            matched = count
            log(f'{matched} publisher(s) matched on {opts["topic"]}')
        now = time.monotonic()
        if opts['duration_s'] and now - start >= opts['duration_s']:
            break
        if opts['max_messages'] and bag.count >= opts['max_messages']:
            break
        if now - last_note >= 5.0:
            log(f'{bag.count} transitions recorded')
            last_note = now


def _drain(stop: StopSignals, executor: Any, bag: Any, failed: list[OSError]) -> None:
    """After a signal, take what the subscription received but has not handed over yet.

    The bag then closes with every transition that reached this process. (Not after
    ``max_messages`` or ``duration_s``: those are the bag's stated bounds.) Each spin waits
    a moment of its own: rclpy's executor answers a zero timeout with nothing every other
    call, which would end the drain after one message.
    """
    drained_at = time.monotonic() + DRAIN_S
    while stop.requested and not failed and time.monotonic() < drained_at:
        before = bag.count
        executor.spin_once(timeout_sec=DRAIN_SPIN_S)
        if bag.count == before:
            break


def _record_failed(failed: list[OSError], count: int, out: str) -> RecordFailed:
    """The error of a recording a refused write ended, naming whether its bag could close."""
    closed = len(failed) == 1 and (Path(out) / 'metadata.yaml').exists()
    return RecordFailed(
        f'{failed[0].strerror or failed[0]} after {count} transitions: '
        + (
            f'recording stopped at the first refused write; {out} could still be '
            'closed (readable; a chunk the disk refused may be missing)'
            if closed
            else f'{out} could not be closed ({failed[-1].strerror or failed[-1]}): '
            'its index and metadata.yaml are missing, it cannot be read'
        )
    )


class RecordFailed(OSError):
    """A write the disk refused ended the recording (the bag's state named)."""


def main(argv: list[str] | None = None) -> int:
    """Command line: ``name:=value`` options (see ``--help``). Exit 0 after a signal too."""
    stop = StopSignals().install()  # first: a signal from here on ends in a closed bag
    argv = sys.argv[1:] if argv is None else argv
    if help_requested(argv, __doc__, OPTIONS):
        return 0
    try:
        opts = parse_options(argv, OPTIONS)
        ensure_loopback_dds()
        record(opts, stop, log=lambda line: print(line, flush=True), ros_teardown=False)
    except (ValueError, FileExistsError) as exc:
        print(f'record: {exc}', file=sys.stderr)
        return 2
    except RecordFailed as exc:
        print(f'record: {exc}', file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)  # as below: no rclpy teardown
    # The bag is closed and said so: end here, without rclpy's teardown (see record()).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == '__main__':
    sys.exit(main())
