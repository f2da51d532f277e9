"""Judging what a phase deployed: the guard's rule on deployments, "shown better", the records."""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from dataclasses import dataclass
from typing import Any

from rip_control.adapting.record import Adapt, balances, mean_of


def judge(a: Adapt, prior: dict[str, Any], candidate: dict[str, Any]) -> Any:
    """The regression guard's verdict on the candidate's deployment against the prior's.

    The guard's own rule and margins (the control node's ``eval_margin`` and
    ``eval_balance_margin``), fed each deployment's mean return and mean longest balance
    instead of one evaluation episode's. A deployment :func:`certain_rejection` ended early
    is judged on the episodes it ran, and its reason names the bar the rule saw missed with
    the episodes it took (a mean over fewer episodes may miss the other bar too).
    """
    guard = _guard_after(a, prior)
    is_evaluation, judged = guard.next_episode(_Version(1))
    assert is_evaluation and judged.version == 1
    verdict = guard.judge(*_scores(candidate))
    ran = len(candidate['episodes'])
    if verdict.kind == 'rejected' and a.plan is not None and ran < a.plan.episodes:
        certain = _certain(a, guard, candidate['episodes'], a.plan.episodes)
        if certain:  # the bar the rule saw missed, whatever the rest would have scored
            verdict = dataclasses.replace(
                verdict, missed=certain, episodes=ran, planned=a.plan.episodes
            )
    return verdict


def certain_rejection(a: Adapt, against: dict[str, Any]) -> Callable[[list[Any]], str]:
    """The candidate deployment's sequential rule: stop once its rejection is certain.

    ``stop(metrics)`` of the candidate's episodes so far: why the guard's rule rejects it
    against ``against``'s deployment whatever its remaining episodes score
    (:func:`rip_control.rt.guard.certain_miss`: each at the most an episode can score), ''
    while it could still pass. The rig time it saves goes to the fine-tune.
    """
    guard = _guard_after(a, against)
    guard.next_episode(_Version(1))
    planned = a.plan.episodes if a.plan is not None else 0  # no plan: nothing to curtail

    def stop(done: list[Any]) -> str:
        episodes = [{'ret': m.ret, 'longest_balance_s': m.longest_balance_s} for m in done]
        missed = _certain(a, guard, episodes, planned) if len(done) < planned else ''
        if not missed:
            return ''
        return (
            f'the candidate misses the {missed} bar whatever its other '
            f'{planned - len(done)} episode(s) score: rejected after {len(done)} of {planned}'
        )

    return stop


def _guard_after(a: Adapt, prior: dict[str, Any]) -> Any:
    """A regression guard with the node's margins whose baseline is ``prior``'s deployment."""
    from rip_control.rt.guard import RegressionGuard

    guard: RegressionGuard[Any] = RegressionGuard(
        every=1,
        margin=float(a.control['eval_margin']),
        balance_margin=float(a.control['eval_balance_margin']),
    )
    before = _Version(0)
    guard.start(before)
    guard.next_episode(before)  # the baseline: the prior
    guard.judge(*_scores(prior))
    guard.finish_training()
    return guard


def _scores(report: dict[str, Any]) -> tuple[float, float]:
    """A deployment's mean return and mean longest balance."""
    return mean_of([float(e['ret']) for e in report['episodes']]), mean_of(balances(report))


def _certain(a: Adapt, guard: Any, episodes: list[dict[str, Any]], planned: int) -> str:
    """The bar ``episodes`` of a deployment of ``planned`` miss whatever the rest score."""
    from rip_control.rig.env import TaskConfig
    from rip_control.rt.guard import EpisodeBounds, certain_miss

    if any(e.get('ret') is None for e in episodes):
        return ''  # rewards not known: nothing is certain
    steps = round(float(a.own['deployment_episode_seconds']) * a.rate)
    # A deployment's balance sums the measured tick lengths, and a kept tick may be late by up
    # to the violation threshold: the most a remaining episode could balance.
    longest_tick_s = 1.0 / a.rate + 1e-3 * float(a.control['timing_violation_threshold_ms'])
    bounds = EpisodeBounds(TaskConfig.most_return(steps), steps * longest_tick_s)
    figures = [(float(e['ret']), float(e['longest_balance_s'])) for e in episodes]
    return certain_miss(figures, planned, bounds, guard.bar(), guard.balance_bar())


