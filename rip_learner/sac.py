"""The learner's SAC: built for the rig's spaces, trained in steps we schedule, actor exported.

SB3's :class:`~stable_baselines3.SAC` is used as a library here, never through
``learn()``: the learner owns the replay buffer and calls ``train(gradient_steps,
batch_size)`` itself. :func:`actor_tensors` maps SB3's actor onto the wire layout of
:mod:`rip_control.policy` (``layers.i``, ``mu``, ``log_std``) so the control process can run
it in numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
import math
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from rip_control import run_files
from rip_control.params import LEARNER_PARAMETERS, From, FromParams, Param, int_tuple
from rip_control.policy import HIDDEN_LAYERS_MAX, HIDDEN_SIZE_MAX, PolicyMeta, read_metadata
from rip_control.rig.env import ACTION_SIZE, obs_size

"""The SAC networks' file; saved beside a policy, it travels with it (critics included)."""
"""A sample of the pre-training replay buffer, beside the policy (``prior_data:=auto``)."""
DEVICES = ('auto', 'cpu', 'cuda')

# The rig's spaces, shared with the control node (rip_control.rig.env): an observation of
# 6 + action_history floats, an action of 1 in [-1, 1].
ACTION_SPACE = gym.spaces.Box(-1.0, 1.0, shape=(ACTION_SIZE,), dtype=np.float32)


def observation_space(action_history: int) -> gym.spaces.Box:
    """The observation space of a policy with ``action_history`` past actions."""
    return gym.spaces.Box(-np.inf, np.inf, shape=(obs_size(action_history),), dtype=np.float32)


@dataclass(frozen=True)
class SacConfig(FromParams):
    """SAC hyperparameters the learner exposes as parameters.

    Their defaults are in :data:`rip_control.params.LEARNER_PARAMETERS` (build one with
    :meth:`from_params`). The default network is smaller than SB3's [256, 256]: on two shared
    cores that size manages ~72 updates/s, short of the K = 4 x 50 Hz = 200 the fine-tune
    needs (``bench/results/learner_throughput.json`` has the measured trade-off).
    """

    TABLE: ClassVar[tuple[Param, ...]] = LEARNER_PARAMETERS
    PARAMS: ClassVar[Mapping[str, From]] = {
        'hidden_sizes': From('hidden_sizes', cast=int_tuple),
    }

    hidden_sizes: tuple[int, ...]
    action_history: int
    batch_size: int
    learning_rate: float
    gamma: float
    tau: float
    buffer_size: int
    torch_threads: int
    seed: int
    device: str

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f'device must be one of {", ".join(DEVICES)}, got {self.device!r}')
        hidden = self.hidden_sizes
        if not 0 < len(hidden) <= HIDDEN_LAYERS_MAX or not all(
            0 < h <= HIDDEN_SIZE_MAX for h in hidden
        ):
            # A control node refuses any other actor (rip_control.policy's bounds).
            raise ValueError(
                f'hidden_sizes must be 1 to {HIDDEN_LAYERS_MAX} layers of 1 to '
                f'{HIDDEN_SIZE_MAX} units, got {list(hidden)}'
            )
        if self.batch_size < 1:
            raise ValueError(f'batch_size must be >= 1, got {self.batch_size}')
        if self.buffer_size < self.batch_size:
            raise ValueError(
                f'buffer_size {self.buffer_size} is smaller than batch_size {self.batch_size}'
            )
        if self.torch_threads < 1:
            raise ValueError(f'torch_threads must be >= 1, got {self.torch_threads}')


class _SpacesOnlyEnv(gym.Env):
    """Carries the spaces into SB3's constructor; never stepped (the rig is elsewhere)."""

    action_space = ACTION_SPACE

    def __init__(self, action_history: int) -> None:
        self.observation_space = observation_space(action_history)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        raise RuntimeError('the learner never steps an env; transitions arrive over DDS')

    def step(self, action: Any) -> Any:
        raise RuntimeError('the learner never steps an env; transitions arrive over DDS')


