"""Identification from the rig's own data.

The excitation episode, the loop that runs it, and the fit (:mod:`rip_control.rig.excitation`,
:mod:`rip_learner.identify`).

The acceptance test (an emulated rig identified within the goal's tolerances from an
excitation and one episode, the real loop against the emulator through a real
pseudo-terminal) is the README's ``adapt`` command, in ``test_readme.py``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
import time

import numpy as np
import pytest

from rip_control.params import defaults
from rip_control.rig.dynamics import PendulumParams
from rip_control.rig.env import (
    VELOCITY_SCALE,
    SimRotaryInvertedPendulumEnv,
    TaskConfig,
)
from rip_control.rig.excitation import Excitation, ExcitationDesign
from rip_learner import ident_data, ident_model, ident_search, identify

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
    with pytest.raises(ValueError, match='kick_s < ladder_cycle_s <= ladder_s'):
        ExcitationDesign(ladder_cycle_s=5.0)


def _excite(rig: Path) -> dict[str, np.ndarray]:
    """The excitation in simulation at ``rig``'s physics, the shipped motor limit: per tick."""
    design = ExcitationDesign()
    task = TaskConfig.from_params(episode_seconds=design.duration_s)
    ex = Excitation(design, task.rate_hz, task.max_action_v)
    env = SimRotaryInvertedPendulumEnv(task, PendulumParams.from_yaml(rig))
    obs, _ = env.reset(seed=3)
    rows = []
    for step in range(ex.steps):
        a = ex.action(step, obs)
        theta, theta_dot = float(obs[0]), float(obs[3]) / VELOCITY_SCALE
        obs, _, terminated, _, info = env.step(a)
        rows.append((step * ex.period_s, theta, theta_dot, float(a[0]), info['phi']))
        assert not terminated, f'{rig.stem}: the excitation ended at the arm limit at tick {step}'
    t, theta, theta_dot, action, phi = (np.array(c) for c in zip(*rows, strict=True))
    return {
        't': t,
        'theta': theta,
        'theta_dot': theta_dot,
        'action': action,
        'volts': action * task.max_action_v,
        'phi': phi,
        'arm_limit': np.full(len(t), task.arm_limit_rad),
    }


@pytest.mark.parametrize('rig', RIGS, ids=lambda p: p.stem)
def test_the_excitation_is_deterministic_bounded_and_keeps_the_pendulum_hanging(rig: Path) -> None:
    runs = [_excite(rig) for _ in range(2)]
    np.testing.assert_array_equal(runs[0]['action'], runs[1]['action'])  # same readings, input
    run = runs[0]
    assert np.abs(run['action']).max() <= 1.0  # the configured motor limit, as any policy's
    # ... and it does excite: beyond the stuck rig's dead zone (1.2 V) and stiction (1.9 V)
    assert np.abs(run['volts']).max() > 2.5
    assert np.abs(run['theta']).max() < 0.5 * run['arm_limit'][0]
    hanging = np.abs(np.abs(run['phi']) - np.pi)  # phi is 0 upright, +/-pi hanging
    assert hanging.max() < 0.5 * np.pi, f'{rig.stem}: the pendulum swung up'


