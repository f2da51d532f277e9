"""The search: CMA-ES over a model's parameters, and what the data determines of them.

:class:`Space` maps the unit cube CMA-ES searches to the parameters being fitted;
:func:`search` runs CMA-ES from a start and from random ones, scans the parameters whose cost
steps and polishes the plateaus it finds; :func:`lockstep` runs several CMA-ES runs as one
batch a generation. :func:`fit_determined` searches, estimates each value's uncertainty
(Gauss-Newton, inflated by the residuals' correlation time) and gives what the data does not
determine back to the prior.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
import math
import time
from typing import Any

import numpy as np

from rip_control.rig.dynamics import PendulumParams
from rip_learner.ident_data import Windows
from rip_learner.ident_model import (
    TERM_GAIN,
    Fitted,
    corrected,
    cost_of,
    grouped,
    own_costs,
    residuals,
    simulate_errors,
)

#: The quick searches (a term tried, the final fit on all the data) start this close to the
#: point they refine, as a fraction of ``initial_step``, with no random restarts.
QUICK_STEP = 0.3


def _with(base: PendulumParams, **values: Any) -> PendulumParams:
    """``base`` with ``values``, the dead zone's offset held within the dead zone."""
    if 'motor_dead_zone_offset_v' in values or 'motor_dead_zone_v' in values:
        dz = values.get('motor_dead_zone_v', base.motor_dead_zone_v)
        off = values.get('motor_dead_zone_offset_v', base.motor_dead_zone_offset_v)
        values['motor_dead_zone_offset_v'] = min(max(off, -dz), dz)
    return replace(base, **values)


class Space:
    """The unit cube CMA-ES searches, mapped to the parameters being fitted."""

    def __init__(self, fitted: list[Fitted], prior: PendulumParams, period_s: float) -> None:
        self.fitted = fitted
        self.prior = prior
        self.bounds = [f.bounds(prior, period_s) for f in fitted]

    def value(self, i: int, x: float) -> float:
        """Parameter ``i`` at ``x`` in the cube, in its unit."""
        lo, hi = self.bounds[i]
        if self.fitted[i].log:
            return lo * (hi / lo) ** x
        return lo + x * (hi - lo)

    def unit(self, i: int, value: float) -> float:
        """Parameter ``i``'s ``value`` in the cube (:meth:`value`'s inverse)."""
        lo, hi = self.bounds[i]
        if self.fitted[i].log:
            return math.log(value / lo) / math.log(hi / lo)
        return (value - lo) / (hi - lo)

    def params(self, x: Iterable[float]) -> PendulumParams:
        """The prior with the fitted parameters at the point ``x`` of the cube."""
        values: dict[str, Any] = {
            f.name: float(self.value(i, xi))
            for i, (f, xi) in enumerate(zip(self.fitted, x, strict=True))
        }
        return _with(self.prior, **values)

    def start(self, base: PendulumParams, margin: float = 0.05) -> np.ndarray:
        """``base`` in the cube, ``margin`` inside its faces (0: exactly ``base``, if inside)."""
        x = [self.unit(i, getattr(base, f.name)) for i, f in enumerate(self.fitted)]
        return np.clip(np.array(x), margin, 1.0 - margin)


#: The polishing run's first step, as a fraction of ``initial_step``.
POLISH_STEP = 0.04
#: The polishing runs' most generations, as a fraction of ``generations``.
POLISH_GENERATIONS = 0.3


