"""What the control loop produced, on its way out of the node: three topics and two files.

The real-time process writes transitions, per-tick samples and episode summaries into its
rings; the node's pump thread reads them and hands them here, where they become
``transitions`` and ``~/tick`` and ``~/episode`` messages, ``timing.csv`` rows and (for the
benchmarks) the tick trace. Nothing here blocks on a peer: a publish with no subscriber is
counted, not held back.

Made at configure, destroyed at cleanup; one thread at a time calls it (the pump thread, or
the node after the pump has stopped).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
import time
from typing import Any

import numpy as np
from std_msgs.msg import Float32MultiArray, Float64MultiArray, MultiArrayDimension

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.rig.env import ACTION_SIZE
from rip_control.ros.qos import (
    EPISODE,
    EPISODE_QOS,
    TICK,
    TICK_QOS,
    TRANSITIONS,
    TRANSITIONS_QOS,
)
from rip_control.rt.guard import MISSED, VERDICTS
from rip_control.rt.layout import RtStatus
from rip_control.rt.loop import EpisodeSummary
from rip_control.telemetry import EPISODE_KINDS, EpisodeTiming, TimingCsv
from rip_control.transitions import field_layout, run_tagged

EPISODE_FIELDS = (
    'episode',
    'return',
    'balance_s',
    'n_ticks',
    'dt_mean_ms',
    'dt_std_ms',
    'max_overrun_ms',
    'n_strikes',
    'policy_version',
    'terminated',
    'kind',  # index into rip_control.telemetry.EPISODE_KINDS
    'verdict',
    'live_version',
    'best_version',
    'best_score',
    'balance_reference_s',
    'eval_bar',
    'eval_balance_bar_s',
    'eval_missed',
    'eval_score',
    'eval_balance_s',
    'reset_s',
    'eval_judged',
    'eval_planned',
)


def _dims(labels_sizes: Any) -> list[MultiArrayDimension]:
    return [MultiArrayDimension(label=label, size=n, stride=n) for label, n in labels_sizes]


class TickTrace:
    """The newest ``capacity`` ticks' ``(dt, overrun, previous work)``, in a fixed ring.

    An activation of hours stays bounded (``capacity`` x 24 bytes); the ticks that did not
    stay are counted.
    """

    CAPACITY = 1 << 20  # 24 MiB: 5.8 h at 50 Hz, 17 min at 1 kHz (the timing benchmarks' 10)

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._ring = np.empty((capacity, 3), dtype=np.float64)  # pages taken as they fill
        self.seen = 0  # ticks appended since the last clear

    def append(self, dt_s: float, overrun_s: float, prev_work_s: float) -> None:
        """One tick; the oldest is overwritten once the ring is full."""
        self._ring[self.seen % len(self._ring)] = (dt_s, overrun_s, prev_work_s)
        self.seen += 1

    @property
    def not_kept(self) -> int:
        """Ticks overwritten by newer ones."""
        return max(0, self.seen - len(self._ring))

    def kept(self) -> np.ndarray:
        """The kept ticks, oldest first (rows of dt, overrun, previous work)."""
        n = len(self._ring)
        if self.seen <= n:
            return self._ring[: self.seen].copy()
        i = self.seen % n
        return np.concatenate([self._ring[i:], self._ring[:i]])

    def clear(self) -> None:
        """Forget every tick."""
        self.seen = 0


class LoopOutputs:
    """The loop's publishers and files, and the counts of what went where.

    :param node: the node the publishers belong to (and whose logger reports episodes).
    :param run_dir: where ``timing.csv`` goes.
    :param obs_size: the observation length of the transitions it publishes.
    :param tick_topic_max_hz: rate cap of ``~/tick`` (0: no samples published).
    :param tick_trace: ``.npz`` path for every tick's figures on :meth:`write_trace` (empty:
        none kept).
    :param learner_stats: the learner's (train calls, train seconds) so far: the first
        episode's ``timing.csv`` row counts from these.
    :param run_id: the run's identity, tagged on every transition ('' : none).

    Its counts (published, unsent, unmatched) are since configure, as the real-time
    process's own are since its start.
    """

    def __init__(
        self,
        node: Any,
        run_dir: Path,
        obs_size: int,
        tick_topic_max_hz: float,
        tick_trace: str,
        learner_stats: tuple[int, float] = (0, 0.0),
        run_id: str = '',
    ) -> None:
        self._node = node
        self._transitions_pub = node.create_publisher(
            Float32MultiArray, TRANSITIONS, TRANSITIONS_QOS
        )
        self._tick_pub = node.create_publisher(Float64MultiArray, TICK, TICK_QOS)
        self._episode_pub = node.create_publisher(Float64MultiArray, EPISODE, EPISODE_QOS)
        self._layout_dims = _dims(run_tagged(field_layout(obs_size, ACTION_SIZE), run_id))
        self._episode_dims = _dims((label, 1) for label in EPISODE_FIELDS)
        self._tick_dims = _dims((('dt_ms', 1), ('overrun_ms', 1)))
        self._min_tick_gap_s = 1.0 / tick_topic_max_hz if tick_topic_max_hz > 0 else math.inf
        self._last_tick_pub = 0.0
        self._tick_trace = tick_trace
        self._trace = TickTrace() if tick_trace else None
        self._csv: TimingCsv | None = TimingCsv(run_dir / run_files.TIMING_CSV)
        self._learner_at_episode = learner_stats
        self.published = 0  # transitions published
        self.unsent = 0  # transitions that came after ROS shut down: counted, not published
        self.unmatched = 0  # published while no subscription had matched
        self.unwritten = 0  # timing.csv rows and tick traces a write error (disk full) lost
        self.last_file_error = ''
        self._alive = True

    def subscribers(self) -> int:
        """Subscriptions (learners, recorders) the ``transitions`` publisher has matched."""
        return self._transitions_pub.get_subscription_count() if self._alive else 0

    def transitions(self, packed: Any, publish: bool) -> None:
        """Publish packed transitions (bytes of float32), or count them as unsent."""
        for raw in packed:
            if not publish:
                self.unsent += 1
                continue
            msg = Float32MultiArray()
            msg.layout.dim = self._layout_dims
            msg.data = np.frombuffer(raw, np.float32).tolist()
            if self._transitions_pub.get_subscription_count() == 0:
                # No learner (or recorder) matched: this one reaches nobody. DDS notices a
                # killed subscriber only when its lease runs out, so this lags such a death.
                self.unmatched += 1
            self._transitions_pub.publish(msg)
            self.published += 1

    def ticks(self, samples: Any, publish: bool) -> None:
        """Per-tick ``(dt, overrun, previous work, strike)``: traced, and published capped."""
        now = time.monotonic()
        for dt_s, overrun_s, prev_work_s, _strike in samples:
            if self._trace is not None:
                self._trace.append(dt_s, overrun_s, prev_work_s)
            if publish and now - self._last_tick_pub >= self._min_tick_gap_s * 0.999:
                self._last_tick_pub = now
                msg = Float64MultiArray()
                msg.layout.dim = self._tick_dims
                msg.data = [dt_s * 1e3, overrun_s * 1e3]
                self._tick_pub.publish(msg)

    def episode(
        self,
        ep: EpisodeSummary,
        violations: int,
        learner_stats: tuple[int, float],
        publish: bool,
    ) -> None:
        """A finished episode: its ``timing.csv`` row always, its message while ROS lives.

        :param learner_stats: the learner's (train calls, train seconds) so far, from the
            weights' metadata; the row gets the part since the previous episode.
        """
        calls, secs = learner_stats
        calls0, secs0 = self._learner_at_episode
        self._learner_at_episode = learner_stats
        if self._csv is not None:
            self._write(
                self._csv.path,
                self._csv.append,
                EpisodeTiming(
                    episode=ep.episode,
                    n_ticks=ep.n_ticks,
                    mean_tick_dt_ms=ep.dt_mean_s * 1e3,
                    std_tick_dt_ms=ep.dt_std_s * 1e3,
                    max_overrun_ms=ep.max_overrun_s * 1e3,
                    n_violations=violations,
                    learner_train_calls=max(calls - calls0, 0),
                    learner_total_train_s=max(secs - secs0, 0.0),
                    episode_return=ep.episode_return,
                    balance_s=ep.balance_s,
                    policy_version=ep.policy_version,
                    kind=ep.kind,
                    verdict=ep.verdict,
                    live_version=ep.live_version,
                    reset_s=ep.reset_s,
                    transitions_dropped_late=ep.transitions_dropped_late,
                ),
            )
        if not publish:
            return
        msg = Float64MultiArray()
        msg.layout.dim = self._episode_dims
        msg.data = [
            float(ep.episode),
            ep.episode_return,
            ep.balance_s,
            float(ep.n_ticks),
            ep.dt_mean_s * 1e3,
            ep.dt_std_s * 1e3,
            ep.max_overrun_s * 1e3,
            float(ep.n_strikes),
            float(ep.policy_version),
            float(ep.terminated),
            float(EPISODE_KINDS.index(ep.kind)),
            float(VERDICTS.index(ep.verdict) if ep.verdict in VERDICTS else 0),
            float(ep.live_version),
            float(ep.best_version),
            ep.best_score,
            ep.balance_reference_s,
            ep.eval_bar,
            ep.eval_balance_bar_s,
            float(MISSED.index(ep.eval_missed) if ep.eval_missed in MISSED else 0),
            ep.eval_score,
            ep.eval_balance_s,
            ep.reset_s,
            float(ep.eval_judged),
            float(ep.eval_planned),
        ]
        self._episode_pub.publish(msg)
        kind = {'training': 'episode'}.get(ep.kind, f'{ep.kind} episode')
        self._node.get_logger().info(
            f'{kind} {ep.episode}: return {ep.episode_return:.2f}, balance {ep.balance_s:.2f} s, '
            f'tick {ep.dt_mean_s * 1e3:.3f}±{ep.dt_std_s * 1e3:.3f} ms, max overrun '
            f'{ep.max_overrun_s * 1e3:.2f} ms, policy v{ep.policy_version}, '
            f'{ep.transitions_published} transitions ({ep.transitions_dropped_late} late dropped)'
        )

    def _write(self, path: Path, write: Any, *args: Any) -> bool:
        """``write(*args)``; a write error (a full disk) is logged naming ``path`` and counted.

        The loop goes on either way: an episode's report, its message and the counters never
        depend on a file; the files written before stay as they were (rows are appended, the
        trace replaced atomically).
        """
        try:
            write(*args)
        except OSError as exc:
            self.unwritten += 1
            self.last_file_error = f'{path}: {exc.strerror or exc}'
            self._node.get_logger().error(
                f'could not write {path} ({exc.strerror or exc}); {self.unwritten} write(s) '
                'lost so far; the loop goes on',
                throttle_duration_sec=5.0,
            )
            return False
        return True

    def start_trace(self) -> None:
        """Forget the ticks traced so far (an activation starts a trace of its own)."""
        if self._trace is not None:
            self._trace.clear()

    def write_trace(self, rate_hz: float, st: RtStatus, fifo: bool) -> None:
        """Write the ticks traced since :meth:`start_trace` (if a trace file was asked for).

        The newest :attr:`TickTrace.CAPACITY` of them; ``ticks_not_kept`` counts the rest.
        """
        if self._trace is None or not self._trace.seen:
            return
        trace = self._trace.kept()
        arrays: dict[str, Any] = {
            'dt_s': trace[:, 0],
            'overrun_s': trace[:, 1],
            'prev_work_s': trace[:, 2],
            'rate_hz': np.float64(rate_hz),
            'violations': np.int64(st.violations),
            'missed_ticks': np.int64(st.missed_ticks),
            'ticks_dropped': np.int64(st.ticks_dropped),
            'fifo': np.bool_(fifo),
            'swap_max_s': np.float64(st.swap_max_s),
            'ticks_not_kept': np.int64(self._trace.not_kept),
        }
        path = Path(self._tick_trace)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        if not self._write(path, atomic_write_bytes, path, buf.getvalue()):
            self._trace.clear()
            return
        lost = (
            f' (the {self._trace.not_kept} before them not kept)' if self._trace.not_kept else ''
        )
        self._node.get_logger().info(f'tick trace of {len(trace)} ticks written to {path}{lost}')
        self._trace.clear()

    def destroy(self) -> None:
        """Destroy the publishers and close ``timing.csv`` (idempotent)."""
        if self._alive:
            for pub in (self._transitions_pub, self._tick_pub, self._episode_pub):
                self._node.destroy_publisher(pub)
            self._alive = False
        if self._csv is not None:
            self._csv.close()
            self._csv = None

    @property
    def alive(self) -> bool:
        """Whether the publishers still exist."""
        return self._alive
