"""The goals ``bench matrix`` checks (pure arithmetic on evaluation summaries)."""

import math

from rip_control.benchmarks.matrix import check


def _summary(balance: float, tv: float) -> dict:
    return {'longest_balance_s': {'mean': balance}, 'action_tv_per_s': {'mean': tv}}


def test_goals_pass_and_fail_on_their_own_figures() -> None:
    sim = _summary(8.0, 10.0)
    ok = check(sim, _summary(7.85, 12.0), [200, 210, 190, 205], None)
    assert ok['balance_ok'] and ok['no_collapse'] and ok['chatter_ok']
    worse = check(sim, _summary(7.7, 12.1), [200, 210, 150, 205], None)
    assert not worse['balance_ok'] and not worse['no_collapse'] and not worse['chatter_ok']
    assert math.isclose(worse['worst_second_half_return_share'], 0.75)


def test_a_floor_and_a_negative_first_return() -> None:
    sim = _summary(1.0, 10.0)
    assert not check(sim, _summary(5.0, 5.0), [100.0], 8.0)['balance_ok']
    # From -100, 80 % "as good" allows down to -120, not -80.
    assert check(sim, _summary(5.0, 5.0), [-100.0, -90.0, -115.0], None)['no_collapse']
    assert not check(sim, _summary(5.0, 5.0), [-100.0, -90.0, -130.0], None)['no_collapse']
