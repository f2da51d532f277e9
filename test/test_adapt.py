"""rip_control.adapt's parts: the fine-tune's budget, the guard's verdict, identifying again.

The loop itself runs as the README types it (test_readme.py).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from rip_control import run_files
from rip_control.adapting.budget import episodes_that_fit
from rip_control.adapting.judging import judge
from rip_control.adapting.record import Adapt
from rip_control.params import defaults
from rip_control.rig.dynamics import PendulumParams
from rip_control.rig.excitation import ExcitationDesign

STUCK = Path(__file__).resolve().parents[1] / 'config' / 'rig_shifted_stuck.yaml'


def test_the_fine_tune_starts_only_if_an_episode_and_the_guards_evaluations_fit() -> None:
    # 3 training episodes and 2 evaluations (the baseline, one after the 2nd) at 33 s: 165 s.
    assert episodes_that_fit(204.0, 33.0, every=2) == 3
    assert episodes_that_fit(164.0, 33.0, every=2) == 2  # 4 episodes' worth: 2 + 2 evals
    assert episodes_that_fit(65.0, 33.0, every=2) == 0  # one episode and its baseline: 66 s
    assert episodes_that_fit(100.0, 10.0, every=0) == 10  # the guard off: no evaluations
    # Whether one fits, at once whatever the rig time (counting 1e11 episodes would not end).
    assert episodes_that_fit(1e12, 10.0, every=0, at_most=1) == 1
    assert episodes_that_fit(65.0, 33.0, every=2, at_most=1) == 0
    # Evaluations of 3 episodes of 10 s with a 23-s reset each (99 s) beside training
    # episodes of 6 s (29 s): the baseline and an episode take 128 s; two episodes bring the
    # evaluation after them (256 s), a third needs 285 s.
    assert episodes_that_fit(160.0, 29.0, every=2, per_evaluation_s=99.0) == 1
    assert episodes_that_fit(284.0, 29.0, every=2, per_evaluation_s=99.0) == 2
    assert episodes_that_fit(285.0, 29.0, every=2, per_evaluation_s=99.0) == 3
    assert episodes_that_fit(127.0, 29.0, every=2, per_evaluation_s=99.0) == 0


def _plan(**typed):
    from rip_control.adapt import OPTIONS
    from rip_control.adapting.plan import make_plan

    own = {**{p.name: p.default for p in OPTIONS}, **typed}
    excitation = 0.0 if own['identification'] else ExcitationDesign().duration_s
    return make_plan(own, {'episode_seconds': 6.0}, excitation, eval_episodes=3)


def test_the_plan_fits_the_deployments_to_the_budget_and_says_what_it_leaves_out() -> None:
    import math

    from rip_control.adapting.plan import RESERVE_FACTOR, RESET_PLAN_S

    per_episode = 10.0 + RESET_PLAN_S  # a deployment episode and its reset
    excitation = ExcitationDesign().duration_s + RESET_PLAN_S
    # Ten minutes: five episodes a deployment, a second candidate and the fine-tune fit.
    ten = _plan(rig_minutes=10.0)
    assert ten.episodes == 5 and ten.deployment_s == 5 * per_episode
    assert ten.compulsory_s == excitation + 2 * 5 * per_episode
    # ... the fine-tune's share: what is left less the final deployment, priced as the
    # fine-tune reserves it (RESERVE_FACTOR deployments)
    final = RESERVE_FACTOR * ten.deployment_s
    assert ten.second_candidate and ten.finetune_s == 600.0 - ten.compulsory_s - final
    # The least a fine-tune needs: the guard's 3 evaluation episodes, a 6-s training
    # episode (each with a reset) and the final deployment's reserve; 0.01 minutes either side.
    least = 3 * per_episode + 6.0 + RESET_PLAN_S + final
    edge = (ten.compulsory_s + least) / 60.0
    assert _plan(rig_minutes=math.floor(edge * 100) / 100).finetune_s == 0.0
    assert _plan(rig_minutes=math.ceil(edge * 100) / 100).finetune_s > 0.0

    # A second candidate needs room for its deployment, and must not take a fine-tune's
    # place. Where no fine-tune fits, its own deployment is the final measure: room for one
    # deployment is enough (the rig time would otherwise go unspent).
    def second(left_s: float) -> Any:
        return _plan(rig_minutes=(ten.compulsory_s + left_s) / 60.0)

    def said(plan: Any) -> str:
        return '\n'.join(plan.lines())

    dep = ten.deployment_s
    assert dep < least
    alone = second(dep + 1.0)
    assert alone.second_candidate and alone.finetune_s == 0.0
    assert 'its deployment the final' in said(alone)
    short = second(dep - 1.0)
    assert not short.second_candidate
    assert 'not expected to fit: a second candidate (~70 s: 69 s left)' in said(short)
    # Room for a fine-tune, but not for one after a second deployment: the fine-tune alone
    # (before, at 2.1 deployments and more, the second candidate ran and no fine-tune fitted
    # after it: the final deployment's reserve went unspent).
    for tuned in (second(least + 1.0), second(dep + least - 1.0)):
        assert tuned.finetune_s > 0.0 and not tuned.second_candidate
        assert "a second candidate (~70 s: it would take the fine-tune's place" in said(tuned)
    both = second(dep + least + 1.0)
    assert both.finetune_s > 0.0 and both.second_candidate
    assert 'less a second candidate, if one runs' in said(both)
    # None is planned without a second identification.
    assert not _plan(rig_minutes=10.0, reidentify=False).second_candidate
    # Two minutes: as many episodes as the excitation and two deployments leave room for
    # (three), nothing optional; said before the rig moves.
    two = _plan(rig_minutes=2.0)
    assert two.episodes == 3 and two.compulsory_s <= 120.0 < excitation + 2 * 4 * per_episode
    assert not two.second_candidate and two.finetune_s == 0.0
    text = '\n'.join(two.lines())
    assert 'plan for 120 s' in text and 'candidate deployment (3 x 10 s) ~42 s' in text
    assert 'not expected to fit: the fine-tune' in text
    # Typed episodes are kept, never shortened; with an identification given, no excitation
    # and no second candidate.
    assert _plan(rig_minutes=10.0, deployment_episodes=7).episodes == 7
    given = _plan(rig_minutes=2.0, identification='rig.yaml')
    assert given.excitation_s == 0.0 and given.episodes == 4 and not given.second_candidate


@pytest.mark.parametrize(
    ('typed', 'least'),
    [
        # the excitation and two deployments of the fewest episodes (2) the plan shortens to
        ({'rig_minutes': 1.0}, 'need 80 s of rig time: rig_minutes:=1.34 at least'),
        # typed episodes are not shortened: their deployments are what is needed
        (
            {'rig_minutes': 2.0, 'deployment_episodes': 5},
            'need 164 s of rig time: rig_minutes:=2.74 at least',
        ),
    ],
)
def test_a_budget_too_small_for_the_compulsory_phases_is_refused_naming_the_least(
    typed, least
) -> None:
    with pytest.raises(ValueError, match=f'rig_minutes:={typed["rig_minutes"]:g} is too small'):
        _plan(**typed)
    with pytest.raises(ValueError, match=least.replace('.', r'\.')):
        _plan(**typed)


def test_adapt_refuses_a_budget_too_small_before_anything_runs(tmp_path) -> None:
    """As typed: exit 2 naming the least budget, no emulator started, nothing written."""
    import subprocess
    import sys

    from rip_control.procs import child_env

    proc = subprocess.run(
        [
            sys.executable, '-m', 'rip_control.adapt',
            'rig_params:=config/rig_shifted_stuck.yaml', 'rig_minutes:=1',
            f'runs_dir:={tmp_path / "runs"}',
        ],
        cwd=STUCK.parents[1],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'rig_minutes:=1 is too small' in proc.stderr, proc.stderr
    assert 'rig_minutes:=1.34 at least' in proc.stderr, proc.stderr
    assert 'emulated rig' not in proc.stdout, proc.stdout
    assert not (tmp_path / 'runs').exists()


def _timing(path: Path, rows: list[tuple]) -> None:
    """A phase's timing.csv by the node's writer: (ticks, kind, verdict, balance, reset, v)."""
    from rip_control.telemetry import EpisodeTiming, TimingCsv

    csv_file = TimingCsv(path / run_files.TIMING_CSV)
    for i, (ticks, kind, verdict, balance, reset, version) in enumerate(rows):
        figures = dict.fromkeys(('mean_tick_dt_ms', 'std_tick_dt_ms', 'max_overrun_ms'), 0.0)
        csv_file.append(
            EpisodeTiming(
                episode=i,
                n_ticks=ticks,
                **figures,
                n_violations=0,
                learner_train_calls=0,
                learner_total_train_s=0.0,
                episode_return=0.0,
                balance_s=balance,
                policy_version=version,
                kind=kind,
                verdict=verdict,
                reset_s=reset,
            )  # fmt: skip
        )


def test_a_loops_plan_takes_its_options_and_the_guards_typed_evaluations(tmp_path) -> None:
    from rip_control.adapt import OPTIONS
    from rip_control.adapting.budget import plan_for
    from rip_control.adapting.plan import RESERVE_FACTOR, RESET_PLAN_S

    own = {p.name: p.default for p in OPTIONS}
    runner = {'runs_dir': str(tmp_path)}
    identifying = plan_for(Adapt(own, runner, stream=False))
    assert identifying.excitation_s == ExcitationDesign().duration_s + RESET_PLAN_S
    given = plan_for(Adapt({**own, 'identification': 'rig.yaml'}, runner, stream=False))
    assert given.excitation_s == 0.0
    # The guard's evaluations as typed (2, not adapt's 3) price the fine-tune; the training
    # episode is the node's episode_seconds as typed.
    typed = plan_for(
        Adapt(own, {**runner, 'eval_episodes': '2', 'episode_seconds': '4'}, stream=False)
    )
    per_episode = own['deployment_episode_seconds'] + RESET_PLAN_S
    final = RESERVE_FACTOR * typed.deployment_s
    assert typed.finetune_least_s == 2 * per_episode + 4.0 + RESET_PLAN_S + final


def test_a_deployment_runs_the_plans_episodes_under_the_limit_that_keeps_the_reserve(
    tmp_path, monkeypatch
) -> None:
    from rip_control import evaluate
    from rip_control.adapt import OPTIONS
    from rip_control.adapting.budget import plan_for

    own = {**{p.name: p.default for p in OPTIONS}, 'rig_minutes': 2.0}
    loop = Adapt(own, {'runs_dir': str(tmp_path)}, stream=False)
    loop.plan = plan_for(loop)
    typed: list[dict] = []

    def deployed(args: dict, stream_logs: bool, stop_when=None) -> dict:
        typed.append(args)
        assert stop_when is None  # no sequential rule unless the phase gives one
        return {'episodes': [], 'ticks': {'n_ticks': 999}}  # 20 s of rig time

    monkeypatch.setattr(evaluate, 'evaluate', deployed)
    loop.deploy('0_baseline', Path('p'), excitation=True, reserve_s=loop.plan.deployment_s)
    assert typed[0]['episodes'] == str(loop.plan.episodes) == '3', typed
    assert typed[0]['rig_seconds'] == f'{120.0 - loop.plan.deployment_s:.1f}'
    assert typed[0]['excitation_episodes'] == '1'
    loop.deploy('2_candidate', Path('p'), excitation=False)
    assert typed[1]['rig_seconds'] == '100.0' and 'excitation_episodes' not in typed[1]
    loop.rig_s = 130.0  # past the budget: the limit never below a second (one episode runs)
    loop.deploy('4_deployment', Path('p'), excitation=False)
    assert typed[2]['rig_seconds'] == '1.0'


def test_the_retraining_is_asked_to_stop_at_the_first_evaluation_that_reaches_the_target(
    tmp_path, monkeypatch
) -> None:
    """The loop's target reaches the re-training, and any evaluation may stop it but the first.

    pretrain scores a warm start at step 1; ``min_steps`` 2 leaves that one out.
    """
    import json

    from rip_control.adapt import OPTIONS
    from rip_control.adapting import offline

    own = {**{p.name: p.default for p in OPTIONS}, 'target_balance_s': 7.5}
    loop = Adapt(own, {'runs_dir': str(tmp_path)}, stream=False)
    asked: dict = {}

    def program(executable: str, options: dict, log, prefix: str = '') -> None:
        asked.update(options, executable=executable)
        out = Path(options['out'])
        out.mkdir(parents=True)
        record = {'steps': 5000, 'wall_s': 1.0, 'stopped_by': 'target', 'best': None}
        (out / run_files.PRETRAIN_RECORD).write_text(json.dumps(record))

    monkeypatch.setattr(offline, 'run_program', program)
    done = offline.retrain(loop, '1_sim_retrain', Path('rig.yaml'), Path('p'), 2, 'identified')
    assert asked['executable'] == 'pretrain' and asked['target_balance_s'] == 7.5, asked
    assert asked['min_steps'] == 2 and asked['init'] == 'p', asked
    assert asked['seed'] == loop.seed, asked  # the run's, unless another is asked for
    assert done['steps'] == 5000
    asked.clear()
    offline.retrain(loop, '2_sim_retrain_again', Path('rig.yaml'), Path('p'), 2, 'x', seed=5)
    assert asked['seed'] == 5, asked


def test_the_rig_time_splits_by_what_the_rig_did_and_the_guards_points_join_the_curve(
    tmp_path,
) -> None:
    from rip_control.adapting import rig_time

    # The baseline: the excitation (1000 ticks) and two 10-s episodes, a 2-s reset before
    # each; the fine-tune: the guard's baseline (two episodes), a training episode, the
    # evaluation of v5 (promoted); a phase in simulation has no rig time.
    _timing(
        tmp_path / '0_baseline',
        [(1000, 'excitation', '', 0, 2, -1), (500, 'training', '', 1.0, 2, 1)]
        + [(500, 'training', '', 0.5, 2, 1)],
    )
    _timing(
        tmp_path / '3_finetune',
        [(500, 'evaluation', 'pending', 8.0, 3, 1), (500, 'evaluation', 'baseline', 9.0, 3, 1)]
        + [(300, 'training', '', 2.0, 3, 5), (500, 'evaluation', 'pending', 9.0, 3, 5)]
        + [(500, 'evaluation', 'promoted', 9.4, 3, 5)],
    )
    phases = [
        {'phase': '0_baseline', 'rig_seconds': 47.0},  # 46 s counted: 1 s other
        {'phase': '1_sim_retrain', 'rig_seconds': 0.0},
        {'phase': '3_finetune', 'rig_seconds': 61.0},
    ]
    split = rig_time.split(tmp_path, phases, 50.0)
    assert split == {
        'excitation_s': 20.0,
        'deployments_s': 20.0,
        'evaluations_s': 40.0,
        'training_s': 6.0,
        'resets_s': 6.0 + 15.0,
        'other_s': 1.0,
    }
    assert sum(split.values()) == 47.0 + 61.0
    points = rig_time.guard_points(tmp_path / '3_finetune', 47.0, 50.0)
    assert points == [
        {'rig_s': 47.0 + 26.0, 'balance_s': 8.5, 'what': '3_finetune v1 baseline'},
        {'rig_s': 47.0 + 61.0, 'balance_s': 9.2, 'what': '3_finetune v5 promoted'},
    ]
    curve = [{'rig_s': 20.0, 'balance_s': 0.75}, *points]
    assert rig_time.target_rig_seconds(curve, 8.0) == 73.0
    assert rig_time.target_rig_seconds(curve, 9.2) == 108.0  # reached exactly counts
    assert rig_time.target_rig_seconds(curve, 9.5) is None


def test_the_runners_rig_time_limit_prices_episodes_and_not_the_excitation() -> None:
    """The rule a deployment under adapt's plan stops by (RigBudget: free of ROS).

    The excitation (20 s and its reset) is a one-off: priced at it, the next episode of a
    30-s limit would never have run. The first episode after it runs unpriced; from then on
    each is priced at the dearest of the last and the mean of the episodes.
    """
    from types import SimpleNamespace

    from rip_control.run.supervisor import RigBudget

    mon = SimpleNamespace(episodes=[], evaluations=[], excitations=[], used=0.0)
    mon.rig_seconds = lambda: mon.used
    limit = RigBudget(50.0)

    def ended(kind: list, used: float) -> str:
        kind.append({})
        mon.used = used
        return limit.exhausted(mon)

    assert ended(mon.excitations, 22.0) == ''  # 22 + 22 + 2 > 50: the excitation prices nothing
    assert ended(mon.evaluations, 34.0) == '' and limit.cost_s == 12.0  # 34 + 12 + 2 <= 50
    why = ended(mon.evaluations, 47.0)  # 13 s the last: 47 + 13 + 2 > 50
    assert limit.cost_s == 13.0 and 'the next would pass the 50 s limit' in why, why
    # The mean, when dearer than the last: three episodes in 34 s of a 100-s limit.
    limit = RigBudget(100.0)
    mon.episodes, mon.evaluations, mon.excitations, mon.used = [], [], [], 0.0
    assert ended(mon.excitations, 20.0) == ''
    assert ended(mon.evaluations, 40.0) == ''  # 20 s
    assert ended(mon.evaluations, 50.0) == ''  # 10 s, the mean 15
    assert ended(mon.evaluations, 54.0) == '' and limit.cost_s == pytest.approx(34.0 / 3)


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
    better = judge(loop, prior, _report([440.0, 450.0], [8.4, 8.5]))
    assert better.kind == 'promoted'
    # Within eval_margin (5 %) of the prior's mean return and balancing as long: promoted.
    assert judge(loop, prior, _report([325.0, 330.0], [0.45, 0.45])).kind == 'promoted'
    # Returns far below (a wrong identification's policy that falls at once): rejected.
    worse = judge(loop, prior, _report([120.0, 130.0], [0.1, 0.1]))
    assert worse.kind == 'rejected' and 'return' in worse.reason
    # A return as high but a balance far shorter (eval_balance_margin 25 %): rejected.
    hover = judge(loop, prior, _report([336.0, 336.0], [0.2, 0.2]))
    assert hover.kind == 'rejected' and 'balance' in hover.reason
    # On the means, not the first, the last or the best episode (the bar: 95 % of 335).
    assert judge(loop, prior, _report([300.0, 380.0], [0.45, 0.45])).kind == 'promoted'
    assert judge(loop, prior, _report([380.0, 250.0], [0.45, 0.45])).kind == 'rejected'
    assert judge(loop, prior, _report([400.0, 240.0], [0.45, 0.45])).kind == 'promoted'


def test_a_candidates_deployment_stops_once_the_guards_rule_rejects_it_whatever_comes_next(
    tmp_path, monkeypatch
) -> None:
    """The sequential rule of a candidate's deployment, on synthetic episodes.

    3 episodes of 10 s at 50 Hz: each returns at most 500 and balances at most 12.5 s (500
    ticks, each kept up to the 5-ms violation threshold late: a deployment's balance sums the
    measured ticks). The prior's deployment (mean return 335, balance 8 s) sets the bars:
    return 318.25 (5 % below), balance 6 s (25 % below).
    """
    from types import SimpleNamespace

    from rip_control import evaluate
    from rip_control.adapt import OPTIONS
    from rip_control.adapting.budget import plan_for
    from rip_control.adapting.judging import certain_rejection

    own = {**{p.name: p.default for p in OPTIONS}, 'rig_minutes': 2.0}
    loop = Adapt(own, {'runs_dir': str(tmp_path)}, stream=False)
    loop.plan = plan_for(loop)
    assert loop.plan.episodes == 3
    prior = _report([330.0, 340.0, 335.0], [8.0, 8.0, 8.0])
    stop = certain_rejection(loop, prior)

    def done(*figures: tuple[float, float]) -> list:
        return [SimpleNamespace(ret=r, longest_balance_s=b) for r, b in figures]

    assert stop([]) == ''
    # One fallen episode: (10 + 2 x 500) / 3 = 337 could still clear 318: it runs on.
    assert stop(done((10.0, 0.1))) == ''
    # Two: (20 + 500) / 3 = 173 cannot. Certain: stop, one episode's rig time saved.
    why = stop(done((10.0, 0.1), (10.0, 0.1)))
    assert why == (
        'the candidate misses the return bar whatever its other 1 episode(s) score: '
        'rejected after 2 of 3'
    )
    # On balance: (0 + 0 + 12.5) / 3 = 4.2 s < 6 s, its returns as high as the prior's.
    assert 'balance bar' in stop(done((400.0, 0.0), (400.0, 0.0)))
    # (1 + 1 + 12.5) / 3 = 4.8 s: still certain; (3 + 3 + 12.5) / 3 = 6.2 s: not.
    assert 'balance bar' in stop(done((400.0, 1.0), (400.0, 1.0)))
    assert stop(done((400.0, 3.0), (400.0, 3.0))) == ''
    assert stop(done(*[(None, 0.0)] * 2)) == ''  # rewards not known: nothing is certain
    # A good start never stops it, nor does a poor one the rest could still lift.
    assert stop(done((440.0, 9.0), (450.0, 9.0))) == ''
    assert stop(done((200.0, 4.0), (300.0, 7.0))) == ''  # (500 + 500) / 3 = 333
    # Judged on the episodes it ran, the verdict is the rejection the rule foresaw.
    v = judge(loop, prior, _report([10.0, 10.0], [0.1, 0.1]))
    assert v.kind == 'rejected' and 'certain after 2 of 3 episodes' in v.reason, v.reason
    # A full deployment's rejection says nothing of certainty, nor does one the budget cut
    # short whose rest could have passed (return (600 + 500) / 3 = 367).
    v = judge(loop, prior, _report([10.0, 10.0, 10.0], [0.1, 0.1, 0.1]))
    assert v.kind == 'rejected' and 'certain' not in v.reason
    v = judge(loop, prior, _report([300.0, 300.0], [8.0, 8.0]))
    assert v.kind == 'rejected' and 'certain' not in v.reason, v.reason
    # The bar the rule saw missed: balance (its return could still pass), though the two
    # episodes' mean return misses too.
    v = judge(loop, prior, _report([300.0, 300.0], [0.0, 0.0]))
    assert v.missed == 'balance' and 'certain after 2 of 3' in v.reason, v.reason
    # What is kept for the next deployment after one cut short: a whole one, at its rig
    # time per episode (1 of 3 episodes in 14 s: 42 s), not the 14 s it ran.
    loop.phases.append({'phase': '2_candidate', 'rig_seconds': 14.0, 'episodes': [{}]})
    assert loop.full_deployment_s() == pytest.approx(42.0)
    # The candidate phases hand their rule to the deployment.
    given: list = []

    def deployed(args: dict, stream_logs: bool, stop_when=None) -> dict:
        given.append(stop_when)
        return {'episodes': [], 'ticks': {'n_ticks': 99}}

    monkeypatch.setattr(evaluate, 'evaluate', deployed)
    loop.deploy('2_candidate', Path('p'), excitation=False, stop_when=stop)
    assert given == [stop]


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
    from rip_control.adapting.record import phase_rig_seconds

    # The trace is the last activation's 500 ticks; a trip ended 249 before them.
    run = {'ticks': {'n_ticks': 499, 'n_ticks_earlier_activations': 249}}
    assert phase_rig_seconds(run, 50.0) == pytest.approx((500 + 249) / 50.0)
    assert phase_rig_seconds({'ticks': {'n_ticks': 499}}, 50.0) == pytest.approx(10.0)


@pytest.mark.parametrize('typed', ['rig_seconds:=100', 'episodes:=3'])
def test_what_the_loop_sets_for_each_phase_is_refused_when_typed(tmp_path, typed) -> None:
    from rip_control.adapt import split_arguments

    own, runner = split_arguments([typed, f'runs_dir:={tmp_path}'])
    with pytest.raises(ValueError, match=typed):
        Adapt(own, runner, stream=False)


def _stuck_run(tmp_path: Path) -> Path:
    """A run folder whose baseline and candidate recorded the stuck rig (in simulation).

    The baseline: the excitation and an episode; the candidate: an episode of its own.
    """
    from rip_bench.identification import simulated_recording
    from rip_control import buffer_file
    from rip_control.adapting.record import PHASES
    from rip_control.transitions import EXCITATION_VERSION

    truth = PendulumParams.from_yaml(STUCK)
    baseline = simulated_recording(truth, seed=0, episodes=1)
    deployed = simulated_recording(truth, seed=1, episodes=1)
    keep = deployed['policy_versions'] != EXCITATION_VERSION
    candidate = {k: v[keep] for k, v in deployed.items()}
    candidate['episodes'] = candidate['episodes'] - 1  # its own numbering, from 0
    run = tmp_path / 'run'
    for phase, arrays in ((PHASES[0], baseline), (PHASES[2], candidate)):
        n_obs, n = arrays['observations'].shape[1], len(arrays['rewards'])
        (run / phase).mkdir(parents=True)
        buffer_file.save(
            run / phase / run_files.EVALUATION_TRANSITIONS,
            arrays,
            buffer_file.BufferMeta(50.0, n_obs, 1, n, 0),
        )
    return run


@pytest.mark.parametrize('minutes', [0.0, 0.25])
def test_identify_minutes_bounds_the_identifications_wall_time(tmp_path, monkeypatch, minutes):
    """``identify_minutes`` reaches the identification as its ``time_limit_s``; 0 leaves it be."""
    from rip_control.adapt import OPTIONS
    from rip_control.adapting import offline

    own = {**{p.name: p.default for p in OPTIONS}, 'identify_minutes': minutes}
    loop = Adapt(own, {'runs_dir': str(tmp_path)}, stream=False)
    given: list[dict] = []

    def identify(opts: dict, log) -> dict:
        given.append(opts)
        return {}

    monkeypatch.setattr(offline, 'identify', identify)
    offline.identify_baseline(loop)
    if minutes:
        assert given[0]['time_limit_s'] == 15.0
    else:
        assert 'time_limit_s' not in given[0]  # the program's own default


@pytest.mark.parametrize('wrong', [True, False], ids=['dead_zone_wrong', 'right'])
def test_the_second_identification_moves_what_the_first_got_wrong(tmp_path, wrong) -> None:
    """Identified again from both deployments, starting at the first identification.

    A first identification that missed the stuck rig's dead zone (0 V for 1.2 V) is moved
    by the second, and only that parameter is reported moved; a right one is not moved.
    """
    from rip_control.adapting.offline import reidentify

    run = _stuck_run(tmp_path)
    truth = PendulumParams.from_yaml(STUCK)
    first = tmp_path / 'first.yaml'
    start = replace(truth, motor_dead_zone_v=0.0) if wrong else truth
    first.write_text(yaml.safe_dump({'rig': asdict(start)}))
    # The first identification's options (the program's defaults for the rest), shortened.
    opts = {'rate_hz': 50.0, 'generations': 8, 'restarts': 0, 'plot': False}
    lines: list[str] = []
    found, out = reidentify(run, opts, first, log=lines.append)
    assert out == run / run_files.REIDENTIFIED_RIG and out.exists()
    assert {'fitted', 'moved', 'seconds_of_data', 'wall_s'} <= set(found), found
    assert any('2_candidate' in line and 'replay buffers' in line for line in lines), lines
    # Every record of both: the excitation (20 s) and the baseline's and candidate's episodes.
    assert found['seconds_of_data'] == pytest.approx(ExcitationDesign().duration_s + 20.0)
    shifted = found['moved']
    if wrong:
        assert list(shifted) == ['motor_dead_zone_v'], shifted
        assert shifted['motor_dead_zone_v']['from'] == 0.0
        assert abs(shifted['motor_dead_zone_v']['to'] - 1.2) < 0.1, shifted
        assert abs(found['fitted']['motor_dead_zone_v']['value'] - 1.2) < 0.1, found['fitted']
    else:
        assert shifted == {}, shifted


@pytest.mark.parametrize(
    'case',
    [
        'moved',
        'still',
        'no_room',
        'kept_start',
        'alone',
        'before_a_fine_tune',
        'beside_a_fine_tune',
        'short_still',
        'short_moved',
        'reached_still',
        'reached_moved',
        'no_room_short',
        'short_kept_start',
    ],
)
def test_a_second_candidate_is_retrained_where_the_physics_moved_or_what_goes_on_falls_short(
    tmp_path, monkeypatch, case
) -> None:
    """The decision around the second identification (its fit: the test above).

    The identification, the re-training and the deployment are stand-ins here (each has
    tests of its own, and the loop runs as typed in test_readme): what is checked is which
    of them run, with what, and the verdict against the deployment of what goes on. The
    ``short_*`` and ``reached_*`` cases name the prior: where what goes on falls short of the
    target, another draw is re-trained from it with the next seed, moved or not.
    """
    from rip_control import adapt
    from rip_control.adapting import budget, offline
    from rip_control.adapting.record import AGAIN, PHASES

    # What the identification moved (which it decides: the test above).
    moved = {'motor_dead_zone_v': {'from': 0.0, 'to': 1.2, 'tolerance': 0.1}}
    still = case in ('still', 'short_still', 'reached_still', 'no_room_short', 'short_kept_start')
    found = {
        'fitted': {'motor_dead_zone_v': {'value': 0.05 if still else 1.2}},
        'moved': {} if still else moved,
        'seconds_of_data': 120.0,
        'wall_s': 1.0,
    }
    calls: list[tuple] = []
    monkeypatch.setattr(
        offline,
        'reidentify',
        lambda run_dir, opts, first, log: (
            calls.append(('identify', first)) or found,
            run_dir / run_files.REIDENTIFIED_RIG,
        ),
    )
    # The re-training's best: a later step, or (kept_start) the policy it started from.
    best = {'best': {'step': 1 if case.endswith('kept_start') else 20_000}}
    monkeypatch.setattr(
        offline,
        'retrain',
        lambda a, name, rig, init, k, rnd, seed: calls.append((name, rig, init, k, seed)) or best,
    )
    monkeypatch.setattr(adapt, '_versioned', lambda src, dst, version, rate: dst / 'p')
    better = _report([440.0, 450.0], [8.4, 8.5])

    def deploy(a, name, policy, excitation, stop_when=None):
        calls.append((name, policy))
        a.phases.append({'phase': name, 'rig_seconds': 60.0, 'episodes': [{}, {}]})
        return better

    monkeypatch.setattr(Adapt, 'deploy', deploy)
    # With the guard on (the default) no fine-tune fits here: its baseline evaluation alone
    # (3 episodes of 30 s, resets included) is more than what is left. With it off (the
    # *_fine_tune cases) a training episode and the final deployment's reserve (66 s) fit
    # in 93 s.
    tunes = case in ('before_a_fine_tune', 'beside_a_fine_tune')
    guard = {'eval_every_episodes': '0'} if tunes else {}
    runner = {'runs_dir': str(tmp_path), 'seed': '7', **guard}  # (a seed of its own)
    loop = Adapt(defaults(adapt.OPTIONS), runner, stream=False)
    assert loop.seed == 7
    # The candidate's deployment: 2 episodes of 10 s in 60 s of rig time (a 20-s reset each).
    loop.phases = [{'phase': PHASES[2], 'rig_seconds': 60.0, 'episodes': [{}, {}]}]
    loop.rig_s = 200.0
    # Room for another deployment (60 s) with no fine-tune to make room for, or just above
    # it, or just short; with a fine-tune that fits, room for it after a second deployment,
    # or not (then the fine-tune goes alone).
    left = {
        'no_room': 60.0 - 6.0,
        'no_room_short': 60.0 - 6.0,
        'alone': 60.0 + 1.0,
        'before_a_fine_tune': 120.0,
        'beside_a_fine_tune': 60.0 + 120.0,
    }.get(case, 126.0)
    rig_budget = 200.0 + left
    assert budget.finetune_fits(loop, rig_budget) == tunes
    assert budget.finetune_fits(loop, rig_budget - 60.0) == (case == 'beside_a_fine_tune')
    first = loop.run_dir / run_files.IDENTIFIED_RIG
    against = _report([330.0, 340.0], [0.4, 0.5])
    named = case.startswith(('short', 'reached', 'no_room_'))
    prior = tmp_path / 'prior.safetensors' if named else None
    if case.startswith('reached'):  # what goes on reached the 8 s target already (exactly)
        against = _report([900.0, 900.0], [7.9, 8.1])
    done = adapt._again(loop, {}, first, 2, 'identified', 2001, rig_budget, against, prior=prior)
    if case in ('no_room', 'no_room_short', 'before_a_fine_tune'):
        assert calls == [] and done['why'].startswith('not run: '), done
        need = {
            'no_room': 'a second candidate would need 60 s',
            'no_room_short': 'a second candidate would need 60 s',
            'before_a_fine_tune': "a second candidate's 60 s would leave no room for the "
            'fine-tune that fits them',
        }[case]
        assert need in done['why'], done['why']
        return
    assert calls[0] == ('identify', first)
    again = loop.run_dir / run_files.REIDENTIFIED_RIG
    if case.startswith('short'):  # another draw: from the prior, the next seed
        assert calls[1] == (AGAIN[0], again, prior, 2, 8), calls
        assert done['retrain_seed'] == 8 and done['retrain_from'] == str(prior)
        assert 'short of the 8 s target: another draw, re-trained from the prior' in done['why']
        if case == 'short_kept_start':  # the prior is its best: nothing to deploy
            assert len(calls) == 2 and done['candidate'] is None, done
            assert 'found nothing better than its start (the prior)' in done['why']
            return
        assert calls[2] == (AGAIN[1], loop.run_dir / 'candidate_again' / 'p')
        assert done['verdict'] == 'promoted' and done['report'] is better
        return
    if case in ('still', 'reached_still'):
        assert calls[1:] == [] and done['moved'] == {} and done['candidate'] is None, done
        return
    assert list(done['moved']) == ['motor_dead_zone_v']
    warm = loop.run_dir / PHASES[1] / run_files.POLICY
    assert calls[1] == (AGAIN[0], again, warm, 2, 7), calls
    if case == 'reached_moved':  # warm from the first; not another draw
        assert 'another draw' not in done['why'] and done['retrain_seed'] == 7, done
        return
    if case == 'kept_start':  # the same policy as the first candidate: not deployed again
        assert len(calls) == 2 and done['candidate'] is None and 'report' not in done, done
        assert 'found nothing better than its start' in done['why']
        return
    assert calls[2] == (AGAIN[1], loop.run_dir / 'candidate_again' / 'p')
    assert done['verdict'] == 'promoted' and done['report'] is better
    assert done['candidate']['policy_version'] == 2001
    # Judged against what goes on: against a deployment as good, it is not promoted.
    calls.clear()
    as_good = _report([440.0, 450.0], [8.4, 8.5])
    worse_than = adapt._again(
        loop, {}, first, 2, 'identified', 2001, 1e9, _report([900.0] * 2, [9.9] * 2)
    )
    assert worse_than['verdict'] == 'rejected', worse_than
    assert (
        adapt._again(loop, {}, first, 2, 'identified', 2001, 1e9, as_good)['verdict'] == 'promoted'
    )

    # Replacing the first re-trained policy takes more: a balance shown better (its 90 %
    # interval above 0), not one within the guard's margins.
    def replacing(deployed: dict) -> dict:
        return adapt._again(
            loop, {}, first, 2, 'identified', 2001, 1e9, deployed, replaces_candidate=True
        )

    assert replacing(against)['verdict'] == 'promoted'  # 8.4, 8.5 s over 0.4, 0.5 s
    tie = replacing(as_good)
    assert tie['verdict'] == 'rejected', tie
    assert (
        'not shown better than the first re-trained policy: balance +0.00 s, 90 % interval'
        in (tie['candidate']['reason'])
    )
    close = replacing(_report([440.0, 450.0], [8.2, 8.6]))  # better by 0.05 s, spread 0.4 s
    assert close['verdict'] == 'rejected', close
    # One episode each: no interval, nothing shown, whatever the difference.
    one = replacing(_report([330.0], [0.4]))
    assert (
        one['verdict'] == 'rejected'
        and 'one episode each: no interval' in (one['candidate']['reason'])
    )
    # What the guard itself rejects stays rejected, for its own reason.
    worse = replacing(_report([900.0] * 2, [9.9] * 2))
    assert worse['verdict'] == 'rejected' and 'below the bar' in worse['candidate']['reason']


@pytest.mark.parametrize(
    ('first', 'second'),
    [
        ('promoted', 'rejected'),
        ('rejected', 'none'),
        ('promoted', 'promoted'),
        ('rejected', 'promoted'),
    ],
)
def test_the_fine_tune_starts_from_what_the_guard_promoted_and_from_nothing_else(
    loop, monkeypatch, first, second
) -> None:
    """The loop's hand-overs, its parts stood in for (each has tests of its own).

    The re-trained candidate goes on only if promoted against the prior's deployment; a
    second candidate only if promoted against what goes on by then; the fine-tune starts
    from what goes on, and a fine-tune-less run reports that policy's deployment.
    """
    from rip_control import adapt
    from rip_control.adapting import budget, offline
    from rip_control.run_files import packaged_policy

    prior = packaged_policy(50.0)
    base, good, bad = (
        _report([330.0, 340.0], [0.4, 0.5]),
        _report([440.0, 450.0], [8.4, 8.5]),
        _report([120.0, 130.0], [0.1, 0.1]),
    )
    candidate = loop.run_dir / 'candidate' / 'p'
    again_policy = loop.run_dir / 'candidate_again' / 'p'
    seen: dict = {}

    def deploy(a, name, policy, excitation, reserve_s=0.0, stop_when=None):
        seen.setdefault('reserves', {})[name] = reserve_s
        a.phases.append({'phase': name, 'rig_seconds': 30.0, 'episodes': [{}, {}]})
        if policy == prior:
            return base
        assert policy == candidate, policy
        return good if first == 'promoted' else bad

    def again(a, opts, identified, k, rnd, version, budget, against, replaces_candidate, prior):
        seen['against'], seen['replaces_candidate'] = against, replaces_candidate
        seen['prior'] = prior  # (what another draw would start from)
        if second == 'none':
            return {'why': 'not run: 1 s of rig time are left'}
        report = _report([500.0, 510.0], [9.0, 9.1])
        return {'verdict': second, 'policy': str(again_policy), 'report': report}

    def finetune(a, budget, start, run):
        seen['start'] = start
        return {}  # no episode fitted: what goes on is the result

    monkeypatch.setattr(Adapt, 'deploy', deploy)
    monkeypatch.setattr(offline, 'identify', lambda opts, log: {'fitted': {}})
    monkeypatch.setattr(
        offline,
        'retrain',
        lambda *args: {'steps': 1, 'wall_s': 1.0, 'stopped_by': 'stub', 'best': None},
    )
    monkeypatch.setattr(adapt, '_versioned', lambda src, dst, version, rate: dst / 'p')
    monkeypatch.setattr(adapt, '_again', again)
    monkeypatch.setattr(budget, 'finetune_within_budget', finetune)
    monkeypatch.setattr(adapt, '_plot', lambda path, summary: None)
    own = {
        **defaults(adapt.OPTIONS),
        'identification': '',
        'reidentify': True,
    }
    loop.run_dir.mkdir(parents=True)
    loop.own = own
    loop.plan = budget.plan_for(loop)
    summary = adapt._loop(loop, own, prior, 600.0, None, None)
    # The baseline keeps room for the candidate's deployment after it; the candidate, nothing.
    assert seen['reserves'] == {'0_baseline': loop.plan.deployment_s, '2_candidate': 0.0}
    # The second identification judges against what goes on after the first candidate.
    assert seen['against'] is (good if first == 'promoted' else base)
    assert seen['replaces_candidate'] == (first == 'promoted')
    assert seen['prior'] == prior
    goes_on = {
        ('promoted', 'rejected'): candidate,
        ('rejected', 'none'): prior,
        ('promoted', 'promoted'): again_policy,
        ('rejected', 'promoted'): again_policy,
    }[first, second]
    assert Path(seen['start']) == goes_on
    assert (
        summary['finetune']['start']
        == {
            candidate: 'candidate',
            prior: 'prior',
            again_policy: 'candidate_again',
        }[goes_on]
    )
    assert summary['candidate']['verdict'] == first
    assert Path(summary['deployed_policy']) == goes_on
    expected = {candidate: [8.4, 8.5], prior: [0.4, 0.5], again_policy: [9.0, 9.1]}[goes_on]
    assert summary['deployment']['adapted_episodes_s'] == expected
    assert summary['deployment']['prior_episodes_s'] == [0.4, 0.5]


@pytest.mark.parametrize('given', ['nothing', 'typed', 'params_file'])
def test_the_fine_tunes_guard_evaluates_on_three_deployment_length_episodes_unless_given(
    tmp_path, given
) -> None:
    """The fine-tune's guard settings: adapt's own, or the user's where typed or in the file."""
    from rip_control.adapt import OPTIONS
    from rip_control.adapting.budget import FINETUNE_EVAL_EPISODES, guard_settings

    own = {p.name: p.default for p in OPTIONS}
    own['deployment_episode_seconds'] = 7.0
    runner = {'runs_dir': str(tmp_path)}
    if given == 'typed':
        runner.update(eval_episodes='2', eval_episode_seconds='0')
    elif given == 'params_file':
        params = tmp_path / 'guard.yaml'
        params.write_text(
            'rip_control:\n  ros__parameters:\n'
            '    eval_episodes: 5\n    eval_episode_seconds: 4.5\n'
        )
        runner['params_file'] = str(params)
    got = guard_settings(Adapt(own, runner, stream=False))
    want = {
        'nothing': {'eval_episodes': FINETUNE_EVAL_EPISODES, 'eval_episode_seconds': 7.0},
        'typed': {'eval_episodes': 2, 'eval_episode_seconds': 0.0},
        'params_file': {'eval_episodes': 5, 'eval_episode_seconds': 4.5},
    }[given]
    assert got == want
    assert FINETUNE_EVAL_EPISODES > 1
