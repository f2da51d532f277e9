"""The ``rip_learner`` node: SAC in its own process, fed by the rigs' ``transitions``.

``ros2 run rip_control learner_node`` (or ``python -m rip_learner.learner_node``).

Threads of this process:

* the **executor** thread: the ``transitions`` subscription (each message is checked —
  labelled layout, sizes, finite values, measured dt within ``dt_tolerance_ms`` of the
  period — and queued; rejections are counted by reason), and ``/diagnostics`` at 1 Hz;
* the **training** thread: drains the queue into the replay buffer it alone owns, runs
  ``model.train(n, batch_size)`` so that gradient steps per received transition approach
  ``gradient_steps`` (K) once ``learning_starts`` transitions are stored, publishes the actor
  on ``policy_weights`` (once at start, then every ``publish_every_steps`` updates or
  ``publish_every_s``), and checkpoints every ``checkpoint_every_s``.

SB3's ``learn()`` is never called; the SAC side is :mod:`rip_learner.trainer`. The buffer
is saved at every checkpoint and at shutdown (SIGINT/SIGTERM included) with
:mod:`rip_learner.buffer_store`: atomic, no pickle, tagged with the rate.
``resume_buffer:=PATH`` continues from one; a buffer from another rate is refused at start
with both rates named, and the process exits non-zero.
"""

from __future__ import annotations

from collections import Counter
import os
import sys
import threading
import time
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
import numpy as np
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.duration import Duration
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Float32MultiArray, UInt8MultiArray

from rip_control.buffer_file import RunFolderInUse, check_run_dir_is_free
from rip_control.params import LEARNER_PARAMETERS
from rip_control.policy import POLICY_VERSION_MAX
from rip_control.rig.env import ACTION_SIZE
from rip_control.ros.node_params import declare
from rip_control.ros.qos import (
    DIAGNOSTICS,
    POLICY_WEIGHTS,
    STATUS_QOS,
    TRANSITIONS,
    TRANSITIONS_QOS,
    WEIGHTS_QOS,
)
from rip_control.transitions import TransitionRejected, check_period, split_run_id, unpack
from rip_learner.learner_settings import LearnerConfigError, LearnerSettings
from rip_learner.trainer import Trainer


