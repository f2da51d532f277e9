"""What more than one benchmark uses: the machine, shared options, helper programs' commands.

Defaults that are the product's (rate, episodes, episode length, K) are read from the
parameter table (:mod:`rip_control.params`), so a benchmark measures what ships unless told
otherwise; only the benchmarks' own conventions (a deployment is 5 x 10 s) are set here.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import platform
import sys
from typing import Any

from rip_control.params import CONTROL_PARAMETERS, LEARNER_PARAMETERS, defaults
from rip_control.run_files import packaged_policy

# A deployment: deterministic evaluation episodes from hanging, this many of this length.
DEPLOY_EPISODES = 5
DEPLOY_SECONDS = 10.0

# The runner's options a fine-tuning benchmark takes, by the parameter that holds the default.
_RUN_OPTIONS = {
    'rate': ('--rate', 'rate_hz', float, 'control rate, Hz'),
    'episodes': ('--episodes', 'episodes', int, 'fine-tune training episodes'),
    'episode_seconds': ('--episode-seconds', 'episode_seconds', float, 'policy time, s'),
    'gradient_steps': ('--gradient-steps', 'gradient_steps', int, 'K: updates per transition'),
}


def shipped(name: str) -> Any:
    """The shipped default of a control or learner parameter (the control node's first)."""
    values = {**defaults(LEARNER_PARAMETERS), **defaults(CONTROL_PARAMETERS)}
    if name not in values:
        raise KeyError(f'{name!r} is neither a rip_control nor a rip_learner parameter')
    return values[name]


# The simulation-only policy the fine-tuning benchmarks start from: the one that ships for the
# shipped rate (what policy:=auto resolves to).
DEFAULT_POLICY = packaged_policy(shipped('rate_hz'))


def add_run_arguments(ap: argparse.ArgumentParser, *names: str) -> None:
    """``--rate``, ``--episodes``, ``--episode-seconds``, ``--gradient-steps`` (those named).

    Their defaults are the parameter table's, so the benchmark runs what ``make demo`` runs.
    """
    for name in names:
        flag, param, kind, text = _RUN_OPTIONS[name]
        default = shipped(param)
        ap.add_argument(flag, type=kind, default=default, help=f'{text} (default {default:g})')


def add_deployment_arguments(ap: argparse.ArgumentParser) -> None:
    """``--eval-episodes`` and ``--eval-seconds``: the deterministic deployment measured."""
    ap.add_argument(
        '--eval-episodes',
        type=int,
        default=DEPLOY_EPISODES,
        help='deterministic deployment episodes per policy, from hanging (default: %(default)s)',
    )
    ap.add_argument(
        '--eval-seconds',
        type=float,
        default=DEPLOY_SECONDS,
        help='length of each deployment episode, s (default: %(default)s)',
    )


def module_command(
    module: str, parser: argparse.ArgumentParser, options: dict[str, Any]
) -> list[str]:
    """``python -m module --name value ...`` for a helper program's argparse ``options``.

    :param parser: the program's own parser: a name it does not have is refused here, in
        the benchmark, rather than by a child process whose log nobody reads.
    :raises ValueError: an option ``module`` does not have, named with the known ones.
    """
    known = {a.dest for a in parser._actions} - {'help'}
    cmd = [sys.executable, '-m', module]
    for name, value in options.items():
        if name not in known:
            raise ValueError(f'{module} has no option {name!r}; known: {", ".join(sorted(known))}')
        cmd += ['--' + name.replace('_', '-'), str(value)]
    return cmd


def print_stats(title: str, s: dict[str, Any]) -> None:
    """One line of tick statistics (:func:`rip_control.stats.tick_stats`) as it is measured."""
    print(
        f'{title}: {s["measured_rate_hz"]:.4f} Hz (target {s["target_rate_hz"]:g}), '
        f'{s["n_ticks"]} ticks, dt {s["dt_mean_ms"]:.4f} ± {s["dt_std_ms"]:.4f} ms, '
        f'p99 |dev| {s["dt_p99_abs_dev_ms"]:.3f} ms, max |dev| {s["dt_max_abs_dev_ms"]:.3f} ms, '
        f'max overrun {s["max_overrun_ms"]:.3f} ms, violations {s["n_violations"]}'
        + (
            f'; work p99 {s["work_p99_ms"]:.3f} ms, late releases {s["late_releases"]} '
            f'({s["late_after_long_work"]} after long work, {s["late_woke_late"]} woke late)'
            if 'late_releases' in s
            else ''
        ),
        flush=True,
    )


def machine() -> dict[str, Any]:
    """What the timing figures depend on beyond the code: CPUs, kernel, idle polling."""
    doc: dict[str, Any] = {'cpus': os.cpu_count(), 'platform': platform.platform()}
    # In a VM, how long an idle vCPU polls before it halts (0: it halts at once, and a
    # wake-up then waits for the hypervisor to run the vCPU again).
    poll = Path('/sys/module/haltpoll/parameters/guest_halt_poll_ns')
    if poll.exists():
        doc['guest_halt_poll_ns'] = int(poll.read_text())
    idle = Path('/sys/devices/system/cpu/cpuidle/current_driver')
    if idle.exists():
        doc['cpuidle_driver'] = idle.read_text().strip()
    return doc
