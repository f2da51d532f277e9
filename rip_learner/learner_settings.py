"""The learner's settings: its parameters read and checked once, at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rip_control.params import LEARNER_PARAMETERS, From, FromParams, Param, int_tuple
from rip_learner.sac import SacConfig

SMOOTHNESS_REFERENCES = ('none', 'initial')


class LearnerConfigError(ValueError):
    """A parameter, initial policy or resume file the learner cannot start with."""


def _paths(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(',') if x.strip())


@dataclass(frozen=True)
class LearnerSettings(FromParams):
    """Everything read from parameters at start.

    Each learner parameter sets exactly one field: of ``sac`` or of this class (its own
    name, or where ``PARAMS`` says).
    """

    TABLE: ClassVar[tuple[Param, ...]] = LEARNER_PARAMETERS
    PARAMS: ClassVar[Mapping[str, From]] = {
        'dt_tolerance_s': From('dt_tolerance_ms', 1e-3),
        'resume_bags': From('resume_bag', cast=_paths),
        'cpus': From('cpus', cast=int_tuple),
    }
    NESTED: ClassVar[tuple[str, ...]] = ('sac',)

    sac: SacConfig
    rate_hz: float
    gradient_steps: int
    learning_starts: int
    max_chunk: int
    fast_updates: bool
    critic_warmup_updates: int
    prior_data: str
    prior_ratio: float
    smoothness: float
    smoothness_reference: str
    dt_tolerance_s: float
    resume_buffer: str
    resume_bags: tuple[str, ...]
    policy: str
    run_name: str
    runs_dir: str
    run_id: str
    publish_every_steps: int
    publish_every_s: float
    checkpoint_every_s: float
    nice: int
    cpus: tuple[int, ...]
    fault_train_error_after_updates: int

    def __post_init__(self) -> None:
        if self.smoothness_reference not in SMOOTHNESS_REFERENCES:
            raise LearnerConfigError(
                f'smoothness_reference must be one of {", ".join(SMOOTHNESS_REFERENCES)}, '
                f'got {self.smoothness_reference!r}'
            )
        safeguards = {
            'critic_warmup_updates': self.critic_warmup_updates,
            'prior_data': self.prior_data,
            'smoothness': self.smoothness,
        }
        if not self.fast_updates and any(safeguards.values()):
            named = ', '.join(f'{k}:={v}' for k, v in safeguards.items() if v)
            raise LearnerConfigError(f'{named} needs fast_updates:=true (rip_learner.fast_sac)')

    @classmethod
    def from_params(
        cls, values: Mapping[str, Any] | None = None, **fields: Any
    ) -> LearnerSettings:
        """The settings for ``values`` (parameter names; the table's defaults for the rest).

        :raises LearnerConfigError: a combination the SAC configuration or the safeguards
            refuse.
        """
        try:
            sac = SacConfig.from_params(values)
        except ValueError as exc:
            raise LearnerConfigError(str(exc)) from exc
        return cls(**{'sac': sac, **cls.field_values(values), **fields})

    @classmethod
    def from_node(cls, node: Any) -> LearnerSettings:
        """Read them from the node's parameters (declared from the parameter table)."""
        return cls.from_params({p.name: node.get_parameter(p.name).value for p in cls.TABLE})

    @property
    def run_dir(self) -> Path:
        """``runs_dir/run_name``: where this learner writes."""
        return Path(self.runs_dir) / self.run_name