class LearnerNode(Node):
    """Runs SAC on the transitions of one or more rigs and publishes the actor.

    ROS on the outside (the ``transitions`` subscription and its checks, ``policy_weights``,
    ``/diagnostics``), the training thread's schedule (when to train, publish, checkpoint);
    the SAC side itself is a :class:`rip_learner.trainer.Trainer`.
    """

    def __init__(self, node_name: str = 'rip_learner', **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare(self, LEARNER_PARAMETERS)
        self.settings = s = LearnerSettings.from_node(self)
        try:
            check_run_dir_is_free(s.run_dir, s.resume_buffer)
        except RunFolderInUse as exc:
            raise LearnerConfigError(str(exc)) from exc
        self._tune_process(s)
        # The name is read now: once the context is shut down, the node's handle is gone.
        self._stopping_logger = f'{self.get_name()}.stopping'
        self.trainer = Trainer(s, lambda text: self.log().info(text))
        self.trainer.load_initial_policy()
        self.trainer.load_prior_data()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.received = 0
        self.accepted = 0
        self.rejected: Counter[str] = Counter()
        self.failed: BaseException | None = None  # set if the training thread died
        self.checkpoints_failed = 0  # periodic saves an OSError refused (a full disk)
        self._actor_updates_at_publish = 0
        self._publish_t = 0.0
        self._diag_prev = (time.monotonic(), 0)
        self.trainer.resume()
        self.trainer.import_bags()
        self.trainer.freeze_smoothness_reference()
        self._weights_pub = self.create_publisher(UInt8MultiArray, POLICY_WEIGHTS, WEIGHTS_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS, STATUS_QOS)
        self._sub = self.create_subscription(
            Float32MultiArray,
            TRANSITIONS,
            self._on_transition,
            TRANSITIONS_QOS,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.create_timer(1.0, self._publish_diagnostics)
        self._thread = threading.Thread(target=self._train_main, name='rip-learner-train')
        self._thread.start()
        self.get_logger().info(
            f'learner at {s.rate_hz:g} Hz: K={s.gradient_steps}, batch {s.sac.batch_size}, '
            f'nets {list(s.sac.hidden_sizes)}, learning_starts {s.learning_starts}, buffer '
            f'{self.trainer.buffer_size} stored, torch threads {s.sac.torch_threads}, run dir '
            f'{s.run_dir}'
        )

    def _tune_process(self, s: LearnerSettings) -> None:
        notes = []
        if s.nice:
            os.nice(s.nice)
            notes.append(f'nice +{s.nice}')
        # Measured on 2 cores: pinning the learner off the control CPU crowds the control
        # process's other threads (and the emulator) onto the control CPU and made tick
        # jitter worse (p99 1.3 ms vs 0.01 ms), so the default leaves placement to the kernel.
        cpus = {c for c in s.cpus if c >= 0}
        if cpus and cpus != os.sched_getaffinity(0):
            try:
                os.sched_setaffinity(0, cpus)
                notes.append(f'cpus {sorted(cpus)}')
            except OSError as exc:
                notes.append(f'cpu pinning refused ({exc})')
        self.get_logger().info('learner process: ' + (', '.join(notes) or 'untuned'))

    # -- receiving -------------------------------------------------------------------------

    def _on_transition(self, msg: Float32MultiArray) -> None:
        self.received += 1
        s = self.settings
        try:
            labels, theirs = split_run_id([(d.label, int(d.size)) for d in msg.layout.dim])
            if s.run_id and theirs != s.run_id:
                raise TransitionRejected(
                    'foreign',
                    f'a transition from run {theirs or "(untagged)"}, not this run '
                    f'({s.run_id}): another control node on this DDS domain?',
                )
            data = np.asarray(msg.data, dtype=np.float32)
            t = unpack(labels, data, self.trainer.obs_size, ACTION_SIZE)
            check_period(t, s.rate_hz, s.dt_tolerance_s)
        except TransitionRejected as exc:
            self.rejected[exc.reason] += 1
            self.get_logger().warning(
                f'transition rejected ({exc.reason}, {sum(self.rejected.values())} so far): {exc}',
                throttle_duration_sec=5.0,
            )
            return
        if not self.trainer.put(t):  # the inbox is full: dropped and counted there
            return
        self.accepted += 1
        self._wake.set()

    # -- the training thread ---------------------------------------------------------------

    def _train_main(self) -> None:
        s, tr = self.settings, self.trainer
        try:
            self._publish_weights()
            while not self._stop.is_set() and self.context.ok():
                tr.drain()
                if not tr.train_due():
                    self._wake.wait(0.05)
                    self._wake.clear()
                now = time.monotonic()
                # Only an actor that moved is published: critic-only updates and undone
                # divergences would resend the same weights as a new version.
                trained = tr.actor_updates - self._actor_updates_at_publish
                if trained >= s.publish_every_steps or (
                    trained > 0 and now - self._publish_t >= s.publish_every_s
                ):
                    self._publish_weights()
                if now - tr.last_save_s >= s.checkpoint_every_s:
                    self._checkpoint(now)
        except Exception as exc:  # noqa: BLE001 - reported, and the process exits non-zero
            if not self.context.ok():
                return  # shutting down (SIGINT/SIGTERM): the final save happens in main()
            self.get_logger().fatal(f'training thread failed: {type(exc).__name__}: {exc}')
            self.failed = exc
            # The ERROR status goes out before the process ends (the 1 Hz timer would not
            # run again): monitors see why the learner stopped, not only that it did.
            try:
                self._publish_diagnostics()
                self._diag_pub.wait_for_all_acked(Duration(seconds=1.0))
            except Exception as diag_exc:  # noqa: BLE001 - the exit status still says it
                self.get_logger().error(f'final diagnostics not sent: {diag_exc!r}')
            rclpy.try_shutdown(context=self.context)

    def _publish_weights(self) -> None:
        tr = self.trainer
        if tr.version >= POLICY_VERSION_MAX:
            # Every control node would refuse a higher one: say so rather than publish it.
            self.get_logger().error(
                f'policy version {tr.version} is the highest a control node takes '
                f'({POLICY_VERSION_MAX}): no more weights are published; start a new run',
                throttle_duration_sec=60.0,
            )
            return
        tr.version += 1
        msg = UInt8MultiArray()
        msg.data = tr.actor_bytes()
        self._weights_pub.publish(msg)
        self._actor_updates_at_publish = tr.actor_updates
        self._publish_t = time.monotonic()

    def log(self) -> Any:
        """The node's logger, or one that does not publish to ``/rosout`` once stopping.

        After a signal has shut the context down, rcl would print a failure to publish for
        every line of the final save.
        """
        if self.context.ok():
            return self.get_logger()
        import rclpy.logging

        return rclpy.logging.get_logger(self._stopping_logger)

    def shutdown(self) -> None:
        """Stop training and save everything (called on every way out)."""
        self.log().info('stopping: training ends, saving the buffer and networks')
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30.0)
        self.trainer.drain()
        self.trainer.checkpoint()

    def _checkpoint(self, now: float) -> None:
        """A periodic save; one a full disk (or any OSError) refuses is said, counted, retried.

        Training goes on: what the learner holds is in memory, the files on disk are the last
        whole save (each file is written atomically), and the next interval tries again.
        """
        try:
            self.trainer.checkpoint()
        except OSError as exc:
            self.trainer.last_save_s = now  # the next try after checkpoint_every_s
            self.checkpoints_failed += 1
            self.get_logger().error(
                f'checkpoint failed ({self.checkpoints_failed} so far), training goes on and '
                f'tries again in {self.settings.checkpoint_every_s:g} s: '
                f'{exc.strerror or exc} ({exc.filename or self.settings.run_dir})'
            )

    # -- diagnostics -----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters for diagnostics and the runner."""
        tr = self.trainer
        return {
            'buffer_size': tr.buffer_size,
            'buffer_resumed': tr.resumed,
            'buffer_evicted': tr.evicted,
            'transitions_received': self.received,
            'transitions_accepted': self.accepted,
            'transitions_dropped_inbox_full': tr.inbox_dropped,
            'transitions_rejected': sum(self.rejected.values()),
            **{f'rejected_{k}': v for k, v in sorted(self.rejected.items())},
            'bag_imported': tr.bag_imported,
            'checkpoints_failed': self.checkpoints_failed,
            'bag_not_kept': tr.bag_not_kept,
            **{f'bag_rejected_{k}': v for k, v in sorted(tr.bag_rejected.items())},
            'gradient_steps_done': tr.updates,
            'train_calls': tr.train_calls,
            'train_seconds': round(tr.train_s, 3),
            'train_diverged': tr.diverged,
            'prior_data_transitions': tr.prior_count,
            'critic_only_updates': min(tr.updates, self.settings.critic_warmup_updates),
            'updates_per_transition': (
                tr.updates / tr.added_after_start if tr.added_after_start else 0.0
            ),
            'policy_version_published': tr.version,
            'last_checkpoint': tr.last_checkpoint or 'none',
        }

    def _publish_diagnostics(self) -> None:
        tr = self.trainer
        values = self.stats()
        now = time.monotonic()
        prev_t, prev_updates = self._diag_prev
        values['updates_per_s'] = round((tr.updates - prev_updates) / max(now - prev_t, 1e-9), 1)
        self._diag_prev = (now, tr.updates)
        level, message = DiagnosticStatus.OK, 'training' if tr.updates else 'waiting for data'
        k = self.settings.gradient_steps
        if self.failed is not None:
            failed = f'{type(self.failed).__name__}: {self.failed}'
            level, message = DiagnosticStatus.ERROR, f'training failed: {failed}'
        elif values['transitions_rejected']:
            level, message = DiagnosticStatus.WARN, 'transitions rejected'
        elif tr.added_after_start > 500 and values['updates_per_transition'] < 0.5 * k:
            level, message = DiagnosticStatus.WARN, 'falling behind K updates per transition'
        status = DiagnosticStatus(
            name=f'{self.get_name()}: learner',
            hardware_id='rip_learner',
            level=level,
            message=message,
            values=[KeyValue(key=key, value=str(v)) for key, v in values.items()],
        )
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        arr.status = [status]
        self._diag_pub.publish(arr)


def main(args: list[str] | None = None) -> int:
    """Run until SIGINT/SIGTERM; the buffer is saved on every way out. Exit 2: bad config.

    A signal while the node is being built (loading the resume buffer, importing bags) lets
    the loading finish, then saves what it holds: nothing received is lost, nothing
    half-loaded is written. A signal before that (nothing loaded yet) exits 0 at once.
    """
    from rip_control.ros.node_params import run_node

    def build(stop: Any) -> LearnerNode | None:
        # Nothing loaded yet: a stop that came first exits at once.
        return None if stop.requested else LearnerNode()  # the training thread starts here

    def start(node: LearnerNode, stop: Any) -> SingleThreadedExecutor:
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        return executor

    def way_out(node: LearnerNode | None, executor: Any, code: int) -> int:
        if node is not None:
            try:
                node.shutdown()
            except Exception as exc:  # noqa: BLE001
                node.log().fatal(f'final save failed: {exc!r}')
                code = 1
            if node.failed is not None:
                code = 1
        if executor is not None:
            executor.shutdown()
        if node is not None:
            node.destroy_node()
        return code

    return run_node('rip_learner', args, build, start, way_out)


if __name__ == '__main__':
    sys.exit(main())