def build_sac(
    cfg: SacConfig, env: gym.Env | None = None, sac_class: Any = None, **sac_kwargs: Any
) -> Any:
    """An SB3 SAC for the rig's spaces (logger configured, torch threads set).

    :param cfg: hyperparameters.
    :param env: an env for ``learn()`` (simulation pre-training, the synchronous baseline);
        None builds one that only carries the spaces, for a learner calling ``train()``.
    :param sac_class: a subclass of SB3's SAC to build instead (the synchronous baseline's).
    :param sac_kwargs: further :class:`~stable_baselines3.SAC` arguments (``learning_starts``,
        ``train_freq``, ``gradient_steps``...).
    """
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import Logger
    import torch

    torch.set_num_threads(cfg.torch_threads)
    sac_kwargs.setdefault('learning_starts', 0)
    model = (sac_class or SAC)(
        'MlpPolicy',
        env if env is not None else _SpacesOnlyEnv(cfg.action_history),
        learning_rate=cfg.learning_rate,
        buffer_size=cfg.buffer_size,
        batch_size=cfg.batch_size,
        tau=cfg.tau,
        gamma=cfg.gamma,
        policy_kwargs={'net_arch': list(cfg.hidden_sizes)},
        replay_buffer_kwargs={'handle_timeout_termination': True},
        seed=cfg.seed,
        device=resolve_device(cfg.device),
        verbose=0,
        **sac_kwargs,
    )
    # SB3's configure() would make a /tmp/SB3-<date> folder for every model; nothing is written.
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def resolve_device(device: str) -> str:
    """``auto``: CUDA when torch sees a GPU, else the CPU. ``cuda`` without one is refused."""
    import torch

    if device == 'auto':
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    if device == 'cuda' and not torch.cuda.is_available():
        raise ValueError('device:=cuda but torch sees no CUDA device (use auto or cpu)')
    return device


def sac_state(model: Any) -> dict[str, np.ndarray]:
    """Every network of the SAC (actor, critics, targets) and the entropy coefficient."""
    state = {k: v.detach().cpu().numpy().copy() for k, v in model.policy.state_dict().items()}
    if model.log_ent_coef is not None:
        state['log_ent_coef'] = model.log_ent_coef.detach().cpu().numpy().copy()
    return state


def encode_checkpoint(
    state: dict[str, np.ndarray], version: int, rate_hz: float, generation: str = ''
) -> bytes:
    """Safetensors bytes of :func:`sac_state`, tagged with the policy version and the rate.

    :param generation: the id of the save it belongs to (the buffer and actor written with it
        carry the same one).
    """
    from safetensors.numpy import save

    md = {'policy_version': str(version), 'rate_hz': repr(float(rate_hz))}
    return save(state, metadata={**md, **({'generation': generation} if generation else {})})


def widen_inputs(tensors: dict[str, np.ndarray], at: int, extra: int) -> dict[str, np.ndarray]:
    """Zero input columns for ``extra`` new observation floats inserted at column ``at``.

    A network trained with a shorter action history, given the longer observation, computes
    exactly what it did (the new inputs are multiplied by zero until training moves them):
    a warm start into a larger ``action_history``. Only the first layers take the observation
    (the critics' ``[obs, action]`` too, so the columns go before the action's).
    """
    out = dict(tensors)
    for name, arr in tensors.items():
        first = name.endswith('.0.weight') or name == 'layers.0.weight'
        if first and arr.ndim == 2 and arr.shape[1] >= at:
            out[name] = np.insert(arr, [at] * extra, 0.0, axis=1).astype(arr.dtype)
    return out


def load_checkpoint(
    model: Any, data: bytes, rate_hz: float, source: str, widen: tuple[int, int] = (0, 0)
) -> int:
    """Load :func:`encode_checkpoint` bytes into ``model``; return the policy version.

    :param widen: ``(at, extra)`` for :func:`widen_inputs` (a shorter action history's
        networks into this model); (0, 0): none.
    :raises ValueError: naming ``source`` when the bytes are corrupt, were trained at another
        rate, or do not fit the networks.
    """
    from safetensors.numpy import load
    import torch

    try:
        meta = read_metadata(data)
        tensors = load(data)
    except Exception as exc:  # noqa: BLE001 - the library raises several types for bad bytes
        raise ValueError(f'checkpoint {source} is corrupt: {exc}') from exc
    saved_rate = float(meta.get('rate_hz', 'nan'))
    if not math.isclose(saved_rate, rate_hz, rel_tol=1e-9):
        raise ValueError(
            f'checkpoint {source} was trained at {saved_rate:g} Hz '
            f'but this run is at {rate_hz:g} Hz'
        )
    bad = sorted(name for name, arr in tensors.items() if not np.isfinite(arr).all())
    if bad:
        raise ValueError(f'checkpoint {source} holds non-finite values in {bad}')
    if widen[1]:
        tensors = widen_inputs(tensors, *widen)
    state = {k: torch.as_tensor(v) for k, v in tensors.items() if k != 'log_ent_coef'}
    try:
        model.policy.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f'checkpoint {source} does not fit these networks: {exc}') from exc
    if 'log_ent_coef' in tensors and model.log_ent_coef is not None:
        with torch.no_grad():
            model.log_ent_coef.copy_(torch.as_tensor(tensors['log_ent_coef']))
    return int(meta.get('policy_version', '0'))