def test_the_brake_ladder_brakes_a_moving_arm_through_the_dead_zone_and_caps_its_kicks() -> None:
    """Part 3 does what it is there for.

    On the stuck rig it commands many different voltages inside the 1.2 V dead zone while the
    arm still moves (a standing arm does not show the dead zone); on the nominal rig, which
    has no friction, the speed cap cuts kicks short.
    """
    design = ExcitationDesign()
    first = design.ramp_s + design.chirp_s
    assert (
        design.ladder_v(first - 1e-6) is None and design.ladder_v(first + design.ladder_s) is None
    )
    kicks = [design.ladder_v(first + c * design.ladder_cycle_s) for c in range(4)]
    assert [k for k, _ in kicks] == ['kick'] * 4 and [v > 0 for _, v in kicks] == [1, 0, 1, 0]
    brakes = [design.ladder_v(first + (c + 0.9) * design.ladder_cycle_s) for c in range(25)]
    assert all(k == 'brake' for k, _ in brakes)
    rungs = [abs(v) for _, v in brakes]
    assert rungs == sorted(rungs) and rungs[0] < 0.5 and rungs[-1] > 2.5  # a ladder, upwards

    stuck = _excite(STUCK)
    dead_zone = PendulumParams.from_yaml(STUCK).motor_dead_zone_v
    braked = []  # the rung of each tick a brake inside the dead zone met a moving arm
    for t, theta, theta_dot, volts in zip(
        stuck['t'], stuck['theta'], stuck['theta_dot'], stuck['volts'], strict=True
    ):
        part = design.ladder_v(float(t))
        if part is None or part[0] != 'brake' or abs(part[1]) >= dead_zone:
            continue
        if abs(theta_dot) > 1.0 and part[1] * theta_dot < 0:  # against the motion
            pd = design.ladder_kp_v_per_rad * theta + design.ladder_kd_v_s_per_rad * theta_dot
            assert volts + pd == pytest.approx(part[1], abs=1e-3), (t, volts, part)  # commanded
            braked.append(round(abs(part[1]), 2))
    assert len(set(braked)) >= 6, sorted(set(braked))  # many voltages inside the dead zone
    # Before the ladder the same excitation gives few ticks of a moving arm at such voltages
    # (why the ladder is there).
    band = (np.abs(stuck['volts']) > design.brake_low_v) & (np.abs(stuck['volts']) < dead_zone)
    before = (stuck['t'] < first) & (np.abs(stuck['theta_dot']) > 1.0) & band
    assert before.sum() < len(braked), (before.sum(), len(braked))

    nominal = _excite(REPO / 'config' / 'rig_qube_servo2.yaml')
    capped = 0
    for t, theta, theta_dot, volts in zip(
        nominal['t'], nominal['theta'], nominal['theta_dot'], nominal['volts'], strict=True
    ):
        part = design.ladder_v(float(t))
        if part is not None and part[0] == 'kick':
            uncapped = part[1] - design.ladder_kp_v_per_rad * theta
            uncapped -= design.ladder_kd_v_s_per_rad * theta_dot
            capped += abs(uncapped) < 7.5 and abs(volts - uncapped) > 0.5  # not the limit
    assert capped > 0


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


def test_the_batch_simulation_is_the_emulators_integrator_compiled() -> None:
    """ident_model's compiled batch against FurutaDynamics stepped as the emulator steps it.

    Two rigs in one batch, one with every optional term (lag, static friction, cable, an
    off-centre dead zone, a voltage limit, an arm stop it runs into), one with none: the same
    equations, so the same readings, to rounding (a command's share of its step, counted in
    the batch from its time, is exact only to 1e-13 V).
    """
    from rip_control.rig.dynamics import FurutaDynamics

    termed = PendulumParams(
        actuator_lag_s=0.02,
        arm_static_friction_nm=0.004,
        arm_cable_stiffness_nm_per_rad=0.003,
        motor_dead_zone_v=0.5,
        motor_dead_zone_offset_v=0.1,
        max_voltage_v=5.0,
        arm_limit_rad=0.3,
    )
    sets = [termed, PendulumParams()]
    h = termed.physics_step_s
    read_t = np.arange(26) * 0.02  # 25 ticks at 50 Hz
    # Commands at whole physics steps: above the limit, inside the dead zone, either way.
    switch_t, switch_v, v_before = np.array([0.0, 0.1, 0.2, 0.3]), np.array([8.0, 0.3, -3, 2]), 1.0
    start = (0.1, 2.9, 1.5, -0.5)  # the arm moving towards its stop at 0.3 rad
    win = ident_data.Windows(
        read_t=read_t[None],
        theta=np.array([[start[0]] * 26]),
        alpha=np.array([[start[1]] * 26]),
        mask=np.ones((1, 26), dtype=bool),
        switch_t=switch_t[None],
        switch_v=switch_v[None],
        v_before=np.array([v_before]),
        theta_dot0=np.array([start[2]]),
        alpha_dot0=np.array([start[3]]),
        source=[(0, 0)],
    )
    theta, alpha = ident_model.simulate(sets, win)
    for i, params in enumerate(sets):
        dyn = FurutaDynamics(params)
        dyn.set_state(*start)
        dyn.motor_volts = dyn.effective_voltage(v_before)
        readings, reached = [start[:2]], 0.0
        for step in range(round(read_t[-1] / h)):
            volts = v_before if step * h < switch_t[0] else switch_v[switch_t <= step * h][-1]
            dyn.step(h, float(volts), True)
            reached = max(reached, abs(dyn.theta))
            if (step + 1) % round(0.02 / h) == 0:
                readings.append((dyn.theta, dyn.alpha))
        want = np.array(readings)
        assert theta[i, 0] == pytest.approx(want[:, 0], abs=1e-9), i
        assert alpha[i, 0] == pytest.approx(want[:, 1], abs=1e-9), i
        if params is termed:
            assert reached == params.arm_limit_rad  # the stop was part of it


