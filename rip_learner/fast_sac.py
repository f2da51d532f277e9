"""SB3 SAC's ``train()`` update, step for step, without its per-step overhead.

On two small CPUs the learner's budget is K = 4 updates per transition at 50 Hz: 200
updates/s. SB3's ``SAC.train()`` spends most of an update of a [64, 64] network on Python:
a ``ReplayBuffer.sample()`` per step, distribution objects per action sampled, four
``.item()`` reads, one Adam kernel per parameter tensor, a Polyak update per tensor pair.
:class:`FastSacUpdate` runs the same mathematics on the same SB3 objects (the policy's
actor, critics and target critics, its optimizers, ``log_ent_coef``, the replay buffer), so
checkpoints, ``predict()`` and everything else of SB3 keep working:

* the batches of a call are drawn with one index draw each (the same ``np.random`` stream
  and order as SB3's ``sample()``) and gathered into tensors once per call;
* the squashed Gaussian's sample and log-probability are computed directly from the actor's
  ``get_action_dist_params()`` (mean, clamped log std), drawing the noise exactly as
  ``Normal.rsample()`` does, so the torch random stream is the one SB3 would consume;
* the Adam optimizers run their multi-tensor (``foreach``) kernels, or the fused ones where
  the torch build offers them for the CPU;
* the target critics move with one ``torch._foreach_lerp_``;
* losses are kept as tensors and read once per call, for the same logger records.

``test/test_fast_sac.py`` checks that it ends where SB3's ``train()`` ends from the same
state and seeds; ``python -m rip_bench learner-throughput`` measures both.

Three fine-tuning safeguards live here too, each off unless asked for (and then, by
construction, no longer SB3's ``train()``):

* ``train(..., update_actor=False)``: critic-only updates (the fine-tune's first ones, so the
  actor is not steered by a critic still fitting the rig);
* ``prior``: a replay buffer's arrays (the simulation's experience) of which ``prior_ratio``
  of every batch is drawn (RLPD's symmetric sampling at 0.5);
* ``smoothness``: CAPS's temporal term, ``smoothness * |a(s) - a(s')|^2`` on the mean
  actions of consecutive observations, added to the actor loss; with a
  ``smoothness_reference`` (the fine-tune's starting policy) only the part of it beyond the
  reference's own ``|a(s) - a(s')|^2`` on the same states, so chatter may not grow but the
  policy is not pushed smoother than it started (CAPS's full term, at the weight that keeps
  chatter down, took a shifted rig's policy from its swing-up: ``bench sim-finetune``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQUASH_EPS = 1e-6  # SB3's SquashedDiagGaussianDistribution epsilon


def _adam_kernels(optimizer: Any, fused: bool) -> str:
    """Switch an Adam's parameter groups to fused kernels (if asked and built) or foreach ones."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        use_fused = fused and 'cpu' in _get_fused_kernels_supported_devices()
    except ImportError:  # an older torch: no fused CPU kernels
        use_fused = False
    for group in optimizer.param_groups:
        group['fused'] = True if use_fused else None
        group['foreach'] = None if use_fused else True
    return 'fused' if use_fused else 'foreach'


