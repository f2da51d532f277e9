"""The regression guard's decisions (:mod:`rip_control.rt.guard`), without a rig or ROS."""

from __future__ import annotations

from dataclasses import dataclass
import math

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from rip_control.rt.guard import EpisodeBounds, RegressionGuard


@dataclass(frozen=True)
class _Actor:
    version: int


def test_off_the_newest_actor_always_drives_and_nothing_is_evaluated() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(every=0)
    assert guard.next_episode(_Actor(0)) == (False, _Actor(0))
    assert guard.next_episode(_Actor(7)) == (False, _Actor(7))
    assert guard.live_version == -1


def test_the_initial_actor_is_measured_first_then_trains() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(every=1)
    first = _Actor(0)
    assert guard.next_episode(first) == (True, first)
    v = guard.judge(200.0, 0.0)
    assert (v.kind, v.version, v.new_best) == ('baseline', 0, True)
    assert math.isnan(v.bar)
    assert guard.next_episode(first) == (False, first)  # nothing newer: train


def test_a_worse_candidate_never_drives_and_is_not_evaluated_twice() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(every=1, margin=0.05)
    guard.next_episode(_Actor(0))
    guard.judge(200.0, 0.0)
    guard.next_episode(_Actor(0))
    guard.finish_training()
    bad = _Actor(3)
    assert guard.next_episode(bad) == (True, bad)
    v = guard.judge(150.0, 0.0)
    assert (v.kind, v.bar) == ('rejected', pytest.approx(190.0))
    assert guard.live_version == 0
    guard.finish_training()
    # The same rejected version is not evaluated again: the live actor keeps training.
    assert guard.next_episode(bad) == (False, _Actor(0))
    guard.finish_training()
    newer = _Actor(4)
    assert guard.next_episode(newer) == (True, newer)


def test_within_the_margin_goes_live_but_the_best_stays_the_bar() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(every=2, margin=0.05)
    guard.next_episode(_Actor(0))
    guard.judge(200.0, 0.0)
    guard.finish_training()
    # One training episode since the evaluation: not yet (every=2).
    assert guard.next_episode(_Actor(1)) == (False, _Actor(0))
    guard.finish_training()
    assert guard.next_episode(_Actor(1)) == (True, _Actor(1))
    v = guard.judge(195.0, 0.0)
    assert (v.kind, v.new_best) == ('promoted', False)
    assert (guard.live_version, guard.best_version, guard.best_score) == (1, 0, 200.0)
    guard.finish_training()
    guard.finish_training()
    guard.next_episode(_Actor(2))
    # 189 is within 5 % of the live one (195) but not of the best (200): no slow slide.
    assert guard.judge(189.0, 0.0).kind == 'rejected'
    guard.finish_training()
    guard.finish_training()
    guard.next_episode(_Actor(3))
    v = guard.judge(230.0, 0.0)
    assert (v.kind, v.new_best, guard.best_version) == ('promoted', True, 3)


def test_a_non_finite_return_is_a_rejection() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(every=1)
    guard.next_episode(_Actor(0))
    guard.judge(10.0, 0.0)
    guard.finish_training()
    guard.next_episode(_Actor(1))
    assert guard.judge(math.nan, 0.0).kind == 'rejected'


@pytest.mark.parametrize(('every', 'margin'), [(-1, 0.05), (1, -0.1), (1, 1.0)])
def test_bad_settings_are_refused_by_name(every: int, margin: float) -> None:
    with pytest.raises(ValueError, match='eval_every_episodes|eval_margin'):
        RegressionGuard(every, margin)


def test_an_actor_arriving_before_the_first_episode_is_a_candidate_not_the_baseline() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(every=1)
    guard.start(_Actor(1))  # what the process started with
    # A re-configured node gets the learner's newest at once: it must not skip the bar.
    assert guard.next_episode(_Actor(9)) == (True, _Actor(1))
    assert guard.judge(100.0, 0.0).kind == 'baseline'
    guard.finish_training()
    assert guard.next_episode(_Actor(9)) == (True, _Actor(9))
    assert guard.judge(10.0, 0.0).kind == 'rejected'
    assert guard.live_version == 1


