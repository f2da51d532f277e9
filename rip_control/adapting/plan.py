"""adapt's rig-time plan: each phase's cost, what the budget leaves out, the least it needs.

Made before anything runs, from the options alone: every on-rig phase is priced at its
episodes' lengths plus a reset each (:data:`RESET_PLAN_S`). The compulsory phases are the
excitation (when identifying), the baseline deployment and the candidate's; a budget that
cannot hold them is refused, naming the least it needs. Deployments have
``deployment_episodes`` episodes, or with ``deployment_episodes:=0`` (the default) as many
as fit, from :data:`MIN_DEPLOYMENT_EPISODES` up to :data:`MAX_DEPLOYMENT_EPISODES`. What the
compulsory phases leave goes to the optional ones: a second candidate, the fine-tune on the
rig and its final deployment, each said to fit or left out. Once on the rig, the phases are
priced by what they measured instead (:mod:`rip_control.adapting.budget`), and each
deployment runs under the rig-time limit that leaves room for the compulsory phases after
it: the budget is never passed by more than one episode and its reset.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
import math
from typing import Any

#: The final deployment's rig time over the candidate deployment's, as the phases reserve it.
RESERVE_FACTOR = 1.1

RESET_PLAN_S = 4.0
"""A reset's rig time as the plan prices it before any is measured: the braking reset's
longest mean over the emulated rigs is below it (``python -m rip_bench reset``,
``bench/results/reset_offline.json``)."""

MIN_DEPLOYMENT_EPISODES = 2
"""The fewest episodes a deployment is shortened to: one episode has no spread to judge by."""

MAX_DEPLOYMENT_EPISODES = 5
"""A deployment's episodes when the budget has room (``deployment_episodes:=0``)."""


def second_candidate_fits(
    left_s: float, deployment_s: float, finetune_now: bool, finetune_after: bool
) -> bool:
    """Whether a second candidate's deployment goes into ``left_s`` of rig time.

    It must fit, and must not take the place of a fine-tune: it runs where no fine-tune
    (with the final deployment's reserve) fits now, its own deployment then the final
    measure of whatever goes on (rig time otherwise left unspent), or where one still fits
    after it (``finetune_after``: in ``left_s`` less its deployment).
    """
    return left_s >= deployment_s and (not finetune_now or finetune_after)


@dataclass(frozen=True)
class Plan:
    """The rig time each phase is planned to take, s, and what fits.

    :param budget_s: the rig-time budget.
    :param excitation_s: the excitation episode and its reset (0: an identification given).
    :param episodes: episodes of each deployment.
    :param deployment_s: one deployment.
    :param finetune_least_s: the least a fine-tune on the rig needs: the guard's baseline
        evaluation, one training episode and the final deployment's reserve
        (:data:`RESERVE_FACTOR` deployments, as the fine-tune reserves it).
    :param second_candidate: a second candidate's deployment is expected to fit (if
        identifying again moves the physics, or the first falls short of the target):
        :func:`second_candidate_fits`.
    :param finetune_s: the fine-tune's expected share, the final deployment's reserve left
        out (0: not expected to fit); a second candidate, if one runs beside a fine-tune, is
        paid from it. The optional phases are decided later, at the rig time each deployment
        measured.
    """

    budget_s: float
    excitation_s: float
    episodes: int
    deployment_s: float
    finetune_least_s: float
    second_candidate: bool
    finetune_s: float

    @property
    def compulsory_s(self) -> float:
        """The excitation, the baseline deployment and the candidate's."""
        return self.excitation_s + 2 * self.deployment_s

    def record(self) -> dict[str, Any]:
        """The summary's ``plan``."""
        return {**asdict(self), 'compulsory_s': self.compulsory_s}

    def lines(self) -> list[str]:
        """What each phase will cost and what is left out, for the log."""
        each = f'{self.episodes} x {self.deployment_s / self.episodes - RESET_PLAN_S:g} s'
        out = [f'plan for {self.budget_s:.0f} s of rig time (each reset ~{RESET_PLAN_S:g} s):']
        if self.excitation_s:
            out.append(f'  excitation ~{self.excitation_s:.0f} s')
        out.append(f'  baseline deployment ({each}) ~{self.deployment_s:.0f} s')
        out.append(f'  candidate deployment ({each}) ~{self.deployment_s:.0f} s')
        left = self.budget_s - self.compulsory_s
        if self.second_candidate:
            out.append(
                f'  a second candidate (if the physics moves or the first falls short) '
                f'~{self.deployment_s:.0f} s'
                + ('' if self.finetune_s else ': with no fine-tune, its deployment the final')
            )
        else:
            why = "it would take the fine-tune's place; " if left >= self.deployment_s else ''
            out.append(
                f'  not expected to fit: a second candidate (~{self.deployment_s:.0f} s: '
                f'{why}{max(left, 0):.0f} s left)'
            )
        if self.finetune_s:
            out.append(
                f'  fine-tune ~{self.finetune_s:.0f} s'
                + (' (less a second candidate, if one runs)' if self.second_candidate else '')
                + f', then the final deployment ~{RESERVE_FACTOR * self.deployment_s:.0f} s'
            )
        else:
            out.append(
                '  not expected to fit: the fine-tune on the rig and its final deployment '
                f'(~{self.finetune_least_s:.0f} s; {max(left, 0):.0f} s left)'
            )
        out.append('  (the optional phases are decided at the rig time measured by then)')
        return out


