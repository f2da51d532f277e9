"""The fast SAC update is SB3's ``train()``: same state and seeds in, same networks out."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip('torch')

from rip_learner.fast_sac import FastSacUpdate  # noqa: E402
from rip_learner.sac import SacConfig, build_sac, prefill_random  # noqa: E402


def _twin_models(ent_coef: object = 'auto') -> tuple[object, object]:
    cfg = SacConfig.from_params(hidden_sizes=(64, 64), batch_size=64, buffer_size=5000, seed=3)
    kwargs = {} if ent_coef == 'auto' else {'ent_coef': ent_coef}
    a, b = build_sac(cfg, **kwargs), build_sac(cfg, **kwargs)
    for m in (a, b):
        prefill_random(m, 1500, seed=11)
        m.replay_buffer.timeouts[::7] = 1.0  # time-limit ends: not terminal for the target
        m.replay_buffer.dones[::5] = 1.0
    b.policy.load_state_dict(a.policy.state_dict())
    if a.log_ent_coef is not None:
        b.log_ent_coef.data.copy_(a.log_ent_coef.data)
    return a, b


def _params(model: object) -> dict[str, np.ndarray]:
    out = {k: v.detach().numpy().copy() for k, v in model.policy.state_dict().items()}
    if model.log_ent_coef is not None:
        out['log_ent_coef'] = model.log_ent_coef.detach().numpy().copy()
    return out


def _train(model: object, fast: bool, seed: int, calls: int = 3, steps: int = 4) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    update = FastSacUpdate(model) if fast else None
    for _ in range(calls):
        if update is not None:
            update.train(steps, 64)
        else:
            model.train(steps, 64)


@pytest.mark.parametrize('ent_coef', ['auto', 0.05])
def test_the_fast_update_ends_where_sb3_train_ends(ent_coef):
    sb3, fast = _twin_models(ent_coef)
    start = _params(sb3)
    _train(sb3, fast=False, seed=7)
    _train(fast, fast=True, seed=7)
    want, got = _params(sb3), _params(fast)
    moved = [k for k in want if not np.allclose(want[k], start[k], atol=1e-6)]
    assert 'critic.qf0.0.weight' in moved and 'actor.mu.weight' in moved  # it trained
    if ent_coef == 'auto':
        assert 'log_ent_coef' in moved
    for k in want:  # fused Adam and a direct log-probability round differently, no more
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=2e-6, err_msg=k)
    assert fast._n_updates == sb3._n_updates == 12


def test_the_comparison_would_see_a_different_update():
    # The same check, but the fast side draws other batches: the networks then differ, so
    # the agreement above is not a tolerance too loose to see anything.
    sb3, fast = _twin_models()
    _train(sb3, fast=False, seed=7)
    _train(fast, fast=True, seed=8)
    want, got = _params(sb3), _params(fast)
    assert not np.allclose(got['critic.qf0.0.weight'], want['critic.qf0.0.weight'], atol=2e-6)


def test_a_model_the_fast_update_cannot_run_is_refused_by_name():
    cfg = SacConfig.from_params(hidden_sizes=(8,), batch_size=8, buffer_size=100)
    with pytest.raises(ValueError, match='gSDE'):
        FastSacUpdate(build_sac(cfg, use_sde=True))
