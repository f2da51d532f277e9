"""The task, the simulator env and the rig env (against the emulator through a pty)."""

import math
import time

from gymnasium.utils.env_checker import check_env
import numpy as np
import pytest

from rip_control.rig.client import LowLevelClient
from rip_control.rig.dynamics import PendulumParams
from rip_control.rig.env import (
    OBS_SIZE,
    QUIET_ARM_RAD,
    QUIET_PENDULUM_RAD,
    PendulumReading,
    RealRotaryInvertedPendulumEnv,
    RipTask,
    SimRotaryInvertedPendulumEnv,
    TaskConfig,
    _TimestampUnwrapper,
    wrap_angle,
)

pytestmark = pytest.mark.alone


def test_wrap_angle_maps_into_minus_pi_to_pi():
    assert wrap_angle(3 * math.pi / 2) == pytest.approx(-math.pi / 2)
    assert wrap_angle(-3 * math.pi / 2) == pytest.approx(math.pi / 2)
    assert wrap_angle(0.5) == pytest.approx(0.5)


def test_firmware_timestamp_wrap_is_unwrapped():
    unwrap = _TimestampUnwrapper()
    assert unwrap(0xFFFFFFF0, host_s=100.0) == pytest.approx(0xFFFFFFF0 * 1e-6)
    assert unwrap(0x10, host_s=100.0 + 32e-6) == pytest.approx((0x10 + (1 << 32)) * 1e-6)
    # An hour later (no reading between), one wrap: still the rig's own time.
    later = (0x10 + 3600_000_000) % (1 << 32)
    assert unwrap(later, host_s=3700.0 + 32e-6) == pytest.approx(
        (0x10 + (1 << 32) + 3600_000_000) * 1e-6
    )


def test_the_emulator_says_when_the_host_read_its_clock_across_the_wrap():
    from rip_control.rig.emulator import READ_ACROSS_S, WRAP_EVENT, Firmware

    events: list[str] = []
    fw = Firmware(PendulumParams())
    fw.on_event = events.append
    fw.clock_offset_s = 2**32 / 1e6 - 0.05  # wraps 50 ms in
    fw.advance_to(0.04)
    before = fw.sample().timestamp_us
    fw.advance_to(0.06)
    assert fw.sample().timestamp_us < before and events == [WRAP_EVENT]
    # A clock that went back between readings further apart than READ_ACROSS_S: nobody read
    # across it. A reset's clock (back to 0) is no wrap either.
    later = 0.06 + READ_ACROSS_S + 0.01
    fw.clock_offset_s = 0.005 - later  # reads 5 ms then: below the 10 ms read before
    fw.advance_to(later)
    assert fw.sample().timestamp_us < before
    fw.advance_to(later + 0.02)
    fw.sample()
    fw.reset()
    fw.advance_to(later + 0.04)
    fw.sample()
    assert events.count(WRAP_EVENT) == 1, events


@pytest.mark.parametrize(
    ('reading_us', 'host_gap_s'),
    [
        (1_500_000, 0.02),  # a firmware reset 20 ms after a reading at 600 s: back to 1.5 s
        (612_000_000, 0.02),  # 12 s ahead of the host's 20 ms
        (0x10, 0.02),  # what a wrap would read, but nowhere near the end of the counter
    ],
)
def test_a_rig_clock_that_jumps_unlike_the_hosts_is_a_named_fault(reading_us, host_gap_s):
    from rip_control.rig.client import RigClockJump

    unwrap = _TimestampUnwrapper()
    unwrap(600_000_000, host_s=50.0)
    unwrap(600_020_000, host_s=50.02)  # as the host counted: fine
    with pytest.raises(RigClockJump, match='a firmware reset'):
        unwrap(reading_us, host_s=50.02 + host_gap_s)


def test_reward_is_highest_upright_and_centred():
    task = RipTask(TaskConfig.from_params())
    upright = PendulumReading(0.0, math.pi, 0.0)
    down = PendulumReading(0.0, 0.0, 0.0)
    off_centre = PendulumReading(1.0, math.pi, 0.0)
    assert task.reward(upright, 0.0, 0.0) == pytest.approx(1.0)
    assert task.reward(down, 0.0, 0.0) == pytest.approx(0.0)
    assert task.reward(off_centre, 0.0, 0.0) < 1.0
    assert task.reward(upright, 0.0, 1.0) < 1.0


def test_velocity_uses_the_measured_interval():
    task = RipTask(TaskConfig.from_params())
    a = PendulumReading(0.0, 0.0, 1.0)
    b = PendulumReading(0.1, 0.2, 1.025)  # a 25 ms sample interval, not the nominal 20
    _, theta_dot, phi_dot = task.observe(a, b)
    assert theta_dot == pytest.approx(4.0) and phi_dot == pytest.approx(8.0)


