"""``policy_weights`` messages into the real-time process: decoded, validated, handed over.

Everything that can be wrong with a message a learner sent (not safetensors, another rate,
other sizes, a non-finite weight, a version not newer than the running one, too large for
the weights box) is found here, in the node process, and the message is refused with its
reason counted and logged; the real-time process only ever sees a validated actor.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
import math
from pathlib import Path
from typing import Any

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.policy import MAX_HEADER_BYTES, PolicyRejected, decode_actor, read_metadata
from rip_control.rig.env import ACTION_SIZE, TaskConfig
from rip_control.rt.guard import rejection_reason
from rip_control.rt.handle import RtHandle
from rip_control.rt.loop import EpisodeSummary

# A safetensors file holds its arrays and a JSON header of at most this (policy.py's bound).
MESSAGE_SLACK_BYTES = MAX_HEADER_BYTES + 8
KEEP_VERSIONS = 32  # accepted messages kept by version, for policy_best (an evaluation
# judges the actor that was newest when it began: a few versions back at most)


class WeightsIntake:
    """Counts of accepted and refused weights, and what the learner reported with them.

    :param logger: where refusals are reported (throttled).
    """

    def __init__(self, logger: Any) -> None:
        self._log = logger
        self.accepted = 0
        self.rejected = 0
        self.last_rejection = ''
        # The learner's (train calls, train seconds) so far, from the last accepted weights.
        self.learner_stats: tuple[int, float] = (0, 0.0)
        self._recent: OrderedDict[int, bytes] = OrderedDict()
        # The regression guard, as the evaluation episodes reported it.
        self.live_version = -1
        self.best_version = -1
        self.best_score = math.nan
        self.last_verdict = 'none'
        self.promoted = 0
        self.rejected_by_guard = 0

    def remember(self, version: int, data: bytes) -> None:
        """Keep an actor's file bytes by version (the initial policy's, and accepted ones)."""
        self._recent[version] = data
        while len(self._recent) > KEEP_VERSIONS:
            self._recent.popitem(last=False)

    def judged(self, ep: EpisodeSummary, run_dir: Path) -> str:
        """An evaluation episode's verdict: noted, and ``policy_best`` rewritten on a new best.

        :returns: a line for the log.
        """
        self.live_version, self.best_version = ep.live_version, ep.best_version
        self.best_score = ep.best_score
        if ep.verdict == 'pending':
            return (
                f'evaluation of policy v{ep.policy_version}: return {ep.episode_return:.2f}, '
                f'balance {ep.balance_s:.2f} s; more of its evaluation to come'
            )
        if ep.verdict == 'promoted':
            self.promoted += 1
        elif ep.verdict == 'rejected':
            self.rejected_by_guard += 1
        score = ep.episode_return if math.isnan(ep.eval_score) else ep.eval_score
        balance = ep.balance_s if math.isnan(ep.eval_balance_s) else ep.eval_balance_s
        bar = '' if math.isnan(ep.eval_bar) else f' (bar {ep.eval_bar:.2f})'
        if ep.eval_missed:
            bar += ': ' + rejection_reason(
                ep.eval_missed,
                score,
                ep.eval_bar,
                balance,
                ep.eval_balance_bar_s,
                ep.eval_judged,
                ep.eval_planned,
            )
        self.last_verdict = (
            f'v{ep.policy_version} {ep.verdict}: evaluation return {score:.2f}{bar}'
        )
        line = (
            f'evaluation of policy v{ep.policy_version}: return {score:.2f}{bar} -> '
            f'{ep.verdict}; live v{ep.live_version}, best v{ep.best_version} '
            f'({ep.best_score:.2f}), balance reference {ep.balance_reference_s:.2f} s'
        )
        if ep.verdict != 'rejected' and ep.best_version == ep.policy_version:
            best = run_dir / run_files.POLICY_BEST
            if ep.verdict == 'baseline' and best.exists():
                # The starting policy measured: an earlier best of this run folder stays
                # until a candidate beats this baseline.
                return line + f'; {best} kept'
            data = self._recent.get(ep.policy_version)
            if data is None:
                return (
                    line
                    + f'; v{ep.policy_version} is no longer held, {run_files.POLICY_BEST} kept'
                )
            atomic_write_bytes(run_dir / run_files.POLICY_BEST, data)
            line += f'; saved as {run_dir / run_files.POLICY_BEST}'
        return line

    def take(self, data: Sequence[int], rt: RtHandle, task: TaskConfig, run_id: str = '') -> bool:
        """Validate ``data`` and hand it to ``rt`` (it swaps at its next tick); whether it did.

        :param data: the message's bytes (its ``data`` field as received: its size is checked
            before it is copied).
        :param run_id: this run's identity: weights tagged with another (or none) are refused
            ('' : any).
        """
        try:
            limit = rt.sizes.weights_bytes + MESSAGE_SLACK_BYTES
            if len(data) > limit:
                raise PolicyRejected(
                    f'a weights message of {len(data)} bytes is larger than any actor the '
                    f'real-time process can hold ({limit} bytes with the file header)'
                )
            data = bytes(data)
            theirs = read_metadata(data).get('run_id', '')
            if run_id and theirs != run_id:
                raise PolicyRejected(
                    f'weights from run {theirs or "(untagged)"}, not this run ({run_id}): '
                    'another learner on this DDS domain?'
                )
            actor = decode_actor(
                data,
                rate_hz=task.rate_hz,
                obs_size=task.obs_size,
                action_size=ACTION_SIZE,
                action_history=task.action_history,
                min_version=rt.weights_version,
                fits=rt.check_fits,
            )
            md = actor.metadata
            stats = (  # before the hand-over: a refused message changes nothing
                int(md.get('learner_train_calls', '0')),
                float(md.get('learner_total_train_s', '0')),
            )
            rt.write_weights(actor)
            self.remember(actor.version, data)
        except Exception as exc:  # noqa: BLE001 - a message must never end the node
            # PolicyRejected names what is wrong; anything else is a message no check
            # foresaw, refused all the same (a stranger's bytes must not end the run).
            self.rejected += 1
            self.last_rejection = (
                str(exc) if isinstance(exc, PolicyRejected) else f'{type(exc).__name__}: {exc}'
            )[:500]
            self._log.warning(
                f'policy weights rejected ({self.rejected} so far): {self.last_rejection}',
                throttle_duration_sec=5.0,
            )
            return False
        self.learner_stats = stats
        self.accepted += 1
        return True
