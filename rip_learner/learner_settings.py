"""The learner's settings: its parameters read and checked once, at start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rip_learner.sac import SacConfig

SMOOTHNESS_REFERENCES = ('none', 'initial')


class LearnerConfigError(ValueError):
    """A parameter, initial policy or resume file the learner cannot start with."""


@dataclass(frozen=True)
class LearnerSettings:
    """Everything read from parameters at start."""

    rate_hz: float
    sac: SacConfig
    gradient_steps: int
    learning_starts: int
    max_chunk: int
    fast_updates: bool
    critic_warmup_updates: int
    prior_data: str
    prior_ratio: float
    smoothness: float
    dt_tolerance_s: float
    resume_buffer: str
    resume_bags: tuple[str, ...]
    policy: str
    run_dir: Path
    publish_every_steps: int
    publish_every_s: float
    checkpoint_every_s: float
    nice: int
    cpus: tuple[int, ...]
    fault_train_error_after_updates: int = 0
    smoothness_reference: str = 'none'

    @classmethod
    def from_node(cls, node: Any) -> LearnerSettings:
        """Read them from the node's parameters (declared from the parameter table).

        :raises LearnerConfigError: a combination the SAC configuration refuses.
        """
        p = node.get_parameter
        try:
            sac = SacConfig(
                hidden_sizes=tuple(int(h) for h in p('hidden_sizes').value),
                batch_size=p('batch_size').value,
                learning_rate=p('learning_rate').value,
                gamma=p('gamma').value,
                tau=p('tau').value,
                buffer_size=p('buffer_size').value,
                torch_threads=p('torch_threads').value,
                seed=p('seed').value,
                device=p('device').value,
            )
        except ValueError as exc:
            raise LearnerConfigError(str(exc)) from exc
        safeguards = {
            'critic_warmup_updates': p('critic_warmup_updates').value,
            'prior_data': p('prior_data').value,
            'smoothness': p('smoothness').value,
        }
        reference = p('smoothness_reference').value
        if reference not in SMOOTHNESS_REFERENCES:
            raise LearnerConfigError(
                f'smoothness_reference must be one of {", ".join(SMOOTHNESS_REFERENCES)}, '
                f'got {reference!r}'
            )
        if not p('fast_updates').value and any(safeguards.values()):
            named = ', '.join(f'{k}:={v}' for k, v in safeguards.items() if v)
            raise LearnerConfigError(f'{named} needs fast_updates:=true (rip_learner.fast_sac)')
        return cls(
            rate_hz=p('rate_hz').value,
            sac=sac,
            gradient_steps=p('gradient_steps').value,
            learning_starts=p('learning_starts').value,
            max_chunk=p('max_chunk').value,
            fast_updates=p('fast_updates').value,
            critic_warmup_updates=safeguards['critic_warmup_updates'],
            prior_data=safeguards['prior_data'],
            prior_ratio=p('prior_ratio').value,
            smoothness=safeguards['smoothness'],
            dt_tolerance_s=p('dt_tolerance_ms').value / 1e3,
            resume_buffer=p('resume_buffer').value,
            resume_bags=tuple(x.strip() for x in p('resume_bag').value.split(',') if x.strip()),
            policy=p('policy').value,
            run_dir=Path(p('runs_dir').value) / p('run_name').value,
            publish_every_steps=p('publish_every_steps').value,
            publish_every_s=p('publish_every_s').value,
            checkpoint_every_s=p('checkpoint_every_s').value,
            nice=p('nice').value,
            cpus=tuple(int(c) for c in p('cpus').value),
            fault_train_error_after_updates=p('fault_train_error_after_updates').value,
            smoothness_reference=reference,
        )
