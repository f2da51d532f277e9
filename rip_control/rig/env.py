"""Gymnasium environments of the rotary inverted pendulum task: the rig and the simulator.

Both share :class:`RipTask` (observation, reward, termination), so a policy trained in the
simulator sees exactly the same numbers on the rig. The rig env splits a step into
:meth:`RealRotaryInvertedPendulumEnv.apply_action` and
:meth:`RealRotaryInvertedPendulumEnv.observe_and_step` so an external pacer decides *when*
each happens; its plain :meth:`~RealRotaryInvertedPendulumEnv.step` paces itself with a
sleep, which is the synchronous pattern whose rate stretches under a learner.

Observation (6 floats, and ``action_history`` more)::

    [theta, sin(phi), cos(phi), theta_dot / 10, phi_dot / 10, previous action,
     the action before it, ...]

``action_history`` (k, a parameter of both nodes and of pre-training, default 0) appends the
k actions before the previous one, newest first: a policy that sees what it commanded two or
three ticks ago can tell a late or dead-zoned response from a still rig (Armandpl/furuta,
SenseAct). k = 0 is the 6-float observation every shipped policy, buffer and bag has; a policy
file records its k (:class:`rip_control.policy.PolicyMeta`) and a node refuses a mismatch.

``theta`` is the arm angle (rad), ``phi`` the pendulum angle from upright (rad, wrapped to
[-pi, pi)), velocities are encoder differences over the firmware's own sample interval.
Action: one float in [-1, 1], scaled to ``max_action_v`` volts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields
import math
import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from rip_control.params import CONTROL_PARAMETERS, FromParams, Param
from rip_control.rig.client import LowLevelClient, RigClockJump
from rip_control.rig.dynamics import FurutaDynamics, PendulumParams
from rip_control.rig.protocol import RigState, Status

OBS_SIZE = 6  # with action_history 0
ACTION_SIZE = 1
OBS_LABELS = ('theta', 'sin_phi', 'cos_phi', 'theta_dot', 'phi_dot', 'prev_action')


def obs_size(action_history: int) -> int:
    """Observation length with ``action_history`` (k) actions before the previous one."""
    return OBS_SIZE + action_history * ACTION_SIZE


def action_history_of(size: int) -> int:
    """The k an observation length stands for; ValueError if none does."""
    k, rest = divmod(size - OBS_SIZE, ACTION_SIZE)
    if k < 0 or rest:
        raise ValueError(f'an observation of {size} floats is not {OBS_SIZE} + k * {ACTION_SIZE}')
    return k


VELOCITY_SCALE = 0.1
VELOCITY_OBS_BOUND = 10.0  # the observation space's bound on a scaled velocity (100 rad/s)
QUIET_FILTER = 0.2  # EMA weight of the reset's stillness velocities (per reset tick)
# When the reset calls the rig quiet (held QUIET_S): the arm centred and still, the pendulum's
# residual swing small. A rig with a wide dead zone or strong stiction cannot calm a small
# swing through the arm (every correction is inside its dead zone), and its pendulum's own
# damping takes tens of seconds: a swing of 0.1 rad is what an episode from hanging starts
# with unharmed.
QUIET_S = 0.5
QUIET_ARM_RAD, QUIET_ARM_RAD_S = 0.05, 0.3
QUIET_PENDULUM_RAD, QUIET_PENDULUM_RAD_S = 0.1, 1.0
#: The reset's integral grows at least as fast as at this arm angle (:func:`reset_integral`).
RESET_INTEGRAL_LEAST_RAD = 0.2


BALANCE_THRESHOLD_RAD = 0.2
"""|phi| below this counts as balanced: the task's, the evaluation's, the guard's."""


