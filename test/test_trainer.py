"""The learner's SAC side without ROS: a diverging update is undone, not published."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
from rip_control.transitions import Transition
from rip_learner.learner_settings import LearnerSettings
from rip_learner.sac import SacConfig, actor_tensors
from rip_learner.trainer import Trainer


def _settings(tmp_path: Path, fast: bool, **kw: object) -> LearnerSettings:
    params = dict(
        batch_size=16,
        buffer_size=1000,
        gradient_steps=1,
        learning_starts=16,
        max_chunk=8,
        fast_updates=fast,
        # The safeguards off: the subject is the update itself.
        critic_warmup_updates=0,
        prior_data='',
        smoothness=0.0,
        smoothness_reference='none',
        publish_every_steps=100,
        publish_every_s=1.0,
        nice=0,
        cpus=[],
        run_name=tmp_path.name,
        runs_dir=str(tmp_path.parent),
    )
    return LearnerSettings.from_params(params, **kw)


def _fill(tr: Trainer, n: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(n):
        tr.put(
            Transition(
                episode=0,
                step=i,
                # Inside the task's spaces: a checkpoint of them loads back.
                obs=rng.uniform(-1, 1, OBS_SIZE).astype(np.float32),
                action=rng.uniform(-1, 1, ACTION_SIZE).astype(np.float32),
                reward=float(rng.uniform(-0.25, 1)),
                next_obs=rng.uniform(-1, 1, OBS_SIZE).astype(np.float32),
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
    adam = [s['exp_avg'].clone() for s in tr.model.critic.optimizer.state.values()]
    moved = tr.actor_updates
    tr.model.replay_buffer.rewards[:64] = np.inf  # every target becomes non-finite
    for round_ in (1, 2):  # restored twice from the one snapshot: it must not alias
        _fill(tr, 8)  # owed 8 more updates
        assert tr.train_due() == 8
        assert tr.diverged == round_ and 'training diverged' in lines[-1]
        after = tr.model.policy.state_dict()
        assert all(bool((after[k] == v).all()) for k, v in state.items())
        now = [s['exp_avg'] for s in tr.model.critic.optimizer.state.values()]
        assert all(bool((a == b).all()) for a, b in zip(now, adam, strict=True))
    assert tr.actor_updates == moved  # nothing new to publish
    # What would be published is the last finite actor.
    assert all(np.array_equal(v, good[k]) for k, v in actor_tensors(tr.model).items())


def test_critic_warmup_leaves_the_actor_alone_then_trains_it(tmp_path: Path) -> None:
    tr = Trainer(_settings(tmp_path, True, critic_warmup_updates=8), print)
    _fill(tr, 64)
    actor0 = actor_tensors(tr.model)
    alpha0 = float(tr.model.log_ent_coef.detach())
    critic0 = [p.detach().clone() for p in tr.model.critic.parameters()]
    assert tr.train_due() == 8  # the warm-up, in one call of its own
    assert float(tr.model.log_ent_coef.detach()) == alpha0 and tr.actor_updates == 0
    assert all(np.array_equal(v, actor0[k]) for k, v in actor_tensors(tr.model).items())
    moved = zip(tr.model.critic.parameters(), critic0, strict=True)
    assert any(not bool((p == q).all()) for p, q in moved)
    _fill(tr, 8)
    tr.train_due()
    assert any(not np.array_equal(v, actor0[k]) for k, v in actor_tensors(tr.model).items())


def test_prior_data_fills_its_share_of_every_batch(tmp_path: Path) -> None:
    from rip_control import buffer_file
    from rip_control.buffer_file import BufferMeta

    n = 100
    prior = {
        # Markers no transition of _fill has (inside the task's spaces and rewards).
        'observations': np.full((n, OBS_SIZE), 0.7, np.float32),
        'next_observations': np.full((n, OBS_SIZE), 0.7, np.float32),
        'actions': np.zeros((n, ACTION_SIZE), np.float32),
        'rewards': np.full(n, 0.9, np.float32),
        'dones': np.ones(n, np.float32),
        'timeouts': np.ones(n, np.float32),  # truncated, not terminal: bootstraps
    }
    path = tmp_path / 'prior.safetensors'
    buffer_file.save(path, prior, BufferMeta(50.0, OBS_SIZE, ACTION_SIZE, n))
    lines: list[str] = []
    tr = Trainer(_settings(tmp_path, True, prior_data=str(path), prior_ratio=0.25), lines.append)
    tr.load_prior_data()
    assert tr.prior_count == n and 'prior data: 100 transitions' in lines[-1]
    _fill(tr, 64)
    assert tr._fast is not None
    obs, _, _, done, rew = tr._fast._batches(3, 16)
    from_prior = (rew[..., 0] == np.float32(0.9)).sum(dim=1).tolist()
    assert from_prior == [4, 4, 4]  # 25 % of 16, every batch
    assert bool((obs[:, 12:] == np.float32(0.7)).all())
    assert bool((done[:, 12:] == 0.0).all())  # a timeout is not a terminal state


def test_prior_data_from_another_rate_is_refused_by_name(tmp_path: Path) -> None:
    from rip_control import buffer_file
    from rip_control.buffer_file import BufferMeta
    from rip_learner.learner_settings import LearnerConfigError

    z = np.zeros
    arrays = {
        'observations': z((4, OBS_SIZE), np.float32),
        'next_observations': z((4, OBS_SIZE), np.float32),
        'actions': z((4, ACTION_SIZE), np.float32),
        'rewards': z(4, np.float32),
        'dones': z(4, np.float32),
        'timeouts': z(4, np.float32),
    }
    path = tmp_path / 'prior100.safetensors'
    buffer_file.save(path, arrays, BufferMeta(100.0, OBS_SIZE, ACTION_SIZE, 4))
    tr = Trainer(_settings(tmp_path, True, prior_data=str(path)), print)
    with pytest.raises(LearnerConfigError, match='prior_data refused.*100'):
        tr.load_prior_data()


def _jumps(tr: Trainer) -> Any:
    """|a(s) - a(s')| of the mean actions on the first 64 stored transitions."""
    import torch

    rb = tr.model.replay_buffer
    obs = torch.as_tensor(rb.observations[:64, 0])
    nxt = torch.as_tensor(rb.next_observations[:64, 0])
    with torch.no_grad():
        a = torch.tanh(tr.model.actor.get_action_dist_params(obs)[0])
        b = torch.tanh(tr.model.actor.get_action_dist_params(nxt)[0])
    return (a - b).abs()


def test_the_smoothness_term_makes_consecutive_actions_closer(tmp_path: Path) -> None:
    def chatter(smoothness: float) -> float:
        tr = Trainer(_settings(tmp_path, True, smoothness=smoothness), print)
        _fill(tr, 64)
        for _ in range(8):
            _fill(tr, 8)
            tr.train_due()
        return float(_jumps(tr).mean())

    assert chatter(100.0) < 0.5 * chatter(0.0)


def test_a_smoothness_reference_lets_the_initial_chatter_be_but_stops_it_growing(
    tmp_path: Path,
) -> None:
    import torch

    def train(smoothness: float, reference: str) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        tr = Trainer(
            _settings(tmp_path, True, smoothness=smoothness, smoothness_reference=reference),
            print,
        )
        _fill(tr, 64)
        tr.freeze_smoothness_reference()
        before = _jumps(tr)
        for _ in range(30):
            _fill(tr, 8)
            tr.train_due()
        return before, _jumps(tr)

    start, free = train(0.0, 'none')
    _, caps = train(100.0, 'none')
    same_start, held = train(100.0, 'initial')
    assert torch.equal(start, same_start)
    # Unpenalised, the critic's pull makes some jumps grow; CAPS's full term drives them far
    # below where they started; against the initial actor only their growth is held back.
    grown_free = (free - start).clamp(min=0).mean()
    grown_held = (held - start).clamp(min=0).mean()
    assert grown_free > 0.005, grown_free
    assert grown_held < 0.2 * grown_free, (grown_held, grown_free)
    assert caps.mean() < 0.5 * start.mean()
    assert held.mean() > 2 * caps.mean(), (held.mean(), caps.mean())


def test_device_auto_takes_the_cpu_here_and_cuda_without_a_gpu_is_refused() -> None:
    import torch

    from rip_learner.sac import build_sac

    model = build_sac(SacConfig.from_params(device='auto'))
    assert model.device.type == ('cuda' if torch.cuda.is_available() else 'cpu')
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match='device:=cuda but torch sees no CUDA device'):
            build_sac(SacConfig.from_params(device='cuda'))
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda, got 'gpu'"):
        SacConfig.from_params(device='gpu')


