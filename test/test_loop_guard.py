"""The regression guard inside the control loop, on the emulator through a real pty (no ROS).

Evaluation episodes act with the candidate's mean action, send their transitions (the
candidate's version on them: the learner must see what its candidate does), run
``eval_steps`` ticks (fewer or more than a training episode's) and do not count towards
``episodes``; training episodes are driven by the live actor only.
"""

from __future__ import annotations

from pathlib import Path
import threading

import numpy as np
import pytest

from rip_control.policy import NumpyActor, random_actor
from rip_control.rig.client import LowLevelClient
from rip_control.rig.emulator_process import EmulatorProcess
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE, RealRotaryInvertedPendulumEnv, TaskConfig
from rip_control.rt.loop import ControlLoop, EpisodeSummary, LoopConfig, TickSample
from rip_control.rt.outbox import Outbox
from rip_control.transitions import Transition

pytestmark = [pytest.mark.alone, pytest.mark.slow]

# The guard is the subject here, not the pacing: an in-process loop without SCHED_FIFO on a
# loaded VM may overrun by 5 ms three ticks in a row (seen once with two benchmarks beside
# it), which would end the run with a TimingViolation. The watchdog has tests of its own.
LENIENT = {'timing_violation_threshold_s': 0.05, 'max_strikes': 10}


class _Box:
    """The policy hand-off: the newest actor, replaced by the test between episodes."""

    def __init__(self, actor: NumpyActor) -> None:
        self.actor = actor

    def read_from_rt(self) -> NumpyActor:
        return self.actor


def _actor(version: int) -> NumpyActor:
    """A random actor whose mean action is 0 (evaluations never reach the arm limit)."""
    rnd = random_actor(OBS_SIZE, ACTION_SIZE, (8,), 50.0, seed=version, version=version)
    tensors = dict(rnd.tensors)
    tensors['mu.weight'] = np.zeros_like(tensors['mu.weight'])
    tensors['mu.bias'] = np.zeros_like(tensors['mu.bias'])
    return NumpyActor(rnd.meta, tensors)