def test_after_a_non_finite_baseline_any_finite_candidate_passes() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(every=1, margin=0.0)
    guard.start(_Actor(0))
    guard.next_episode(_Actor(0))
    guard.judge(math.inf * -1, 0.0)
    guard.finish_training()
    guard.next_episode(_Actor(1))
    assert guard.judge(-5.0, 0.0).kind == 'promoted'


def test_a_tie_won_by_noise_drives_but_does_not_become_the_best() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(every=1, margin=0.05, best_margin=0.02)
    guard.next_episode(_Actor(0))
    guard.judge(200.0, 0.0)
    verdicts = []
    for version, score in ((1, 203.0), (2, 204.5), (3, 190.0)):
        guard.finish_training()
        assert guard.next_episode(_Actor(version)) == (True, _Actor(version))
        v = guard.judge(score, 0.0)
        verdicts.append((v.kind, v.new_best, guard.best_version, guard.live_version))
    # 203 is within the noise (< 204): live, not best; 204.5 beats 200 by more than 2 %: best;
    # 190 is within 5 % of 204.5 (>= 194.3)? No: rejected, the best and the live stay.
    assert verdicts == [
        ('promoted', False, 0, 1),
        ('promoted', True, 2, 2),
        ('rejected', False, 2, 2),
    ]
    with pytest.raises(ValueError, match='eval_best_margin must be in'):
        RegressionGuard(1, 0.05, best_margin=1.0)


def test_a_candidate_that_returns_enough_but_does_not_balance_never_drives() -> None:
    # The worn rig's case: 230 against a best of 240 (within 5 %), but 1.58 s of balance
    # against the best's 4.30 s. Return alone let it drive; the balance bar does not.
    guard: RegressionGuard[_Actor] = RegressionGuard(every=1, margin=0.05, balance_margin=0.25)
    guard.next_episode(_Actor(0))
    assert math.isnan(guard.judge(240.0, balance_s=4.30).balance_bar_s)  # the baseline
    verdicts = []
    for version, score, balance in ((1, 230.0, 3.74), (2, 230.0, 1.58), (3, 200.0, 4.5)):
        guard.finish_training()
        assert guard.next_episode(_Actor(version)) == (True, _Actor(version))
        v = guard.judge(score, balance_s=balance)
        verdicts.append((v.kind, guard.live_version, v.reason))
    assert guard.last is not None and guard.last.balance_bar_s == pytest.approx(0.75 * 4.30)
    assert verdicts == [
        ('promoted', 1, ''),  # 3.74 s >= 3.225 s
        ('rejected', 1, 'balance 1.580 s below the bar 3.225 s'),
        ('rejected', 1, 'return 200.00 below the bar 228.00'),  # a long balance is not enough
    ]
    # The reference is the longest balance that went live (4.30 s), not the live one's (3.74 s).
    assert (guard.best_version, guard.balance_reference_s) == (0, 4.30)


def test_without_a_balance_margin_return_alone_decides() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(every=1, margin=0.05)  # balance_margin 1: off
    guard.next_episode(_Actor(0))
    guard.judge(240.0, balance_s=4.30)
    guard.finish_training()
    guard.next_episode(_Actor(1))
    assert guard.judge(230.0, balance_s=0.0).kind == 'promoted'
    with pytest.raises(ValueError, match=r'eval_balance_margin must be in \[0, 1\], got 1.5'):
        RegressionGuard(1, 0.05, balance_margin=1.5)


