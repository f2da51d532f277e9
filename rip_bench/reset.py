"""The reset between episodes, offline: time to quiet and the arm's reach, per rig and start.

``python -m rip_bench reset --json bench/results/reset_offline.json``

The rig env's own reset (:func:`rip_control.rig.env.reset_voltage`, its integral and its
quiet rule, ``QUIET_*``) run tick by tick at the control rate against the emulator's firmware
on an explicit clock (:mod:`rip_bench.offline_rig`), from starts an episode leaves behind: the
arm off centre and moving, the pendulum swinging wide or near upright. Each start is placed
directly (offline only). The reset is compared with itself without the brake's floor
(``reset_brake_floor_v_per_s`` 0) and without the brake on the pendulum's angle as well (the
brake on its velocity alone, the reset before both).
The record: per rig, controller and start, the seconds to quiet (``reset_timeout_s`` if never)
and the largest arm angle on the way.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import math
from typing import Any

NAME = 'reset'
HELP = "the reset between episodes, offline: seconds to quiet, the arm's reach"

RIGS = (
    'config/rig_qube_servo2.yaml',
    'config/rig_shifted_stuck.yaml',
    'config/rig_shifted_worn.yaml',
    'config/rig_shifted_heavy.yaml',
    'bench/rigs/gap_mild.yaml',
    'bench/rigs/gap_sticky.yaml',
    'bench/rigs/gap_laggy.yaml',
    'bench/rigs/gap_heavy_tip.yaml',
)
STARTS = (
    # (theta, theta_dot, alpha from hanging, alpha_dot): what episodes leave behind. Until
    # session 33 each went to set_state(theta, alpha, ...) as written, theta_dot and alpha
    # swapped: the reset_offline.json of earlier commits measured other starts than these.
    (1.5, 2.0, math.pi - 0.3, 0.0),  # ended at the arm limit, the pendulum near upright
    (-1.0, 0.0, 2.0, 3.0),  # a wide swing, the arm off centre
    (0.0, 0.0, 1.0, 0.0),  # a swing released at 1 rad
    (0.3, 0.0, 0.3, 0.0),  # small, off centre
    (0.0, -3.0, math.pi - 0.05, 4.0),  # fallen from upright, the arm moving
    (-0.05, -4.5, 1.06, 6.5),  # after a second of +-0.8 full voltage (the stuck rig, test_env)
    (0.0, 0.0, math.pi - 0.02, 0.0),  # a balanced episode's end: upright and still
    (0.2, 0.5, math.pi - 0.1, -0.5),  # ... falling, the arm drifting
)
#: The reset's controllers compared: its own, and with its parts taken away (their settings).
CONTROLLERS: dict[str, dict[str, float]] = {
    'brake on angle and velocity, floor': {},
    'brake on angle and velocity, no floor': {'reset_brake_floor_v_per_s': 0.0},
    'brake on velocity alone': {
        'reset_brake_floor_v_per_s': 0.0,
        'reset_pendulum_brake_v_per_rad': 0.0,
    },
}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``reset`` options."""
    ap.add_argument('--rigs', nargs='+', default=list(RIGS))
    ap.add_argument('--seed', type=int, default=0, help='encoder noise: seed + start index')


def settle(
    rig_file: str, start: tuple[float, ...], seed: int, settings: dict[str, float]
) -> dict[str, Any]:
    """One reset from ``start``: seconds to quiet (None: timed out) and the arm's reach."""
    from rip_bench.offline_rig import OfflineRig
    from rip_bench.paths import REPO
    from rip_control.params import CONTROL_PARAMETERS, defaults
    from rip_control.rig import env
    from rip_control.rig.gap_plant import load_rig

    params, gap = load_rig(REPO / rig_file)
    rig = OfflineRig(params, gap, seed=seed)
    c = env.TaskConfig.from_params(defaults(CONTROL_PARAMETERS))
    c = replace(c, **settings)
    dt = c.period_s
    rig.engage()
    rig.firmware.advance_to(0.0)
    theta, theta_dot, alpha, alpha_dot = start
    rig.firmware.dynamics.set_state(theta, alpha, theta_dot, alpha_dot)
    prev, t, still, reach = rig.read(), 0.0, None, 0.0
    controller = env.ResetController(c)
    while t < c.reset_timeout_s:
        t += dt
        cur = rig.at(t).read()
        d = max(cur.time_s - prev.time_s, 1e-6)
        theta_dot, alpha_dot = (cur.theta - prev.theta) / d, (cur.alpha - prev.alpha) / d
        alpha_down, prev = env.wrap_angle(cur.alpha), cur
        reach = max(reach, abs(cur.theta))
        volts, quiet = controller.step(cur.theta, alpha_down, theta_dot, alpha_dot)
        still = (still if still is not None else t) if quiet else None
        if still is not None and t - still >= env.QUIET_S:
            return {'seconds': round(t, 3), 'settled': True, 'arm_reach_rad': round(reach, 3)}
        rig.set_voltage(volts)
    return {'seconds': round(t, 3), 'settled': False, 'arm_reach_rad': round(reach, 3)}


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Every rig, both controllers, every start: the JSON record."""
    out: dict[str, Any] = {'starts': [list(s) for s in STARTS], 'seed': a.seed, 'rigs': {}}
    for rig in a.rigs:
        out['rigs'][rig] = {}
        for name, settings in CONTROLLERS.items():
            runs = [settle(rig, start, a.seed + i, settings) for i, start in enumerate(STARTS)]
            out['rigs'][rig][name] = runs
            print(
                f'{rig}: {name}: '
                + ', '.join(
                    f'{r["seconds"]:.1f} s' + ('' if r['settled'] else ' (timeout)') for r in runs
                )
                + f'; arm reach {max(r["arm_reach_rad"] for r in runs):.2f} rad',
                flush=True,
            )
    return out


def table(records: list[dict[str, Any]]) -> str:
    """Seconds to quiet (mean and largest over the starts) and the arm's reach, by rig."""
    lines = [
        '| rig | controller | mean s to quiet | largest | timed out | arm reach, rad |',
        '|---|---|---|---|---|---|',
    ]
    for d in records:
        for rig, by in d['rigs'].items():
            for name, runs in by.items():
                s = [r['seconds'] for r in runs]
                lines.append(
                    f'| {rig.rsplit("/", 1)[-1].removesuffix(".yaml")} | {name} | '
                    f'{sum(s) / len(s):.1f} | {max(s):.1f} | '
                    f'{sum(not r["settled"] for r in runs)} of {len(runs)} | '
                    f'{max(r["arm_reach_rad"] for r in runs):.2f} |'
                )
    return '\n'.join(lines)


TABLES = {NAME: table}
