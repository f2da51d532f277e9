"""The control node's settings: its parameters read and checked once, at configure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
import os
from pathlib import Path
from typing import Any, ClassVar

from rip_control.params import CONTROL_PARAMETERS, From, FromParams, Param, int_tuple
from rip_control.rig.env import TaskConfig
from rip_control.rt.loop import LoopConfig
from rip_control.rt.process import RtConfig


@dataclass(frozen=True)
class NodeSettings(FromParams):
    """Everything read from parameters at configure time.

    Each control node parameter sets exactly one field: of ``task``, of ``loop`` or of this
    class (its own name, or where ``PARAMS`` says).
    """

    TABLE: ClassVar[tuple[Param, ...]] = CONTROL_PARAMETERS
    PARAMS: ClassVar[Mapping[str, From]] = {
        'serial_timeout_s': From('serial_timeout_ms', 1e-3),
        'node_timeout_s': From('node_timeout_ms', 1e-3),
        'hidden_sizes': From('hidden_sizes', cast=int_tuple),
        'switch_interval_s': From('switch_interval_us', 1e-6),
    }
    NESTED: ClassVar[tuple[str, ...]] = ('task', 'loop')

    task: TaskConfig
    loop: LoopConfig
    serial_port: str
    serial_timeout_s: float
    node_timeout_s: float
    max_deadman_ms: int
    policy: str
    allow_random_policy: bool
    hidden_sizes: tuple[int, ...]
    run_name: str
    runs_dir: str
    run_id: str
    control_cpu: int
    fifo_priority: int
    gil_holders_fifo_priority: int
    cpu_idle_latency_us: int
    switch_interval_s: float
    tick_topic_max_hz: float
    gc_off: bool
    tick_trace: str

    def __post_init__(self) -> None:
        if not self.serial_port:
            raise ValueError('serial_port is empty: name the rig device (or start the emulator)')

    @classmethod
    def from_params(cls, values: Mapping[str, Any] | None = None, **fields: Any) -> NodeSettings:
        """The settings for ``values`` (parameter names; the table's defaults for the rest)."""
        nested = {'task': TaskConfig.from_params(values), 'loop': LoopConfig.from_params(values)}
        return cls(**{**nested, **cls.field_values(values), **fields})

    @classmethod
    def from_node(cls, node: Any) -> NodeSettings:
        """Read them from the node's parameters (declared from the parameter table).

        :raises ValueError: a value the table's ranges allow but the rig cannot use.
        """
        return cls.from_params({p.name: node.get_parameter(p.name).value for p in cls.TABLE})

    @property
    def run_dir(self) -> Path:
        """``runs_dir/run_name``: where this node writes."""
        return Path(self.runs_dir) / self.run_name

    @property
    def cpu(self) -> int:
        """The CPU of the real-time process (``control_cpu`` -1: the last one allowed)."""
        return self.control_cpu if self.control_cpu >= 0 else max(os.sched_getaffinity(0))

    def rt_config(self) -> RtConfig:
        """What the real-time process runs with (:class:`~rip_control.rt.process.RtConfig`)."""
        return RtConfig(
            task=self.task,
            loop=self.loop,
            serial_port=self.serial_port,
            serial_timeout_s=self.serial_timeout_s,
            cpu=self.cpu,
            fifo_priority=self.fifo_priority,
            switch_interval_s=self.switch_interval_s,
            gc_off=self.gc_off,
            node_timeout_s=self.node_timeout_s,
            cpu_idle_latency_us=self.cpu_idle_latency_us,
        )
