"""Deployment metrics on synthetic traces whose answers are known (no ROS)."""

import math

import numpy as np
import pytest

from rip_control.run.evaluation import (
    balance_windows,
    chatter,
    deployment_measures,
    difference_interval,
    episode_metrics,
    mean_interval,
    phi_from_obs,
    summarize,
)

T = 0.02  # 50 Hz


def test_balance_windows_measure_each_continuous_stretch_below_the_threshold():
    # 10 ticks hanging, 50 balanced, 5 out, 100 balanced, 5 out.
    phi = np.concatenate(
        [np.full(10, 3.0), np.zeros(50), np.full(5, 0.5), np.zeros(100), [0.3] * 5]
    )
    dt = np.full(phi.size, T)
    windows = balance_windows(phi, dt)
    assert [(round(s, 6), round(n, 6)) for s, n in windows] == [(0.2, 1.0), (1.3, 2.0)]
    m = episode_metrics(phi, np.zeros(phi.size), dt, T)
    assert m.longest_balance_s == pytest.approx(2.0)
    assert m.swing_up_s == pytest.approx(0.2)  # the first window lasting >= 0.5 s
    assert m.balanced_fraction == pytest.approx(150 / 170)
    # After the swing-up (0.2 s in): 150 of 160 ticks balanced, the hanging start not counted.
    assert m.balanced_after_swing_up == pytest.approx(150 / 160)
    assert m.duration_s == pytest.approx(170 * T)


def test_balance_window_lengths_use_the_measured_dt_not_the_tick_count():
    phi = np.zeros(10)
    dt = np.array([T] * 9 + [0.1])  # one stretched tick
    assert balance_windows(phi, dt) == [(0.0, pytest.approx(9 * T + 0.1))]
    m = episode_metrics(phi, np.zeros(10), dt, T)
    assert m.dt_max_dev_ms == pytest.approx(80.0)


def test_the_threshold_is_strict_and_short_windows_are_no_swing_up():
    phi = np.array([0.2, 0.19, 0.19, 0.2, -0.1, 0.25])
    assert [round(n, 6) for _, n in balance_windows(phi, np.full(6, T))] == [0.04, 0.02]
    assert episode_metrics(phi, np.zeros(6), np.full(6, T), T).swing_up_s is None


def test_chatter_counts_total_variation_and_sign_changes_per_second():
    # A bang-bang +/-1 action at every tick for 1 s: TV 2 per tick, 49 sign changes.
    a = np.array([1.0, -1.0] * 25)
    tv, changes = chatter(a, 1.0)
    assert tv == pytest.approx(2.0 * 49)
    assert changes == pytest.approx(49)
    # A smooth 1 Hz cosine over 1 s: TV 4 (amplitude 1), zero crossings at 0.25 and 0.75 s.
    t = np.arange(50) * T
    tv, changes = chatter(np.cos(2 * math.pi * t), 1.0)
    assert tv == pytest.approx(4.0, rel=0.05)
    assert changes == 2


def test_actions_inside_the_deadband_are_no_sign_changes():
    tv, changes = chatter(np.array([0.5, 0.0, 0.001, -0.001, 0.5]), 1.0)
    assert changes == 0
    assert tv == pytest.approx(0.5 + 0.001 + 0.002 + 0.501)


def test_metrics_refuse_traces_of_different_lengths():
    with pytest.raises(ValueError, match='phi 3, action 2, dt 3'):
        episode_metrics(np.zeros(3), np.zeros(2), np.full(3, T), T)
    with pytest.raises(ValueError, match='non-empty'):
        episode_metrics(np.zeros(0), np.zeros(0), np.zeros(0), T)


def test_phi_is_recovered_from_the_observation():
    angles = np.array([-3.0, -0.1, 0.0, 0.5, 3.1])
    obs = np.zeros((5, 6))
    obs[:, 1], obs[:, 2] = np.sin(angles), np.cos(angles)
    np.testing.assert_allclose(phi_from_obs(obs), angles, atol=1e-12)


def test_summary_counts_swing_ups_and_averages_windows():
    up = episode_metrics(
        np.r_[np.full(10, 3.0), np.zeros(40)], np.zeros(50), np.full(50, T), T, reward=np.ones(50)
    )
    never = episode_metrics(np.full(50, 3.0), np.zeros(50), np.full(50, T), T, reward=np.zeros(50))
    s = summarize([up, never])
    assert s['episodes'] == 2 and s['swung_up'] == 1
    assert s['longest_balance_s']['mean'] == pytest.approx(0.4)
    assert s['longest_balance_s']['min'] == 0.0
    assert s['return_mean'] == pytest.approx(25.0)