@dataclass(frozen=True)
class TaskConfig(FromParams):
    """The task both environments pose. Validated here, once.

    The first four fields are the control node's parameters (their defaults are in
    :data:`rip_control.params.CONTROL_PARAMETERS`: build one with :meth:`from_params`); the
    rest are the task's constants.

    :param rate_hz: control rate; one env step is one period.
    :param episode_seconds: truncation after this long of policy ticks.
    :param max_action_v: volts at action = +/-1.
    :param arm_limit_rad: safety limit: an episode terminates beyond it (the hard stop of the
        rig is further out).
    :param action_history: k, the actions before the previous one in the observation.
    :param balance_threshold_rad: |phi| below which the pendulum counts as balanced.
    :param reward_arm_weight: penalty weight of (theta / arm_limit)^2.
    :param reward_action_weight: penalty weight of action^2.
    :param reward_velocity_weight: penalty weight of (phi_dot / 10)^2.
    :param termination_penalty: reward of a step that ends beyond the arm limit.
    :param reset_timeout_s: give up settling the rig after this long (rig env only).
    :param reset_kp_v_per_rad: arm-centring gain of the reset loop.
    :param reset_kd_v_s_per_rad: arm damping gain of the reset loop.
    :param reset_pendulum_damping_v_s_per_rad: gain of the pendulum-calming term.
    :param reset_pendulum_brake_v_per_rad: gain of the pendulum brake (on its angle's sine).
    :param reset_brake_arm_rad: beyond this arm angle the brake never pushes the arm further
        out (the centring alone acts there).
    :param reset_ki_v_per_rad_s: integral gain of the arm centring while the arm is still
        (it breaks a sticky arm away where the proportional term alone stays inside the dead
        zone and the stiction).
    :param reset_brake_floor_v_per_s: how fast the brake's floor grows while the pendulum
        swings and the arm stays still (a brake swallowed by the motor's dead zone or the
        arm's stiction): it learns, within a reset, the least voltage that moves the arm.
    """

    TABLE: ClassVar[tuple[Param, ...]] = CONTROL_PARAMETERS

    rate_hz: float
    episode_seconds: float
    max_action_v: float
    arm_limit_rad: float
    action_history: int
    balance_threshold_rad: float = BALANCE_THRESHOLD_RAD
    reward_arm_weight: float = 0.2
    reward_action_weight: float = 0.05
    reward_velocity_weight: float = 0.01
    termination_penalty: float = -10.0
    reset_timeout_s: float = 20.0
    reset_kp_v_per_rad: float = 4.0
    reset_kd_v_s_per_rad: float = 0.3
    reset_pendulum_damping_v_s_per_rad: float = 0.15
    reset_pendulum_brake_v_per_rad: float = 3.0
    reset_brake_arm_rad: float = 1.0
    reset_ki_v_per_rad_s: float = 5.0
    reset_brake_floor_v_per_s: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f'TaskConfig.{f.name} must be a finite number, got {value!r}')
        for name in (
            'rate_hz',
            'episode_seconds',
            'max_action_v',
            'arm_limit_rad',
            'balance_threshold_rad',
            'reset_timeout_s',
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f'TaskConfig.{name} must be > 0, got {getattr(self, name)!r}')
        if not 1.0 <= self.rate_hz <= 2000.0:
            raise ValueError(f'TaskConfig.rate_hz must be in [1, 2000], got {self.rate_hz!r}')
        k = self.action_history
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f'TaskConfig.action_history must be an integer >= 0, got {k!r}')

    @property
    def obs_size(self) -> int:
        """Observation length."""
        return obs_size(self.action_history)

    @classmethod
    def step_reward_range(cls, terminated: bool, spin: float) -> tuple[float, float]:
        """Every reward :class:`RipTask` can give a step (from the task's constants).

        :param spin: the step's observed pendulum speed (``next_obs[4]``, scaled).

        A terminated step earns exactly ``termination_penalty``; any other at most 1 (upright)
        and at least minus every penalty at its largest: the arm at its limit, a full action,
        and the spin penalty of this step's own pendulum speed.
        """
        if terminated:
            return cls.termination_penalty, cls.termination_penalty
        worst = cls.reward_arm_weight + cls.reward_action_weight
        return -(worst + cls.reward_velocity_weight * spin**2), 1.0

    @classmethod
    def most_return(cls, steps: int) -> float:
        """The most an episode of ``steps`` steps can return: each at the reward's ceiling."""
        ceiling = max(cls.step_reward_range(False, 0.0)[1], cls.termination_penalty)
        return steps * ceiling

    @property
    def period_s(self) -> float:
        """Control period."""
        return 1.0 / self.rate_hz

    @property
    def episode_steps(self) -> int:
        """Policy ticks per episode."""
        return max(1, round(self.episode_seconds * self.rate_hz))


