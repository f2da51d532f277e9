"""rip_control.adapt's pure parts: the fine-tune's budget, the guard's verdict on the re-training.

The loop itself runs as the README types it (test_readme.py).
"""

from __future__ import annotations

import pytest

from rip_control.adapt import Adapt, _episodes_that_fit, _judge


def test_the_fine_tune_starts_only_if_an_episode_and_the_guards_evaluations_fit() -> None:
    # 3 training episodes and 2 evaluations (the baseline, one after the 2nd) at 33 s: 165 s.
    assert _episodes_that_fit(204.0, 33.0, every=2) == 3
    assert _episodes_that_fit(164.0, 33.0, every=2) == 2  # 4 episodes' worth: 2 + 2 evals
    assert _episodes_that_fit(65.0, 33.0, every=2) == 0  # one episode and its baseline: 66 s
    assert _episodes_that_fit(100.0, 10.0, every=0) == 10  # the guard off: no evaluations


def _report(returns: list[float], balances: list[float]) -> dict:
    return {
        'episodes': [
            {'ret': r, 'longest_balance_s': b} for r, b in zip(returns, balances, strict=True)
        ]
    }


@pytest.fixture
def loop(tmp_path) -> Adapt:
    return Adapt({}, {'runs_dir': str(tmp_path)}, stream=False)


def test_the_retrained_policy_is_judged_by_the_guards_rule_on_the_deployments_means(loop):
    prior = _report([330.0, 340.0], [0.4, 0.5])
    better = _judge(loop, prior, _report([440.0, 450.0], [8.4, 8.5]))
    assert better.kind == 'promoted'
    # Within eval_margin (5 %) of the prior's mean return and balancing as long: promoted.
    assert _judge(loop, prior, _report([325.0, 330.0], [0.45, 0.45])).kind == 'promoted'
    # Returns far below (a wrong identification's policy that falls at once): rejected.
    worse = _judge(loop, prior, _report([120.0, 130.0], [0.1, 0.1]))
    assert worse.kind == 'rejected' and 'return' in worse.reason
    # A return as high but a balance far shorter (eval_balance_margin 25 %): rejected.
    hover = _judge(loop, prior, _report([336.0, 336.0], [0.2, 0.2]))
    assert hover.kind == 'rejected' and 'balance' in hover.reason


def test_the_launch_passes_on_what_was_typed_and_refuses_a_bad_value_by_name() -> None:
    from rip_control.adapt import OPTIONS, launch_argv, split_arguments
    from rip_control.run.launching import LAUNCH_ARGUMENTS

    untyped = {a.name: a.default for a in LAUNCH_ARGUMENTS}  # what the launch file declares
    own = {p.name: '' for p in OPTIONS}
    assert launch_argv(untyped, own) == []
    typed = launch_argv({**untyped, 'run_name': 'stuck'}, {**own, 'rig_minutes': '10'})
    assert typed == ['run_name:=stuck', 'rig_minutes:=10']
    own_typed, runner = split_arguments(typed)  # what the launched loop makes of them
    assert own_typed == {**{p.name: p.default for p in OPTIONS}, 'rig_minutes': 10.0}
    assert runner == {'run_name': 'stuck'}
    with pytest.raises(ValueError, match='rig_minutes:=ten'):
        launch_argv(untyped, {**own, 'rig_minutes': 'ten'})
    with pytest.raises(ValueError, match='rig_minutes:=0'):  # below its range
        launch_argv(untyped, {**own, 'rig_minutes': '0'})
    with pytest.raises(ValueError, match='rate:=fast'):
        launch_argv({**untyped, 'rate': 'fast'}, own)


def test_a_phases_rig_time_counts_every_activation() -> None:
    from rip_control.adapt import _rig_seconds

    # The trace is the last activation's 500 ticks; a trip ended 249 before them.
    run = {'ticks': {'n_ticks': 499, 'n_ticks_earlier_activations': 249}}
    assert _rig_seconds(run, 50.0) == pytest.approx((500 + 249) / 50.0)
    assert _rig_seconds({'ticks': {'n_ticks': 499}}, 50.0) == pytest.approx(10.0)


@pytest.mark.parametrize('typed', ['rig_seconds:=100', 'episodes:=3'])
def test_what_the_loop_sets_for_each_phase_is_refused_when_typed(tmp_path, typed) -> None:
    from rip_control.adapt import split_arguments

    own, runner = split_arguments([typed, f'runs_dir:={tmp_path}'])
    with pytest.raises(ValueError, match=typed):
        Adapt(own, runner, stream=False)