def test_task_config_names_the_bad_field():
    with pytest.raises(ValueError, match='TaskConfig.rate_hz must be > 0, got -5'):
        TaskConfig.from_params(rate_hz=-5)
    with pytest.raises(ValueError, match='TaskConfig.max_action_v must be a finite number'):
        TaskConfig.from_params(max_action_v=float('nan'))


def test_sim_env_passes_the_gymnasium_checker():
    check_env(SimRotaryInvertedPendulumEnv(TaskConfig.from_params()), skip_render_check=True)


def test_sim_env_truncates_at_episode_length_and_terminates_at_the_arm_limit():
    env = SimRotaryInvertedPendulumEnv(TaskConfig.from_params(episode_seconds=0.5))
    env.reset(seed=0)
    for i in range(25):  # noqa: B007 - i is checked after the loop
        _, _, terminated, truncated, _ = env.step(np.zeros(1))
        assert not terminated
    assert truncated and i == 24
    env.reset(seed=0)
    for _ in range(100):
        _, reward, terminated, _, info = env.step(np.ones(1))
        if terminated:
            break
    assert terminated and abs(info['theta']) > 1.6 and reward == -10.0


def test_sim_env_rejects_non_finite_actions():
    env = SimRotaryInvertedPendulumEnv(TaskConfig.from_params())
    env.reset(seed=0)
    with pytest.raises(ValueError, match='action must be finite, got nan'):
        env.step(np.array([np.nan]))


def test_rig_env_resets_steps_at_its_rate_and_disengages_on_close(emulator):
    client = LowLevelClient(str(emulator.link), timeout_s=0.02)
    client.open()
    env = RealRotaryInvertedPendulumEnv(client, TaskConfig.from_params(episode_seconds=0.4))
    obs, info = env.reset(seed=0)
    assert obs.shape == (OBS_SIZE,) and info['settled']
    dts = []
    for _ in range(20):
        obs, reward, terminated, truncated, step_info = env.step(np.array([0.05]))
        dts.append(step_info['dt_s'])
        assert step_info['engaged']
    assert truncated and not terminated
    # The median: a pause of the VM's host (3-100 ms, CI saw one) stretches one interval and
    # the env starts its schedule anew after an overrun, so the mean would carry the pause;
    # an env that did not pace (~1 ms) or paced at another rate still fails this.
    assert np.median(dts) == pytest.approx(0.02, abs=0.002), dts
    assert obs[0] > 0  # 20 ticks of +0.4 V turned the arm positive
    env.close()
    assert not client.get_state().engaged
    client.close()


def test_the_brakes_floor_grows_while_the_pendulum_swings_and_the_arm_stays_still():
    """The floor learns the least voltage that moves the arm, within a reset.

    It shrinks while the arm moves (a floor that held there drove a lasting swing on a rig
    with lag, offline), never below 0.
    """
    from rip_control.rig.env import (
        QUIET_ARM_RAD_S,
        QUIET_PENDULUM_RAD,
        ResetController,
        reset_brake_floor,
        reset_voltage,
    )

    c = TaskConfig.from_params(episode_seconds=1.0)
    dt, swing = c.period_s, 2 * QUIET_PENDULUM_RAD
    assert reset_brake_floor(c, 0.5, swing, 0.0, dt) == pytest.approx(0.5 + 1.0 * dt)
    assert reset_brake_floor(c, 0.5, swing, 1.0, dt) == pytest.approx(0.5 - 1.0 * dt)  # moves
    assert reset_brake_floor(c, 0.5, 0.0, -1.0, dt) == pytest.approx(0.5 - 1.0 * dt)
    assert reset_brake_floor(c, 0.5 * dt, swing, 1.0, dt) == 0.0  # never below 0
    # Still and moving as the quiet rule tells them apart (its arm speed).
    slow, fast = 0.5 * QUIET_ARM_RAD_S, QUIET_ARM_RAD_S
    assert reset_brake_floor(c, 0.5, swing, slow, dt) == pytest.approx(0.5 + 1.0 * dt)
    assert reset_brake_floor(c, 0.5, swing, -fast, dt) == pytest.approx(0.5 - 1.0 * dt)
    assert reset_brake_floor(c, 0.5, 0.5 * QUIET_PENDULUM_RAD, 0.0, dt) == 0.5  # quiet swing
    assert reset_brake_floor(c, 100.0, swing, 0.0, dt) == 0.5 * c.max_action_v  # bounded
    # Added in the brake's own direction beyond half the quiet angle, not inside it.
    without = reset_voltage(c, 0.0, 0.0, swing, 0.0)
    assert reset_voltage(c, 0.0, 0.0, swing, 0.0, 0.0, 1.0) == pytest.approx(without + 1.0)
    assert reset_voltage(c, 0.0, 0.0, -swing, 0.0, 0.0, 1.0) == pytest.approx(-without - 1.0)
    small = 0.4 * QUIET_PENDULUM_RAD
    assert reset_voltage(c, 0.0, 0.0, small, 0.0, 0.0, 1.0) == reset_voltage(
        c, 0.0, 0.0, small, 0.0
    )
    # Each reset starts its own: the floor from 0.
    assert ResetController(c).floor_v == 0.0