class FastSacUpdate:
    """``train(gradient_steps, batch_size)`` for an SB3 SAC (:func:`rip_learner.sac.build_sac`).

    :param model: the SB3 SAC (MLP policy, one env, no gSDE).
    :param fused: use fused Adam kernels where available (else multi-tensor ones).
    :param prior: arrays of a buffer file (:mod:`rip_learner.buffer_store`) to mix in.
    :param prior_ratio: share of each batch drawn from ``prior`` (0 with no prior).
    :param smoothness: weight of the temporal action-smoothness term (0: off).
    :param smoothness_reference: an actor (SB3's) whose own chatter the term allows: only
        what exceeds its ``|a(s) - a(s')|^2`` on the same pair of states is penalised. None:
        all of it is (CAPS). A frozen copy is kept (:meth:`set_smoothness_reference`).
    """

    def __init__(
        self,
        model: Any,
        fused: bool = True,
        prior: dict[str, np.ndarray] | None = None,
        prior_ratio: float = 0.0,
        smoothness: float = 0.0,
        smoothness_reference: Any = None,
    ) -> None:
        if not 0.0 <= prior_ratio < 1.0:
            raise ValueError(f'prior_ratio must be in [0, 1), got {prior_ratio}')
        if smoothness < 0:
            raise ValueError(f'smoothness must be >= 0, got {smoothness}')
        self.prior = prior if prior is not None and prior_ratio > 0 else None
        self.prior_ratio = prior_ratio if self.prior is not None else 0.0
        self.smoothness = smoothness
        self.smoothness_reference: Any = None
        if smoothness_reference is not None:
            self.set_smoothness_reference(smoothness_reference)
        if model.use_sde:
            raise ValueError('gSDE is not supported by the fast update (use SB3 train())')
        if model.replay_buffer.n_envs != 1 or model.replay_buffer.optimize_memory_usage:
            raise ValueError('the fast update expects one env and next_observations stored')
        self.model = model
        self.device = model.device
        self._critic_params = list(model.critic.parameters())
        self._target_params = list(model.critic_target.parameters())
        if [p.shape for p in self._critic_params] != [p.shape for p in self._target_params]:
            raise ValueError('critic and target critic parameters do not pair up')
        self.kernels = {}
        for name, opt in (
            ('actor', model.actor.optimizer),
            ('critic', model.critic.optimizer),
            ('ent_coef', model.ent_coef_optimizer),
        ):
            if opt is not None:
                self.kernels[name] = _adam_kernels(opt, fused)

    def _freeze_critic(self, frozen: bool) -> None:
        for p in self._critic_params:
            p.requires_grad_(not frozen)

    def set_smoothness_reference(self, actor: Any) -> None:
        """Penalise only the chatter beyond ``actor``'s (a frozen copy of it, taken now)."""
        import copy

        ref = copy.deepcopy(actor)
        ref.optimizer = None  # never stepped; no optimizer state carried along
        ref.requires_grad_(False)
        ref.eval()
        self.smoothness_reference = ref

    def _batches(self, n: int, batch_size: int) -> tuple[Any, ...]:
        """``n`` batches, drawn as SB3's ``sample()`` draws them, as (n, batch, ...) tensors."""
        import torch

        rb = self.model.replay_buffer
        upper = rb.buffer_size if rb.full else rb.pos
        n_prior = round(batch_size * self.prior_ratio) if self.prior is not None else 0
        n_prior = min(n_prior, batch_size - 1)  # at least one of the rig's own
        n_own = batch_size - n_prior
        inds = np.empty((n, n_own), dtype=np.int64)
        for i in range(n):  # SB3's draws, in SB3's order: batch indices, then env indices
            inds[i] = np.random.randint(0, upper, size=n_own)
            np.random.randint(0, 1, size=n_own)
        obs = rb.observations[inds, 0]
        next_obs = rb.next_observations[inds, 0]
        actions = rb.actions[inds, 0]
        dones = rb.dones[inds, 0] * (1.0 - rb.timeouts[inds, 0])
        rewards = rb.rewards[inds, 0]
        if n_prior:
            p = self.prior
            assert p is not None
            pi = np.random.randint(0, len(p['rewards']), size=(n, n_prior))
            obs = np.concatenate([obs, p['observations'][pi]], axis=1)
            next_obs = np.concatenate([next_obs, p['next_observations'][pi]], axis=1)
            actions = np.concatenate([actions, p['actions'][pi]], axis=1)
            dones = np.concatenate([dones, p['dones'][pi] * (1.0 - p['timeouts'][pi])], axis=1)
            rewards = np.concatenate([rewards, p['rewards'][pi]], axis=1)

        def as_t(a: np.ndarray) -> Any:
            return torch.from_numpy(a).to(self.device)

        return (
            as_t(np.ascontiguousarray(obs, dtype=np.float32)),
            as_t(np.ascontiguousarray(actions, dtype=np.float32)),
            as_t(np.ascontiguousarray(next_obs, dtype=np.float32)),
            as_t(np.ascontiguousarray(dones[..., None], dtype=np.float32)),
            as_t(np.ascontiguousarray(rewards[..., None], dtype=np.float32)),
        )

    def _sample_pi(self, obs: Any) -> tuple[Any, Any, Any]:
        """A squashed Gaussian action, its log-probability, and the Gaussian's mean.

        As SB3's ``action_log_prob``; the mean is before the squashing.
        """
        import torch

        mean, log_std, _ = self.model.actor.get_action_dist_params(obs)
        eps = torch.empty_like(mean).normal_()  # as Normal.rsample() draws it
        actions = torch.tanh(mean + log_std.exp() * eps)
        log_prob = (-0.5 * eps.square() - log_std - _LOG_SQRT_2PI).sum(dim=1, keepdim=True)
        log_prob = log_prob - torch.log(1.0 - actions.square() + _SQUASH_EPS).sum(
            dim=1, keepdim=True
        )
        return actions, log_prob, mean

    def train(self, gradient_steps: int, batch_size: int, update_actor: bool = True) -> None:
        """What ``model.train(gradient_steps, batch_size)`` does, faster.

        One function of ~100 lines on purpose: it is SB3's ``train()`` step for step (critic
        target, critic loss, actor and entropy losses, Polyak update), read side by side with
        it (``test_fast_sac`` compares the two), and it runs 200 times a second on two cores,
        where each extra call and tensor hand-over shows in the learner's throughput.

        :param update_actor: False updates the critics (and their targets) only: the actor
            and the entropy coefficient stay as they are.
        """
        import torch
        from torch.nn.functional import mse_loss

        m = self.model
        m.policy.set_training_mode(True)
        optimizers = [m.actor.optimizer, m.critic.optimizer]
        if m.ent_coef_optimizer is not None:
            optimizers.append(m.ent_coef_optimizer)
        m._update_learning_rate(optimizers)
        obs_b, act_b, next_b, done_b, rew_b = self._batches(gradient_steps, batch_size)
        ref_jumps = None
        if update_actor and self.smoothness and self.smoothness_reference is not None:
            # The frozen reference's jumps on every batch of the call, in one forward pass.
            with torch.no_grad():
                both = torch.cat([obs_b, next_b], dim=1)
                ref, _, _ = self.smoothness_reference.get_action_dist_params(
                    both.reshape(-1, both.shape[-1])
                )
                ref = torch.tanh(ref).reshape(gradient_steps, 2 * batch_size, -1)
                ref_jumps = (ref[:, :batch_size] - ref[:, batch_size:]).square()
        ent_losses, ent_coefs, actor_losses, critic_losses = [], [], [], []
        for step in range(gradient_steps):
            obs, actions, next_obs = obs_b[step], act_b[step], next_b[step]
            smooth = None
            if update_actor and self.smoothness:
                # One actor pass over both observations (grad kept): the first half is the
                # policy loss's sample, the second the target's (detached), and the two means
                # give CAPS's term. Without the term, SB3's order and random draws exactly.
                n = obs.shape[0]
                acts, logps, mean = self._sample_pi(torch.cat([obs, next_obs]))
                actions_pi, log_prob = acts[:n], logps[:n]
                next_actions, next_log_prob = acts[n:].detach(), logps[n:].detach()
                jump = (torch.tanh(mean[:n]) - torch.tanh(mean[n:])).square()
                if ref_jumps is not None:
                    # Only the chatter beyond the reference's on the same pair of states.
                    jump = torch.relu(jump - ref_jumps[step])
                smooth = jump.mean()
            else:
                actions_pi, log_prob, _ = self._sample_pi(obs)
            if update_actor and m.ent_coef_optimizer is not None and m.log_ent_coef is not None:
                ent_coef = torch.exp(m.log_ent_coef.detach())
                ent_loss = -(m.log_ent_coef * (log_prob + m.target_entropy).detach()).mean()
                ent_losses.append(ent_loss.detach())
                m.ent_coef_optimizer.zero_grad()
                ent_loss.backward()
                m.ent_coef_optimizer.step()
            elif m.log_ent_coef is not None:
                ent_coef = torch.exp(m.log_ent_coef.detach())
            else:
                ent_coef = m.ent_coef_tensor
            ent_coefs.append(ent_coef.detach().reshape(()))
            with torch.no_grad():
                if smooth is None:
                    next_actions, next_log_prob, _ = self._sample_pi(next_obs)
                next_q = torch.cat(m.critic_target(next_obs, next_actions), dim=1)
                next_q = next_q.min(dim=1, keepdim=True).values - ent_coef * next_log_prob
                target_q = rew_b[step] + (1.0 - done_b[step]) * m.gamma * next_q
            current_q = m.critic(obs, actions)
            critic_loss = 0.5 * torch.stack([mse_loss(q, target_q) for q in current_q]).sum()
            critic_losses.append(critic_loss.detach())
            m.critic.optimizer.zero_grad()
            critic_loss.backward()
            m.critic.optimizer.step()
            if update_actor:
                # The actor loss needs the critics' gradient with respect to the action only:
                # SB3 also fills the critics' weight gradients here, which the next critic
                # step's zero_grad() throws away unread. Frozen, they are not computed.
                self._freeze_critic(True)
                try:
                    q_pi = torch.cat(m.critic(obs, actions_pi), dim=1)
                    q_min = q_pi.min(dim=1, keepdim=True).values
                    actor_loss = (ent_coef * log_prob - q_min).mean()
                    if smooth is not None:
                        actor_loss = actor_loss + self.smoothness * smooth
                    actor_losses.append(actor_loss.detach())
                    m.actor.optimizer.zero_grad()
                    actor_loss.backward()
                finally:
                    self._freeze_critic(False)
                m.actor.optimizer.step()
            if step % m.target_update_interval == 0:
                with torch.no_grad():
                    torch._foreach_lerp_(self._target_params, self._critic_params, m.tau)
                    for stat, target in zip(
                        m.batch_norm_stats, m.batch_norm_stats_target, strict=True
                    ):
                        target.copy_(stat)
        m._n_updates += gradient_steps
        m.logger.record('train/n_updates', m._n_updates, exclude='tensorboard')
        m.logger.record('train/ent_coef', torch.stack(ent_coefs).mean().item())
        if actor_losses:
            m.logger.record('train/actor_loss', torch.stack(actor_losses).mean().item())
        m.logger.record('train/critic_loss', torch.stack(critic_losses).mean().item())
        if ent_losses:
            m.logger.record('train/ent_coef_loss', torch.stack(ent_losses).mean().item())
