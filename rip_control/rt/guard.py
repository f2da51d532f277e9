"""The regression guard: which actor drives the next episode, and whether it is an evaluation.

Without it (``every == 0``) the newest actor from the learner drives the rig the moment it
arrives, and a bad update acts on the rig at once. With it, a newer actor first gets a
deterministic evaluation (its mean action, no exploration noise; its transitions still
reach the learner, which must see what its candidate does) and goes *live* only if its return
is within ``margin`` of the best evaluated return so far and, optionally, it balanced nearly
as long as the best did; training episodes are always driven by the live actor. The first
evaluation measures the initial actor itself (the baseline). An evaluation is ``episodes``
episodes in a row, judged on their mean return and mean longest balance: one episode's
figures spread wider than the differences they judge (0.9-2.8 s of balance for one policy on
a rig outside the model), and the mean of ``n`` spreads ``sqrt(n)`` times less. Free of ROS,
time and I/O: the control loop asks it at each episode start and tells it each result.

An evaluation stops early when its rejection is certain (curtailment): given the most one
episode can score (:class:`EpisodeBounds`: every step's reward at its ceiling, balance from
start to end), the episodes left could not lift the mean to a bar even if each scored its
most. No assumption about the spread goes into it, so the verdict is the one all its
episodes would have given; an evaluation that could still pass runs to its end, and a
promotion always rests on every episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
import math
from typing import Generic, Protocol, TypeVar


class VersionedActor(Protocol):
    """What the guard needs of an actor (the loop's :class:`~rip_control.policy.NumpyActor`)."""

    @property
    def version(self) -> int:
        """The actor's version (the learner's count; newer is larger)."""
        ...


A = TypeVar('A', bound=VersionedActor)

"""The best-evaluated actor, in the run folder (the node writes it; ``policy:=auto`` takes it)."""
VERDICTS = ('', 'baseline', 'promoted', 'rejected', 'pending')
"""``verdict`` of an ``~/episode`` message is an index into this (0: a training episode;
``pending``: an evaluation episode before its evaluation's last)."""
MISSED = ('', 'return', 'balance')
"""Which bar a rejected candidate missed (``eval_missed`` of ``~/episode`` indexes this)."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of one evaluation episode.

    :param kind: ``baseline`` (the initial actor measured), ``promoted`` (the candidate is
        live now), ``rejected`` (the live actor stays) or ``pending`` (more of its
        evaluation's episodes to come; nothing changed).
    :param version: the evaluated actor's version.
    :param score: its evaluation return (the mean over the evaluation's episodes).
    :param bar: the return it had to reach (NaN for a baseline).
    :param new_best: it is the best evaluated so far (``policy_best`` should be rewritten).
    :param balance_s: its longest balance in the evaluation (the mean over its episodes).
    :param balance_bar_s: the balance it had to reach (NaN for a baseline; 0 with no balance
        requirement).
    :param missed: for a rejection, the bar it missed: ``return`` (checked first) or
        ``balance``; '' otherwise.
    :param episodes: the evaluation episodes its figures are the means of: fewer than the
        guard's ``episodes`` when the rejection was certain before the last.
    :param planned: the guard's ``episodes``.
    """

    kind: str
    version: int
    score: float
    bar: float
    new_best: bool
    balance_s: float = math.nan
    balance_bar_s: float = math.nan
    missed: str = ''
    episodes: int = 1
    planned: int = 1

    @property
    def reason(self) -> str:
        """Why a candidate was rejected ('' otherwise), for a log line."""
        return rejection_reason(
            self.missed,
            self.score,
            self.bar,
            self.balance_s,
            self.balance_bar_s,
            self.episodes,
            self.planned,
        )


def rejection_reason(
    missed: str,
    score: float,
    bar: float,
    balance_s: float,
    balance_bar_s: float,
    judged: int = 0,
    planned: int = 0,
) -> str:
    """The bar a rejected candidate missed, with both figures ('' if it missed none).

    ``judged`` of ``planned`` episodes: an evaluation ended early, its rejection certain.
    """
    if missed == 'return':
        why = f'return {score:.2f} below the bar {bar:.2f}'
    elif missed == 'balance':
        why = f'balance {balance_s:.3f} s below the bar {balance_bar_s:.3f} s'
    else:
        return ''
    if 0 < judged < planned:
        why += f' (certain after {judged} of {planned} episodes)'
    return why


@dataclass(frozen=True)
class EpisodeBounds:
    """The most one evaluation episode can score.

    :param max_return: its return if every step earned the reward's ceiling.
    :param max_balance_s: its longest balance if it balanced from start to end.
    """

    max_return: float
    max_balance_s: float


def certain_miss(
    figures: Sequence[tuple[float, float]],
    planned: int,
    bounds: EpisodeBounds,
    bar: float,
    balance_bar: float,
) -> str:
    """The bar ``planned`` episodes' means miss, whatever the episodes not yet run score.

    ``return`` or ``balance`` when even the most each remaining episode can score
    (``bounds``) would leave the mean of the ``(return, balance)`` ``figures`` and them
    below that bar (the module docstring's curtailment); '' while the mean could still reach
    both, before any episode, and with no bar (NaN: a baseline's).
    """
    if not figures or math.isnan(bar):
        return ''
    left = max(0, planned - len(figures))
    most_return = math.fsum([*(f[0] for f in figures), left * bounds.max_return])
    most_balance = math.fsum([*(f[1] for f in figures), left * bounds.max_balance_s])
    n = len(figures) + left
    if not most_return / n >= bar:
        return 'return'
    if most_balance / n < balance_bar:
        return 'balance'
    return ''


class RegressionGuard(Generic[A]):
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
        ``1 - balance_margin`` times the longest any evaluation that went live has shown (the
        baseline's included; it only rises, so it cannot slide). Return alone can hide a
        policy that hovers near upright without holding it: on the worn rig one returned 96 %
        of the best while it balanced 1.58 s against 4.3 s (1: no balance requirement).
    :param episodes: evaluation episodes per evaluation, judged on their means.
    :param bounds: the most an evaluation episode can score; with them an evaluation whose
        rejection is certain ends at once (the module docstring's curtailment). None: every
        evaluation runs all its episodes.
    """

    def __init__(
        self,
        every: int = 0,
        margin: float = 0.05,
        best_margin: float = 0.0,
        balance_margin: float = 1.0,
        episodes: int = 1,
        bounds: EpisodeBounds | None = None,
    ) -> None:
        if every < 0:
            raise ValueError(f'eval_every_episodes must be >= 0, got {every}')
        if not (0.0 <= margin < 1.0):
            raise ValueError(f'eval_margin must be in [0, 1), got {margin}')
        if not (0.0 <= best_margin < 1.0):
            raise ValueError(f'eval_best_margin must be in [0, 1), got {best_margin}')
        if not (0.0 <= balance_margin <= 1.0):
            raise ValueError(f'eval_balance_margin must be in [0, 1], got {balance_margin}')
        if episodes < 1:
            raise ValueError(f'eval_episodes must be >= 1, got {episodes}')
        self.every = every
        self.margin = margin
        self.best_margin = best_margin
        self.balance_margin = balance_margin
        self.episodes = episodes
        self.bounds = bounds
        self.live: A | None = None
        self.best_version = -1
        self.best_score = math.nan
        self.balance_reference_s = math.nan  # longest balance of an evaluation that went live
        self.last: Verdict | None = None
        self.promoted = 0
        self.rejected = 0
        self._since_eval = 0  # training episodes since the last evaluation
        self._judged = -1  # newest version evaluated (a rejected one is not evaluated again)
        self._candidate: A | None = None
        self._figures: list[tuple[float, float]] = []  # the evaluation so far: (return, balance)

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
        """The live actor's version (-1 before :meth:`start`)."""
        return self.live.version if self.live is not None else -1

    def bar(self) -> float:
        """The evaluation return a candidate must reach (NaN before the baseline)."""
        if not math.isfinite(self.best_score):
            return self.best_score  # -inf after a non-finite baseline: any finite return
        return self.best_score - self.margin * abs(self.best_score)

    def balance_bar(self) -> float:
        """The longest balance a candidate must reach (NaN before the baseline)."""
        if math.isnan(self.balance_reference_s):
            return math.nan
        return (1.0 - self.balance_margin) * self.balance_reference_s

    def next_episode(self, latest: A) -> tuple[bool, A]:
        """``(is_evaluation, actor)`` for the episode starting now.

        :param latest: the newest actor the learner has sent (or the initial one).
        """
        if not self.enabled:
            return False, latest
        if self.live is None:
            self.live = latest  # the initial actor
        if self._figures:  # an evaluation under way goes on
            assert self._candidate is not None
            return True, self._candidate
        if math.isnan(self.best_score):
            self._candidate = self.live
            return True, self.live  # the baseline: the initial actor measured
        newer = latest.version > max(self.live.version, self._judged)
        if newer and self._since_eval >= self.every:
            self._candidate = latest
            return True, latest
        return False, self.live

    def certain_miss(self) -> str:
        """The bar the evaluation under way misses whatever its remaining episodes score.

        :func:`certain_miss` of its figures so far; '' without bounds and for the baseline
        (which has no bar).
        """
        if self.bounds is None or math.isnan(self.best_score):
            return ''
        return certain_miss(
            self._figures, self.episodes, self.bounds, self.bar(), self.balance_bar()
        )

    def finish_training(self) -> None:
        """A training episode ended."""
        self._since_eval += 1

    def judge(self, score: float, balance_s: float) -> Verdict:
        """An evaluation episode ended: promote or reject its actor, or ``pending``.

        ``pending`` until its evaluation's last episode; then the verdict on the means.

        :param score: the episode's return.
        :param balance_s: its longest balance (what ``balance_margin`` compares).
        """
        cand = self._candidate
        assert cand is not None, 'judge() without an evaluation episode'
        if not math.isfinite(score):
            score = -math.inf
        if not math.isfinite(balance_s):
            balance_s = 0.0
        self._figures.append((score, balance_s))
        certain = self.certain_miss() if len(self._figures) < self.episodes else ''
        if len(self._figures) < self.episodes and not certain:
            return Verdict('pending', cand.version, score, math.nan, False, balance_s)
        judged = len(self._figures)
        score = math.fsum(f[0] for f in self._figures) / judged
        balance_s = math.fsum(f[1] for f in self._figures) / judged
        if math.isnan(score):  # -inf and +inf: not finite either way
            score = -math.inf
        self._figures = []
        self._candidate = None
        self._since_eval = 0
        self._judged = max(self._judged, cand.version)
        missed = certain
        if math.isnan(self.best_score):
            kind, bar, balance_bar = 'baseline', math.nan, math.nan
        else:
            bar, balance_bar = self.bar(), self.balance_bar()
            if missed:
                pass  # certain before the last episode
            elif not (math.isfinite(score) and score >= bar):
                missed = 'return'
            elif balance_s < balance_bar:
                missed = 'balance'
            kind = 'rejected' if missed else 'promoted'
        best = self.best_score
        new_best = kind != 'rejected' and (
            math.isnan(best)
            or (not math.isfinite(best) and math.isfinite(score))  # after a non-finite baseline
            or score > best + self.best_margin * abs(best)
        )
        if kind == 'promoted':
            self.live = cand
            self.promoted += 1
        elif kind == 'rejected':
            self.rejected += 1
        if kind != 'rejected' and not balance_s <= self.balance_reference_s:  # NaN: baseline
            self.balance_reference_s = balance_s
        if new_best:
            self.best_score, self.best_version = score, cand.version
        self.last = Verdict(
            kind,
            cand.version,
            score,
            bar,
            new_best,
            balance_s,
            balance_bar,
            missed,
            judged,
            self.episodes,
        )
        return self.last
