"""What the fine-tuning benchmarks share: the parameters the arms run with, and deployments.

:mod:`rip_bench.v5`, :mod:`rip_bench.matrix` and :mod:`rip_bench.sim_finetune` each fine-tune
from one parameter file (the shipped defaults, ``--params-file`` and ``--set`` over them) and
measure a policy by deploying it: deterministic evaluation episodes through
:func:`rip_control.evaluate.evaluate`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def arm_parameters(a: argparse.Namespace, runs: Path) -> tuple[Path, dict[str, Any]]:
    """The parameter file both arms run with, written into ``runs``; and its learner section."""
    import yaml

    from rip_control.run.launching import CONTROL, LEARNER, RunnerInput

    given = {'params_file': a.params_file} if a.params_file else {}
    params = RunnerInput.parse(given).nodes  # the shipped defaults, and the file over them
    doc = {node: {'ros__parameters': params[node]} for node in (CONTROL, LEARNER)}
    control = doc[CONTROL]['ros__parameters']
    learner = doc[LEARNER]['ros__parameters']
    control['seed'] = learner['seed'] = a.seed
    if a.guard is not None:  # None: as the file says
        control['eval_every_episodes'] = a.guard
    if a.hidden:
        control['hidden_sizes'] = learner['hidden_sizes'] = [int(h) for h in a.hidden.split(',')]
    for item in a.set:
        key, eq, value = item.partition('=')
        node, _, name = key.partition('.')
        if node not in doc or not name or not eq:
            raise ValueError(
                f'--set {item}: expected rip_control.NAME=VALUE or rip_learner.NAME=VALUE'
            )
        doc[node]['ros__parameters'][name] = yaml.safe_load(value) if value else ''
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / 'params.yaml'
    path.write_text(yaml.safe_dump(doc))
    return path, learner


def deploy(
    a: argparse.Namespace,
    rig: str,
    policy: str,
    runs: Path,
    run_name: str,
    extra: dict[str, str] | None = None,
) -> Any:
    """Evaluate ``policy`` on ``rig`` (``a.eval_episodes`` x ``a.eval_seconds``): the report.

    :param extra: further runner arguments (``name`` -> text).
    :raises RuntimeError: the evaluation failed, with the reason.
    """
    from rip_control.evaluate import evaluate

    print(f'-- evaluating {run_name}: {policy} on {rig}', flush=True)
    report = evaluate(
        {
            'policy': policy,
            'rig_params': rig,
            'rate': str(a.rate),
            'episodes': str(a.eval_episodes),
            'episode_seconds': str(a.eval_seconds),
            'run_name': run_name,
            'runs_dir': str(runs),
            **(extra or {}),
        },
        stream_logs=False,
    )
    if report['failure']:
        raise RuntimeError(f'evaluation {run_name} failed: {report["failure"]}')
    return report


def sac_config(lp: dict[str, Any]) -> Any:
    """The learner's SAC hyperparameters from its parameter section (for the sync arm)."""
    from rip_learner.sac import SacConfig

    return SacConfig.from_params(lp)


def safeguards(lp: dict[str, Any], policy: str, rate_hz: float) -> dict[str, Any]:
    """The learner's update and safeguards from its parameter section, for the sync arm."""
    from rip_control import buffer_file
    from rip_control.run_files import PRIOR_DATA as PRIOR_DATA_FILE
    from rip_control.run_files import packaged_policy

    prior = None
    path = str(lp.get('prior_data') or '')
    if path == 'auto':  # as the learner resolves it (Trainer.prior_data_path)
        found = [
            Path(p).with_name(PRIOR_DATA_FILE)
            for p in (policy, str(packaged_policy(rate_hz)))
            if Path(p).with_name(PRIOR_DATA_FILE).exists()
        ]
        path = str(found[0]) if found else ''
    if path:
        from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

        prior, _ = buffer_file.load(
            path, rate_hz=rate_hz, obs_size=OBS_SIZE, action_size=ACTION_SIZE
        )
    return {
        'fast_updates': bool(lp.get('fast_updates')),
        'critic_warmup_updates': int(lp.get('critic_warmup_updates', 0)),
        'prior': prior,
        'prior_ratio': float(lp.get('prior_ratio', 0.0)),
        'smoothness': float(lp.get('smoothness', 0.0)),
        'smoothness_reference': smoothness_reference(lp),
    }


def smoothness_reference(lp: dict[str, Any]) -> str:
    """The learner section's ``smoothness_reference``, checked as the learner checks it."""
    from rip_learner.learner_settings import SMOOTHNESS_REFERENCES

    value = lp.get('smoothness_reference', 'none')
    if value not in SMOOTHNESS_REFERENCES:
        raise ValueError(
            f'rip_learner.smoothness_reference must be one of {", ".join(SMOOTHNESS_REFERENCES)}, '
            f'got {value!r}'
        )
    return str(value)