def test_the_balance_reference_only_rises_so_the_bar_cannot_slide() -> None:
    # Each new best returns more but balances 75 % as long: were the reference the best's own
    # balance, the bar would go 3.0 -> 2.25 -> 1.69 s. It stays at 75 % of the longest.
    guard: RegressionGuard[_Actor] = RegressionGuard(every=1, margin=0.05, balance_margin=0.25)
    guard.next_episode(_Actor(0))
    guard.judge(100.0, 4.0)
    bars = []
    for version, score, balance in ((1, 110.0, 3.0), (2, 120.0, 2.9), (3, 130.0, 2.2)):
        guard.finish_training()
        guard.next_episode(_Actor(version))
        v = guard.judge(score, balance)
        bars.append((v.kind, v.balance_bar_s, v.missed))
    assert bars == [
        ('promoted', 3.0, ''),
        ('rejected', 3.0, 'balance'),
        ('rejected', 3.0, 'balance'),
    ]
    assert (guard.best_version, guard.live_version) == (1, 1)


def test_a_baseline_that_never_swung_up_is_raised_by_the_first_that_does() -> None:
    # A baseline that failed its swing-up (0.16 s) sets no useful balance bar; the first
    # candidate that goes live balancing 5.4 s does, even if it is not a new best by return.
    guard: RegressionGuard[_Actor] = RegressionGuard(
        every=1, margin=0.05, best_margin=0.5, balance_margin=0.25
    )
    guard.next_episode(_Actor(0))
    guard.judge(171.0, 0.16)
    guard.finish_training()
    guard.next_episode(_Actor(1))
    assert guard.judge(200.0, 5.4).new_best is False  # not 50 % better: not the best
    guard.finish_training()
    guard.next_episode(_Actor(2))
    v = guard.judge(200.0, 1.0)
    assert (v.kind, v.missed, v.balance_bar_s) == ('rejected', 'balance', pytest.approx(4.05))


def test_non_finite_figures_from_an_evaluation() -> None:
    guard: RegressionGuard[_Actor] = RegressionGuard(
        every=1, best_margin=0.02, balance_margin=0.25
    )
    guard.next_episode(_Actor(0))
    guard.judge(math.nan, math.nan)  # a broken baseline: -inf, and no balance
    guard.finish_training()
    guard.next_episode(_Actor(1))
    v = guard.judge(50.0, math.inf)  # any finite return beats it and becomes the best
    assert (v.kind, v.new_best, v.balance_s) == ('promoted', True, 0.0)
    assert (guard.best_version, guard.best_score) == (1, 50.0)
    guard.finish_training()
    guard.next_episode(_Actor(2))
    v = guard.judge(math.inf, 1.0)
    assert (v.kind, v.missed) == ('rejected', 'return')
    assert v.reason == 'return -inf below the bar 47.50'


def test_an_evaluation_of_three_episodes_is_judged_on_their_means() -> None:
    """Every episode of an evaluation drives the candidate; the verdict comes at the last.

    One lucky episode does not promote (a single-episode guard would have), and one bad
    episode does not reject a candidate whose mean clears the bars.
    """
    guard: RegressionGuard[_Actor] = RegressionGuard(
        every=1, margin=0.05, balance_margin=0.25, episodes=3
    )
    first, lucky, steady = _Actor(0), _Actor(1), _Actor(2)
    for ret in (200.0, 210.0):  # the baseline: three episodes of the initial actor
        assert guard.next_episode(first) == (True, first)
        assert guard.judge(ret, 5.0).kind == 'pending'
        assert guard.best_version == -1 and math.isnan(guard.best_score)
    assert guard.next_episode(first) == (True, first)
    v = guard.judge(190.0, 5.0)
    assert (v.kind, v.score, v.balance_s) == ('baseline', pytest.approx(200.0), 5.0)
    guard.finish_training()
    # A newer actor arriving mid-evaluation waits: the evaluation under way goes on.
    assert guard.next_episode(lucky) == (True, lucky)
    pending = guard.judge(400.0, 9.0)  # one lucky episode
    assert (pending.kind, pending.new_best, pending.version) == ('pending', False, 1)
    assert guard.next_episode(steady) == (True, lucky)  # still lucky's evaluation
    guard.judge(100.0, 1.0)
    assert guard.next_episode(steady) == (True, lucky)
    v = guard.judge(80.0, 1.0)  # mean return 193.3 clears 190; mean balance 3.67 misses 3.75
    assert (v.kind, v.missed) == ('rejected', 'balance')
    assert v.balance_s == pytest.approx(11.0 / 3.0) and v.score == pytest.approx(580.0 / 3.0)
    assert guard.live_version == 0 and guard.rejected == 1
    guard.finish_training()
    assert guard.next_episode(steady) == (True, steady)
    for ret, bal in ((220.0, 5.0), (150.0, 2.0)):  # one bad episode among good ones
        assert guard.judge(ret, bal).kind == 'pending'
        assert guard.next_episode(steady) == (True, steady)
    v = guard.judge(230.0, 6.0)
    assert (v.kind, v.score) == ('promoted', pytest.approx(200.0))
    assert guard.live_version == 2
    guard.finish_training()
    assert guard.next_episode(steady) == (False, steady)  # nothing newer: training


