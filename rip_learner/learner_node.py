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

SB3's ``learn()`` is never called. The buffer is saved at every checkpoint and at shutdown
(SIGINT/SIGTERM included) with :mod:`rip_learner.buffer_store`: atomic, no pickle, tagged
with the rate. ``resume_buffer:=PATH`` continues from one; a buffer from another rate is
refused at start with both rates named, and the process exits non-zero.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
import os
from pathlib import Path
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

from rip_control.files import atomic_write_bytes
from rip_control.policy import PolicyRejected, encode_actor, load_actor_file
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
from rip_control.ros.bags import BagRejected, read_transitions
from rip_control.ros.node_params import declare, spin_until_shutdown
from rip_control.ros.qos import TRANSITIONS_QOS, WEIGHTS_QOS
from rip_control.run.params import LEARNER_PARAMETERS
from rip_control.transitions import Transition, TransitionRejected, check_period, unpack
from rip_learner import buffer_store
from rip_learner.buffer_store import (
    BUFFER_FILE,
    BufferMeta,
    BufferRejected,
    RunFolderInUse,
    check_run_dir_is_free,
)
from rip_learner.sac import (
    CHECKPOINT_FILE,
    SacConfig,
    actor_meta,
    actor_tensors,
    build_sac,
    encode_checkpoint,
    load_checkpoint,
    load_initial_networks,
    sac_state,
)

POLICY_FILE = 'policy_latest.safetensors'


class LearnerConfigError(ValueError):
    """A parameter, initial policy or resume file the learner cannot start with."""


@dataclass(frozen=True)
class LearnerSettings:
    """Everything read from parameters at start."""

    rate_hz: float
    sac: SacConfig
    gradient_steps: int
    learning_starts: int
    max_chunk: int
    dt_tolerance_s: float
    resume_buffer: str
    resume_bags: tuple[str, ...]
    policy: str
    run_dir: Path
    publish_every_steps: int
    publish_every_s: float
    checkpoint_every_s: float
    nice: int
    cpus: tuple[int, ...]
    fault_train_error_after_updates: int = 0


PARAMETERS = LEARNER_PARAMETERS


