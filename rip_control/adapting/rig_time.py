"""Where adapt's rig time went: the split by what the rig did, the guard's points on the curve.

Read from each on-rig phase's ``timing.csv`` (one row per episode, its ticks and the reset
before it, as the control node counted them): the excitation, the deployments' episodes, the
fine-tune's guard evaluations and training episodes, and the resets; ``other`` is the rest
of what the phases counted (an activation's first ticks, an episode a trip cut and ran again).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from rip_control import run_files

FINETUNE = '3_finetune'  # the phase whose evaluations are the guard's (the others deploy)

SPLIT = ('excitation_s', 'deployments_s', 'evaluations_s', 'training_s', 'resets_s', 'other_s')
"""The keys of :func:`split`, in the order a reader follows the loop."""


def _rows(phase_dir: Path) -> list[dict[str, str]]:
    path = phase_dir / run_files.TIMING_CSV
    if not path.exists():
        return []
    with path.open(newline='') as f:
        return list(csv.DictReader(f))


def _reset_s(row: dict[str, str]) -> float:
    value = float(row.get('reset_s') or 0.0)
    return value if value == value else 0.0  # NaN: no reset recorded


def split(run_dir: Path, phases: list[dict[str, Any]], rate_hz: float) -> dict[str, float]:
    """The rig time of ``phases`` (the record's entries) by what the rig did, s (:data:`SPLIT`)."""
    out = dict.fromkeys(SPLIT, 0.0)
    for entry in phases:
        if not entry.get('rig_seconds'):
            continue  # in simulation, or no rig time known
        counted = 0.0
        for row in _rows(run_dir / entry['phase']):
            seconds = int(row['n_ticks']) / rate_hz
            if row['kind'] == 'excitation':
                key = 'excitation_s'
            elif entry['phase'] != FINETUNE:
                key = 'deployments_s'
            else:
                key = 'evaluations_s' if row['kind'] == 'evaluation' else 'training_s'
            out[key] += seconds
            out['resets_s'] += _reset_s(row)
            counted += seconds + _reset_s(row)
        out['other_s'] += max(float(entry['rig_seconds']) - counted, 0.0)
    return {k: round(v, 2) for k, v in out.items()}


def guard_points(phase_dir: Path, start_rig_s: float, rate_hz: float) -> list[dict[str, Any]]:
    """The fine-tune's guard evaluations on the curve: each judged mean at its rig time.

    An evaluation's episodes run back to back; its point is the mean balance over them at
    the rig time its last episode ended (the phase's start plus its episodes and resets so
    far), with the verdict.
    """
    points: list[dict[str, Any]] = []
    at, pending = start_rig_s, []
    for row in _rows(phase_dir):
        at += int(row['n_ticks']) / rate_hz + _reset_s(row)
        if row['kind'] != 'evaluation':
            continue
        pending.append(float(row['balance_s']))
        if row['verdict'] == 'pending':
            continue
        points.append(
            {
                'rig_s': round(at, 2),
                'balance_s': sum(pending) / len(pending),
                'what': f'{FINETUNE} v{row["policy_version"]} {row["verdict"]}',
            }
        )
        pending = []
    return points


def target_rig_seconds(curve: list[dict[str, Any]], target_s: float) -> float | None:
    """The rig time of the first point of ``curve`` whose balance reached ``target_s``."""
    reached = [p['rig_s'] for p in curve if p['balance_s'] >= target_s]
    return min(reached) if reached else None