def _stuck_windows() -> ident_data.Windows:
    from rip_bench.identification import simulated_recording

    truth = PendulumParams.from_yaml(REPO / 'config' / 'rig_shifted_stuck.yaml')
    arrays = simulated_recording(truth, seed=0, episodes=1)
    records = identify.records_from_arrays(arrays, 0.02, 8.0)
    return ident_data.make_windows(records, 25, ident_model.LATENCY_PERIODS + 1, 5)


@pytest.mark.parametrize('scan', [True, False])
def test_the_dead_zone_scan_leaves_a_basin_the_search_alone_stays_in(scan: bool) -> None:
    """The scan finds a dead zone the search alone does not reach.

    A search whose dead zone starts far below the rig's (on stuck-rig data recorded from the
    emulator a run ended at 0.02 V, and in CI one at 1.50 V, for the rig's 1.2 V) reaches
    it through the scan; the same short search without the scan stays where it started.
    """
    truth = PendulumParams.from_yaml(REPO / 'config' / 'rig_shifted_stuck.yaml')
    win = _stuck_windows()
    fitted = [f if scan else replace(f, scan=0.0) for f in ident_model.FITTED]
    space = ident_search.Space(fitted, truth, 0.02)
    # Every other parameter right; a short search with a small step (10 generations).
    opts = _opts(restarts=0, generations=10, initial_step=0.01)
    start = space.start(replace(truth, motor_dead_zone_v=0.0))
    lines: list[str] = []
    x, _ = ident_search.search(space, win, start, opts, time.monotonic() + 300, lines.append)
    found = space.params(x).motor_dead_zone_v
    cost = ident_model.cost_of(ident_model.residuals([space.params(x), space.params(start)], win))
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
    space = ident_search.Space(list(ident_model.FITTED), truth, 0.02)
    start = space.start(truth)
    lines: list[str] = []
    x, _ = ident_search.search(
        space, win, start, _opts(restarts=1), time.monotonic(), lines.append
    )
    assert sum('time_limit_s reached after 0 generations' in x for x in lines) == 1
    assert not any('polished' in x for x in lines)
    cost = ident_model.cost_of(ident_model.residuals([space.params(x), space.params(start)], win))
    assert cost[0] <= cost[1]


@pytest.mark.parametrize('prior_damping', [3e-5, 1.5e-4], ids=['prior_right', 'prior_far'])
def test_a_parameter_the_data_does_not_determine_keeps_the_prior_and_is_named(
    prior_damping: float,
) -> None:
    """An undetermined parameter keeps its prior and is named, unless the prior is ruled out.

    With its prior at the truth, dropping it costs nothing: it keeps the prior and the rest
    are fitted again. With a prior five times the truth, holding it there would raise the
    cost by more than the rule allows: it stays fitted, and the log says it was needed.
    """
    from rip_bench.identification import simulated_recording

    truth = PendulumParams.from_yaml(REPO / 'config' / 'rig_shifted_worn.yaml')
    arrays = simulated_recording(truth, seed=1, episodes=0)  # the excitation alone
    records = identify.records_from_arrays(arrays, 0.02, 8.0)
    # A short search from the truth (accuracy is the acceptance test's), the pendulum damping
    # made undeterminable by a tolerance nothing meets.
    strict = [
        ident_model.Fitted(f.name, f.low, f.high, f.log, f.relative, 1e-12, f.probe)
        if f.name == 'pendulum_viscous_damping_nms_per_rad'
        else f
        for f in ident_model.FITTED
    ]
    lines: list[str] = []
    monkey = pytest.MonkeyPatch()
    monkey.setattr(identify, 'FITTED', tuple(strict))
    try:
        prior = replace(truth, pendulum_viscous_damping_nms_per_rad=prior_damping)
        opts = _opts(restarts=0, generations=20, initial_step=0.01)
        result, _ = identify.identify(records, prior, opts, lines.append)
    finally:
        monkey.undo()
    if prior_damping != truth.pendulum_viscous_damping_nms_per_rad:
        assert result.undetermined == [], lines
        assert any('pendulum_viscous_damping_nms_per_rad: needed (cost' in x for x in lines)
        fitted = result.params.pendulum_viscous_damping_nms_per_rad
        truth_damping = truth.pendulum_viscous_damping_nms_per_rad
        assert abs(fitted - truth_damping) < abs(prior_damping - truth_damping), fitted
        return
    assert result.undetermined == ['pendulum_viscous_damping_nms_per_rad']
    damping = next(e for e in result.estimates if e.name == result.undetermined[0])
    assert not damping.determined and np.isnan(damping.std)
    assert result.params.pendulum_viscous_damping_nms_per_rad == prior_damping  # the prior's
    assert any('pendulum_viscous_damping_nms_per_rad: not determined' in x for x in lines)
    # The rest of the base model was fitted again without it, and is determined (the terms
    # beyond it are kept only where the held-out windows ask for them).
    base = {f.name for f in strict}
    rest = [e for e in result.estimates if e is not damping and e.name in base]
    assert len(rest) == len(base) - 1 and all(e.determined and e.std > 0 for e in rest)
    assert sum('fit:' in x for x in lines) == 2