class LearnerNode(Node):
    """Runs SAC on the transitions of one or more rigs and publishes the actor."""

    def __init__(self, node_name: str = 'rip_learner', **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare(self, PARAMETERS)
        self.settings = self._read_settings()
        s = self.settings
        try:
            check_run_dir_is_free(s.run_dir, s.resume_buffer)
        except RunFolderInUse as exc:
            raise LearnerConfigError(str(exc)) from exc
        self._tune_process(s)
        self.model = build_sac(s.sac)
        self.version = 0
        self._load_initial_policy(s)
        self._lock = threading.Lock()  # the replay buffer: add() and the whole train() call
        self._inbox: deque[Transition] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.received = 0
        self.accepted = 0
        self.rejected: Counter[str] = Counter()
        self.bag_rejected: Counter[str] = Counter()
        self.bag_imported = 0
        self.added = 0
        self.resumed = 0  # transitions loaded from resume_buffer at start
        self.added_after_start = 0
        self.train_calls = 0
        self.train_s = 0.0
        self.updates = 0
        self.last_checkpoint = ''
        self.failed: BaseException | None = None  # set if the training thread died
        self.last_save_s = time.monotonic()
        self._updates_at_publish = 0
        self._publish_t = 0.0
        self._diag_prev = (time.monotonic(), 0)
        self._resume(s)
        self._import_bags(s)
        self._weights_pub = self.create_publisher(UInt8MultiArray, 'policy_weights', WEIGHTS_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self._sub = self.create_subscription(
            Float32MultiArray,
            'transitions',
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
            f'{self.buffer_size} stored, torch threads {s.sac.torch_threads}, run dir {s.run_dir}'
        )

    # -- set-up ----------------------------------------------------------------------------

    def _read_settings(self) -> LearnerSettings:
        p = self.get_parameter
        try:
            sac = SacConfig(
                hidden_sizes=tuple(int(h) for h in p('hidden_sizes').value),
                batch_size=p('batch_size').value,
                learning_rate=p('learning_rate').value,
                gamma=p('gamma').value,
                tau=p('tau').value,
                buffer_size=p('buffer_size').value,
                torch_threads=p('torch_threads').value,
                seed=p('seed').value,
            )
        except ValueError as exc:
            raise LearnerConfigError(str(exc)) from exc
        return LearnerSettings(
            rate_hz=p('rate_hz').value,
            sac=sac,
            gradient_steps=p('gradient_steps').value,
            learning_starts=p('learning_starts').value,
            max_chunk=p('max_chunk').value,
            dt_tolerance_s=p('dt_tolerance_ms').value / 1e3,
            resume_buffer=p('resume_buffer').value,
            resume_bags=tuple(x.strip() for x in p('resume_bag').value.split(',') if x.strip()),
            policy=p('policy').value,
            run_dir=Path(p('runs_dir').value) / p('run_name').value,
            publish_every_steps=p('publish_every_steps').value,
            publish_every_s=p('publish_every_s').value,
            checkpoint_every_s=p('checkpoint_every_s').value,
            nice=p('nice').value,
            cpus=tuple(int(c) for c in p('cpus').value),
            fault_train_error_after_updates=p('fault_train_error_after_updates').value,
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

    def _load_initial_policy(self, s: LearnerSettings) -> None:
        if not s.policy:
            return
        try:
            actor = load_actor_file(
                s.policy, rate_hz=s.rate_hz, obs_size=OBS_SIZE, action_size=ACTION_SIZE
            )
        except PolicyRejected as exc:
            raise LearnerConfigError(f'initial policy refused: {exc}') from exc
        if actor.meta.hidden_sizes != s.sac.hidden_sizes:
            raise LearnerConfigError(
                f'initial policy {s.policy} has hidden sizes {list(actor.meta.hidden_sizes)} '
                f'but the learner is configured with {list(s.sac.hidden_sizes)}'
            )
        try:
            ckpt = load_initial_networks(self.model, actor, s.policy, s.rate_hz)
        except ValueError as exc:
            raise LearnerConfigError(str(exc)) from exc
        if ckpt is not None:
            self.get_logger().info(f'initial SAC networks (critics included) from {ckpt}')
        self.version = actor.version

    def _resume(self, s: LearnerSettings) -> None:
        if not s.resume_buffer:
            return
        try:
            arrays, meta = buffer_store.load(
                s.resume_buffer, rate_hz=s.rate_hz, obs_size=OBS_SIZE, action_size=ACTION_SIZE
            )
        except BufferRejected as exc:
            raise LearnerConfigError(f'resume_buffer refused: {exc}') from exc
        n = buffer_store.insert(self.model.replay_buffer, arrays)
        self.added = self.resumed = n
        self.version = max(self.version, meta.policy_version)
        note = ''
        ckpt = Path(s.resume_buffer).with_name(CHECKPOINT_FILE)
        if ckpt.exists() and not s.policy:
            self._load_checkpoint(ckpt)
            note = f' and the SAC networks from {ckpt}'
        self.get_logger().info(
            f'resumed {n} transitions from {s.resume_buffer}{note} (policy version {self.version})'
        )

    def _import_bags(self, s: LearnerSettings) -> None:
        """Fill the buffer from recorded bags, with the checks live transitions get."""
        if not s.resume_bags:
            return
        try:
            got = read_transitions(
                s.resume_bags,
                rate_hz=s.rate_hz,
                obs_size=OBS_SIZE,
                action_size=ACTION_SIZE,
                dt_tolerance_s=s.dt_tolerance_s,
            )
        except BagRejected as exc:
            raise LearnerConfigError(f'resume_bag refused: {exc}') from exc
        self._inbox.extend(got.transitions)
        self.bag_rejected = got.rejected
        n = self._drain_inbox()
        self.bag_imported = n
        self.added_after_start = 0  # imported data is not owed K updates each
        per_bag = ', '.join(f'{k}: {v}' for k, v in got.per_bag.items())
        self.get_logger().info(
            f'imported {n} transitions from {len(got.per_bag)} bag(s) ({per_bag}); '
            f'{got.messages} messages read, rejected {dict(got.rejected) or "none"}'
        )

    def _load_checkpoint(self, path: Path) -> None:
        try:
            load_checkpoint(self.model, path.read_bytes(), self.settings.rate_hz, str(path))
        except (OSError, ValueError) as exc:
            raise LearnerConfigError(str(exc)) from exc

    @property
    def buffer_size(self) -> int:
        """Transitions stored in the replay buffer."""
        rb = self.model.replay_buffer
        return int(rb.buffer_size if rb.full else rb.pos)

    # -- receiving -------------------------------------------------------------------------

    def _on_transition(self, msg: Float32MultiArray) -> None:
        self.received += 1
        s = self.settings
        try:
            labels = [(d.label, int(d.size)) for d in msg.layout.dim]
            t = unpack(labels, np.asarray(msg.data, dtype=np.float32), OBS_SIZE, ACTION_SIZE)
            check_period(t, s.rate_hz, s.dt_tolerance_s)
        except TransitionRejected as exc:
            self.rejected[exc.reason] += 1
            self.get_logger().warning(
                f'transition rejected ({exc.reason}, {sum(self.rejected.values())} so far): {exc}',
                throttle_duration_sec=5.0,
            )
            return
        self.accepted += 1
        self._inbox.append(t)
        self._wake.set()

    # -- training --------------------------------------------------------------------------

    def _drain_inbox(self) -> int:
        rb = self.model.replay_buffer
        n = 0
        with self._lock:
            while self._inbox:
                t = self._inbox.popleft()
                rb.add(
                    t.obs[None],
                    t.next_obs[None],
                    t.action[None],
                    np.array([t.reward], dtype=np.float32),
                    np.array([float(t.terminated or t.truncated)], dtype=np.float32),
                    [{'TimeLimit.truncated': bool(t.truncated and not t.terminated)}],
                )
                n += 1
        self.added += n
        if self.buffer_size >= self.settings.learning_starts:
            self.added_after_start += n
        return n

    def _train_main(self) -> None:
        s = self.settings
        try:
            self._publish_weights()
            while not self._stop.is_set() and self.context.ok():
                self._drain_inbox()
                due = s.gradient_steps * self.added_after_start - self.updates
                if due > 0 and self.buffer_size >= max(1, s.learning_starts):
                    n = min(due, s.max_chunk)
                    t0 = time.perf_counter()
                    with self._lock:
                        self.model.train(gradient_steps=n, batch_size=s.sac.batch_size)
                    self.train_s += time.perf_counter() - t0
                    self.train_calls += 1
                    self.updates += n
                    fault_at = s.fault_train_error_after_updates
                    if fault_at and self.updates >= fault_at:
                        raise RuntimeError(f'injected training fault after {self.updates} updates')
                else:
                    self._wake.wait(0.05)
                    self._wake.clear()
                now = time.monotonic()
                trained = self.updates - self._updates_at_publish
                if trained >= s.publish_every_steps or (
                    trained > 0 and now - self._publish_t >= s.publish_every_s
                ):
                    self._publish_weights()
                if now - self.last_save_s >= s.checkpoint_every_s:
                    self.checkpoint()
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

    def _actor_bytes(self) -> bytes:
        s = self.settings
        extra = {
            'learner_train_calls': str(self.train_calls),
            'learner_total_train_s': repr(self.train_s),
            'learner_updates': str(self.updates),
        }
        meta = actor_meta(s.sac, self.version, s.rate_hz)
        return encode_actor(meta, actor_tensors(self.model), extra)

    def _publish_weights(self) -> None:
        self.version += 1
        msg = UInt8MultiArray()
        msg.data = self._actor_bytes()
        self._weights_pub.publish(msg)
        self._updates_at_publish = self.updates
        self._publish_t = time.monotonic()

    # -- persistence -----------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Save the buffer, the actor and the SAC networks into the run folder (atomic)."""
        s = self.settings
        t0 = time.monotonic()
        with self._lock:
            arrays = buffer_store.extract(self.model.replay_buffer)
            state = sac_state(self.model)
            actor = self._actor_bytes()
        meta = BufferMeta(s.rate_hz, OBS_SIZE, ACTION_SIZE, len(arrays['rewards']), self.version)
        buffer_store.save(s.run_dir / BUFFER_FILE, arrays, meta)
        atomic_write_bytes(s.run_dir / POLICY_FILE, actor)
        atomic_write_bytes(
            s.run_dir / CHECKPOINT_FILE, encode_checkpoint(state, self.version, s.rate_hz)
        )
        self.last_save_s = time.monotonic()
        self.last_checkpoint = time.strftime('%H:%M:%S')
        self.get_logger().info(
            f'checkpoint: {meta.count} transitions, policy v{self.version}, '
            f'{self.updates} updates -> {s.run_dir} ({time.monotonic() - t0:.2f} s)'
        )

    def shutdown(self) -> None:
        """Stop training and save everything (called on every way out)."""
        self.get_logger().info('stopping: training ends, saving the buffer and networks')
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30.0)
        self._drain_inbox()
        self.checkpoint()

    # -- diagnostics -----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters for diagnostics and the runner."""
        return {
            'buffer_size': self.buffer_size,
            'buffer_resumed': self.resumed,
            'transitions_received': self.received,
            'transitions_accepted': self.accepted,
            'transitions_rejected': sum(self.rejected.values()),
            **{f'rejected_{k}': v for k, v in sorted(self.rejected.items())},
            'bag_imported': self.bag_imported,
            **{f'bag_rejected_{k}': v for k, v in sorted(self.bag_rejected.items())},
            'gradient_steps_done': self.updates,
            'train_calls': self.train_calls,
            'train_seconds': round(self.train_s, 3),
            'updates_per_transition': (
                self.updates / self.added_after_start if self.added_after_start else 0.0
            ),
            'policy_version_published': self.version,
            'last_checkpoint': self.last_checkpoint or 'none',
        }

    def _publish_diagnostics(self) -> None:
        values = self.stats()
        now = time.monotonic()
        prev_t, prev_updates = self._diag_prev
        values['updates_per_s'] = round((self.updates - prev_updates) / max(now - prev_t, 1e-9), 1)
        self._diag_prev = (now, self.updates)
        level, message = DiagnosticStatus.OK, 'training' if self.updates else 'waiting for data'
        k = self.settings.gradient_steps
        if self.failed is not None:
            failed = f'{type(self.failed).__name__}: {self.failed}'
            level, message = DiagnosticStatus.ERROR, f'training failed: {failed}'
        elif values['transitions_rejected']:
            level, message = DiagnosticStatus.WARN, 'transitions rejected'
        elif self.added_after_start > 500 and values['updates_per_transition'] < 0.5 * k:
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
    from rip_control.ros.node_params import init_rclpy
    from rip_control.signals import StopSignals

    # First: from here on a signal is a stop request, recorded; nothing is raised into the
    # set-up, and the finally below (the final save) runs whatever the moment.
    stop = StopSignals().install()
    init_rclpy(args)
    node: LearnerNode | None = None
    executor: SingleThreadedExecutor | None = None
    code = 0
    try:
        if not stop.requested:
            try:
                node = LearnerNode()  # the training thread starts in here
            except (LearnerConfigError, ValueError) as exc:  # ValueError: a refused parameter
                print(f'rip_learner: {exc}', file=sys.stderr, flush=True)
                code = 2
        if node is not None:
            executor = SingleThreadedExecutor()
            executor.add_node(node)
            code = spin_until_shutdown(node, executor, stop)
    finally:
        if node is not None:
            try:
                node.shutdown()
            except Exception as exc:  # noqa: BLE001
                node.get_logger().fatal(f'final save failed: {exc!r}')
                code = 1
            if node.failed is not None:
                code = 1
        if executor is not None:
            executor.shutdown()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return code


if __name__ == '__main__':
    sys.exit(main())
