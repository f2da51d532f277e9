"""The control node's settings: its parameters read and checked once, at configure."""

from __future__ import annotations

from dataclasses import dataclass
import os
from pathlib import Path
from typing import Any

from rip_control.rig.env import TaskConfig
from rip_control.rt.loop import LoopConfig


@dataclass(frozen=True)
class NodeSettings:
    """Everything read from parameters at configure time."""

    task: TaskConfig
    loop: LoopConfig
    serial_port: str
    serial_timeout_s: float
    policy: str
    allow_random_policy: bool
    hidden_sizes: tuple[int, ...]
    run_dir: Path
    control_cpu: int
    fifo_priority: int
    switch_interval_s: float
    tick_topic_max_hz: float
    tick_trace: str
    gc_off: bool
    node_timeout_s: float
    cpu_idle_latency_us: int

    @classmethod
    def from_node(cls, node: Any) -> NodeSettings:
        """Read them from the node's parameters (declared from the parameter table).

        :raises ValueError: a value the table's ranges allow but the rig cannot use.
        """
        p = node.get_parameter
        task = TaskConfig(
            rate_hz=p('rate_hz').value,
            episode_seconds=p('episode_seconds').value,
            max_action_v=p('max_action_v').value,
            arm_limit_rad=p('arm_limit_rad').value,
        )
        loop = LoopConfig(
            timing_violation_threshold_s=p('timing_violation_threshold_ms').value / 1e3,
            max_strikes=p('max_strikes').value,
            hung_timeout_s=p('hung_timeout_ms').value / 1e3,
            max_serial_errors=p('max_serial_errors').value,
            stochastic_actions=p('stochastic_actions').value,
            train_noise_scale=p('train_noise_scale').value,
            episodes=p('episodes').value,
            seed=p('seed').value,
            fault_tick_delay_s=p('fault_tick_delay_ms').value / 1e3,
            fault_after_ticks=p('fault_after_ticks').value,
            eval_every_episodes=p('eval_every_episodes').value,
            eval_margin=p('eval_margin').value,
            eval_best_margin=p('eval_best_margin').value,
            eval_balance_margin=p('eval_balance_margin').value,
            eval_steps=round(p('eval_episode_seconds').value * task.rate_hz),
        )
        cpu = p('control_cpu').value
        if cpu < 0:
            cpu = max(os.sched_getaffinity(0))
        port = p('serial_port').value
        if not port:
            raise ValueError('serial_port is empty: name the rig device (or start the emulator)')
        hidden = tuple(int(h) for h in p('hidden_sizes').value)
        return cls(
            task=task,
            loop=loop,
            serial_port=port,
            serial_timeout_s=p('serial_timeout_ms').value / 1e3,
            policy=p('policy').value,
            allow_random_policy=p('allow_random_policy').value,
            hidden_sizes=hidden,
            run_dir=Path(p('runs_dir').value) / p('run_name').value,
            control_cpu=cpu,
            fifo_priority=p('fifo_priority').value,
            switch_interval_s=p('switch_interval_us').value / 1e6,
            tick_topic_max_hz=p('tick_topic_max_hz').value,
            tick_trace=p('tick_trace').value,
            gc_off=p('gc_off').value,
            node_timeout_s=p('node_timeout_ms').value / 1e3,
            cpu_idle_latency_us=p('cpu_idle_latency_us').value,
        )