@pytest.mark.parametrize('eval_steps', [5, 30])  # training episodes are 20 ticks
def test_evaluations_send_their_transitions_count_for_nothing_and_only_the_live_actor_trains(
    tmp_path: Path, eval_steps: int
) -> None:
    with EmulatorProcess(tmp_path / 'rig') as emu:
        client = LowLevelClient(str(emu.link))
        client.open()
        try:
            # 20 ticks; every tick counts as balanced (|phi| < 4 rad), so that an evaluation's
            # balance is its length and the guard's balance bar has something to compare.
            task = TaskConfig.from_params(episode_seconds=0.4, balance_threshold_rad=4.0)
            env = RealRotaryInvertedPendulumEnv(client, task)
            cfg = LoopConfig.from_params(
                episodes=3,
                eval_every_episodes=1,
                eval_margin=0.05,
                eval_best_margin=0.0,
                eval_balance_margin=0.25,
                eval_episode_s=eval_steps / 50.0,
                **LENIENT,
            )
            box = _Box(_actor(1))
            guard = cfg.guard()
            guard.start(box.actor)
            transitions: Outbox[Transition] = Outbox(100_000, holdback=2)
            episodes: Outbox[EpisodeSummary] = Outbox(100)
            ticks: Outbox[TickSample] = Outbox(100_000)
            loop = ControlLoop(env, cfg, box, transitions, ticks, episodes, guard=guard)
            done: list[EpisodeSummary] = []

            def after_tick() -> None:  # the newest actor arrives once the baseline is done
                while (ep := episodes.pop_from_non_rt()) is not None:
                    done.append(ep)
                    if ep.verdict == 'baseline':
                        box.actor = _actor(2)

            stop = threading.Event()
            loop.run(stop, after_tick=after_tick)
            after_tick()
        finally:
            client.close()
    kinds = [(e.evaluation, e.verdict, e.policy_version) for e in done]
    # Baseline of v1, a training episode, then v2 evaluated, then two more training episodes.
    assert [k[0] for k in kinds] == [True, False, True, False, False], kinds
    assert kinds[0] == (True, 'baseline', 1)
    assert kinds[2][2] == 2 and kinds[2][1] in ('promoted', 'rejected')
    live_after = 2 if kinds[2][1] == 'promoted' else 1
    assert [e.policy_version for e in done if not e.evaluation] == [1, live_after, live_after]
    evals = [e for e in done if e.evaluation]
    # Every tick of an evaluation is sent, but one whose dt was off (a loaded machine) is not.
    sent = [e.transitions_published + e.transitions_dropped_late for e in evals]
    assert sent == [eval_steps] * 2
    # The guard judged each evaluation on its return and its longest balance (all of it, here),
    # and the summaries carry the bars: 75 % of the baseline's balance.
    assert [e.balance_s for e in evals] == [pytest.approx(eval_steps / 50.0)] * 2
    assert guard.last is not None and guard.last.balance_s == evals[-1].balance_s
    assert evals[0].balance_reference_s == evals[0].balance_s
    assert evals[1].eval_balance_bar_s == pytest.approx(0.75 * evals[0].balance_s)
    # Each evaluation ran its own length (a mean action of 0 never reaches the arm limit).
    assert [(e.n_ticks, e.terminated) for e in evals] == [(eval_steps, False)] * 2
    assert all(e.n_ticks == 20 or e.terminated for e in done if not e.evaluation)
    assert loop.status.train_episodes == 3 and loop.status.eval_episodes == 2
    got = []
    while (t := transitions.pop_from_non_rt()) is not None:
        got.append(t)
    published = sum(e.transitions_published for e in done)
    # An episode cut by a serial error (a loaded machine) sent what it had and ended without a
    # summary; its number is the next one's. Nothing else may add transitions.
    cut = loop.status.serial_errors > 0
    assert published > 0 and (len(got) == published or (cut and len(got) > published)), (
        len(got),
        published,
        loop.status.serial_errors,
    )
    # Every episode's transitions carry the version that drove them (a cut episode is run again
    # as the same kind by the same actor): an evaluation's the candidate's, v2 here, whatever
    # its verdict, not the live one's.
    assert {t.episode for t in got} == {e.episode for e in done}
    by_episode = {e.episode: e for e in done}
    assert all(t.policy_version == by_episode[t.episode].policy_version for t in got)
    assert {t.policy_version for t in got if t.episode == evals[1].episode} == {2}
    # An evaluation's transitions are its mean action (0 here), not a sample, and end as it
    # ended: truncated at its own length.
    for e in evals:
        mine = [t for t in got if t.episode == e.episode]
        assert all(float(np.abs(t.action).max()) == 0.0 for t in mine)
        assert not any(t.terminated for t in mine)
        assert not any(t.truncated for t in mine[:-1])
        assert mine[-1].truncated or e.transitions_dropped_late  # its last tick may be late
    assert any(float(np.abs(t.action).max()) > 0.0 for t in got if t.episode == done[1].episode)
    if not cut:  # a cut episode's transitions share the next one's number and steps
        for e in done:
            steps = [t.step for t in got if t.episode == e.episode]
            assert steps == list(range(e.transitions_published)) or e.transitions_dropped_late


def test_a_reactivation_runs_only_the_training_episodes_still_owed(tmp_path: Path) -> None:
    # After a trip the node re-activates the loop with the count of training episodes the
    # earlier activations finished; ``episodes`` is a total, not a count per activation.
    def activation(done_before: int) -> tuple[list[EpisodeSummary], int]:
        task = TaskConfig.from_params(episode_seconds=0.2)  # 10 ticks
        env = RealRotaryInvertedPendulumEnv(client, task)
        transitions: Outbox[Transition] = Outbox(100_000, holdback=2)
        episodes: Outbox[EpisodeSummary] = Outbox(100)
        loop = ControlLoop(
            env,
            LoopConfig.from_params(episodes=3, eval_every_episodes=0, **LENIENT),
            _Box(_actor(1)),
            transitions,
            Outbox(100_000),
            episodes,
            first_episode=done_before,
            train_episodes_done=done_before,
        )
        loop.run(threading.Event())
        got = []
        while (ep := episodes.pop_from_non_rt()) is not None:
            got.append(ep)
        assert loop.motor_confirmed_off
        return got, loop.status.ticks

    with EmulatorProcess(tmp_path / 'rig') as emu:
        client = LowLevelClient(str(emu.link))
        client.open()
        try:
            fresh, _ = activation(0)
            resumed, _ = activation(2)
            finished, ticks = activation(3)
        finally:
            client.close()
    assert [e.episode for e in fresh] == [0, 1, 2]
    assert [e.episode for e in resumed] == [2]
    assert finished == [] and ticks == 0  # nothing owed: not even a reset


