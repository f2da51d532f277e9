"""The learner's SAC side, without ROS: the replay buffer, its inputs, the updates, the files.

:class:`Trainer` owns an SB3 SAC model whose ``learn()`` is never called. Validated
transitions are queued from any thread (:meth:`Trainer.put`) and moved into the replay buffer
by the one training thread (:meth:`Trainer.drain`), which runs ``n`` SAC updates at a time
(SB3's ``model.train(n, batch)``, or :mod:`rip_learner.fast_sac` with
``fast_updates:=true``) so that gradient steps per stored transition approach K
(:meth:`Trainer.train_due`). Start-up
material (an initial policy, a resume buffer, recorded bags) is loaded with the same checks
live data gets; the run folder's files are written atomically (:meth:`Trainer.checkpoint`).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
import threading
import time
from typing import Any
import uuid

import numpy as np

from rip_control import buffer_file, run_files
from rip_control.bags import BagRejected, read_transitions
from rip_control.buffer_file import BufferMeta, BufferRejected
from rip_control.files import atomic_write_bytes
from rip_control.policy import PolicyRejected, encode_actor, load_actor_file, read_metadata
from rip_control.rig.env import ACTION_SIZE, obs_size
from rip_control.transitions import Transition
from rip_learner import buffer_store
from rip_learner.buffer_store import ProvenanceLog
from rip_learner.fast_sac import FastSacUpdate
from rip_learner.learner_settings import LearnerConfigError, LearnerSettings
from rip_learner.sac import (
    actor_meta,
    actor_tensors,
    build_sac,
    encode_checkpoint,
    load_checkpoint,
    load_initial_networks,
    sac_state,
)


def copy_state(state: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of an optimizer's state dict (a snapshot is restored more than once)."""
    import copy

    return copy.deepcopy(state)


#: Received transitions waiting for the training thread to store them, at most (10 minutes
#: of 50 Hz from 10 rigs; each ~0.5 kB).
INBOX_MAX = 300_000


