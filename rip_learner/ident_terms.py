"""The terms beyond the base model, chosen by held-out multi-step prediction error.

:func:`held_out_split` holds a share of the windows out of the fit; :func:`select_terms` tries
each of :data:`rip_learner.ident_model.TERMS` and keeps it only where it predicts the held-out
windows better; its record says how much the chosen model leaves unexplained
(:data:`GAP_COUNTS`).
"""

from __future__ import annotations

from collections.abc import Callable
import math
import time
from typing import Any

import numpy as np

from rip_control.rig.dynamics import PendulumParams
from rip_learner.ident_data import Windows, subset
from rip_learner.ident_model import (
    FITTED,
    TERM_GAIN,
    TERMS,
    Fitted,
    Term,
    cost_of,
    own_costs,
    residuals,
    rms,
)
from rip_learner.ident_search import (
    Space,
    lockstep,
    quick_options,
    scan_grid,
    scan_line,
    search,
)

#: Held-out RMS above this many encoder counts (either angle): the model does not explain the
#: rig ("expect a gap"), and the re-training is randomised that much wider, up to MAX_WIDENING
#: times. Set from few recordings: the stuck rig (in the model, 1 count of encoder noise)
#: 0.65-0.98 counts; the sticky gap rig (bench/rigs/gap_sticky.yaml) 1.6.
GAP_COUNTS = 1.25
MAX_WIDENING = 3.0
#: Every HELD_OUT_EVERY-th block of HELD_OUT_BLOCK consecutive windows is held out of the fit.
HELD_OUT_EVERY = 4
HELD_OUT_BLOCK = 3


def held_out_split(win: Windows) -> tuple[Windows, Windows | None]:
    """The windows to fit to, and those held out (``None`` when too few to spare any).

    Every :data:`HELD_OUT_EVERY`-th block of :data:`HELD_OUT_BLOCK` consecutive windows is
    held out: a share of every record, in stretches long enough that a held-out window's
    neighbours do not give it away.
    """
    block = np.arange(win.count) // HELD_OUT_BLOCK
    held = block % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
    if held.sum() < HELD_OUT_BLOCK or (~held).sum() < 2 * HELD_OUT_BLOCK:
        return win, None
    return subset(win, np.flatnonzero(~held)), subset(win, np.flatnonzero(held))


def select_terms(
    fit_win: Windows,
    held_win: Windows,
    prior: PendulumParams,
    period: float,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
) -> tuple[dict[str, Any], list[Term], PendulumParams, int]:
    """Which :data:`TERMS` the data asks for, judged by held-out multi-step prediction.

    Forward selection: the base model is searched on ``fit_win``; then, round by round, each
    term not yet kept is added alone to the model so far and refined from its best (a round's
    trials in one batch, :func:`_trials`), and the one that predicts ``held_win`` best is kept
    if it lowers the held-out cost by more than :data:`TERM_GAIN` and its size is beyond its
    resolution. The rounds end when no term passes. Returns the record of the selection (each
    term's held-out cost and verdict, the held-out RMS per channel of the base and the chosen
    model, what is left unexplained), the terms kept, the chosen model's parameters and the
    evaluations.
    """
    space = Space(list(FITTED), prior, period)
    x, evaluations = search(space, fit_win, space.start(prior), opts, deadline, log)
    best = space.params(x)
    base_res = residuals([best], held_win)[0]
    cost = float(cost_of(base_res[None])[0])
    log(f'  held out: {held_win.count} windows; base model held-out cost {cost:.5g}')
    kept: list[Term] = []
    verdicts: dict[str, Any] = {}
    while len(kept) < len(TERMS) and time.monotonic() < deadline:
        left = [t for t in TERMS if t not in kept]
        extra = [t.fitted for t in kept]
        # The model so far refined as the trials are (the control: a trial's gain over it is
        # the term's, not the refinement's), and each term added to it.
        tried, n_eval = _trials(
            [None, *left], best, fit_win, prior, period, opts, deadline, log, extra
        )
        evaluations += n_eval
        held = [float(c) for c in own_costs(tried, held_win)]
        if held[0] < cost:
            best, cost = tried[0], held[0]
        for term, candidate, h in zip(left, tried[1:], held[1:], strict=True):
            verdicts[term.fitted.name] = _verdict(term, candidate, cost, h)
        passing = [i for i, t in enumerate(left) if verdicts[t.fitted.name]['passes']]
        if not passing:
            break
        i = min(passing, key=lambda j: held[j + 1])
        kept.append(left[i])
        best, cost = tried[i + 1], held[i + 1]
        log(f'  term {left[i].name} kept: held-out cost {cost:.5g}')
    for name, v in verdicts.items():
        v['kept'] = any(t.fitted.name == name for t in kept)
        # (a term that passed yet was not kept: the time limit ended the rounds first)
        why = v['why'] or 'the time limit ended the selection first'
        log(
            f'  term {v["term"]} ({name}={v["value"]:.4g}): held-out cost '
            f'{v["held_out_cost_without"]:.5g} -> {v["held_out_cost_with"]:.5g}: '
            + ('kept' if v['kept'] else f'left out ({why})')
        )
    selection = _selection(verdicts, kept, best, base_res, held_win, prior, log)
    return selection, kept, best, evaluations