def test_a_dead_zone_that_passes_one_direction_sooner_is_kept_by_the_held_out_windows(
    tmp_path: Path,
) -> None:
    """A rig outside the model: the off-centre term is kept because it predicts held-out data.

    The gap plant's dead zone is subtractive and asymmetric (0.3 V one way, 1.2 V the other)
    and its friction sticks: forms the model does not have. Recorded offline behind the real
    firmware logic (the excitation and two episodes of the shipped policy). The base model
    (a centred dead zone) cannot represent it; the widened one keeps the dead zone's offset,
    towards the side that loses more, predicts the held-out windows better, and says the rest
    is a gap.
    """
    from rip_bench.common import DEFAULT_POLICY
    from rip_bench.offline_rig import record_session

    rig = tmp_path / 'asymmetric.yaml'
    rig.write_text(
        'rig:\n  encoder_noise_counts: 0.3\n'
        'gap:\n  breakaway_torque_nm: 0.008\n  sliding_torque_nm: 0.003\n'
        '  stribeck_velocity_rad_s: 0.05\n  stribeck_exponent: 1.0\n'
        '  dead_zone_pos_v: 0.3\n  dead_zone_neg_v: 1.2\n'
    )
    records = identify.records_from_arrays(
        record_session(rig, DEFAULT_POLICY, episodes=2), 0.02, 8.0
    )
    # A short search with one random restart: from the prior alone, 40 or 60 generations
    # ended in a basin where no term helped (seen with search seed 0).
    result, _ = identify.identify(
        records, PendulumParams(), _opts(generations=40, restarts=1), log=lambda _: None
    )
    sel = result.selection
    assert sel is not None
    kept = [name for name, v in sel['terms'].items() if v['kept']]
    assert 'motor_dead_zone_offset_v' in kept, sel['terms']
    offset = next(e for e in result.estimates if e.name == 'motor_dead_zone_offset_v')
    assert offset.determined and offset.value < -0.3  # the zone reaches further negative
    assert 'pendulum_inertia_factor' not in kept and 'actuator_lag_s' not in kept
    base, chosen = sel['base_held_out_rms_rad'], sel['held_out_rms_rad']
    assert max(chosen.values()) < 0.8 * max(base.values())
    assert sel['expect_gap'] and sel['randomization_scale'] > 1.0


def test_a_term_left_out_says_why() -> None:
    """Not better by TERM_GAIN, or better with a value the data cannot tell from neutral."""
    from rip_learner.ident_model import TERM_GAIN, TERMS
    from rip_learner.ident_terms import _verdict

    lag = next(t for t in TERMS if t.fitted.name == 'actuator_lag_s')
    cost = 1.0
    near = (1.0 - 0.5 * TERM_GAIN) * cost  # better, by less than TERM_GAIN
    far = (1.0 - 2.0 * TERM_GAIN) * cost

    def verdict(lag_s: float, held: float) -> dict:
        return _verdict(lag, replace(PendulumParams(), actuator_lag_s=lag_s), cost, held)

    small = verdict(0.005, near)
    assert not small['passes'] and small['why'] == 'lowers the held-out cost by less than 3 %'
    unseen = verdict(0.5 * lag.fitted.resolution, far)
    assert not unseen['passes'] and unseen['why'] == 'within its resolution (0.002) of neutral'
    kept = verdict(0.005, far)
    assert kept['passes'] and kept['why'] == ''