def test_prior_data_loaded_after_the_reference_keeps_it(tmp_path: Path) -> None:
    from rip_control import buffer_file
    from rip_control.buffer_file import BufferMeta

    arrays = {
        'observations': np.zeros((4, OBS_SIZE), np.float32),
        'next_observations': np.zeros((4, OBS_SIZE), np.float32),
        'actions': np.zeros((4, ACTION_SIZE), np.float32),
        'rewards': np.zeros(4, np.float32),
        'dones': np.zeros(4, np.float32),
        'timeouts': np.zeros(4, np.float32),
    }
    path = tmp_path / 'prior.safetensors'
    buffer_file.save(path, arrays, BufferMeta(50.0, OBS_SIZE, ACTION_SIZE, 4))
    settings = _settings(
        tmp_path, True, smoothness=1.0, smoothness_reference='initial', prior_data=str(path)
    )
    tr = Trainer(settings, print)
    tr.freeze_smoothness_reference()  # the node loads the prior data first; either order works
    assert tr._fast is not None and tr._fast.smoothness_reference is not None
    tr.load_prior_data()
    assert tr._fast.prior is not None and tr._fast.smoothness_reference is not None


def _buffer(n: int) -> dict:
    z = np.zeros
    return {
        'observations': z((n, OBS_SIZE), np.float32),
        'next_observations': z((n, OBS_SIZE), np.float32),
        'actions': z((n, ACTION_SIZE), np.float32),
        'rewards': z(n, np.float32),
        'dones': z(n, np.float32),
        'timeouts': z(n, np.float32),
    }