def test_the_resets_integral_pulls_a_stuck_arm_at_least_as_at_its_least_angle():
    """A still arm just outside the quiet angle winds the integral up as fast as at 0.2 rad.

    Inside half the quiet angle, or while the arm moves, it does not grow; it drops once it
    pushes the arm's own way.
    """
    from rip_control.rig.env import QUIET_ARM_RAD, RESET_INTEGRAL_LEAST_RAD, reset_integral

    c = TaskConfig.from_params(episode_seconds=1.0)
    dt, ki = c.period_s, c.reset_ki_v_per_rad_s
    near = 2 * QUIET_ARM_RAD  # outside the quiet angle, well inside the least angle
    assert near < RESET_INTEGRAL_LEAST_RAD
    assert reset_integral(c, 0.0, near, 0.0, dt) == pytest.approx(
        -ki * RESET_INTEGRAL_LEAST_RAD * dt
    )
    assert reset_integral(c, 0.0, -near, 0.0, dt) == pytest.approx(
        ki * RESET_INTEGRAL_LEAST_RAD * dt
    )
    assert reset_integral(c, 0.0, 0.5, 0.0, dt) == pytest.approx(-ki * 0.5 * dt)  # its angle
    assert reset_integral(c, -0.1, 0.4 * QUIET_ARM_RAD, 0.0, dt) == -0.1  # inside: held
    edge = 0.75 * QUIET_ARM_RAD  # beyond half the quiet angle: it grows
    assert reset_integral(c, 0.0, edge, 0.0, dt) == pytest.approx(
        -ki * RESET_INTEGRAL_LEAST_RAD * dt
    )
    assert reset_integral(c, -0.1, near, 1.0, dt) == -0.1  # the arm moves: held
    assert reset_integral(c, 0.1, near, 0.0, dt) == 0.0  # pushed the arm's own way: dropped


@pytest.mark.parametrize(
    'rig',
    ['config/rig_shifted_stuck.yaml', 'bench/rigs/gap_laggy.yaml', 'bench/rigs/gap_sticky.yaml'],
)
def test_the_reset_settles_a_pendulum_falling_from_upright_offline(rig):
    """What a balanced episode leaves: the pendulum upright and still, the arm centred.

    The reset's own controller against the rig's plant on an explicit clock (the reset
    benchmark's ``settle``). Before its floor shrank while the arm moves, the laggy gap rig's
    reset never settled from here (a lasting swing of arm and pendulum); now 2.6-3.7 s on
    these rigs (``bench/results/reset_offline.json``).
    """
    import math

    from rip_bench.reset import settle

    start = (0.0, 0.0, math.pi - 0.02, 0.0)  # theta, theta_dot, alpha from hanging, alpha_dot
    for seed in (0, 1):
        got = settle(rig, start, seed, {})
        assert got['settled'] and got['seconds'] < 8.0, got
        assert got['arm_reach_rad'] < TaskConfig.from_params(episode_seconds=1.0).arm_limit_rad


