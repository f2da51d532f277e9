"""The learner's SAC side without ROS: a diverging update is undone, not published."""

from pathlib import Path

import numpy as np
import pytest

from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
from rip_control.transitions import Transition
from rip_learner.learner_settings import LearnerSettings
from rip_learner.sac import SacConfig, actor_tensors
from rip_learner.trainer import Trainer


def _settings(tmp_path: Path, fast: bool) -> LearnerSettings:
    return LearnerSettings(
        rate_hz=50.0,
        sac=SacConfig(batch_size=16, buffer_size=1000),
        gradient_steps=1,
        learning_starts=16,
        max_chunk=8,
        fast_updates=fast,
        dt_tolerance_s=0.005,
        resume_buffer='',
        resume_bags=(),
        policy='',
        run_dir=tmp_path,
        publish_every_steps=100,
        publish_every_s=1.0,
        checkpoint_every_s=30.0,
        nice=0,
        cpus=(),
    )


def _fill(tr: Trainer, n: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(n):
        tr.put(
            Transition(
                episode=0,
                step=i,
                obs=rng.standard_normal(OBS_SIZE).astype(np.float32),
                action=rng.uniform(-1, 1, ACTION_SIZE).astype(np.float32),
                reward=float(rng.standard_normal()),
                next_obs=rng.standard_normal(OBS_SIZE).astype(np.float32),
                terminated=False,
                truncated=False,
                dt_s=0.02,
                policy_version=0,
            )
        )
    tr.drain()


@pytest.mark.parametrize('fast', [False, True])
def test_a_diverging_update_is_undone_and_never_published(tmp_path: Path, fast: bool) -> None:
    lines: list[str] = []
    tr = Trainer(_settings(tmp_path, fast), lines.append)
    _fill(tr, 64)
    assert tr.train_due() == 8 and tr.diverged == 0
    good = actor_tensors(tr.model)
    state = {k: v.clone() for k, v in tr.model.policy.state_dict().items()}
    tr.model.replay_buffer.rewards[:64] = np.inf  # every target becomes non-finite
    _fill(tr, 8)  # owed 8 more updates
    assert tr.train_due() == 8
    assert tr.diverged == 1 and 'training diverged' in lines[-1]
    after = tr.model.policy.state_dict()
    assert all(bool((after[k] == v).all()) for k, v in state.items())
    # What would be published is the last finite actor.
    assert all(np.array_equal(v, good[k]) for k, v in actor_tensors(tr.model).items())