class Trainer:
    """SAC updates on a replay buffer this object alone writes.

    :param s: the learner's settings.
    :param say: where progress lines go (the node's logger ``info``).
    """

    def __init__(self, s: LearnerSettings, say: Callable[[str], object]) -> None:
        self.s = s
        self.obs_size = obs_size(s.sac.action_history)  # every file and message is checked for it
        self._say = say
        self.model = build_sac(s.sac)
        self._fast = FastSacUpdate(self.model, smoothness=s.smoothness) if s.fast_updates else None
        self.prior_count = 0  # transitions of prior_data mixed into the batches
        self.version = 0  # of the last actor published (or loaded)
        self._lock = threading.Lock()  # the replay buffer: add() and the whole train() call
        self._inbox: deque[Transition] = deque()
        self.inbox_dropped = 0  # transitions refused because the inbox was full
        self._last_generation = ''  # the last save whose three files were all written
        self.provenance = ProvenanceLog(self.model.replay_buffer.buffer_size)
        self.added = 0  # transitions stored, resumed ones included
        self.resumed = 0  # ... of them loaded from resume_buffer at start
        self.added_after_start = 0  # stored once learning_starts was reached: owed K updates
        self.bag_imported = 0
        self.bag_not_kept = 0  # accepted from bags, older than the buffer's buffer_size newest
        self.bag_rejected: Counter[str] = Counter()
        self.updates = 0
        self.actor_updates = 0  # ... of them, kept updates that moved the actor (publish on these)
        self.diverged = 0  # train() calls that made a network non-finite (undone)
        self._good: dict[str, Any] | None = None  # the last finite networks and optimizers
        self.train_calls = 0
        self.train_s = 0.0
        self.last_checkpoint = ''
        self.last_save_s = time.monotonic()

    # -- start-up material -----------------------------------------------------------------

    def load_initial_policy(self) -> None:
        """The ``policy`` parameter's actor (and its critics, when a checkpoint is beside it)."""
        s = self.s
        if not s.policy:
            return
        try:
            actor = load_actor_file(
                s.policy,
                rate_hz=s.rate_hz,
                obs_size=self.obs_size,
                action_size=ACTION_SIZE,
                action_history=s.sac.action_history,
            )
        except PolicyRejected as exc:
            raise LearnerConfigError(f'initial policy refused: {exc}') from exc
        if actor.meta.hidden_sizes != s.sac.hidden_sizes:
            raise LearnerConfigError(
                f'initial policy {s.policy} has hidden sizes {list(actor.meta.hidden_sizes)} '
                f'but the learner is configured with {list(s.sac.hidden_sizes)}'
            )
        try:
            ckpt = load_initial_networks(self.model, actor, s.policy, s.rate_hz)
        except ValueError as exc:
            raise LearnerConfigError(str(exc)) from exc
        if ckpt is not None:
            self._say(f'initial SAC networks (critics included) from {ckpt}')
        self.version = actor.version

    def load_prior_data(self) -> None:
        """The ``prior_data`` parameter's buffer, mixed into every batch from now on."""
        s = self.s
        path = self.prior_data_path()
        if path is None:
            return
        try:
            arrays, meta = buffer_file.load(
                path, rate_hz=s.rate_hz, obs_size=self.obs_size, action_size=ACTION_SIZE
            )
        except BufferRejected as exc:
            raise LearnerConfigError(f'prior_data refused: {exc}') from exc
        self._fast = FastSacUpdate(
            self.model,
            prior=arrays,
            prior_ratio=s.prior_ratio,
            smoothness=s.smoothness,
            smoothness_reference=self._fast.smoothness_reference if self._fast else None,
        )
        self.prior_count = meta.count
        self._say(
            f'prior data: {meta.count} transitions from {path}, {s.prior_ratio:.0%} of each batch'
        )

    def prior_data_path(self) -> Path | None:
        """Where ``prior_data`` points (``auto``: beside the policy, else the shipped one's)."""
        s = self.s
        if s.prior_data != 'auto':
            return Path(s.prior_data) if s.prior_data else None
        from rip_control.run_files import packaged_policy

        # The shipped policy's prior data has the 6-float observation (action_history 0).
        shipped = [str(packaged_policy(s.rate_hz))] if s.sac.action_history == 0 else []
        for near in (s.policy, *shipped):
            if near and (Path(near).with_name(run_files.PRIOR_DATA)).exists():
                return Path(near).with_name(run_files.PRIOR_DATA)
        self._say(f'prior_data:=auto: no {run_files.PRIOR_DATA} beside {s.policy or "the policy"}')
        return None

    def resume(self) -> None:
        """The ``resume_buffer`` parameter's buffer (and the networks saved beside it)."""
        s = self.s
        if not s.resume_buffer:
            return
        try:
            arrays, meta = buffer_file.load(
                s.resume_buffer, rate_hz=s.rate_hz, obs_size=self.obs_size, action_size=ACTION_SIZE
            )
        except BufferRejected as exc:
            raise LearnerConfigError(f'resume_buffer refused: {exc}') from exc
        if meta.count > s.sac.buffer_size:
            # Loading would keep the newest buffer_size and the next checkpoint would write
            # the rest away, over the user's file when it is this run's own.
            raise LearnerConfigError(
                f'resume_buffer {s.resume_buffer} holds {meta.count} transitions, more than '
                f'buffer_size {s.sac.buffer_size}: give buffer_size:={meta.count} or more '
                '(nothing was loaded; the file is untouched)'
            )
        first_slot = self.model.replay_buffer.pos
        n = buffer_store.insert(self.model.replay_buffer, arrays)
        self.provenance.restore(first_slot, arrays)
        self.added = self.resumed = n
        self.version = max(self.version, meta.policy_version)
        note = ''
        ckpt = Path(s.resume_buffer).with_name(run_files.CHECKPOINT)
        if ckpt.exists() and not s.policy:
            try:
                data = ckpt.read_bytes()
                saved = read_metadata(data).get('generation', '')
                older = bool(saved) and saved == meta.previous_generation
                if older:
                    # A stop between the buffer's write and the networks': they are the
                    # save before, at most checkpoint_every_s older. Taken, and said.
                    self._say(
                        f'{ckpt} is from the save before {s.resume_buffer} (a stop between '
                        'their writes): the networks are one save older than the buffer'
                    )
                elif saved != meta.generation:
                    # Not a set one learner wrote: the networks are another run's or older.
                    raise ValueError(
                        f'{ckpt} is from save {saved or "(untagged)"} but {s.resume_buffer} '
                        f'from save {meta.generation or "(untagged)"}, a set the learner did '
                        'not write together (stopped between two writes?): give policy:= to '
                        f'start the networks from a policy, or move {ckpt.name} away to '
                        'start them fresh'
                    )
                load_checkpoint(self.model, data, s.rate_hz, str(ckpt))
            except (OSError, ValueError) as exc:
                raise LearnerConfigError(str(exc)) from exc
            note = f' and the SAC networks from {ckpt}'
            self._last_generation = saved  # the networks' save, on disk beside the buffer
        self._last_generation = self._last_generation or meta.generation
        self._say(
            f'resumed {n} transitions from {s.resume_buffer}{note} (policy version {self.version})'
        )

    def import_bags(self) -> None:
        """Fill the buffer from the ``resume_bag`` bags, with the checks live transitions get."""
        s = self.s
        if not s.resume_bags:
            return
        try:
            got = read_transitions(
                s.resume_bags,
                rate_hz=s.rate_hz,
                obs_size=self.obs_size,
                action_size=ACTION_SIZE,
                dt_tolerance_s=s.dt_tolerance_s,
                keep=s.sac.buffer_size,  # read message by message, the newest held
            )
        except BagRejected as exc:
            raise LearnerConfigError(f'resume_bag refused: {exc}') from exc
        self.bag_rejected = got.rejected
        self.bag_not_kept = got.not_kept
        n = 0
        while got.transitions:  # the inbox's bound, chunk by chunk
            take = min(INBOX_MAX, len(got.transitions))
            self._inbox.extend(got.transitions.popleft() for _ in range(take))
            n += self.drain()
        self.bag_imported = n
        self.added_after_start = 0  # imported data is not owed K updates each
        per_bag = ', '.join(f'{k}: {v}' for k, v in got.per_bag.items())
        older = (
            f'; the {self.bag_not_kept} oldest accepted ones not kept (buffer_size '
            f'{s.sac.buffer_size})'
            if self.bag_not_kept
            else ''
        )
        self._say(
            f'imported {n} transitions from {len(got.per_bag)} bag(s) ({per_bag}); '
            f'{got.messages} messages read, rejected {dict(got.rejected) or "none"}{older}'
        )

    def freeze_smoothness_reference(self) -> None:
        """Fix the actor whose chatter the smoothness term allows (``smoothness_reference``).

        With ``initial``: the actor as it is now, the start-up material loaded and before any
        update.
        """
        s = self.s
        if not (s.smoothness and s.smoothness_reference == 'initial' and self._fast):
            return
        self._fast.set_smoothness_reference(self.model.actor)
        self._say(
            f"smoothness term: only the chatter beyond policy v{self.version}'s own "
            '(smoothness_reference:=initial)'
        )

    @property
    def buffer_size(self) -> int:
        """Transitions stored in the replay buffer."""
        rb = self.model.replay_buffer
        return int(rb.buffer_size if rb.full else rb.pos)

    # -- data in ---------------------------------------------------------------------------

    @property
    def evicted(self) -> int:
        """Transitions the replay buffer overwrote with newer ones (it holds ``buffer_size``)."""
        return max(0, self.added - self.s.sac.buffer_size)

    def put(self, t: Transition) -> bool:
        """Queue a validated transition (any thread; :meth:`drain` stores it); whether it was.

        At most :data:`INBOX_MAX` wait: past that (a training thread that stopped draining)
        the newest are dropped and counted (:attr:`inbox_dropped`), memory stays bounded.
        """
        if len(self._inbox) >= INBOX_MAX:
            self.inbox_dropped += 1
            return False
        self._inbox.append(t)
        return True

    def drain(self) -> int:
        """Move the queued transitions into the replay buffer; how many."""
        rb = self.model.replay_buffer
        n = 0
        with self._lock:
            while self._inbox:
                t = self._inbox.popleft()
                self.provenance.record(rb.pos, t.episode, t.step, t.dt_s, t.policy_version)
                rb.add(
                    t.obs[None],
                    t.next_obs[None],
                    t.action[None],
                    np.array([t.reward], dtype=np.float32),
                    np.array([float(t.terminated or t.truncated)], dtype=np.float32),
                    [{'TimeLimit.truncated': bool(t.truncated and not t.terminated)}],
                )
                n += 1
        capacity = self.s.sac.buffer_size
        if self.added <= capacity < self.added + n:
            self._say(
                f'replay buffer full ({capacity} transitions, buffer_size): from now on each '
                'new transition replaces the oldest (counted in buffer_evicted)'
            )
        self.added += n
        if self.buffer_size >= self.s.learning_starts:
            self.added_after_start += n
        return n

    # -- updates ---------------------------------------------------------------------------

    def due(self) -> int:
        """Gradient steps owed now (K per transition stored since learning_starts)."""
        if self.buffer_size < max(1, self.s.learning_starts):
            return 0
        return max(self.s.gradient_steps * self.added_after_start - self.updates, 0)

    def train_due(self) -> int:
        """Run the owed steps, at most ``max_chunk`` in one ``train()`` call; how many ran."""
        n = min(self.due(), self.s.max_chunk)
        if n <= 0:
            return 0
        update_actor = self.updates >= self.s.critic_warmup_updates
        if not update_actor:
            n = min(n, self.s.critic_warmup_updates - self.updates)
        t0 = time.perf_counter()
        with self._lock:
            if self._good is None:
                self._good = self._snapshot()
            try:
                if self._fast is not None:
                    self._fast.train(n, self.s.sac.batch_size, update_actor=update_actor)
                else:
                    self.model.train(gradient_steps=n, batch_size=self.s.sac.batch_size)
                finite = self._finite()
                why = 'a network became non-finite'
            except ValueError as exc:  # torch.distributions refusing a NaN mean or std
                finite, why = False, str(exc).splitlines()[0]
            if finite:
                self._good = self._snapshot()
                self.actor_updates += n if update_actor else 0
            else:
                self._restore(self._good)
                self.diverged += 1
                self._say(
                    f'training diverged ({why}) after {self.updates + n} updates: undone, '
                    f'networks back to the last finite state ({self.diverged} so far; a '
                    'learning rate this high cannot train)'
                )
        self.train_s += time.perf_counter() - t0
        self.train_calls += 1
        self.updates += n
        fault_at = self.s.fault_train_error_after_updates
        if fault_at and self.updates >= fault_at:
            raise RuntimeError(f'injected training fault after {self.updates} updates')
        return n

    def _finite(self) -> bool:
        import torch

        m = self.model
        tensors = list(m.policy.parameters())
        if m.log_ent_coef is not None:
            tensors.append(m.log_ent_coef)
        return all(bool(torch.isfinite(t).all()) for t in tensors)

    def _snapshot(self) -> dict[str, Any]:
        """Copies of every network, optimizer state and the entropy coefficient."""
        import copy

        m = self.model
        opts = {'actor': m.actor.optimizer, 'critic': m.critic.optimizer}
        if m.ent_coef_optimizer is not None:
            opts['ent_coef'] = m.ent_coef_optimizer
        return {
            'policy': copy.deepcopy(m.policy.state_dict()),
            'log_ent_coef': None if m.log_ent_coef is None else m.log_ent_coef.detach().clone(),
            'optimizers': {k: copy.deepcopy(o.state_dict()) for k, o in opts.items()},
        }

    def _restore(self, snap: dict[str, Any] | None) -> None:
        import torch

        assert snap is not None
        m = self.model
        m.policy.load_state_dict(snap['policy'])
        if snap['log_ent_coef'] is not None:
            with torch.no_grad():
                m.log_ent_coef.copy_(snap['log_ent_coef'])
        opts = {'actor': m.actor.optimizer, 'critic': m.critic.optimizer}
        if m.ent_coef_optimizer is not None:
            opts['ent_coef'] = m.ent_coef_optimizer
        for k, state in snap['optimizers'].items():
            opts[k].load_state_dict(copy_state(state))

    # -- data out --------------------------------------------------------------------------

    def actor_bytes(self, generation: str = '') -> bytes:
        """The current actor as a weights message (safetensors, version :attr:`version`).

        :param generation: the checkpoint save it is written with ('' for a message).
        """
        s = self.s
        extra = {
            'learner_train_calls': str(self.train_calls),
            'learner_total_train_s': repr(self.train_s),
            'learner_updates': str(self.updates),
            **({'run_id': s.run_id} if s.run_id else {}),
            **({'generation': generation} if generation else {}),
        }
        meta = actor_meta(s.sac, self.version, s.rate_hz)
        return encode_actor(meta, actor_tensors(self.model), extra)

    def checkpoint(self) -> None:
        """Save the buffer, the actor and the SAC networks into the run folder (atomic)."""
        s = self.s
        t0 = time.monotonic()
        # One id for the three files of this save: resume refuses a mixed set.
        generation = uuid.uuid4().hex
        with self._lock:
            arrays = buffer_store.extract(self.model.replay_buffer)
            arrays.update(self.provenance.extract(self.model.replay_buffer))
            state = sac_state(self.model)
            actor = self.actor_bytes(generation)
        n = len(arrays['rewards'])
        meta = BufferMeta(
            s.rate_hz,
            self.obs_size,
            ACTION_SIZE,
            n,
            self.version,
            generation,
            self._last_generation,
        )
        buffer_file.save(s.run_dir / run_files.BUFFER, arrays, meta)
        atomic_write_bytes(s.run_dir / run_files.POLICY_LATEST, actor)
        atomic_write_bytes(
            s.run_dir / run_files.CHECKPOINT,
            encode_checkpoint(state, self.version, s.rate_hz, generation),
        )
        self._last_generation = generation  # the three files of this save are written
        self.last_save_s = time.monotonic()
        self.last_checkpoint = time.strftime('%H:%M:%S')
        self._say(
            f'checkpoint: {meta.count} transitions, policy v{self.version}, '
            f'{self.updates} updates -> {s.run_dir} ({time.monotonic() - t0:.2f} s)'
        )