class _Version:
    """What the guard needs of an actor: a version."""

    def __init__(self, version: int) -> None:
        self.version = version


@dataclass(frozen=True)
class _NotShownBetter:
    """A guard's promotion overruled: the second candidate did not show it is better."""

    reason: str
    kind: str = 'rejected'


def shown_better(verdict: Any, report: dict[str, Any], against: dict[str, Any]) -> Any:
    """``verdict`` if ``report``'s balance beats ``against``'s with its 90 % interval above 0.

    Otherwise a rejection that gives the difference and its interval (Welch's t over the two
    deployments' episodes, :func:`rip_control.run.evaluation.difference_interval`; with one
    episode each there is no interval, and nothing is shown).
    """
    from rip_control.run.evaluation import difference_interval

    d = difference_interval(balances(report), balances(against))
    if d['ci90_low'] is not None and d['ci90_low'] > 0.0:
        return verdict
    shown = (
        f', 90 % interval {d["ci90_low"]:+.2f} to {d["ci90_high"]:+.2f} s'
        if d['ci90_low'] is not None
        else ' (one episode each: no interval)'
    )
    return _NotShownBetter(
        f'not shown better than the first re-trained policy: balance {d["mean"]:+.2f} s{shown}'
    )


def candidate_record(version: int, verdict: Any, report: dict[str, Any]) -> dict[str, Any]:
    """The summary's record of a candidate: its version, the guard's verdict, its balances.

    With its deployment's measures and their 90 % intervals.
    """
    from rip_control.run.evaluation import deployment_measures

    return {
        'policy_version': version,
        'verdict': verdict.kind,
        'reason': verdict.reason,
        'balance_s': mean_of(balances(report)),
        'episodes_s': balances(report),
        'measures': deployment_measures(report['episodes']),
    }


def log_verdict(a: Adapt, name: str, verdict: Any, promoted: str, otherwise: str) -> None:
    """The verdict on ``name``'s policy, and which policy the loop goes on from."""
    went_on = promoted if verdict.kind == 'promoted' else otherwise
    a.log(
        f'{name}: {verdict.kind}'
        + (f' ({verdict.reason})' if verdict.reason else '')
        + f': the loop goes on from the {went_on} policy'
    )


def deployment_record(
    own: dict[str, Any], episodes: int, prior: dict[str, Any], adapted: dict[str, Any] | None
) -> dict[str, Any]:
    """The summary's ``deployment``: the prior's deployment, and the adapted's once deployed.

    ``episodes``: the plan's episodes a deployment (a deployment the budget ended early has
    fewer: its list says how many).

    The mean balances and their per-episode lists, and each deployment's measures with their
    90 % intervals (:func:`rip_control.run.evaluation.deployment_measures`).
    """
    from rip_control.run.evaluation import deployment_measures

    out: dict[str, Any] = {
        'episodes': episodes,
        'episode_seconds': own['deployment_episode_seconds'],
        'prior_balance_s': mean_of(balances(prior)),
    }
    if adapted is not None:
        out['adapted_balance_s'] = mean_of(balances(adapted))
    out['prior_episodes_s'] = balances(prior)
    if adapted is not None:
        out['adapted_episodes_s'] = balances(adapted)
    out['prior_measures'] = deployment_measures(prior['episodes'])
    if adapted is not None:
        out['adapted_measures'] = deployment_measures(adapted['episodes'])
    return out


def gain(final: dict[str, Any], start: dict[str, Any]) -> dict[str, Any]:
    """What the fine-tune on the rig added, with its 90 % interval.

    The final deployment's balance over the deployment of the policy the fine-tune started
    from: two samples of one rig.
    """
    from rip_control.run.evaluation import difference_interval

    return difference_interval(balances(final), balances(start))
