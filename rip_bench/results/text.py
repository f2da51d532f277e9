"""The prose's helpers: numbers written as the pages write them, and values read from the code.

A span ('0.52-0.61 s'), a list, a share ('63 %'), 'a, b and c', 'all 3', minutes; a node
parameter's shipped default (:func:`_control`, :func:`_learner`) and a rig file's physics
(:func:`_rig`), so that prose restates no number the code holds; and 'question N'
(:func:`_q`), a reference to another section of results.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rip_bench.paths import REPO
from rip_bench.results.order import section_number


def _q(key: str) -> str:
    """'question N', a reference to another section of results.md."""
    return f'question {section_number(key)}'


def _span(values: Sequence[float], digits: int = 2, unit: str = '') -> str:
    """'lo-hi' (one value when they read alike), with the unit after."""
    lo, hi = f'{min(values):.{digits}f}', f'{max(values):.{digits}f}'
    return (lo if lo == hi else f'{lo}-{hi}') + unit


def _list(values: Sequence[float], digits: int = 2) -> str:
    return ', '.join(f'{v:.{digits}f}' for v in values)


def _pct(share: float) -> str:
    """A share as a whole percentage: '63 %'."""
    return f'{100 * share:.0f} %'


def _and(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return ' and '.join([', '.join(items[:-1]), items[-1]] if len(items) > 1 else items)


def _slashed(values: Sequence[float], digits: int = 2) -> str:
    return ' / '.join(f'{v:.{digits}f}' for v in values)


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values))


def _of(k: int, n: int) -> str:
    """'all 3', '2 of 3'."""
    return f'all {n}' if k == n and n > 1 else f'{k} of {n}'


def _minutes(seconds: float, digits: int = 1) -> str:
    return f'{seconds / 60:.{digits}f}'


def _control(name: str) -> Any:
    """A control node parameter's default."""
    from rip_control.params import CONTROL_PARAMETERS, table_by_name

    return table_by_name(CONTROL_PARAMETERS)[name].default


def _learner(name: str) -> Any:
    """A learner node parameter's default."""
    from rip_control.params import LEARNER_PARAMETERS, table_by_name

    return table_by_name(LEARNER_PARAMETERS)[name].default


def _rig(path: str) -> Any:
    """The physics of a rig file (``PendulumParams``)."""
    from rip_control.rig.dynamics import PendulumParams

    return PendulumParams.from_yaml(REPO / path)


def _overrides(d: dict[str, Any]) -> dict[str, str]:
    """A v5 record's ``--set NODE.NAME=VALUE`` as ``{NAME: VALUE}``."""
    out = {}
    for item in d.get('overrides') or d.get('set') or []:
        key, _, value = item.partition('=')
        out[key.split('.', 1)[-1]] = value
    return out


def _each_run(values: Sequence[str], what: str) -> str:
    """'Each run's WHAT' when the runs agree, else 'The runs' WHAT' with each run's value."""
    if len(set(values)) == 1:
        return "Each run's " + what.format(values[0])
    return "The runs' " + what.format(', '.join(values))


def _bullets(*items: str) -> str:
    return '\n'.join(f'- {item}' for item in items if item)


def _returns_span(values: Sequence[float]) -> str:
    return _span(values, 0)