def search(
    space: Space,
    win: Windows,
    x0: np.ndarray,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
) -> tuple[np.ndarray, int]:
    """The best point a search finds, and the evaluations it took.

    CMA-ES runs from ``x0`` and from ``restarts`` seeded random starts; then a grid over each
    stepped parameter's whole range (:attr:`Fitted.scan`; none when ``opts['scan']`` is empty)
    at the best of them, the others
    held; then, in lockstep, polishing runs from the grid's best :data:`SCAN_CANDIDATES`
    plateaus that cost less than that best, if any, each run's first step :data:`POLISH_STEP`
    of the first and its generations :data:`POLISH_GENERATIONS` of ``generations``. The
    cheapest point seen wins.

    The cost has flat regions and local minima. The dead zone's cost steps: it changes only
    where a commanded voltage falls between two candidate values while the arm moves, so a
    run can stop in the wrong basin with another parameter making up for it (on stuck-rig
    data recorded from the emulator, a run started at 1.6 V ended at 0.02 V; in CI one
    ended at 1.50 V, for the rig's 1.2 V; different seeds on one recording ended 0.1 V
    apart). The grid finds the dead zone's plateaus for the rest of the fit, and the polish
    lets the others follow.
    """
    rng = np.random.default_rng(opts['seed'])
    starts = [x0] + [rng.uniform(0.05, 0.95, len(x0)) for _ in range(opts['restarts'])]
    finals, exact, evaluations = lockstep(
        space, win, starts, opts['initial_step'], opts, deadline, log, cull=True
    )
    log('  ' + ', '.join(f'start {i + 1}: cost {c:.5g}' for i, c in enumerate(exact)))
    best = int(np.argmin(exact))
    seen = [(finals[best], exact[best])]
    for i, f in enumerate(space.fitted):
        if f.scan and opts.get('scan', f.name) == f.name:
            found, n = scan_grid(space, win, seen[0][0], seen[0][1], i)
            evaluations += n
            seen += found
            if found:
                shown = ', '.join(f'{space.value(i, float(x[i])):.3g}' for x, _ in found)
                log(f'  scanned {f.name}: polishing from {shown}')
    if len(seen) > 1 and time.monotonic() < deadline:
        polished, costs, more = lockstep(
            space,
            win,
            [x for x, _ in seen[1:]],
            opts['initial_step'] * POLISH_STEP,
            {
                **opts,
                'seed': opts['seed'] + 7919 * len(starts),
                'generations': max(1, round(opts['generations'] * POLISH_GENERATIONS)),
            },
            deadline,
            log,
        )
        evaluations += more
        log(f'  polished: cost {min(costs):.5g}')
        seen += list(zip(polished, costs, strict=True))
    return min(seen, key=lambda xc: xc[1])[0], evaluations


def lockstep(
    space: Space | list[Space],
    win: Windows,
    starts: list[np.ndarray],
    step: float,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
    cull: bool = False,
) -> tuple[list[np.ndarray], list[float], int]:
    """CMA-ES runs from ``starts`` in lockstep.

    Returns each run's best point and its exact cost, and the evaluations they took. Every
    generation's candidates of all the runs are simulated as one batch (a batch's cost grows
    slower than its size, :func:`_generation`). ``space`` may be one per start: runs in
    different spaces (a term each) share the batches too. With ``cull`` (runs of one model from
    different starts), a run whose best costs more than :data:`CULL_RATIO` times the best run's
    is stopped from generation :data:`CULL_AFTER` on: it has settled in a worse basin.
    """
    spaces = space if isinstance(space, list) else [space] * len(starts)
    of = dict(zip(range(len(starts)), spaces, strict=True))
    runs = _strategies(starts, step, opts, spaces[0].prior, win)
    evaluations, generation = 0, 0
    culled: set[int] = set()
    sens: dict[int, np.ndarray] = {}  # each run's start-state sensitivity (_generation's)
    while time.monotonic() < deadline:
        live = [i for i, es in enumerate(runs) if not es.stop() and i not in culled]
        if not live:
            break
        generation += 1
        if cull and generation > CULL_AFTER and generation % 10 == 0:
            culled.update(_settled_worse(runs, live))
            live = [i for i in live if i not in culled]
        evaluations += _generation(runs, live, of, starts, win, sens, generation)
        if generation % 50 == 0:
            _log_lead(runs, of, generation, log)
    else:
        log(f'  time_limit_s reached after {generation} generations')
    finals, exact = _best_ends(runs, of, starts, win)
    return finals, exact, evaluations + 2 * len(runs)