def _verdict(term: Term, candidate: PendulumParams, cost: float, held: float) -> dict[str, Any]:
    """A term's trial: its value, the held-out cost without and with it, whether it passes."""
    name = term.fitted.name
    size = abs(getattr(candidate, name) - getattr(PendulumParams(), name))
    # Better predictions, and an effect the data tells from none: a value within its
    # resolution of neutral would only let the other parameters move.
    better = held < (1.0 - TERM_GAIN) * cost
    seen = size > term.fitted.resolution
    return {
        'term': term.name,
        'value': float(getattr(candidate, name)),
        'held_out_cost_without': cost,
        'held_out_cost_with': held,
        'passes': better and seen,
        'why': (
            f'lowers the held-out cost by less than {100 * TERM_GAIN:g} %'
            if not better
            else f'within its resolution ({term.fitted.resolution:g}) of neutral'
            if not seen
            else ''
        ),
    }


def _trials(
    terms: list[Term | None],
    base: PendulumParams,
    win: Windows,
    prior: PendulumParams,
    period: float,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
    extra: list[Fitted] | None = None,
) -> tuple[list[PendulumParams], int]:
    """The base model, ``extra`` and each term (none, for ``None``), refined from ``base``.

    One quick CMA-ES run per term, all in lockstep (one batch a generation), each from the
    best point of a line through the term's range (:func:`scan_line`; a term whose cost steps,
    :attr:`Fitted.scan`, from its grid's best plateau). From the term's neutral value alone,
    a quick run's small first step rarely leaves the base model's optimum: static friction
    at 0 sits on its range's face, and every sample that moves the others costs more.

    A term whose line (or grid) lowers the cost nowhere is not refined: it comes back as
    ``base`` (the term neutral), and so does the base model itself when no term is refined.
    On a rig the model explains, that is every term: the round costs its lines alone (on the
    stuck rig's excitation every refined term had come back at neutral, in 28 s).
    """
    runs: list[tuple[int, Space, np.ndarray]] = []  # (index in terms, space, start)
    evaluations = 0
    for j, term in enumerate(terms):
        fitted = [*FITTED, *(extra or [])] + ([term.fitted] if term else [])
        space = Space(fitted, prior, period)
        x0 = space.start(base, 0.0)
        if term is not None:
            c0 = float(own_costs([space.params(x0)], win)[0])
            scan = scan_grid if term.fitted.scan else scan_line
            found, n = scan(space, win, x0, c0, len(fitted) - 1)
            evaluations += n
            if not found:
                continue
            x0 = found[0][0]
        runs.append((j, space, x0))
    out = [base] * len(terms)
    if all(terms[j] is None for j, _, _ in runs):  # no term to refine: nor the base alone
        return out, evaluations
    quick = quick_options(opts)
    spaces, starts = [r[1] for r in runs], [r[2] for r in runs]
    finals, _, n = lockstep(spaces, win, starts, quick['initial_step'], quick, deadline, log)
    for (j, space, _), x in zip(runs, finals, strict=True):
        out[j] = space.params(x)
    return out, evaluations + n


def _selection(
    verdicts: dict[str, Any],
    kept: list[Term],
    chosen: PendulumParams,
    base_res: np.ndarray,
    held_win: Windows,
    prior: PendulumParams,
    log: Callable[[str], object],
) -> dict[str, Any]:
    """The selection's record, and its log line on what the chosen model leaves unexplained."""
    rms_chosen = rms(residuals([chosen], held_win)[0])
    base = rms(base_res)
    counts = max(rms_chosen) / (2.0 * math.pi / prior.encoder_counts_per_rev)
    gap = counts > GAP_COUNTS
    widen = min(MAX_WIDENING, max(1.0, counts / GAP_COUNTS))
    log(
        f'  held-out RMS: theta {rms_chosen[0]:.4f} rad, alpha {rms_chosen[1]:.4f} rad '
        f'({counts:.2f} encoder counts; the base model {base[0]:.4f}, {base[1]:.4f}); terms: '
        + (', '.join(t.name for t in kept) or 'none')
        + (
            f'. The model does not explain this rig: expect a gap (the re-training is '
            f'randomised {widen:.2g} times wider)'
            if gap
            else ''
        )
    )
    return {
        'held_out_windows': held_win.count,
        'terms': verdicts,
        'held_out_rms_rad': {'theta': rms_chosen[0], 'alpha': rms_chosen[1]},
        'base_held_out_rms_rad': {'theta': base[0], 'alpha': base[1]},
        'unexplained_counts': counts,
        'expect_gap': gap,
        'randomization_scale': widen,
    }