_BOUNDS = EpisodeBounds(max_return=100.0, max_balance_s=2.0)


def _after_baseline(episodes: int, ret: float, balance_s: float, bounds=_BOUNDS):
    """A guard of ``episodes``-episode evaluations whose baseline scored ``ret``/``balance_s``."""
    guard: RegressionGuard[_Actor] = RegressionGuard(
        every=1, margin=0.05, balance_margin=0.25, episodes=episodes, bounds=bounds
    )
    for _ in range(episodes):
        guard.next_episode(_Actor(0))
        v = guard.judge(ret, balance_s)
    assert v.kind == 'baseline'
    guard.finish_training()
    return guard


def test_an_evaluation_stops_when_its_rejection_is_certain_and_runs_on_while_it_could_pass():
    """Curtailment: stop once no remaining episode scoring its most could lift the mean.

    Baseline 90 (bar 85.5) and 1.6 s (bar 1.2 s) over 3 episodes of at most 100 and 2 s.
    """
    guard = _after_baseline(3, 90.0, 1.6)
    cand = _Actor(1)
    assert guard.next_episode(cand) == (True, cand)
    v = guard.judge(10.0, 2.0)  # at most (10 + 200) / 3 = 70 < 85.5: certain
    assert (v.kind, v.missed, v.episodes, v.planned) == ('rejected', 'return', 1, 3)
    assert v.score == 10.0 and 'certain after 1 of 3 episodes' in v.reason
    assert guard.live_version == 0 and guard.rejected == 1
    guard.finish_training()
    # The next candidate: 60 could still pass ((60 + 200) / 3 = 86.7), so it runs on.
    close = _Actor(2)
    assert guard.next_episode(close) == (True, close)
    assert guard.judge(60.0, 2.0).kind == 'pending'
    assert guard.next_episode(close) == (True, close)
    v = guard.judge(95.0, 0.1)  # (155 + 100) / 3 = 85 < 85.5: now certain
    assert (v.kind, v.missed, v.episodes) == ('rejected', 'return', 2)
    guard.finish_training()
    # On balance alone: 0 s, then 0 s leave at most 2 / 3 = 0.67 s < 1.2 s.
    short = _Actor(3)
    guard.next_episode(short)
    assert guard.judge(100.0, 0.0).kind == 'pending'  # (0 + 4) / 3 = 1.33: could pass
    guard.next_episode(short)
    v = guard.judge(100.0, 0.0)
    assert (v.kind, v.missed, v.episodes) == ('rejected', 'balance', 2)
    guard.finish_training()
    # A candidate that passes runs every episode: a promotion is never curtailed.
    good = _Actor(4)
    for _ in range(2):
        guard.next_episode(good)
        assert guard.judge(99.0, 2.0).kind == 'pending'
    guard.next_episode(good)
    v = guard.judge(99.0, 2.0)
    assert (v.kind, v.episodes) == ('promoted', 3) and guard.live_version == 4


