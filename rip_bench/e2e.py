"""``e2e`` (V4): the whole fine-tune through the standalone runner, timed.

``python -m rip_bench e2e --rate 50 --episodes 10 --episode-seconds 6 --gradient-steps 4``

:func:`rip_control.finetune.run` with the emulated rig(s): the control nodes' tick
figures, the learner's updates per second of training and its ingest per wall second.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import tempfile
from typing import Any

from rip_bench.common import add_run_arguments, print_stats
from rip_control.params import parse_args

NAME = 'e2e'
HELP = 'V4: the whole fine-tune, timed'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``e2e`` options (the run's defaults are the shipped ones)."""
    add_run_arguments(ap, 'rate', 'episodes', 'episode_seconds', 'gradient_steps')
    ap.add_argument('--rigs', type=int, default=1, help='control nodes feeding the learner')
    ap.add_argument(
        '--set',
        nargs='*',
        default=[],
        metavar='NAME:=VALUE',
        help='more runner arguments (e.g. params_file:=my.yaml for node parameters)',
    )


def run(a: argparse.Namespace) -> dict[str, Any]:
    """The fine-tune through the standalone runner: the JSON record."""
    from rip_control import finetune

    workdir = Path(tempfile.mkdtemp(prefix='rip_e2e_'))
    args = {
        'rate': str(a.rate),
        'episodes': str(a.episodes),
        'episode_seconds': str(a.episode_seconds),
        'gradient_steps': str(a.gradient_steps),
        'run_name': 'e2e',
        'runs_dir': str(workdir / 'runs'),
        'rigs': str(a.rigs),
    }
    args.update(parse_args(a.set))  # the runner refuses unknown names by itself
    summary = finetune.run(args, stream_logs=False)
    learner = summary.get('learner', {})
    rigs = summary.get('rigs') or [summary]
    ingest = None
    if learner.get('transitions_received') and summary.get('wall_seconds'):
        ingest = float(learner['transitions_received']) / float(summary['wall_seconds'])
    doc = {
        'benchmark': 'e2e',
        'rigs': [
            {
                'rig': r.get('rig', ''),
                'ticks': r.get('ticks', {}),
                'returns': r.get('episode_returns'),
            }
            for r in rigs
        ],
        'learner_transitions_per_wall_second': ingest,
        'args': args,
        'control_node': summary.get('ticks', {}),
        'episode_returns': summary.get('episode_returns'),
        'policy_versions': summary.get('policy_versions'),
        'learner': learner,
        'learner_updates_per_train_second': (
            float(learner['gradient_steps_done']) / float(learner['train_seconds'])
            if learner.get('train_seconds') not in (None, '0', '0.0')
            else None
        ),
        'failure': summary.get('failure'),
    }
    for r in doc['rigs']:
        if r['ticks']:
            print_stats(f'fine-tune control node {r["rig"]}'.strip(), r['ticks'])
        else:
            print(f'{r["rig"] or "control node"}: no tick trace (it stopped early)')
    if ingest is not None:
        print(f'learner ingest: {ingest:.1f} transitions per wall second (resets included)')
    return doc