def test_an_episode_cut_by_a_fault_and_run_again_is_measured_once() -> None:
    """A trip cuts episode 2 after 192 ticks; the node runs it again under the same number.

    The recorder keeps the attempt that ended, not the two merged (which once read as an 11 s
    balance in a 10 s episode).
    """
    from rip_control.evaluate import TransitionRecorder
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
    from rip_control.transitions import Transition

    def tick(step: int, phi: float, last: bool = False) -> Transition:
        obs = np.zeros(OBS_SIZE, dtype=np.float32)
        obs[1], obs[2] = math.sin(phi), math.cos(phi)
        act = np.zeros(ACTION_SIZE, dtype=np.float32)
        return Transition(2, step, obs, act, 1.0, obs, False, last, T, 1)

    rec = TransitionRecorder()
    rec.ticks[2] = [tick(i, 0.0) for i in range(192)]  # cut: no terminal tick
    rec.ticks[2] += [tick(0, 0.0)]  # cut at once
    assert not rec.complete(1)
    rec.ticks[2] += [tick(i, 1.0 if i < 100 else 0.0, i == 499) for i in range(500)]
    assert rec.complete(1)
    [(ep, m, traces)] = rec.episodes(T)
    assert ep == 2 and m.ticks == 500 and traces['phi'].size == 500
    assert m.longest_balance_s == pytest.approx(400 * T)
    assert rec.cut_attempts == 2


def test_the_evaluations_recorder_takes_only_its_own_runs_transitions() -> None:
    """Another runner's control node on the same DDS domain: its transitions are not scored.

    The recorder gets the run's identity from the runner (``observe(node, run_id)``); a
    transition tagged with another run, or untagged, is counted in ``foreign`` and dropped.
    """
    from types import SimpleNamespace

    from rip_control.evaluate import TransitionRecorder
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
    from rip_control.transitions import Transition, field_layout, run_tagged

    def message(step: int, run_id: str) -> SimpleNamespace:
        obs = np.zeros(OBS_SIZE, dtype=np.float32)
        obs[2] = 1.0  # cos(phi): a valid observation
        t = Transition(0, step, obs, np.zeros(ACTION_SIZE, np.float32), 1.0, obs, False,
                       False, T, 1)  # fmt: skip
        dims = [
            SimpleNamespace(label=label, size=size)
            for label, size in run_tagged(tuple(field_layout(OBS_SIZE, ACTION_SIZE)), run_id)
        ]
        return SimpleNamespace(layout=SimpleNamespace(dim=dims), data=t.pack())

    rec = TransitionRecorder()
    rec.run_id = 'runours'
    for step, run_id in enumerate(['runours', 'runtheirs', '', 'runours']):
        rec._on_transition(message(step, run_id))
    assert [t.step for t in rec.received] == [0, 3]
    assert rec.foreign == 2 and rec.rejected == 0
    anyone = TransitionRecorder()  # no identity given (a bare node's run): every run's taken
    for step, run_id in enumerate(['runours', '', 'runtheirs']):
        anyone._on_transition(message(step, run_id))
    assert len(anyone.received) == 3 and anyone.foreign == 0


def test_an_episode_that_never_swings_up_has_no_balance_after_it():
    phi = np.full(100, 3.0)
    m = episode_metrics(phi, np.zeros(100), np.full(100, T), T)
    assert m.swing_up_s is None and m.balanced_after_swing_up == 0.0


def test_the_mean_interval_is_students_t_at_90_percent():
    got = mean_interval([8.0, 9.0, 10.0])  # mean 9, sd 1, n 3: t(2 df) = 2.920
    half = 2.920 / math.sqrt(3)
    assert got == pytest.approx({'mean': 9.0, 'ci90_low': 9 - half, 'ci90_high': 9 + half, 'n': 3})
    assert mean_interval([7.0])['ci90_low'] is None  # one episode: no interval
    wide, narrow = mean_interval([1.0, 9.0] * 3), mean_interval([4.9, 5.1] * 3)
    assert wide['ci90_high'] - wide['ci90_low'] > 10 * (narrow['ci90_high'] - narrow['ci90_low'])


def test_a_deployment_that_never_swings_up_counts_its_whole_length_as_the_swing_up():
    episodes = [
        {'duration_s': 10.0, 'longest_balance_s': 0.2, 'swing_up_s': None},
        {'duration_s': 10.0, 'longest_balance_s': 8.0, 'swing_up_s': 2.0},
    ]
    got = deployment_measures(episodes)
    assert got['swing_up_s']['mean'] == pytest.approx(6.0)
    assert got['longest_balance_s']['mean'] == pytest.approx(4.1)
    assert 'action_tv_per_s' not in got  # an episode without it: not made up


def test_the_gain_of_one_deployment_over_another_is_welchs_interval():
    # Equal spreads and sizes: Welch's df is 2 (n - 1) = 4, so t = 2.132.
    got = difference_interval([9.0, 9.2, 9.4], [6.0, 6.2, 6.4])
    half = 2.132 * math.sqrt(2 * 0.04 / 3)
    assert got == pytest.approx({'mean': 3.0, 'ci90_low': 3 - half, 'ci90_high': 3 + half})
    # A gain the spread cannot tell from none: the interval spans zero.
    noisy = difference_interval([9.0, 1.0, 9.0], [6.0, 6.0, 6.0])
    assert noisy['ci90_low'] < 0.0 < noisy['ci90_high']
    assert difference_interval([9.0], [6.0, 7.0])['ci90_low'] is None
