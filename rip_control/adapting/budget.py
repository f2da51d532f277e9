"""The rig-time budget: the plan before the loop starts, and the fine-tune within what is left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rip_control.adapting.plan import RESERVE_FACTOR, Plan, make_plan
from rip_control.adapting.record import PHASES, Adapt, reset_seconds

FINETUNE_EVAL_EPISODES = 3
"""The fine-tune's guard judges a candidate on this many evaluation episodes, each as long
as a deployment's (unless typed: ``eval_episodes:=``, ``eval_episode_seconds:=``). One
episode of the node's default length spreads wider than the differences it judges, and caps
balance at ~5 s: a fine-tuned policy could never rate above a re-trained one at that cap."""


def finetune_within_budget(
    a: Adapt, budget_s: float, start: Path, finetune_run: Any
) -> dict[str, Any]:
    """Fine-tune on the rig from ``start`` until the rig-time budget is spent.

    The budget less what the final deployment will take (``RESERVE_FACTOR`` times a whole
    deployment at the last one's rig time per episode, :meth:`Adapt.full_deployment_s`).
    One runner run (its critics and prior data beside ``start``), the node's guard on, ended
    by the runner's own rig-time limit (``rig_seconds``) at the end of the episode past which
    the next would not fit: every activation counted, so a trip's re-run episode is paid from
    the budget too. Returns its summary (``{}`` when not one
    training episode with the guard's baseline evaluation fits). Resuming, its record's entry
    when it finished.
    """
    done = a.replay(PHASES[3])
    if done is not None:
        return done
    left, fits, guard = _finetune_room(a, budget_s)
    if not fits:
        a.log(f'fine-tune: {max(left, 0):.0f} s of rig time left: not one episode fits')
        return {}
    a.log(
        f'fine-tune: until {left:.0f} s of rig time are spent (rig_seconds:={left:.1f}); the '
        f'guard judges each candidate on {guard["eval_episodes"]} evaluation episodes'
        + (f' of {guard["eval_episode_seconds"]} s' if guard['eval_episode_seconds'] else '')
    )
    fine = a.phase(
        PHASES[3],
        {
            'policy': str(start),
            'episodes': '0',
            'rig_seconds': f'{left:.1f}',
            **{k: str(v) for k, v in guard.items()},
        },
        lambda run_args: finetune_run(run_args, stream_logs=a.stream),
        lambda run: {
            'policy': str(start),
            **{k: run[k] for k in ('episodes', 'evaluations', 'live_policy_version') if k in run},
            'reset_seconds': reset_seconds(run),
        },
    )
    for e in fine.get('evaluations', []):
        if e.get('verdict') != 'pending':
            a.log(f'fine-tune: evaluation of v{e.get("policy_version")}: {e.get("verdict")}')
    return fine


def finetune_fits(a: Adapt, budget_s: float) -> bool:
    """Whether one fine-tune episode, with the guard's baseline and the final reserve, fits now."""
    return _finetune_room(a, budget_s)[1]


def _finetune_room(a: Adapt, budget_s: float) -> tuple[float, bool, dict[str, Any]]:
    """The fine-tune's rig time, whether an episode fits it, and the guard's settings.

    The rig time is the budget's rest less the final deployment's reserve; an episode fits
    when one training episode with the guard's baseline evaluation does. Priced at the last
    deployment's rig time per episode, as the runner's stop rule will.
    """
    deployment = a.last_deployment()
    reserve = RESERVE_FACTOR * a.full_deployment_s()
    left = budget_s - a.rig_s - reserve
    guard = guard_settings(a)
    # An episode's cost, its reset included: the last deployment's, for each episode's length.
    per_deployment = deployment['rig_seconds'] / max(len(deployment['episodes']), 1)
    reset = per_deployment - float(a.own['deployment_episode_seconds'])
    training = float(a.control['episode_seconds'])
    evaluation = float(guard['eval_episode_seconds']) or training
    per_evaluation = int(guard['eval_episodes']) * (reset + evaluation)
    # The runner's stop rule prices the next episode at the dearest one so far (RigBudget):
    # after the guard's baseline, a training episode costs an evaluation episode's.
    every = int(a.control['eval_every_episodes'])
    per_episode = reset + (max(training, evaluation) if every > 0 else training)
    from rip_control.run.supervisor import RigBudget

    lag = RigBudget.REPORT_LAG_S  # the runner's stop rule keeps this margin too
    one = episodes_that_fit(left - lag, per_episode, every, per_evaluation, at_most=1)
    return left, one == 1, guard


def plan_for(a: Adapt) -> Plan:
    """The plan of ``a``'s loop (:mod:`rip_control.adapting.plan`); the loop logs it.

    :raises ValueError: the budget is too small for the compulsory phases, naming the least.
    """
    from rip_control.rig.excitation import ExcitationDesign

    excitation_s = 0.0 if a.own['identification'] else ExcitationDesign().duration_s
    return make_plan(a.own, a.control, excitation_s, int(guard_settings(a)['eval_episodes']))


def guard_settings(a: Adapt) -> dict[str, Any]:
    """The fine-tune's guard evaluations: :data:`FINETUNE_EVAL_EPISODES` of a deployment's length.

    Each setting the user's where typed (the params file included).
    """
    ours = {
        'eval_episodes': FINETUNE_EVAL_EPISODES,
        'eval_episode_seconds': a.own['deployment_episode_seconds'],
    }
    return {
        name: a.control[name] if a.input.set_by_user(name) else value
        for name, value in ours.items()
    }


def episodes_that_fit(
    left_s: float,
    per_episode_s: float,
    every: int,
    per_evaluation_s: float | None = None,
    at_most: int | None = None,
) -> int:
    """Training episodes that fit ``left_s`` of rig time (counted up to ``at_most``).

    ``n`` training episodes, each about ``per_episode_s`` with its reset, come with the
    guard's evaluations: its baseline at the start and one after every ``every`` training
    episodes (none with the guard off), each about ``per_evaluation_s`` (default: one
    episode's).
    """
    per_evaluation_s = per_episode_s if per_evaluation_s is None else per_evaluation_s
    n = 0
    while at_most is None or n < at_most:
        m = n + 1
        evaluations = (1 + m // every) if every > 0 else 0
        if m * per_episode_s + evaluations * per_evaluation_s > left_s:
            return n
        n = m
    return n
