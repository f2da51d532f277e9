"""Exploration in training episodes: ``train_noise_scale`` narrows the sampled actions.

The control loop on the emulator through a real pty (no ROS). The actor's mean action is 0
and its log-std a constant, so every training action is ``tanh(scale * std * z)`` with z
standard normal, whatever the state: the spread of ``atanh(action) / std`` is the scale.
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

pytestmark = pytest.mark.slow

STD = 0.3
LENIENT = {'timing_violation_threshold_s': 0.05, 'max_strikes': 10}  # pacing is not the subject


def _actor() -> NumpyActor:
    rnd = random_actor(OBS_SIZE, ACTION_SIZE, (8,), 50.0, seed=3, version=1)
    tensors = dict(rnd.tensors)
    for name in ('mu.weight', 'mu.bias', 'log_std.weight'):
        tensors[name] = np.zeros_like(tensors[name])
    tensors['log_std.bias'] = np.full_like(tensors['log_std.bias'], np.log(STD))
    return NumpyActor(rnd.meta, tensors)


class _Box:
    def __init__(self, actor: NumpyActor) -> None:
        self.actor = actor

    def read_from_rt(self) -> NumpyActor:
        return self.actor


def _training_actions(client: LowLevelClient, scale: float) -> np.ndarray:
    """The actions of three 2 s training episodes, as the transitions carry them."""
    env = RealRotaryInvertedPendulumEnv(client, TaskConfig(rate_hz=50.0, episode_seconds=2.0))
    transitions: Outbox[Transition] = Outbox(100_000, holdback=2)
    cfg = LoopConfig(episodes=3, seed=11, train_noise_scale=scale, **LENIENT)
    loop = ControlLoop(env, cfg, _Box(_actor()), transitions, Outbox(100_000), Outbox(100))
    loop.run(threading.Event())
    assert loop.motor_confirmed_off
    got = []
    while (t := transitions.pop_from_non_rt()) is not None:
        got.append(t.action)
    return np.concatenate(got)


def test_training_actions_spread_by_the_noise_scale(tmp_path: Path) -> None:
    with EmulatorProcess(tmp_path / 'rig') as emu:
        client = LowLevelClient(str(emu.link))
        client.open()
        try:
            spread = {s: _training_actions(client, s) for s in (1.0, 0.5, 0.0)}
        finally:
            client.close()
    for scale, actions in spread.items():
        assert len(actions) >= 100, (scale, len(actions))
    # Without noise every training action is the mean action, 0.
    assert np.all(spread[0.0] == 0.0)
    # With it, the spread of the pre-squash noise is scale * std (250-300 samples: a
    # standard deviation's sampling error is about 4 %; the bounds are 20 %).
    for scale in (1.0, 0.5):
        z = np.arctanh(spread[scale]) / STD
        assert 0.8 * scale < float(np.std(z)) < 1.2 * scale, (scale, float(np.std(z)))


def test_a_noise_scale_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r'train_noise_scale must be in \[0, 1\], got 1.5'):
        LoopConfig(train_noise_scale=1.5)
    with pytest.raises(ValueError, match=r'train_noise_scale must be in \[0, 1\], got nan'):
        LoopConfig(train_noise_scale=float('nan'))