def wrap_angle(angle: float) -> float:
    """Wrap to [-pi, pi)."""
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


@dataclass(frozen=True)
class PendulumReading:
    """Angles (rad) and firmware time (s) of one sample; ``alpha`` is zero hanging down."""

    theta: float
    alpha: float
    time_s: float

    @property
    def phi(self) -> float:
        """Pendulum angle from upright, wrapped."""
        return wrap_angle(self.alpha - math.pi)


class RipTask:
    """Observation, reward and termination of the task, shared by rig and simulator.

    It holds the episode's last ``1 + action_history`` actions (newest first), which the
    observation ends with: :meth:`clear_actions` at an episode's start, :meth:`push_action`
    with each action applied.
    """

    def __init__(self, config: TaskConfig) -> None:
        self.config = config
        self.actions: deque[float] = deque(maxlen=1 + config.action_history)
        self.clear_actions()

    def clear_actions(self) -> None:
        """An episode starts from rest: every earlier action counts as 0."""
        self.actions.extend([0.0] * (self.actions.maxlen or 1))

    def push_action(self, value: float) -> None:
        """The action applied in the transition being made."""
        self.actions.appendleft(value)

    @property
    def last_action(self) -> float:
        """The action of the current transition."""
        return self.actions[0]

    def observe(
        self, prev: PendulumReading, cur: PendulumReading
    ) -> tuple[np.ndarray, float, float]:
        """Observation plus the raw velocities ``(theta_dot, phi_dot)`` from two readings."""
        dt = cur.time_s - prev.time_s
        if dt <= 0.0:
            theta_dot = phi_dot = 0.0
        else:
            theta_dot = (cur.theta - prev.theta) / dt
            phi_dot = (cur.alpha - prev.alpha) / dt  # unwrapped counts: no jump at +/-pi
        phi = cur.phi
        obs = np.array(
            [
                cur.theta,
                math.sin(phi),
                math.cos(phi),
                theta_dot * VELOCITY_SCALE,
                phi_dot * VELOCITY_SCALE,
                *self.actions,
            ],
            dtype=np.float32,
        )
        return obs, theta_dot, phi_dot

    def reward(self, reading: PendulumReading, phi_dot: float, action: float) -> float:
        """Upright and centred, with small penalties for arm excursion, effort and spin."""
        c = self.config
        upright = 0.5 * (1.0 + math.cos(reading.phi))
        arm = (reading.theta / c.arm_limit_rad) ** 2
        spin = (phi_dot * VELOCITY_SCALE) ** 2
        return (
            upright
            - c.reward_arm_weight * arm
            - c.reward_action_weight * action * action
            - c.reward_velocity_weight * spin
        )

    def terminated(self, reading: PendulumReading) -> bool:
        """Safety termination: the arm beyond its limit."""
        return abs(reading.theta) > self.config.arm_limit_rad

    def is_balanced(self, reading: PendulumReading) -> bool:
        """|phi| within the balance threshold."""
        return abs(reading.phi) < self.config.balance_threshold_rad


def bounded_by_construction(obs_size: int) -> list[int]:
    """The observation entries no rig can put outside [-1, 1].

    Sin and cos of the pendulum angle, and the actions; the arm angle and the velocities are
    whatever the rig measured.
    """
    return [1, 2, *range(OBS_SIZE - ACTION_SIZE, obs_size)]


