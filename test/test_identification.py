"""Identification from the rig's own data.

The excitation episode, the loop that runs it, and the fit (:mod:`rip_control.rig.excitation`,
:mod:`rip_learner.identify`).

The acceptance test runs the real control loop against the emulator through a real
pseudo-terminal, with a rig whose physics differ from the prior's (the stuck rig: a dead
zone, stiction, latency), records an excitation and one episode of the shipped policy, and
identifies the rig from those transitions alone.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
import time

import numpy as np
import pytest

from rip_control.params import defaults
from rip_control.policy import load_actor_file
from rip_control.rig.dynamics import PendulumParams
from rip_control.rig.env import (
    ACTION_SIZE,
    OBS_SIZE,
    SimRotaryInvertedPendulumEnv,
    TaskConfig,
)
from rip_control.rig.excitation import Excitation, ExcitationDesign
from rip_control.run_files import packaged_policy
from rip_learner import identify

REPO = Path(__file__).resolve().parents[1]
RIGS = sorted((REPO / 'config').glob('rig_*.yaml'))
#: The excitation's ticks at the shipped 50 Hz.
EXCITATION_TICKS = round(ExcitationDesign().duration_s * 50)
STUCK = REPO / 'config' / 'rig_shifted_stuck.yaml'


# -- the excitation ---------------------------------------------------------------------------


def test_the_design_refuses_what_is_not_short_or_well_formed_by_name() -> None:
    with pytest.raises(ValueError, match=r'duration_s must be in \(0, 20\]'):
        ExcitationDesign(duration_s=25.0)
    with pytest.raises(ValueError, match='ramp_v must be a finite number'):
        ExcitationDesign(ramp_v=float('nan'))
    with pytest.raises(ValueError, match='ramp_s \\+ chirp_s'):
        ExcitationDesign(ramp_s=10.0, chirp_s=8.0)
    with pytest.raises(ValueError, match='chirp_start_hz < chirp_end_hz'):
        ExcitationDesign(chirp_start_hz=5.0, chirp_end_hz=1.0)
    with pytest.raises(ValueError, match='kick_s < ladder_cycle_s <= ladder_s'):
        ExcitationDesign(kick_s=0.2, ladder_cycle_s=0.16)


@pytest.mark.parametrize('rig', RIGS, ids=lambda p: p.stem)
def test_the_excitation_is_deterministic_bounded_and_keeps_the_pendulum_hanging(rig: Path) -> None:
    task = TaskConfig.from_params(episode_seconds=20.0, max_action_v=6.0)
    ex = Excitation(ExcitationDesign(), task.rate_hz, task.max_action_v)
    assert ex.steps == round(ex.design.duration_s * task.rate_hz)
    runs = []
    for _ in range(2):
        env = SimRotaryInvertedPendulumEnv(task, PendulumParams.from_yaml(rig))
        obs, _ = env.reset(seed=3)
        actions, thetas, phis = [], [], []
        for step in range(ex.steps):
            a = ex.action(step, obs)
            obs, _, terminated, _, info = env.step(a)
            actions.append(float(a[0]))
            thetas.append(info['theta'])
            phis.append(info['phi'])
            assert not terminated, f'{rig.stem}: the excitation ended at the arm limit'
        runs.append(np.array(actions))
    np.testing.assert_array_equal(runs[0], runs[1])  # the same readings give the same input
    assert np.abs(runs[0]).max() <= 1.0  # the configured motor limit, as any policy's action
    # ... and it does excite: beyond the stuck rig's dead zone (1.2 V) and stiction (1.9 V)
    assert np.abs(runs[0]).max() * task.max_action_v > 2.5
    assert np.abs(thetas).max() < 0.5 * task.arm_limit_rad
    hanging = np.abs(np.abs(np.array(phis)) - np.pi)  # phi is 0 upright, +/-pi hanging
    assert hanging.max() < 0.5 * np.pi, f'{rig.stem}: the pendulum swung up'


# -- the fit on simulated data (fast, no rig) -------------------------------------------------


def _opts(**over: object) -> dict:
    return {**defaults(identify.OPTIONS), **over}


def test_records_break_where_the_chain_or_the_episode_breaks() -> None:
    from rip_bench.identification import simulated_recording

    arrays = simulated_recording(PendulumParams(), seed=0, episodes=1, episode_seconds=1.0)
    n = len(arrays['rewards'])
    records = identify.records_from_arrays(arrays, 0.02, 8.0)
    assert [(r.excitation, len(r.volts)) for r in records] == [
        (True, EXCITATION_TICKS),
        (False, n - EXCITATION_TICKS),
    ]
    assert all(r.from_rest for r in records)
    # A lost transition inside the excitation (its next observation is not the following
    # transition's observation) cuts it in two; neither half starts at rest.
    half = EXCITATION_TICKS // 2
    cut = {k: np.delete(v, half, axis=0) for k, v in arrays.items()}
    records = identify.records_from_arrays(cut, 0.02, 8.0)
    assert [len(r.volts) for r in records] == [
        half,
        EXCITATION_TICKS - half - 1,
        n - EXCITATION_TICKS,
    ]
    assert [r.from_rest for r in records] == [True, False, True]


def _stuck_windows() -> identify.Windows:
    from rip_bench.identification import simulated_recording

    truth = PendulumParams.from_yaml(REPO / 'config' / 'rig_shifted_stuck.yaml')
    arrays = simulated_recording(truth, seed=0, episodes=1)
    records = identify.records_from_arrays(arrays, 0.02, 8.0)
    return identify.make_windows(records, 25, identify.LATENCY_PERIODS + 1, 5)


@pytest.mark.parametrize('scan', [True, False])
def test_the_dead_zone_scan_leaves_a_basin_the_search_alone_stays_in(scan: bool) -> None:
    """The scan finds a dead zone the search alone does not reach.

    A search whose dead zone starts far below the rig's (on stuck-rig data recorded from the
    emulator a run ended at 0.02 V, and in CI one at 1.50 V, for the rig's 1.2 V) reaches
    it through the scan; the same short search without the scan stays where it started.
    """
    truth = PendulumParams.from_yaml(REPO / 'config' / 'rig_shifted_stuck.yaml')
    win = _stuck_windows()
    fitted = [f if scan else replace(f, scan=0.0) for f in identify.FITTED]
    space = identify._Space(fitted, truth, 0.02)
    # Every other parameter right; a short search with a small step (10 generations).
    opts = _opts(restarts=0, generations=10, initial_step=0.01)
    start = space.start(replace(truth, motor_dead_zone_v=0.0))
    lines: list[str] = []
    x, _ = identify._search(space, win, start, opts, time.monotonic() + 300, lines.append)
    found = space.params(x).motor_dead_zone_v
    cost = identify._cost(identify.residuals([space.params(x), space.params(start)], win))
    assert cost[0] <= cost[1]  # never worse than where it started
    if scan:
        assert abs(found - 1.2) <= 0.1, (found, lines)
        assert any('scanned motor_dead_zone_v: polishing from 1.2' in x for x in lines)
    else:
        assert found < 0.5, (found, lines)


def test_a_search_out_of_time_ends_with_what_it_has() -> None:
    """A search whose time limit has passed returns its start: no generation, no polish."""
    truth = PendulumParams.from_yaml(REPO / 'config' / 'rig_shifted_stuck.yaml')
    win = _stuck_windows()
    space = identify._Space(list(identify.FITTED), truth, 0.02)
    start = space.start(truth)
    lines: list[str] = []
    x, _ = identify._search(space, win, start, _opts(restarts=1), time.monotonic(), lines.append)
    assert sum('time_limit_s reached after 0 generations' in x for x in lines) == 1
    assert not any('polished' in x for x in lines)
    cost = identify._cost(identify.residuals([space.params(x), space.params(start)], win))
    assert cost[0] <= cost[1]


def test_a_parameter_the_data_does_not_determine_keeps_the_prior_and_is_named() -> None:
    from rip_bench.identification import simulated_recording

    truth = PendulumParams.from_yaml(REPO / 'config' / 'rig_shifted_worn.yaml')
    arrays = simulated_recording(truth, seed=1, episodes=0)  # the excitation alone
    records = identify.records_from_arrays(arrays, 0.02, 8.0)
    # A short search from the truth (accuracy is the acceptance test's), the pendulum damping
    # made undeterminable by a tolerance nothing meets.
    strict = [
        identify.Fitted(f.name, f.low, f.high, f.log, f.relative, 1e-12, f.probe)
        if f.name == 'pendulum_viscous_damping_nms_per_rad'
        else f
        for f in identify.FITTED
    ]
    lines: list[str] = []
    monkey = pytest.MonkeyPatch()
    monkey.setattr(identify, 'FITTED', tuple(strict))
    try:
        prior = replace(truth, pendulum_viscous_damping_nms_per_rad=5e-5)
        opts = _opts(restarts=0, generations=20, initial_step=0.01)
        result, _ = identify.identify(records, prior, opts, lines.append)
    finally:
        monkey.undo()
    assert result.undetermined == ['pendulum_viscous_damping_nms_per_rad']
    damping = next(e for e in result.estimates if e.name == result.undetermined[0])
    assert not damping.determined and np.isnan(damping.std)
    assert result.params.pendulum_viscous_damping_nms_per_rad == 5e-5  # the prior's
    assert any('pendulum_viscous_damping_nms_per_rad: not determined' in x for x in lines)
    # The rest was fitted again without it, and is determined.
    assert all(e.determined and e.std > 0 for e in result.estimates if e is not damping)
    assert sum('fit:' in x for x in lines) == 2


# -- the acceptance test: the loop runs the excitation on the emulated rig --------------------


class _Box:
    def __init__(self) -> None:
        self.actor = load_actor_file(
            packaged_policy(50.0), rate_hz=50.0, obs_size=OBS_SIZE, action_size=ACTION_SIZE
        )

    def read_from_rt(self):  # noqa: ANN201 - the ActorSource protocol
        return self.actor
