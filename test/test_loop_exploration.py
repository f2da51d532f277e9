"""Exploration in training episodes: ``train_noise_scale`` narrows the sampled actions.

The control loop on the emulator through a real pty (no ROS). The actor's mean action is a
PD law that keeps the arm near its centre, its log-std a constant, so each training action
is ``tanh(mu(obs) + scale * std * z)`` with z standard normal: from a transition's
observation and action the draw ``scale * z`` can be read back, and compared between scales.
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
from rip_control.rt.loop import ControlLoop, LoopConfig
from rip_control.rt.outbox import Outbox
from rip_control.transitions import Transition

pytestmark = pytest.mark.alone

STD = 0.3
# Pacing is not the subject, nor is the regression guard (it would interleave evaluations).
LENIENT = {'timing_violation_threshold_s': 0.05, 'max_strikes': 10, 'eval_every_episodes': 0}


def _actor() -> NumpyActor:
    """Mean action -0.5 theta - 0.5 theta_dot / 10 (a PD law on the arm), std 0.3."""
    rnd = random_actor(OBS_SIZE, ACTION_SIZE, (8,), 50.0, seed=3, version=1)
    t = {k: np.zeros_like(v) for k, v in rnd.tensors.items()}
    # Hidden units relu(+-theta) and relu(+-theta_dot / 10) (obs[0] and obs[3]), then mu.
    for unit, (feature, sign) in enumerate([(0, 1.0), (0, -1.0), (3, 1.0), (3, -1.0)]):
        t['layers.0.weight'][unit, feature] = sign
    t['mu.weight'][0, :4] = [-0.5, 0.5, -0.5, 0.5]
    t['log_std.bias'][:] = np.log(STD)
    return NumpyActor(rnd.meta, t)


class _Box:
    def __init__(self, actor: NumpyActor) -> None:
        self.actor = actor

    def read_from_rt(self) -> NumpyActor:
        return self.actor


def _draws(client: LowLevelClient, scale: float) -> np.ndarray:
    """``scale * z`` of every training transition of two 2 s episodes, in the order sent."""
    actor = _actor()
    env = RealRotaryInvertedPendulumEnv(client, TaskConfig.from_params(episode_seconds=2.0))
    transitions: Outbox[Transition] = Outbox(100_000, holdback=2)
    cfg = LoopConfig.from_params(episodes=2, seed=11, train_noise_scale=scale, **LENIENT)
    loop = ControlLoop(env, cfg, _Box(actor), transitions, Outbox(100_000), Outbox(100))
    loop.run(threading.Event())
    assert loop.motor_confirmed_off
    draws = []
    while (t := transitions.pop_from_non_rt()) is not None:
        mean = actor.act(t.obs)  # the deterministic action, tanh(mu)
        if scale == 0.0:
            assert np.array_equal(t.action, mean), (t.step, t.action, mean)
        draws.append(float(np.arctanh(t.action[0]) - np.arctanh(mean[0])) / STD)
    return np.array(draws)


def _longest_halved_run(full: np.ndarray, half: np.ndarray) -> int:
    """The most consecutive ticks at which ``half`` is ``full`` halved, over small shifts.

    The loop's generator is seeded, so every run makes the same draws in the same order. A
    tick whose transition was not sent (dropped late, withdrawn at a trip, an episode cut by
    a serial error on a loaded machine) shifts the rest of one run against the other.
    """
    best = 0
    for shift in range(-40, 41):
        f = full[max(shift, 0) :]
        h = half[max(-shift, 0) :]
        n = min(len(f), len(h))
        run = 0
        for ok in np.abs(h[:n] - 0.5 * f[:n]) < 2e-3:
            run = run + 1 if ok else 0
            best = max(best, run)
    return best


@pytest.mark.slow
def test_training_actions_spread_by_the_noise_scale(tmp_path: Path) -> None:
    with EmulatorProcess(tmp_path / 'rig') as emu:
        client = LowLevelClient(str(emu.link))
        client.open()
        try:
            draws = {s: _draws(client, s) for s in (1.0, 0.5, 0.0)}
        finally:
            client.close()
    for scale, d in draws.items():
        assert len(d) >= 100, (scale, len(d))  # the PD mean keeps the arm off its limit
    # Without noise every training action was the mean action (checked in _draws).
    assert set(draws[0.0]) == {0.0}
    # With it, the same seed draws the same z at every tick, whatever the scale: tick for
    # tick the 0.5 run's draw is half the 1.0 run's (30 in a row cannot match by chance).
    assert _longest_halved_run(draws[1.0], draws[0.5]) >= 30
    # And they are exploration: standard-normal draws times the scale.
    for scale in (1.0, 0.5):
        spread = float(np.std(draws[scale]))
        assert 0.7 * scale < spread < 1.3 * scale, (scale, spread)


def test_a_noise_scale_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r'train_noise_scale must be in \[0, 1\], got 1.5'):
        LoopConfig.from_params(train_noise_scale=1.5)
    with pytest.raises(ValueError, match=r'train_noise_scale must be in \[0, 1\], got nan'):
        LoopConfig.from_params(train_noise_scale=float('nan'))