def test_an_evaluation_of_two_episodes_drives_the_candidate_twice_and_judges_their_mean(
    tmp_path: Path,
) -> None:
    """``eval_episodes``: a candidate's evaluation runs on, whatever arrives meanwhile.

    v2 arrives during the baseline and v3 during v2's evaluation: each evaluation's episodes
    are all its own actor's, the verdict comes at its last episode, on the means of what the
    guard was told.
    """
    import math

    with EmulatorProcess(tmp_path / 'rig') as emu:
        client = LowLevelClient(str(emu.link))
        client.open()
        try:
            task = TaskConfig.from_params(episode_seconds=0.2, balance_threshold_rad=4.0)
            env = RealRotaryInvertedPendulumEnv(client, task)
            cfg = LoopConfig.from_params(
                episodes=2, eval_every_episodes=1, eval_episodes=2, **LENIENT
            )
            box = _Box(_actor(1))
            guard = cfg.guard()
            guard.start(box.actor)
            told: list[tuple[float, float]] = []
            judge = guard.judge

            def recording(score: float, balance_s: float):  # what the loop tells the guard
                told.append((score, balance_s))
                return judge(score, balance_s)

            guard.judge = recording  # type: ignore[method-assign]
            transitions: Outbox[Transition] = Outbox(100_000, holdback=2)
            episodes: Outbox[EpisodeSummary] = Outbox(100)
            ticks: Outbox[TickSample] = Outbox(100_000)
            loop = ControlLoop(env, cfg, box, transitions, ticks, episodes, guard=guard)
            done: list[EpisodeSummary] = []

            def after_tick() -> None:
                while (ep := episodes.pop_from_non_rt()) is not None:
                    done.append(ep)
                    if ep.verdict == 'pending':  # a newer actor, mid-evaluation
                        box.actor = _actor(ep.policy_version + 1)

            loop.run(threading.Event(), after_tick=after_tick)
            after_tick()
        finally:
            client.close()
    kinds = [(e.kind, e.verdict, e.policy_version) for e in done]
    assert kinds[:5] == [
        ('evaluation', 'pending', 1),
        ('evaluation', 'baseline', 1),  # v2 had arrived: the baseline still measured v1
        ('training', '', 1),
        ('evaluation', 'pending', 2),
        ('evaluation', kinds[4][1], 2),  # v3 had arrived: v2's evaluation went on
    ], kinds
    assert kinds[4][1] in ('promoted', 'rejected') and len(done) == 6, kinds
    assert done[5].kind == 'training' and loop.status.eval_episodes == 4
    assert done[5].policy_version == (2 if kinds[4][1] == 'promoted' else 1)
    pending = [e for e in done if e.verdict == 'pending']
    assert all(math.isnan(e.eval_score) and math.isnan(e.eval_balance_s) for e in pending)
    assert math.isnan(done[2].eval_score)  # a training episode judges nothing
    assert len(told) == 4
    evaluations = ((done[0], done[1]), (done[3], done[4]))
    for (first, last), pair in zip(evaluations, (told[:2], told[2:]), strict=True):
        # The guard was told each episode's own figures, and judged on their means.
        assert pair == [
            (first.episode_return, first.balance_s),
            (last.episode_return, last.balance_s),
        ]
        assert last.eval_score == pytest.approx((pair[0][0] + pair[1][0]) / 2)
        assert last.eval_balance_s == pytest.approx((pair[0][1] + pair[1][1]) / 2)