def _strategies(
    starts: list[np.ndarray],
    step: float,
    opts: dict[str, Any],
    prior: PendulumParams,
    win: Windows,
) -> list[Any]:
    """One CMA-ES run per start, created in order (run ``i`` seeded ``seed + 7919 i + 1``).

    A run stops when a generation's costs span less than ``tolerance`` of ``prior``'s cost.
    """
    import cma

    tolfun = opts['tolerance'] * float(cost_of(residuals([prior], win))[0])
    return [
        cma.CMAEvolutionStrategy(
            list(start),
            step,
            {
                'bounds': [0.0, 1.0],
                'popsize': opts['population'],
                'seed': opts['seed'] + 7919 * i + 1,  # cma: 0 means "from the clock"
                'maxiter': opts['generations'],
                'verbose': -9,
                'tolfun': tolfun,
            },
        )
        for i, start in enumerate(starts)
    ]


def _settled_worse(runs: list[Any], live: list[int]) -> list[int]:
    """The runs ``live`` whose best costs more than :data:`CULL_RATIO` times the best run's."""
    lead_cost = min(es.result.fbest for es in runs)
    return [i for i in live if runs[i].result.fbest > CULL_RATIO * lead_cost]


def _generation(
    runs: list[Any],
    live: list[int],
    of: dict[int, Space],
    starts: list[np.ndarray],
    win: Windows,
    sens: dict[int, np.ndarray],
    generation: int,
) -> int:
    """One generation of the runs ``live``, asked, simulated in one batch and told.

    Returns its evaluations. Each run's candidates have their start states corrected at the
    run's start-state sensitivity (``sens``, by run): at its best point so far (at its start in
    the first generation), refreshed every 10th generation in the same batch: runs in
    different spaces are different models.
    """
    asked = [runs[i].ask() for i in live]
    flat = [of[i].params(x) for i, xs in zip(live, asked, strict=True) for x in xs]
    groups = [len(xs) for xs in asked]
    refresh = [] if generation % 10 != 1 else live
    probed = [
        of[i].params(starts[i] if runs[i].result.xbest is None else runs[i].result.xbest)
        for i in refresh
    ]
    errors, _, fresh = simulate_errors(flat, win, probed)
    sens.update(zip(refresh, fresh, strict=True))
    costs = cost_of(grouped(errors, np.stack([sens[i] for i in live]), groups))
    k = 0
    for i, xs in zip(live, asked, strict=True):
        runs[i].tell(xs, list(costs[k : k + len(xs)]))
        k += len(xs)
    return len(flat)


def _log_lead(
    runs: list[Any], of: dict[int, Space], generation: int, log: Callable[[str], object]
) -> None:
    """Log the leading run's best cost and point."""
    lead = min(range(len(runs)), key=lambda i: runs[i].result.fbest)
    best = of[lead].params(runs[lead].result.xbest)
    shown = ', '.join(f'{f.name}={getattr(best, f.name):.4g}' for f in of[lead].fitted)
    log(f'    generation {generation}: cost {runs[lead].result.fbest:.4g} | {shown}')


def _best_ends(
    runs: list[Any], of: dict[int, Space], starts: list[np.ndarray], win: Windows
) -> tuple[list[np.ndarray], list[float]]:
    """Each run's best sample or its start, whichever costs less, and that exact cost.

    CMA-ES never samples its start; a run the deadline stopped before its first generation has
    only that. Both are costed in one batch, each at its own sensitivity (:func:`own_costs`).
    """
    ends = [
        np.asarray(start if es.result.xbest is None else es.result.xbest)
        for es, start in zip(runs, starts, strict=True)
    ]
    n = len(runs)
    both = own_costs([of[i % n].params(x) for i, x in enumerate([*ends, *starts])], win)
    finals = [ends[i] if both[i] <= both[n + i] else np.asarray(starts[i]) for i in range(n)]
    exact = [float(min(both[i], both[n + i])) for i in range(n)]
    return finals, exact


