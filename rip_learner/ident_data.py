"""The data an identification reads: the rig's readings as records, cut into windows.

A :class:`Record` is one unbroken run of ticks (:func:`rip_learner.identify.records_from_arrays`
reads them from buffer arrays); :func:`select` chooses the records to fit to, within a budget of
seconds; :func:`make_windows` cuts them into :class:`Windows`, padded to one shape so that one
batch simulates them all (:func:`rip_learner.ident_model.simulate`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
import math
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Record:
    """One unbroken run of ticks: ``n + 1`` readings and the ``n`` voltages between them.

    ``volts[k]`` was sent right after reading ``k`` and held until after reading ``k + 1``;
    ``dt[k]`` is the measured interval between the two readings. ``from_rest``: reading 0 is
    an episode's first (the rig at rest, 0 V before it).
    """

    theta: np.ndarray
    alpha: np.ndarray
    volts: np.ndarray
    dt: np.ndarray
    episode: int
    excitation: bool
    from_rest: bool

    @property
    def seconds(self) -> float:
        """The record's length."""
        return float(self.dt.sum())


def select(records: list[Record], max_seconds: float) -> list[Record]:
    """The excitation records first (newest first), then the newest others, up to a budget."""
    ordered = sorted(records, key=lambda r: (not r.excitation, -r.episode))
    chosen, total = [], 0.0
    for r in ordered:
        if total >= max_seconds:
            break
        chosen.append(r)
        total += r.seconds
    return chosen


@dataclass
class Windows:
    """Windows of the records, padded to one shape: what one simulation of a batch reads.

    Times are relative to each window's first reading. ``switch_t``/``switch_v``: the voltage
    commands that can act inside the window (earlier ones included for the latency), as sent;
    ``v_before``: the command in force before the first of them.
    """

    read_t: np.ndarray  # (S, W+1)
    theta: np.ndarray  # (S, W+1) measured
    alpha: np.ndarray  # (S, W+1)
    mask: np.ndarray  # (S, W+1) readings that exist
    switch_t: np.ndarray  # (S, J)
    switch_v: np.ndarray  # (S, J)
    v_before: np.ndarray  # (S,)
    theta_dot0: np.ndarray  # (S,)
    alpha_dot0: np.ndarray  # (S,)
    source: list[tuple[int, int]]  # (record index, first reading) of each window

    @property
    def count(self) -> int:
        """Number of windows."""
        return len(self.v_before)


def _spans(r: Record, ticks: int, upright_ticks: int) -> Iterable[tuple[int, int]]:
    """``(first tick, ticks)`` of each window of a record."""
    n, k = len(r.volts), 0
    shortest = min(max(2, ticks // 2), upright_ticks)
    while k < n:
        w = min(ticks, n - k)
        # Near upright the pendulum is unstable: a prediction error doubles every ~60 ms, so
        # a window that gets there is cut short.
        from_upright = np.abs(np.mod(r.alpha[k : k + w + 1], 2 * math.pi) - math.pi)
        if (from_upright < 0.5 * math.pi).any():
            w = min(w, upright_ticks)
        if w >= shortest:
            yield k, w
        k += w


def make_windows(
    records: list[Record], ticks: int, history: int, upright_ticks: int | None = None
) -> Windows:
    """The records cut into windows.

    Cut every record into windows of ``ticks`` ticks (a last short one if at least half),
    ``upright_ticks`` where the pendulum comes within 90 degrees of upright.
    """
    upright_ticks = upright_ticks or ticks
    rows: list[dict[str, Any]] = []
    for ri, r in enumerate(records):
        times = np.concatenate([[0.0], np.cumsum(r.dt)])
        for k, w in _spans(r, ticks, upright_ticks):
            if k == 0 and r.from_rest:
                td0 = ad0 = 0.0
            else:
                lo, hi = max(k - 1, 0), k + 1
                span = times[hi] - times[lo]
                td0 = (r.theta[hi] - r.theta[lo]) / span
                ad0 = (r.alpha[hi] - r.alpha[lo]) / span
            first = max(0, k - history)
            sw = np.arange(first, k + w)
            before = r.volts[first - 1] if first > 0 else 0.0
            rows.append(
                dict(
                    read_t=times[k : k + w + 1] - times[k],
                    theta=r.theta[k : k + w + 1],
                    alpha=r.alpha[k : k + w + 1],
                    switch_t=times[sw] - times[k],
                    switch_v=r.volts[sw],
                    v_before=before,
                    td0=td0,
                    ad0=ad0,
                    source=(ri, k),
                )
            )
    if not rows:
        raise ValueError(f'no window of {ticks} ticks in the data: too little of it')
    s = len(rows)
    width = ticks + 1
    jmax = max(len(r['switch_t']) for r in rows)
    out = Windows(
        read_t=np.zeros((s, width)),
        theta=np.zeros((s, width)),
        alpha=np.zeros((s, width)),
        mask=np.zeros((s, width), dtype=bool),
        switch_t=np.full((s, jmax), 1e9),  # padding: switches that never happen
        switch_v=np.zeros((s, jmax)),
        v_before=np.array([r['v_before'] for r in rows]),
        theta_dot0=np.array([r['td0'] for r in rows]),
        alpha_dot0=np.array([r['ad0'] for r in rows]),
        source=[r['source'] for r in rows],
    )
    for i, row in enumerate(rows):
        m = len(row['read_t'])
        out.read_t[i, :m], out.theta[i, :m] = row['read_t'], row['theta']
        out.alpha[i, :m] = row['alpha']
        out.read_t[i, m:] = row['read_t'][-1]
        out.mask[i, :m] = True
        j = len(row['switch_t'])
        out.switch_t[i, :j], out.switch_v[i, :j] = row['switch_t'], row['switch_v']
        out.switch_v[i, j:] = row['switch_v'][-1]
    return out


def subset(win: Windows, rows: np.ndarray) -> Windows:
    """The windows ``rows`` of ``win``."""
    return Windows(
        **{f.name: getattr(win, f.name)[rows] for f in fields(Windows) if f.name != 'source'},
        source=[win.source[i] for i in rows],
    )