def spaces(action_history: int) -> tuple[gym.spaces.Box, gym.spaces.Box]:
    """The task's (observation, action) spaces with ``action_history`` past actions."""
    high = np.array(
        [math.pi, 1.0, 1.0, VELOCITY_OBS_BOUND, VELOCITY_OBS_BOUND] + [1.0] * (1 + action_history),
        np.float32,
    )
    obs_space = gym.spaces.Box(-high, high, dtype=np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, shape=(ACTION_SIZE,), dtype=np.float32)
    return obs_space, act_space


def _action_value(action: Any) -> float:
    value = float(np.asarray(action, dtype=np.float64).reshape(-1)[0])
    if not math.isfinite(value):
        raise ValueError(f'action must be finite, got {value!r}')
    return max(-1.0, min(1.0, value))


class RealRotaryInvertedPendulumEnv(gym.Env):
    """The task on a rig reached through :class:`LowLevelClient` (physical or emulated).

    :param client: an open client.
    :param config: the task.
    """

    metadata = {'render_modes': []}

    def __init__(self, client: LowLevelClient, config: TaskConfig) -> None:
        if client.device_info is None:
            raise ValueError('the rig client must be open (call client.open() first)')
        self.client = client
        self.config = config
        self.task = RipTask(config)
        self.observation_space, self.action_space = spaces(config.action_history)
        self._rad_per_count = 2.0 * math.pi / client.device_info.counts_per_rev
        self._prev: PendulumReading | None = None
        self._steps = 0
        self._last_obs_t = 0.0
        self._ts_unwrap = _TimestampUnwrapper()
        self.last_state: RigState | None = None
        self._next_tick = 0.0

    # -- readings --------------------------------------------------------------------------

    def read(self) -> PendulumReading:
        """One GET_STATE, converted to angles and seconds."""
        state = self.client.get_state()
        self.last_state = state
        k = self._rad_per_count
        t = self._ts_unwrap(state.timestamp_us)
        return PendulumReading(state.arm_counts * k, state.pendulum_counts * k, t)

    # -- split step ------------------------------------------------------------------------

    def apply_action(self, action: Any) -> None:
        """Send the action (in [-1, 1]) as a motor voltage; also feeds the firmware deadman."""
        value = _action_value(action)
        self.client.set_voltage(value * self.config.max_action_v)
        self.task.push_action(value)

    def observe_and_step(self) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Read the rig and complete the transition begun by the last :meth:`apply_action`."""
        if self._prev is None:
            raise RuntimeError('call reset() before stepping')
        now = time.monotonic()
        cur = self.read()
        obs, _, phi_dot = self.task.observe(self._prev, cur)
        reward = self.task.reward(cur, phi_dot, self.task.last_action)
        terminated = self.task.terminated(cur)
        if terminated:
            reward = self.config.termination_penalty
        self._steps += 1
        truncated = not terminated and self._steps >= self.config.episode_steps
        info = {
            'dt_s': now - self._last_obs_t,
            'firmware_dt_s': cur.time_s - self._prev.time_s,
            'phi': cur.phi,
            'theta': cur.theta,
            'engaged': bool(self.last_state and self.last_state.status & Status.ENGAGED),
            'deadman_tripped': bool(
                self.last_state and self.last_state.status & Status.DEADMAN_TRIPPED
            ),
        }
        self._prev = cur
        self._last_obs_t = now
        return obs, reward, terminated, truncated, info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Self-paced step: act, sleep to the next tick, observe.

        This is the synchronous pattern: when the caller spends longer than a period between
        steps (e.g. in gradient updates), every tick is late and the rate silently drops.
        The measured interval is reported in ``info['dt_s']``.
        """
        self.apply_action(action)
        self._next_tick += self.config.period_s
        remaining = self._next_tick - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
        else:
            self._next_tick = time.monotonic()
        return self.observe_and_step()

    # -- reset -----------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Bring the rig to rest, arm centred and pendulum hanging still; then observe.

        A paced PD loop centres the arm while a pendulum-calming term removes swing energy;
        it never teleports. ``info['settled']`` is False if ``reset_timeout_s`` ran out.
        """
        super().reset(seed=seed)
        start = time.monotonic()
        self.begin_reset()
        next_tick = start
        while True:
            next_tick += self.config.period_s
            remaining = next_tick - time.monotonic()
            if remaining > 0:
                time.sleep(remaining)
            done, settled = self.reset_step()
            if done:
                break
        obs = self.begin_episode()
        return obs, {'settled': settled, 'reset_s': time.monotonic() - start}

    def begin_reset(self) -> None:
        """Engage and start the reset controller; then call :meth:`reset_step` every tick."""
        self.client.engage()
        self._reset_prev = self.read()
        self._reset_start = time.monotonic()
        self._still_since: float | None = None
        self._reset = ResetController(self.config)

    def reset_step(self) -> tuple[bool, bool]:
        """One tick of the reset controller; return ``(done, settled)``.

        Done when the rig has been quiet for ``QUIET_S`` (settled) or ``reset_timeout_s`` ran out.
        """
        c = self.config
        prev = self._reset_prev
        cur = self.read()
        dt = max(cur.time_s - prev.time_s, 1e-6)
        theta_dot = (cur.theta - prev.theta) / dt
        alpha_dot = (cur.alpha - prev.alpha) / dt
        alpha_down = wrap_angle(cur.alpha)
        self._reset_prev = cur
        now = time.monotonic()
        volts, quiet = self._reset.step(cur.theta, alpha_down, theta_dot, alpha_dot)
        if quiet:
            if self._still_since is None:
                self._still_since = now
            if now - self._still_since >= QUIET_S:
                self.client.set_voltage(0.0)
                return True, True
        else:
            self._still_since = None
        if now - self._reset_start > c.reset_timeout_s:
            self.client.set_voltage(0.0)
            return True, False
        self.client.set_voltage(volts)
        return False, False

    def begin_episode(self) -> np.ndarray:
        """Take the first observation of an episode (the motor stays engaged at 0 V)."""
        self._prev = self.read()
        self.task.clear_actions()
        self._steps = 0
        self._last_obs_t = time.monotonic()
        self._next_tick = self._last_obs_t
        obs, _, _ = self.task.observe(self._prev, self._prev)
        return obs

    @property
    def episode_steps_done(self) -> int:
        """Steps taken in the current episode."""
        return self._steps

    def disengage_safely(self) -> None:
        """Disengage the motor; callable from any thread."""
        self.client.disengage_motor()

    def close(self) -> None:
        """Disengage (best effort); the caller owns and closes the client."""
        if self.client.is_open:
            try:
                self.client.disengage_motor()
            except Exception:  # noqa: BLE001 - closing must not raise; the deadman backs it up
                pass


def quiet_velocities(
    filtered: tuple[float, float], theta_dot: float, alpha_dot: float
) -> tuple[float, float]:
    """The reset's low-passed ``(theta_dot, alpha_dot)`` after one tick.

    Stillness is judged on low-passed velocities: one count of encoder noise makes a raw 20 ms
    difference jump by 0.15 rad/s, and a noisy rig would never look still.
    """
    k = QUIET_FILTER
    return (
        filtered[0] + k * (theta_dot - filtered[0]),
        filtered[1] + k * (alpha_dot - filtered[1]),
    )


def is_quiet(theta: float, alpha_down: float, filtered: tuple[float, float]) -> bool:
    """The reset's quiet rule, one tick: the arm centred and still, the pendulum's swing small."""
    return (
        abs(theta) < QUIET_ARM_RAD
        and abs(filtered[0]) < QUIET_ARM_RAD_S
        and abs(alpha_down) < QUIET_PENDULUM_RAD
        and abs(filtered[1]) < QUIET_PENDULUM_RAD_S
    )


class ResetController:
    """The reset's state from tick to tick, and its command.

    :func:`quiet_velocities` (the quiet rule's), :func:`reset_integral`'s and
    :func:`reset_brake_floor`'s states, one reset long; each tick :meth:`step` gives the
    voltage and whether the rig is quiet (:func:`is_quiet`).
    """

    def __init__(self, config: TaskConfig) -> None:
        self.config = config
        self.quiet_vel = (0.0, 0.0)
        self.integral_v = 0.0
        self.floor_v = 0.0

    def step(
        self, theta: float, alpha_down: float, theta_dot: float, alpha_dot: float
    ) -> tuple[float, bool]:
        """One tick: ``(voltage, quiet)`` from the reading's angles and velocities."""
        c = self.config
        self.quiet_vel = quiet_velocities(self.quiet_vel, theta_dot, alpha_dot)
        quiet = is_quiet(theta, alpha_down, self.quiet_vel)
        arm_speed = self.quiet_vel[0]
        self.integral_v = reset_integral(c, self.integral_v, theta, arm_speed, c.period_s)
        self.floor_v = reset_brake_floor(c, self.floor_v, alpha_down, arm_speed, c.period_s)
        volts = reset_voltage(
            c, theta, theta_dot, alpha_down, alpha_dot, self.integral_v, self.floor_v
        )
        return volts, quiet


def reset_brake_floor(
    config: TaskConfig, floor_v: float, alpha_down: float, arm_speed: float, dt_s: float
) -> float:
    """The brake's floor after one tick: the least voltage the brake is given.

    It grows while the pendulum swings beyond the quiet rule's angle and the arm stays still
    (the brake swallowed by the motor's dead zone or the arm's stiction) and shrinks at the
    same rate while the arm moves: on a rig with a 1.2 V dead zone, a swing of 0.3 rad asks
    a 0.9 V brake that moves nothing, and the pendulum's own damping took 7-8 s to calm it
    (offline, after a second of +-0.8 full voltage; 3-3.5 s with the floor). A floor that
    only held once the arm moved kept growing at each turning point of a small swing on a
    rig with lag (``bench/rigs/gap_laggy.yaml``) and drove a lasting swing of the arm and
    the pendulum (a relay with delay): that reset never settled. A rig whose arm answers at
    once keeps it near 0. Within 0 and the reset's voltage limit.
    """
    if abs(arm_speed) >= QUIET_ARM_RAD_S:
        floor_v -= config.reset_brake_floor_v_per_s * dt_s
    elif abs(alpha_down) > QUIET_PENDULUM_RAD:
        floor_v += config.reset_brake_floor_v_per_s * dt_s
    return max(0.0, min(floor_v, 0.5 * config.max_action_v))


def reset_voltage(
    config: TaskConfig,
    theta: float,
    theta_dot: float,
    alpha_down: float,
    alpha_dot: float,
    integral_v: float = 0.0,
    floor_v: float = 0.0,
) -> float:
    """The reset controller: centre the arm (PID) and brake the hanging pendulum.

    The brake drives the arm with the pendulum's angle (``sin``) and against its velocity
    (``cos`` times the rate). The arm's speed follows the voltage closely (back EMF), so a
    voltage in phase with the pendulum's angle moves the pivot in phase with the pendulum's
    velocity: work taken out of the swing every half period. On rigs whose motor has a wide
    dead zone or whose arm sticks, a brake on the velocity alone stayed inside the dead zone
    for a small swing, and the pendulum's own damping took most of the timeout to calm it; the
    angle term reaches beyond it (``python -m rip_bench reset``, offline:
    ``bench/results/reset_offline.json``). Beyond ``reset_brake_arm_rad`` the brake never
    pushes the arm further out. ``integral_v`` is
    :func:`reset_integral`'s state; ``floor_v`` :func:`reset_brake_floor`'s, added to the
    brake in its own direction while the pendulum swings beyond half the quiet rule's angle.
    """
    v = -config.reset_kp_v_per_rad * theta - config.reset_kd_v_s_per_rad * theta_dot
    brake = config.reset_pendulum_brake_v_per_rad * math.sin(alpha_down)
    brake -= config.reset_pendulum_damping_v_s_per_rad * math.cos(alpha_down) * alpha_dot
    if floor_v > 0.0 and brake != 0.0 and abs(alpha_down) > 0.5 * QUIET_PENDULUM_RAD:
        brake += math.copysign(floor_v, brake)
    if not (abs(theta) > config.reset_brake_arm_rad and brake * theta > 0.0):
        v += brake
    limit = 0.5 * config.max_action_v
    return max(-limit, min(limit, v + integral_v))


def reset_integral(
    config: TaskConfig, integral_v: float, theta: float, theta_dot: float, dt_s: float
) -> float:
    """The reset's integral term after one tick.

    It grows only while the arm is still outside half the quiet rule's angle (a stuck arm
    off centre, held by stiction or inside the motor's dead zone, until it breaks away), at
    least as fast as at :data:`RESET_INTEGRAL_LEAST_RAD` off centre: a stuck arm just outside
    the quiet angle reaches a 1.2 V dead zone in about a second, not the 3 s its own angle
    took (the stuck rig from upright, offline). It is dropped once it pushes the arm's own
    way (the arm crossed the centre), so a free arm sees the PD alone and no wind-up
    overshoots; bounded by the reset's voltage limit.
    """
    if abs(theta_dot) < QUIET_ARM_RAD_S and abs(theta) > 0.5 * QUIET_ARM_RAD:
        pull = math.copysign(max(abs(theta), RESET_INTEGRAL_LEAST_RAD), theta)
        integral_v -= config.reset_ki_v_per_rad_s * pull * dt_s
    if integral_v * theta > 0.0:
        integral_v = 0.0
    limit = 0.5 * config.max_action_v
    return max(-limit, min(limit, integral_v))


class _TimestampUnwrapper:
    """Turns the firmware's wrapping u32 microsecond counter into monotonic seconds.

    A wrap (every 71.6 minutes) is told from a reset by the host's own clock: between two
    readings the rig's time must advance as the host's did, within :attr:`TOLERANCE_S` (and
    :attr:`DRIFT` of the gap), modulo 2**32 us. Anything else raises :class:`RigClockJump`.
    """

    TOLERANCE_S = 0.5  # serial timeouts, a paused host: far below any reset's jump
    DRIFT = 1e-3  # the two clocks' rates may differ by this share of the gap (crystals)

    def __init__(self) -> None:
        self._last: int | None = None  # unwrapped, us
        self._last_host_s = 0.0

    def __call__(self, timestamp_us: int, host_s: float | None = None) -> float:
        host_s = time.monotonic() if host_s is None else host_s
        if self._last is None:
            unwrapped = timestamp_us
        else:
            gap_s = host_s - self._last_host_s
            expected = self._last + gap_s * 1e6
            wraps = round((expected - timestamp_us) / (1 << 32))
            unwrapped = timestamp_us + wraps * (1 << 32)
            off_s = (unwrapped - expected) * 1e-6
            if abs(off_s) > self.TOLERANCE_S + self.DRIFT * gap_s or unwrapped < self._last:
                raise RigClockJump(
                    f"the rig's clock read {timestamp_us * 1e-6:.6f} s, {off_s:+.3f} s from "
                    f'the {gap_s:.3f} s the host counted since the last reading: a firmware '
                    'reset (its encoder zero is lost: centre the arm and configure again) or '
                    'a corrupt reading'
                )
        self._last, self._last_host_s = unwrapped, host_s
        return unwrapped * 1e-6


class SimRotaryInvertedPendulumEnv(gym.Env):
    """The same task on the simulated pendulum, as fast as the CPU allows (not real time).

    Uses the emulator's dynamics, encoder quantisation, encoder noise and sensing latency
    (the reading of a step is the state ``sensing_latency_s`` earlier, time-stamped with that
    earlier time, as the emulator's replies are). :meth:`reset` places the state directly
    (SIMULATION ONLY: a real rig cannot be teleported): hanging down at rest by default, or
    near upright with ``options={'start': 'upright'}``.

    :param config: the task.
    :param params: physics; default QUBE-Servo 2. :meth:`set_params` swaps them between
        episodes (domain randomisation).
    """

    metadata = {'render_modes': []}

    def __init__(self, config: TaskConfig, params: PendulumParams | None = None) -> None:
        self.config = config
        self.task = RipTask(config)
        self.observation_space, self.action_space = spaces(config.action_history)
        self.set_params(params or PendulumParams())
        self._prev: PendulumReading | None = None
        self._steps = 0
        self._t = 0.0

    def set_params(self, params: PendulumParams) -> None:
        """Use other physics from the next :meth:`reset` on."""
        self.params = params
        self.dynamics = FurutaDynamics(params)
        self._k = 2.0 * math.pi / params.encoder_counts_per_rev
        # Latency L = m whole periods + a remainder r: each step snapshots the state r before
        # its end, and the reading reported is the snapshot m steps back.
        period = self.config.period_s
        latency = params.sensing_latency_s
        self._lat_periods = int(latency // period)
        self._lat_rem = latency - self._lat_periods * period
        if self._lat_rem < 0.5 * params.physics_step_s:
            self._lat_rem = 0.0
        self._snapshots: deque[PendulumReading] = deque(maxlen=self._lat_periods + 1)

    def _snapshot(self, t: float) -> PendulumReading:
        arm, pend = self.dynamics.encoder_counts()
        noise = self.params.encoder_noise_counts
        if noise > 0.0:
            arm += round(float(self.np_random.normal(0.0, noise)))
            pend += round(float(self.np_random.normal(0.0, noise)))
        return PendulumReading(arm * self._k, pend * self._k, t)

    def _advance(self, volts: float) -> PendulumReading:
        period = self.config.period_s
        if self._lat_rem > 0.0:
            self.dynamics.advance(period - self._lat_rem, volts, engaged=True)
            snap = self._snapshot(self._t + period - self._lat_rem)
            self.dynamics.advance(self._lat_rem, volts, engaged=True)
        else:
            self.dynamics.advance(period, volts, engaged=True)
            snap = self._snapshot(self._t + period)
        self._t += period
        self._snapshots.append(snap)
        return self._snapshots[0]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Place the pendulum (simulation-only fast reset)."""
        super().reset(seed=seed)
        start = (options or {}).get('start', 'down')
        if start == 'upright':
            alpha = math.pi + float(self.np_random.uniform(-0.1, 0.1))
        elif start == 'down':
            alpha = float(self.np_random.uniform(-0.05, 0.05))
        else:
            raise ValueError(f"options['start'] must be 'down' or 'upright', got {start!r}")
        self.dynamics.set_state(0.0, alpha)
        self._t = 0.0
        self._steps = 0
        self.task.clear_actions()
        self._snapshots.clear()
        self._prev = self._snapshot(0.0)
        for _ in range(self._lat_periods):  # the rig has been at rest: history is flat
            self._snapshots.append(self._prev)
        obs, _, _ = self.task.observe(self._prev, self._prev)
        return obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Advance one control period with the action held."""
        if self._prev is None:
            raise RuntimeError('call reset() before step()')
        value = _action_value(action)
        cur = self._advance(value * self.config.max_action_v)
        self.task.push_action(value)
        obs, _, phi_dot = self.task.observe(self._prev, cur)
        reward = self.task.reward(cur, phi_dot, value)
        terminated = self.task.terminated(cur)
        if terminated:
            reward = self.config.termination_penalty
        self._steps += 1
        truncated = not terminated and self._steps >= self.config.episode_steps
        self._prev = cur
        return obs, reward, terminated, truncated, {'phi': cur.phi, 'theta': cur.theta}