@pytest.mark.parametrize('rig', ['rig_shifted_worn', 'rig_shifted_stuck'])
def test_the_reset_brakes_a_swing_on_a_dead_zone_rig_in_seconds_inside_the_arm_limit(
    start_emulator, rig
):
    """A dead-zone rig (real emulator, pty), swung by a second of +-0.8 of full voltage, settles.

    Their dead zones (0.6 and 1.2 V) and stiction swallow a brake on the pendulum's velocity
    alone: the stuck rig's resets took 15-19 s of the 20 s timeout, the worn one's about 8 s
    (measured on the code before the brake on the pendulum's angle). With that brake the stuck
    rig's took 6.8-8.3 s from this swing (its last 0.3 rad swing inside the dead zone); with
    the brake's floor 3.2-3.5 s, the worn rig's 3.1-3.2 s (emulator, 6 and 4 runs). The arm
    never beyond the task's limit on the way (or, where the episode left it past the limit,
    never further out).
    """
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / 'config' / f'{rig}.yaml'
    emu = start_emulator('--params', str(path))
    client = LowLevelClient(str(emu.link), timeout_s=0.02)
    client.open()
    config = TaskConfig.from_params(episode_seconds=1.0)
    env = RealRotaryInvertedPendulumEnv(client, config)
    seen: list[float] = []
    read = env.read

    def recorded() -> PendulumReading:  # every reading the reset takes, as it takes it
        r = read()
        seen.append(r.theta)
        return r

    try:
        env.reset(seed=0)
        swings = []
        for k in range(config.episode_steps):
            _, _, terminated, truncated, _ = env.step(np.array([0.8 if k % 25 < 12 else -0.8]))
            swings.append(abs(wrap_angle(env.read().alpha)))
            if terminated or truncated:
                break
        assert max(swings[-25:]) > 0.3, swings  # disturbed: the pendulum swings wide
        env.read = recorded  # type: ignore[method-assign]
        obs, info = env.reset()
        # 6 s: fails the 6.8-8.3 s without the floor, leaves room for a host's pauses.
        assert info['settled'] and info['reset_s'] < 6.0, info
        assert abs(obs[0]) < 0.05, (obs, info)  # the arm centred
        # Quiet by the readings themselves, not the reset's own verdict: half a second at 0 V,
        # the pendulum within the quiet rule's swing (QUIET_PENDULUM_RAD, a swing an episode
        # from hanging starts with unharmed), the arm centred and still.
        env.read = read  # type: ignore[method-assign]
        after = []
        for _ in range(25):
            client.set_voltage(0.0)
            after.append(env.read())
            time.sleep(config.period_s)
        alphas = [wrap_angle(r.alpha) for r in after]
        assert max(map(abs, alphas)) < 1.2 * QUIET_PENDULUM_RAD, alphas
        thetas = [r.theta for r in after]
        assert max(map(abs, thetas)) < QUIET_ARM_RAD + 0.01 and np.ptp(thetas) < 0.02, thetas
        # Never beyond the task's arm limit, or beyond where the arm was when the reset began
        # (an episode the limit ended leaves it just past it, still moving out).
        bound = max(config.arm_limit_rad, abs(seen[0]) + 0.1)
        assert len(seen) > 20 and max(map(abs, seen)) < bound, (seen[0], max(seen, key=abs))
    finally:
        env.close()
        client.close()


def test_sim_sensing_latency_delays_readings_by_whole_and_partial_periods():
    actions = [0.6] * 10 + [-0.6] * 10
    lat = PendulumParams(sensing_latency_s=0.04)  # two periods at 50 Hz
    prompt, late = (
        SimRotaryInvertedPendulumEnv(TaskConfig.from_params()),
        SimRotaryInvertedPendulumEnv(TaskConfig.from_params(), lat),
    )
    prompt.reset(seed=1)
    late.reset(seed=1)
    seen_prompt = [prompt.step(np.array([a]))[0] for a in actions]
    seen_late = [late.step(np.array([a]))[0] for a in actions]
    # The late rig reports what the prompt one reported two steps before (angles and
    # velocities; the last column is the action just sent, not a reading).
    for k in range(2, len(actions)):
        np.testing.assert_allclose(seen_late[k][:5], seen_prompt[k - 2][:5], atol=1e-6)
    # Half a period: the reading lies between the two neighbouring prompt readings.
    half = SimRotaryInvertedPendulumEnv(
        TaskConfig.from_params(), PendulumParams(sensing_latency_s=0.01)
    )
    half.reset(seed=1)
    arm = [half.step(np.array([a]))[0][0] for a in actions]
    prompt_arm = [o[0] for o in seen_prompt]
    for k in range(1, 10):
        assert prompt_arm[k - 1] <= arm[k] <= prompt_arm[k]


def test_sim_encoder_noise_is_seeded_and_switches_physics_between_episodes():
    noisy = SimRotaryInvertedPendulumEnv(
        TaskConfig.from_params(), PendulumParams(encoder_noise_counts=2.0)
    )
    obs_a, _ = noisy.reset(seed=3)
    obs_b, _ = noisy.reset(seed=3)
    np.testing.assert_array_equal(obs_a, obs_b)
    quiet = SimRotaryInvertedPendulumEnv(TaskConfig.from_params())
    quiet.reset(seed=3)
    arms = {round(float(noisy.step(np.zeros(1))[0][0]), 6) for _ in range(20)}
    assert len(arms) > 1  # noise on a rig at rest
    quiet.set_params(PendulumParams(pendulum_mass_kg=0.03))
    quiet.reset(seed=0)
    assert quiet.dynamics.params.pendulum_mass_kg == 0.03