def test_a_curtailed_verdict_names_the_bar_that_was_certain() -> None:
    """The certain bar, not the one the fewer episodes' means miss; return first if both."""
    guard = _after_baseline(3, 90.0, 1.6)
    cand = _Actor(1)
    for _ in range(2):  # return (160 + 100) / 3 = 86.7 may still clear 85.5; balance cannot
        guard.next_episode(cand)
        v = guard.judge(80.0, 0.0)
    assert (v.kind, v.missed, v.episodes) == ('rejected', 'balance', 2), v  # means: return 80
    guard = _after_baseline(2, 90.0, 1.6)
    guard.next_episode(cand)
    v = guard.judge(50.0, 0.0)  # (50 + 100) / 2 < 85.5 and (0 + 2) / 2 < 1.2: both certain
    assert (v.kind, v.missed, v.episodes) == ('rejected', 'return', 1), v


def test_the_runners_line_says_how_many_episodes_made_a_rejection_certain() -> None:
    from rip_control.run.supervisor import episode_rejection

    ep = {'eval_missed': 1, 'return': 10.0, 'balance_s': 2.0, 'eval_bar': 85.5}
    assert 'certain' not in episode_rejection(ep)  # an older node's message: no counts
    ep.update(eval_judged=1, eval_planned=3)
    assert episode_rejection(ep) == (
        'return 10.00 below the bar 85.50 (certain after 1 of 3 episodes)'
    )


def test_without_bounds_every_episode_runs() -> None:
    guard = _after_baseline(3, 90.0, 1.6, bounds=None)
    guard.next_episode(_Actor(1))
    assert guard.judge(-1e9, 0.0).kind == 'pending'
    assert guard.judge(-1e9, 0.0).kind == 'pending'


@settings(max_examples=300, deadline=None)
@given(
    episodes=st.integers(2, 5),
    baseline=st.tuples(st.floats(-50.0, 100.0), st.floats(0.0, 2.0)),
    figures=st.lists(st.tuples(st.floats(-200.0, 100.0), st.floats(0.0, 2.0)), min_size=5),
)
def test_a_curtailed_verdict_is_the_one_every_completion_would_give(episodes, baseline, figures):
    """The rule stops only when certain: any scores of the episodes it skipped reject too.

    And while it runs on, the verdict is open: the skipped episodes at their most would
    promote (the full evaluation, without bounds, run on the same figures).
    """
    curtailed = _after_baseline(episodes, *baseline)
    cand = _Actor(1)
    k = 0
    for ret, bal in figures[:episodes]:
        curtailed.next_episode(cand)
        v = curtailed.judge(ret, bal)
        k += 1
        if v.kind != 'pending':
            break
    done = figures[:k]
    completions = [
        [(_BOUNDS.max_return, _BOUNDS.max_balance_s)] * (episodes - k),  # the most
        [(-200.0, 0.0)] * (episodes - k),
        figures[k:episodes],
    ]
    for rest in completions:
        full = _after_baseline(episodes, *baseline, bounds=None)
        full.next_episode(cand)
        for ret, bal in done + rest:
            w = full.judge(ret, bal)
            full.next_episode(cand)
        if k < episodes:  # stopped early: every completion rejects as well
            assert (v.kind, w.kind) == ('rejected', 'rejected'), (done, rest, v, w)
            assert v.missed and (v.episodes, v.planned) == (k, episodes), v
            assert f'certain after {k} of {episodes} episodes' in v.reason, v.reason
    # Before each episode where it ran on, the most the rest could score would pass.
    for j in range(1, k):
        full = _after_baseline(episodes, *baseline, bounds=None)
        full.next_episode(cand)
        for ret, bal in figures[:j] + [(_BOUNDS.max_return, _BOUNDS.max_balance_s)] * (
            episodes - j
        ):
            w = full.judge(ret, bal)
            full.next_episode(cand)
        assert w.kind == 'promoted', (figures[:j], w)