def test_a_buffer_larger_than_buffer_size_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    from rip_control import buffer_file
    from rip_control.buffer_file import BufferMeta
    from rip_learner.learner_settings import LearnerConfigError

    path = tmp_path / 'replay_buffer.safetensors'
    buffer_file.save(path, _buffer(1001), BufferMeta(50.0, OBS_SIZE, ACTION_SIZE, 1001))
    before = path.read_bytes()
    tr = Trainer(_settings(tmp_path, True, resume_buffer=str(path)), print)  # buffer_size 1000
    with pytest.raises(LearnerConfigError, match='holds 1001 transitions, more than buffer_size'):
        tr.resume()
    assert tr.model.replay_buffer.pos == 0 and path.read_bytes() == before


def test_resume_refuses_a_checkpoint_of_another_save_and_non_finite_networks(
    tmp_path: Path,
) -> None:
    from safetensors.numpy import load, save

    from rip_control import buffer_file
    from rip_control.policy import read_metadata
    from rip_learner.learner_settings import LearnerConfigError

    first = Trainer(_settings(tmp_path, True), print)
    _fill(first, 40)
    first.checkpoint()
    buffer, ckpt = tmp_path / 'replay_buffer.safetensors', tmp_path / 'sac_checkpoint.safetensors'
    generation = read_metadata(ckpt.read_bytes())['generation']
    assert read_metadata((tmp_path / 'policy_latest.safetensors').read_bytes())['generation'] == (
        generation
    )
    lines: list[str] = []
    consistent = Trainer(_settings(tmp_path, True, resume_buffer=str(buffer)), lines.append)
    consistent.resume()
    assert 'and the SAC networks from' in lines[-1]
    saved = ckpt.read_bytes()

    # The next save stopped after its buffer: the checkpoint is the save before, and the
    # buffer says so: taken, and said.
    arrays, meta = buffer_file.load(buffer, rate_hz=50.0, obs_size=None, action_size=None)
    newer = buffer_file.BufferMeta(
        50.0, OBS_SIZE, ACTION_SIZE, meta.count, 9, 'next-save', generation
    )
    buffer_file.save(buffer, arrays, newer)
    lines.clear()
    Trainer(_settings(tmp_path, True, resume_buffer=str(buffer)), lines.append).resume()
    assert any('the networks are one save older than the buffer' in x for x in lines), lines
    assert 'and the SAC networks from' in lines[-1]
    # A checkpoint of neither that save nor the one before: not a set one learner wrote.
    stranger = buffer_file.BufferMeta(50.0, OBS_SIZE, ACTION_SIZE, meta.count, 9, 'next', 'x')
    buffer_file.save(buffer, arrays, stranger)
    mixed = Trainer(_settings(tmp_path, True, resume_buffer=str(buffer)), print)
    with pytest.raises(LearnerConfigError, match=f'from save {generation} but .* from save next'):
        mixed.resume()

    # A consistent set whose networks hold a NaN.
    buffer_file.save(buffer, arrays, meta)
    tensors = load(saved)
    name = sorted(tensors)[0]
    tensors[name] = np.full_like(tensors[name], np.nan)
    ckpt.write_bytes(save(tensors, metadata=read_metadata(saved)))
    broken = Trainer(_settings(tmp_path, True, resume_buffer=str(buffer)), print)
    with pytest.raises(LearnerConfigError, match=rf"non-finite values in \['{name}'\]"):
        broken.resume()