def actor_tensors(model: Any) -> dict[str, np.ndarray]:
    """The SB3 actor's weights in :mod:`rip_control.policy`'s naming, as float32 arrays."""
    import torch

    linears = [m for m in model.actor.latent_pi if isinstance(m, torch.nn.Linear)]
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for i, layer in enumerate(linears):
            out[f'layers.{i}.weight'] = layer.weight.detach().cpu().numpy().astype(np.float32)
            out[f'layers.{i}.bias'] = layer.bias.detach().cpu().numpy().astype(np.float32)
        for head in ('mu', 'log_std'):
            module = getattr(model.actor, head)
            out[f'{head}.weight'] = module.weight.detach().cpu().numpy().astype(np.float32)
            out[f'{head}.bias'] = module.bias.detach().cpu().numpy().astype(np.float32)
    return out


def load_actor_into(model: Any, tensors: dict[str, np.ndarray]) -> None:
    """Overwrite the SB3 actor with wire-layout weights (an initial policy)."""
    import torch

    linears = [m for m in model.actor.latent_pi if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for i, layer in enumerate(linears):
            layer.weight.copy_(torch.as_tensor(tensors[f'layers.{i}.weight']))
            layer.bias.copy_(torch.as_tensor(tensors[f'layers.{i}.bias']))
        for head in ('mu', 'log_std'):
            module = getattr(model.actor, head)
            module.weight.copy_(torch.as_tensor(tensors[f'{head}.weight']))
            module.bias.copy_(torch.as_tensor(tensors[f'{head}.bias']))


def actor_meta(cfg: SacConfig, version: int, rate_hz: float) -> PolicyMeta:
    """Metadata of the actor this config builds."""
    k = cfg.action_history
    return PolicyMeta(version, rate_hz, obs_size(k), ACTION_SIZE, tuple(cfg.hidden_sizes), k)


def prefill_random(model: Any, n: int, seed: int = 0) -> None:
    """Fill the replay buffer with ``n`` synthetic transitions (benchmarks of train())."""
    rng = np.random.default_rng(seed)
    size = model.observation_space.shape[0]
    for _ in range(n):
        obs = rng.standard_normal((1, size)).astype(np.float32)
        nxt = rng.standard_normal((1, size)).astype(np.float32)
        act = rng.uniform(-1, 1, (1, ACTION_SIZE)).astype(np.float32)
        model.replay_buffer.add(
            obs, nxt, act, rng.standard_normal(1), np.zeros(1), [{'TimeLimit.truncated': False}]
        )


def load_initial_networks(
    model: Any, actor: Any, policy_path: str, rate_hz: float, widen: tuple[int, int] = (0, 0)
) -> Any:
    """Put an initial policy into ``model``, with the critics saved beside it if there are.

    Fine-tuning with a fresh critic would first unlearn the actor, so a checkpoint next to
    the policy file (what pre-training and the learner write) is loaded first; then the
    actor itself. :param widen: see :func:`load_checkpoint`. :returns: the checkpoint's path,
    or None. :raises ValueError: a bad checkpoint (see :func:`load_checkpoint`).
    """
    from pathlib import Path

    ckpt = Path(policy_path).with_name(run_files.CHECKPOINT)
    if ckpt.exists():
        load_checkpoint(model, ckpt.read_bytes(), rate_hz, str(ckpt), widen)
    tensors = widen_inputs(actor.tensors, *widen) if widen[1] else actor.tensors
    load_actor_into(model, tensors)
    return ckpt if ckpt.exists() else None