def test_the_loops_guard_knows_the_most_an_evaluation_episode_scores() -> None:
    """The bounds the control loop gives its guard: the task's reward ceiling and length."""
    from rip_control.params import CONTROL_PARAMETERS, defaults
    from rip_control.rig.env import TaskConfig
    from rip_control.rt.loop import LoopConfig

    task = TaskConfig(50.0, 6.0, 10.0, 1.5, 0)
    config = LoopConfig.from_params(defaults(CONTROL_PARAMETERS))
    bounds = config.guard(task).bounds
    assert bounds == EpisodeBounds(300.0, pytest.approx(6.0))  # 300 steps of at most 1
    longer = LoopConfig.from_params({**defaults(CONTROL_PARAMETERS), 'eval_episode_seconds': 10.0})
    assert longer.guard(task).bounds == EpisodeBounds(500.0, pytest.approx(10.0))
    assert config.guard().bounds is None
    # The control loop, given no guard of the caller's, builds its own with the bounds.
    from types import SimpleNamespace

    from rip_control.rt.loop import ControlLoop
    from rip_control.rt.outbox import Outbox

    env = SimpleNamespace(config=task)
    loop = ControlLoop(env, config, None, Outbox(1), Outbox(1), Outbox(1))  # type: ignore[arg-type]
    assert loop.guard.bounds == bounds


def test_eval_episodes_below_one_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match='eval_episodes must be >= 1, got 0'):
        RegressionGuard(every=1, episodes=0)


def _summary(verdict: str, ret: float, balance: float, **judged: float):
    from rip_control.rt.loop import EpisodeSummary

    return EpisodeSummary(
        episode=4,
        n_ticks=500,
        dt_mean_s=0.02,
        dt_std_s=0.0,
        max_overrun_s=0.0,
        n_strikes=0,
        episode_return=ret,
        balance_s=balance,
        terminated=False,
        policy_version=7,
        transitions_published=500,
        transitions_dropped_late=0,
        settled=True,
        kind='evaluation',
        verdict=verdict,
        live_version=3,
        best_version=3,
        best_score=300.0,
        balance_reference_s=8.0,
        **judged,
    )


def test_the_nodes_log_and_the_runners_lines_give_what_the_verdict_judged(tmp_path) -> None:
    """A pending episode changes nothing; the last gives the means it was judged on."""
    from rip_control.ros.weights_intake import WeightsIntake
    from rip_control.run.supervisor import episode_rejection, judged_figures

    intake = WeightsIntake(logger=None)
    line = intake.judged(_summary('pending', 100.0, 2.0), tmp_path)
    assert 'more of its evaluation to come' in line and 'v7' in line
    assert (intake.promoted, intake.rejected_by_guard, intake.last_verdict) == (0, 0, 'none')
    rejected = _summary(
        'rejected',
        100.0,  # this episode's
        2.0,
        eval_score=250.0,  # the evaluation's mean
        eval_balance_s=5.0,
        eval_bar=285.0,
        eval_balance_bar_s=6.0,
        eval_missed='return',
    )
    line = intake.judged(rejected, tmp_path)
    assert 'return 250.00 below the bar 285.00' in line and intake.rejected_by_guard == 1
    assert intake.last_verdict.startswith('v7 rejected: evaluation return 250.00')
    # The runner reads the ~/episode message's fields the same way.
    msg = {'return': 100.0, 'balance_s': 2.0, 'eval_score': 250.0, 'eval_balance_s': 5.0}
    assert judged_figures(msg) == (250.0, 5.0)
    assert judged_figures({**msg, 'eval_score': math.nan}) == (100.0, 2.0)  # pending, older
    missed = {**msg, 'eval_missed': 2.0, 'eval_bar': 285.0, 'eval_balance_bar_s': 6.0}
    assert episode_rejection(missed) == 'balance 5.000 s below the bar 6.000 s'
