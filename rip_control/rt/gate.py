"""The regression guard: which actor drives the next episode, and whether it is an evaluation.

Without it (``every == 0``) the newest actor from the learner drives the rig the moment it
arrives, and a bad update acts on the rig at once. With it, a newer actor first gets a
deterministic evaluation episode (its mean action, no exploration noise, nothing sent to the
learner) and goes *live* only if its return is within ``margin`` of the best evaluated
return so far and, optionally, it balanced nearly as long as the best did; training episodes
are always driven by the live actor. The first evaluation
measures the initial actor itself (the baseline). Free of ROS, time and I/O: the control
loop asks it at each episode start and tells it each result.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Generic, Protocol, TypeVar


class VersionedActor(Protocol):
    """What the gate needs of an actor (the loop's :class:`~rip_control.policy.NumpyActor`)."""

    @property
    def version(self) -> int:
        """The actor's version (the learner's count; newer is larger)."""
        ...


A = TypeVar('A', bound=VersionedActor)

BEST_POLICY_FILE = 'policy_best.safetensors'
"""The best-evaluated actor, in the run folder (the node writes it; ``policy:=auto`` takes it)."""
VERDICTS = ('', 'baseline', 'promoted', 'rejected')
"""``verdict`` of an ``~/episode`` message is an index into this (0: a training episode)."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of one evaluation episode.

    :param kind: ``baseline`` (the initial actor measured), ``promoted`` (the candidate is
        live now) or ``rejected`` (the live actor stays).
    :param version: the evaluated actor's version.
    :param score: its evaluation return.
    :param bar: the return it had to reach (NaN for a baseline).
    :param new_best: it is the best evaluated so far (``policy_best`` should be rewritten).
    :param balance_s: its longest balance in the evaluation.
    :param balance_bar_s: the balance it had to reach (NaN for a baseline; 0 with no balance
        requirement).
    """

    kind: str
    version: int
    score: float
    bar: float
    new_best: bool
    balance_s: float = math.nan
    balance_bar_s: float = math.nan

    @property
    def reason(self) -> str:
        """Why a candidate was rejected ('' otherwise): the bar it missed."""
        if self.kind != 'rejected':
            return ''
        if not (math.isfinite(self.score) and self.score >= self.bar):
            return f'return {self.score:.2f} below the bar {self.bar:.2f}'
        return f'balance {self.balance_s:.2f} s below the bar {self.balance_bar_s:.2f} s'


class PolicyGate(Generic[A]):
    """Keeps the live actor and the best evaluation, and schedules evaluations.

    :param every: evaluate a newer actor after this many training episodes (0: no guard, the
        newest actor always drives).
    :param margin: a candidate goes live when its evaluation return is at least the best one
        minus ``margin`` times its magnitude (0.05: within 5 %).
    :param best_margin: a candidate becomes the best (``policy_best``, what ``policy:=auto``
        resumes and a deployment takes) only when it beats the best evaluation by this
        fraction of its magnitude: one evaluation episode is noisy, and a tie won by noise
        would replace a measured policy with an unmeasured one (0: any higher return).
    :param balance_margin: a candidate goes live only if its longest balance is also at least
        ``1 - balance_margin`` times the best evaluation's. Return alone can hide a policy that
        hovers near upright without holding it: on the worn rig one returned 96 % of the best
        while it balanced 1.58 s against 4.3 s (1: no balance requirement).
    """

    def __init__(
        self,
        every: int = 0,
        margin: float = 0.05,
        best_margin: float = 0.0,
        balance_margin: float = 1.0,
    ) -> None:
        if every < 0:
            raise ValueError(f'eval_every_episodes must be >= 0, got {every}')
        if not (0.0 <= margin < 1.0):
            raise ValueError(f'eval_margin must be in [0, 1), got {margin}')
        if not (0.0 <= best_margin < 1.0):
            raise ValueError(f'eval_best_margin must be in [0, 1), got {best_margin}')
        if not (0.0 <= balance_margin <= 1.0):
            raise ValueError(f'eval_balance_margin must be in [0, 1], got {balance_margin}')
        self.every = every
        self.margin = margin
        self.best_margin = best_margin
        self.balance_margin = balance_margin
        self.live: A | None = None
        self.best_version = -1
        self.best_score = math.nan
        self.best_balance_s = math.nan  # the best evaluation's longest balance
        self.last: Verdict | None = None
        self.promoted = 0
        self.rejected = 0
        self._since_eval = 0  # training episodes since the last evaluation
        self._judged = -1  # newest version evaluated (a rejected one is not evaluated again)
        self._candidate: A | None = None

    def start(self, actor: A) -> None:
        """The actor the process started with: live, and what the baseline measures.

        Whatever arrives from the learner later is a candidate, even if it arrives before the
        first episode (a re-configured node gets the learner's newest at once).
        """
        if self.live is None:
            self.live = actor

    @property
    def enabled(self) -> bool:
        """Whether the guard is on."""
        return self.every > 0

    @property
    def live_version(self) -> int:
        """The live actor's version (-1 before the first episode, or with the guard off)."""
        return self.live.version if self.live is not None else -1

    def bar(self) -> float:
        """The evaluation return a candidate must reach (NaN before the baseline)."""
        if not math.isfinite(self.best_score):
            return self.best_score  # -inf after a non-finite baseline: any finite return
        return self.best_score - self.margin * abs(self.best_score)

    def balance_bar(self) -> float:
        """The longest balance a candidate must reach (NaN before the baseline)."""
        if math.isnan(self.best_balance_s):
            return math.nan
        return (1.0 - self.balance_margin) * self.best_balance_s

    def next_episode(self, latest: A) -> tuple[bool, A]:
        """``(is_evaluation, actor)`` for the episode starting now.

        :param latest: the newest actor the learner has sent (or the initial one).
        """
        if not self.enabled:
            return False, latest
        if self.live is None:
            self.live = latest  # the initial actor
        if math.isnan(self.best_score):
            self._candidate = self.live
            return True, self.live  # the baseline: the initial actor measured
        newer = latest.version > max(self.live.version, self._judged)
        if newer and self._since_eval >= self.every:
            self._candidate = latest
            return True, latest
        return False, self.live

    def finish_training(self) -> None:
        """A training episode ended."""
        self._since_eval += 1

    def judge(self, score: float, balance_s: float) -> Verdict:
        """An evaluation episode ended: promote or reject its actor.

        :param score: the episode's return.
        :param balance_s: its longest balance (what ``balance_margin`` compares).
        """
        cand = self._candidate
        assert cand is not None, 'judge() without an evaluation episode'
        self._candidate = None
        self._since_eval = 0
        self._judged = max(self._judged, cand.version)
        if not math.isfinite(score):
            score = -math.inf
        if not math.isfinite(balance_s):
            balance_s = 0.0
        if math.isnan(self.best_score):
            kind, bar, balance_bar = 'baseline', math.nan, math.nan
        else:
            bar, balance_bar = self.bar(), self.balance_bar()
            passed = math.isfinite(score) and score >= bar and balance_s >= balance_bar
            kind = 'promoted' if passed else 'rejected'
        new_best = kind != 'rejected' and (
            math.isnan(self.best_score)
            or score > self.best_score + self.best_margin * abs(self.best_score)
        )
        if kind == 'promoted':
            self.live = cand
            self.promoted += 1
        elif kind == 'rejected':
            self.rejected += 1
        if new_best:
            self.best_score, self.best_version = score, cand.version
            self.best_balance_s = balance_s
        self.last = Verdict(kind, cand.version, score, bar, new_best, balance_s, balance_bar)
        return self.last