CULL_AFTER = 50
CULL_RATIO = 2.0
"""A restart costing more than this many times the best one after :data:`CULL_AFTER`
generations is stopped: on the stuck rig's excitation the two starts that lost ended at 4.8
and 16 times the winner's cost, and culling them took the identification from 88 to 76 s."""

#: How many of a scan's plateaus are polished.
SCAN_CANDIDATES = 2


def scan_grid(
    space: Space, win: Windows, x: np.ndarray, cost: float, i: int
) -> tuple[list[tuple[np.ndarray, float]], int]:
    """A grid over parameter ``i``'s range, the others held at ``x``.

    The cost of a stepped parameter is flat between steps: a run of equal costs on the grid
    is one plateau, represented by its middle point. Returns ``x`` with parameter ``i`` set
    to each of the best :data:`SCAN_CANDIDATES` plateaus lower than both neighbours that
    cost less than ``cost`` (``x``'s), with their costs; and the grid's evaluations.
    """
    f = space.fitted[i]
    lo, hi = space.bounds[i]
    values = np.linspace(lo, hi, round((hi - lo) / f.scan) + 1)
    points = [x.copy() for _ in values]
    for point, value in zip(points, values, strict=True):
        point[i] = space.unit(i, float(value))
    errors, _, sens = simulate_errors([space.params(p) for p in points], win, [space.params(x)])
    costs = cost_of(corrected(errors, sens[0]))  # at x, as ``cost`` is
    edges = [0, *(np.flatnonzero(np.diff(costs) != 0) + 1), len(costs)]
    plateaus = []
    for j, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        left = costs[edges[j - 1]] if j > 0 else np.inf
        right = costs[b] if b < len(costs) else np.inf
        if costs[a] < min(left, right, cost):
            plateaus.append((points[(a + b - 1) // 2], float(costs[a])))
    plateaus.sort(key=lambda pc: pc[1])
    return plateaus[:SCAN_CANDIDATES], len(points)


LINE_POINTS = 9
"""Points of :func:`scan_line` across a term's range."""


def scan_line(
    space: Space, win: Windows, x: np.ndarray, cost: float, i: int
) -> tuple[list[tuple[np.ndarray, float]], int]:
    """Parameter ``i`` at :data:`LINE_POINTS` points across its range, the others held at ``x``.

    As :func:`scan_grid` returns: the best point if it costs less than ``cost`` (``x``'s), with its
    cost, and the evaluations (one batch).
    """
    points = [x.copy() for _ in range(LINE_POINTS)]
    for point, u in zip(points, np.linspace(0.0, 1.0, LINE_POINTS), strict=True):
        point[i] = u
    errors, _, sens = simulate_errors([space.params(p) for p in points], win, [space.params(x)])
    costs = cost_of(corrected(errors, sens[0]))  # at x, as ``cost`` is
    j = int(np.argmin(costs))
    return ([(points[j], float(costs[j]))] if costs[j] < cost else []), len(points)


def fit_determined(
    fitted: list[Fitted],
    win: Windows,
    prior: PendulumParams,
    start: PendulumParams,
    period: float,
    opts: dict[str, Any],
    deadline: float,
    log: Callable[[str], object],
    margin: float,
) -> tuple[PendulumParams, np.ndarray, list[Fitted], list[str], int]:
    """Fit ``fitted`` to ``win`` from ``start``; drop (to the prior) what is not determined.

    ``margin``: how far inside the search range's faces the start is moved (0: a start
    refined, taken as it is). Returns the best parameters, the uncertainties of what stayed
    fitted, what stayed fitted, what was dropped, and the evaluations.
    """
    base, evaluations, undetermined = start, 0, list[str]()
    kept: tuple[PendulumParams, np.ndarray, list[Fitted], float] | None = None
    while True:
        space = Space(fitted, prior, period)
        x, n_eval = search(space, win, space.start(base, margin), opts, deadline, log)
        evaluations += n_eval
        best = space.params(x)
        cost = float(cost_of(residuals([best], win))[0])
        if kept is not None and cost > (1.0 + TERM_GAIN) * kept[3]:
            # The data needs what was dropped, though it knows it loosely (a model that does
            # not explain the rig inflates every uncertainty): keep it, with its uncertainty.
            log(f'  {undetermined.pop()}: needed (cost {kept[3]:.5g} -> {cost:.5g}): kept')
            return kept[0], kept[1], kept[2], undetermined, evaluations
        std = _uncertainty(space, win, best)
        shown = ', '.join(
            f'{f.name}={getattr(best, f.name):.4g} ± {sd:.2g}'
            for f, sd in zip(fitted, std, strict=True)
        )
        log(f'  fit: {shown}')
        worst = _loosest(fitted, best, std)
        if worst is None:
            return best, std, fitted, undetermined, evaluations
        kept = (best, std, fitted, cost)
        # Keep the prior for what the data does not determine; fit the rest again.
        undetermined.append(worst)
        log(
            f'  {worst}: not determined by this data: keeping the prior value '
            f'{getattr(prior, worst):.4g}; fitting the rest again'
        )
        fitted = [f for f in fitted if f.name != worst]
        base = _with(best, **{worst: getattr(prior, worst)})
        if not fitted:
            return prior, np.zeros(0), fitted, undetermined, evaluations


def _uncertainty(space: Space, win: Windows, best: PendulumParams) -> np.ndarray:
    """Each parameter's standard deviation at the optimum.

    Gauss-Newton standard deviations in each parameter's unit, inflated by the residuals'
    correlation time (consecutive errors of a window are not independent).
    """
    probes, steps = [], []
    for f, (lo, hi) in zip(space.fitted, space.bounds, strict=True):
        value = getattr(best, f.name)
        h = f.step(value) or f.probe
        centre = min(max(value, lo + h), hi - h)  # central differences inside the range
        steps.append(h)
        probes += [_with(best, **{f.name: centre + h}), _with(best, **{f.name: centre - h})]
    res = residuals([best, *probes], win)
    r0 = res[0].reshape(-1)
    d = len(steps)
    jac = np.stack(
        [(res[1 + 2 * i] - res[2 + 2 * i]).reshape(-1) / (2 * steps[i]) for i in range(d)],
        axis=1,
    )
    s2 = float(r0 @ r0) / max(1, len(r0) - d)
    cov = s2 * _correlation_time(res[0]) * np.linalg.pinv(jac.T @ jac)
    return np.sqrt(np.clip(np.diag(cov), 0.0, None))


def _correlation_time(res: np.ndarray) -> float:
    """The residuals' correlation time.

    Integrated autocorrelation time of the errors, in samples (at least 1): the largest of
    the windows' arm and pendulum error series.
    """
    w = (res.shape[-1] - 4) // 2
    total = 1.0
    for series in [*res[:, :w], *res[:, w : 2 * w]]:
        r = series - series.mean()
        var = float(r @ r)
        if var <= 0:
            continue
        tau = 1.0
        for lag in range(1, min(50, len(r) // 4)):
            rho = float(r[:-lag] @ r[lag:]) / var
            if rho < 0.05:
                break
            tau += 2.0 * rho
        total = max(total, tau)
    return total


def _loosest(fitted: list[Fitted], best: PendulumParams, std: np.ndarray) -> str | None:
    """The parameter the data determines least, if any is not determined.

    Least: its uncertainty over its tolerance.
    """
    ratios = {
        f.name: s / f.tolerance(getattr(best, f.name)) for f, s in zip(fitted, std, strict=True)
    }
    loose = {n: r for n, r in ratios.items() if not r <= 1.0}  # NaN counts as loose
    if not loose:
        return None
    return max(loose, key=lambda n: math.inf if math.isnan(loose[n]) else loose[n])


def quick_options(opts: dict[str, Any]) -> dict[str, Any]:
    """A search's options for refining a point: no restarts, no grid scan, a short first step."""
    return {
        **opts,
        'restarts': 0,
        'scan': '',
        'initial_step': opts['initial_step'] * QUICK_STEP,
        'generations': max(1, round(opts['generations'] * POLISH_GENERATIONS)),
    }