def make_plan(
    own: dict[str, Any], control: dict[str, Any], excitation_s: float, eval_episodes: int
) -> Plan:
    """The plan for ``own``'s budget (adapt's options) and ``control`` (the node's settings).

    :param excitation_s: the excitation episode's length (0: no excitation).
    :param eval_episodes: episodes of each guard evaluation in the fine-tune.
    :raises ValueError: the budget cannot hold the compulsory phases, naming the least.
    """
    budget_s = 60.0 * float(own['rig_minutes'])
    episode_s = float(own['deployment_episode_seconds'])
    per_episode = episode_s + RESET_PLAN_S
    excitation = excitation_s + RESET_PLAN_S if excitation_s else 0.0
    typed = int(own['deployment_episodes'])
    fewest = typed or MIN_DEPLOYMENT_EPISODES
    fit = int((budget_s - excitation) // (2 * per_episode))
    episodes = typed if typed else min(MAX_DEPLOYMENT_EPISODES, fit)
    episodes = episodes if episodes <= fit else 0
    if episodes < fewest:
        least_s = excitation + 2 * fewest * per_episode
        deployments = f'{fewest} x {episode_s:g}-s episodes (~{fewest * per_episode:.0f} s each'
        raise ValueError(
            f'rig_minutes:={own["rig_minutes"]:g} is too small: '
            + (f'the excitation (~{excitation:.0f} s) and ' if excitation else '')
            + f'two deployments of {deployments}, resets included) need {least_s:.0f} s of rig '
            f'time: rig_minutes:={math.ceil(least_s * 100 / 60.0) / 100:g} at least'
        )
    deployment_s = episodes * per_episode
    again = bool(own['reidentify']) and not own['identification']
    left = budget_s - excitation - 2 * deployment_s
    training_s = float(control['episode_seconds']) + RESET_PLAN_S
    guard_s = eval_episodes * per_episode
    final_s = RESERVE_FACTOR * deployment_s
    finetune_least_s = guard_s + training_s + final_s
    finetune_s = left - final_s if left >= finetune_least_s else 0.0
    return Plan(
        budget_s=budget_s,
        excitation_s=excitation,
        episodes=episodes,
        deployment_s=deployment_s,
        finetune_least_s=finetune_least_s,
        second_candidate=again
        and second_candidate_fits(
            left, deployment_s, finetune_s > 0, left - deployment_s >= finetune_least_s
        ),
        finetune_s=finetune_s,
    )
