"""``sync-baseline``: SB3 ``SAC.learn()`` with a self-pacing env, the bug this package fixes.

``python -m rip_bench sync-baseline --rate 50 --gradient-steps 4 --seconds 40``

The env sleeps to the next tick inside ``step()`` and the K gradient updates run between
steps in the same thread, so every tick after them is late: the figures are the real tick
intervals through the emulator, over all steps and over those after learning started.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import tempfile
import time
from typing import Any

import numpy as np

from rip_bench.common import add_run_arguments, print_stats, shipped
from rip_control.rig.emulator_process import EmulatorProcess
from rip_control.stats import tick_stats

NAME = 'sync-baseline'
HELP = 'SB3 SAC.learn() with a self-paced env'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``sync-baseline`` options (the rate, K and warm-up default to what ships)."""
    add_run_arguments(ap, 'rate', 'gradient_steps')
    ap.add_argument('--seconds', type=float, default=60.0)
    ap.add_argument('--learning-starts', type=int, default=shipped('learning_starts'))
    ap.add_argument('--hidden', default=','.join(str(h) for h in shipped('hidden_sizes')))
    ap.add_argument('--max-action-v', type=float, default=8.0)


def run(a: argparse.Namespace) -> dict[str, Any]:
    """SB3 ``SAC.learn()`` with a self-pacing env through the emulator: the JSON record."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    from rip_control.rig.client import LowLevelClient, RigError
    from rip_control.rig.env import RealRotaryInvertedPendulumEnv, TaskConfig

    workdir = Path(tempfile.mkdtemp(prefix='rip_sync_'))
    dts: list[float] = []
    stopped_by = ''

    class _Stop(BaseCallback):
        def __init__(self, seconds: float) -> None:
            super().__init__()
            self.end = time.monotonic() + seconds

        def _on_step(self) -> bool:
            for info in self.locals.get('infos', []):
                if 'dt_s' in info:
                    dts.append(float(info['dt_s']))
            return time.monotonic() < self.end

    with EmulatorProcess(workdir / 'rig', []) as emu:
        client = LowLevelClient(str(emu.link))
        client.open()
        task = TaskConfig.from_params(
            rate_hz=a.rate, episode_seconds=6.0, max_action_v=a.max_action_v
        )
        env = RealRotaryInvertedPendulumEnv(client, task)
        try:
            model = SAC(
                'MlpPolicy',
                env,
                learning_starts=a.learning_starts,
                batch_size=256,
                train_freq=1,
                gradient_steps=a.gradient_steps,
                policy_kwargs={'net_arch': [int(h) for h in a.hidden.split(',')]},
                device='cpu',
                seed=0,
            )
            import torch

            torch.set_num_threads(1)
            print(
                f'SAC.learn() with a self-paced {a.rate:g} Hz env, K={a.gradient_steps}, '
                f'{a.seconds:g} s ...',
                flush=True,
            )
            try:
                model.learn(total_timesteps=10**9, callback=_Stop(a.seconds))
            except RigError as exc:  # e.g. the firmware deadman tripped on a stretched step
                stopped_by = f'{type(exc).__name__}: {exc}'
                print(f'SAC.learn() stopped by the rig: {stopped_by}', flush=True)
        finally:
            env.disengage_safely()
            client.close()
    # Only the ticks after learning started show the stretch; report both.
    dt = np.asarray(dts)
    learning = dt[a.learning_starts :] if len(dt) > a.learning_starts else dt
    doc: dict[str, Any] = {
        'benchmark': 'sync-baseline',
        'gradient_steps': a.gradient_steps,
        'hidden_sizes': a.hidden,
        'seconds': a.seconds,
        'learning_starts': a.learning_starts,
        'stopped_by': stopped_by,
        'all_steps': tick_stats(dt, np.maximum(dt - 1.0 / a.rate, 0.0), a.rate),
        'while_learning': tick_stats(learning, np.maximum(learning - 1.0 / a.rate, 0.0), a.rate),
    }
    print_stats('sync SAC.learn(), while learning', doc['while_learning'])
    return doc