def test_a_full_inbox_drops_and_counts_the_newest_and_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rip_learner import trainer

    monkeypatch.setattr(trainer, 'INBOX_MAX', 10)
    tr = Trainer(_settings(tmp_path, True), print)
    t = Transition(
        0,
        0,
        np.zeros(OBS_SIZE, np.float32),
        np.zeros(ACTION_SIZE, np.float32),
        0.0,
        np.zeros(OBS_SIZE, np.float32),
        False,
        False,
        0.02,
        0,
    )
    taken = [tr.put(t) for _ in range(15)]
    assert taken == [True] * 10 + [False] * 5 and tr.inbox_dropped == 5
    assert tr.drain() == 10 and tr.put(t)  # drained: room again


def test_the_buffer_says_when_it_starts_replacing_its_oldest_and_counts_them(
    tmp_path: Path,
) -> None:
    lines: list[str] = []
    tr = Trainer(_settings(tmp_path, True), lines.append)  # buffer_size 1000
    _fill(tr, 990)
    assert tr.evicted == 0 and not any('replay buffer full' in x for x in lines)
    _fill(tr, 15)
    assert tr.evicted == 5 and tr.buffer_size == 1000
    assert sum('replay buffer full (1000 transitions' in x for x in lines) == 1
    _fill(tr, 8)
    assert tr.evicted == 13 and sum('replay buffer full' in x for x in lines) == 1  # once


def test_a_bag_larger_than_the_buffer_is_imported_newest_first_and_said(tmp_path: Path) -> None:
    from rip_control.bags import BagWriter, serialize
    from rip_control.transitions import field_layout

    bag = tmp_path / 'bag'
    w = BagWriter(bag, 50.0, OBS_SIZE, ACTION_SIZE)
    for i in range(1500):
        t = Transition(0, i, np.zeros(OBS_SIZE, np.float32), np.zeros(ACTION_SIZE, np.float32),
                       0.5, np.zeros(OBS_SIZE, np.float32), False, False, 0.02, 1)  # fmt: skip
        w.write(serialize(list(field_layout(OBS_SIZE, ACTION_SIZE)), t.pack()), 1_000 + i)
    w.close()
    said: list[str] = []
    tr = Trainer(_settings(tmp_path / 'run', False, resume_bags=(str(bag),)), said.append)
    tr.import_bags()
    assert tr.bag_imported == 1000 and tr.bag_not_kept == 500 and tr.buffer_size == 1000
    assert tr.evicted == 0  # nothing was added only to be overwritten
    # the newest 1000, oldest first in slot order (live data then replaces the oldest first)
    steps = tr.provenance.arrays['steps']
    assert steps.tolist() == list(range(500, 1500))
    assert any('the 500 oldest accepted ones not kept (buffer_size 1000)' in s for s in said), said
