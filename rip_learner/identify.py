"""System identification: the rig's physics from the transitions it recorded.

``python -m rip_learner.identify run:=runs/NAME`` (or ``buffer:=FILE``, ``bag:=DIR``)

Fits the emulator's own equations of motion (:mod:`rip_control.rig.dynamics`) to the rig's
readings by **multi-step simulation error**: the data is cut into windows of
``window_seconds``; each window is simulated from its measured start with the voltages the
rig was sent, switched at the measured tick times plus the latency, and the predicted arm and
pendulum angles are compared with the readings over the whole window (one-step regression
would fit the encoder noise and miss the latency). The fitted parameters are the motor dead
zone, the arm's Coulomb friction, the arm's and the pendulum's viscous damping, the motor
resistance (the torque per volt), the sensing latency (continuous: a voltage switch inside a
physics step counts by its share of the step) and the pendulum's and the arm's masses and the
pendulum's length. The optimiser is CMA-ES (``cma``), robust to the dead zone's and the
friction's kinks.

Beyond that base model, the terms of :mod:`rip_learner.ident_model` (a dead zone off centre,
static friction, an actuator lag, the cable's torque, the pendulum's inertia apart from a
rod's) are chosen by **held-out multi-step prediction error**: the base is fitted to three
quarters of the windows, each term is added in turn and kept only if the held-out quarter is
predicted better (and the term's size is beyond its resolution). The held-out RMS per angle
is reported; above ``GAP_COUNTS`` encoder counts the model does not explain the rig ("expect a
gap") and ``randomization:=identified`` draws that many times wider. A physical rig is never
the model: see ``docs/reality_gap.md``.

Each value's uncertainty is the Gauss-Newton standard deviation at the optimum, inflated by the
residuals' correlation time. A parameter the data does not determine (its uncertainty above
:attr:`~rip_learner.ident_model.Fitted.resolution`) keeps the prior's value, is named, and
the rest are fitted again without it, unless the fit without it costs clearly more (a model
that does not explain the rig inflates every uncertainty): then it stays, with its
uncertainty.

Outputs: a rig YAML in the format of ``config/rig_*.yaml`` (``rig:`` holds every parameter, so
the emulator and ``pretrain`` load it unchanged; ``identification:`` holds each value's prior,
uncertainty and verdict, and the fit's residuals) and a plot of predicted against measured
trajectories beside it.

Only transitions reach the fit: angles and voltages as the rig reported and was sent, with
their measured dt. The rig description of an emulated rig is never read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
import math
from pathlib import Path
import sys
import time
from typing import Any

import numpy as np

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.params import (
    CONTROL_PARAMETERS,
    Param,
    help_requested,
    parse_options,
    table_by_name,
)
from rip_control.rig.dynamics import PendulumParams
from rip_control.transitions import EXCITATION_VERSION
from rip_learner.ident_data import Record, Windows, make_windows, select, subset
from rip_learner.ident_model import (
    ALL_FITTED,
    FITTED,
    LATENCY_PERIODS,
    SCALE,
    Term,
    residuals,
    rms,
    simulate,
)
from rip_learner.ident_search import POLISH_STEP, fit_determined, quick_options
from rip_learner.ident_terms import held_out_split, select_terms

_CONTROL = table_by_name(CONTROL_PARAMETERS)

OPTIONS = (
    Param('run', '', 'a run folder: its replay buffer (replay_buffer.safetensors)'),
    Param(
        'buffer',
        '',
        'a replay buffer file, or several separated by commas (each numbers its episodes '
        "after the earlier's: e.g. two deployments' evaluation transitions)",
    ),
    Param('bag', '', 'a bag of the transitions topic (a directory)'),
    Param('out', '', f'rig YAML to write (default: {run_files.IDENTIFIED_RIG} in the run folder)'),
    Param(
        'prior',
        '',
        'rig YAML of the starting values and of what is not fitted (default: '
        'the QUBE-Servo 2 of rip_control.rig.dynamics.PendulumParams)',
    ),
    replace(
        _CONTROL['rate_hz'],
        description='the control rate the data were recorded at, Hz (a buffer or bag of '
        'another rate is refused, naming both)',
    ),
    _CONTROL['max_action_v'],
    Param('window_seconds', 0.5, 'length of one simulated window, s', 0.04, 10.0),
    Param(
        'upright_window_seconds',
        0.1,
        'window length where the pendulum is near upright (unstable there: errors grow fast), s',
        0.04,
        10.0,
    ),
    Param(
        'max_seconds',
        120.0,
        'use at most this much of the data (the newest excitation '
        'first, then the newest episodes), s',
        1.0,
        100_000.0,
    ),
    Param('generations', 150, 'most CMA-ES generations', 1, 100_000),
    Param('population', 12, 'CMA-ES population', 4, 1000),
    Param(
        'initial_step',
        0.25,
        "CMA-ES's first step, as a fraction of each search range "
        '(smaller: a prior already close, e.g. an earlier identification)',
        0.001,
        1.0,
    ),
    Param(
        'restarts',
        2,
        'CMA-ES runs from random starts besides the one from the prior (the '
        'cost has local minima)',
        0,
        100,
    ),
    Param(
        'tolerance',
        1e-7,
        "stop a CMA-ES run when a generation's costs span less than this "
        "fraction of the prior's cost",
        0.0,
        1.0,
    ),
    Param('seed', 0, 'seed of CMA-ES', 0, 2**31 - 1),
    Param('time_limit_s', 600.0, 'stop the search after this long', 1.0, 86_400.0),
    Param('plot', True, 'write the predicted-against-measured plot'),
)


# -- the fit ----------------------------------------------------------------------------------


@dataclass
class Estimate:
    """One fitted parameter's result."""

    name: str
    prior: float
    value: float
    std: float
    determined: bool


@dataclass
class Identification:
    """What :func:`identify` found."""

    params: PendulumParams
    estimates: list[Estimate]
    rms_theta_rad: float
    rms_alpha_rad: float
    prior_rms_theta_rad: float
    prior_rms_alpha_rad: float
    seconds_of_data: float
    windows: int
    evaluations: int
    wall_s: float
    undetermined: list[str]
    selection: dict[str, Any] | None = None  # select_terms's record; None: none was made

    def moved(self) -> dict[str, dict[str, float]]:
        """The parameters the data moved from the prior by more than they count as determined.

        Determined, and further from the prior than :meth:`Fitted.tolerance` at the prior:
        name -> ``from``, ``to``, ``tolerance`` (what a second identification, started at a
        first one's result, found that the first got wrong).
        """
        by_name = {f.name: f for f in ALL_FITTED}
        out = {}
        for e in self.estimates:
            tolerance = by_name[e.name].tolerance(e.prior)
            if e.determined and abs(e.value - e.prior) > tolerance:
                out[e.name] = {'from': e.prior, 'to': e.value, 'tolerance': tolerance}
        return out

    def summary(self) -> dict[str, Any]:
        """The record of the fit: the rig YAML's ``identification:`` (JSON-able too)."""
        return {
            'fitted': {
                e.name: {
                    'value': float(e.value),
                    'std': None if math.isnan(e.std) else float(e.std),
                    'prior': float(e.prior),
                    'determined': e.determined,
                }
                for e in self.estimates
            },
            'undetermined_kept_prior': list(self.undetermined),
            'moved': self.moved(),
            'not_fitted_scale': SCALE,
            'residual_rms_rad': {'theta': self.rms_theta_rad, 'alpha': self.rms_alpha_rad},
            'prior_residual_rms_rad': {
                'theta': self.prior_rms_theta_rad,
                'alpha': self.prior_rms_alpha_rad,
            },
            'seconds_of_data': self.seconds_of_data,
            'windows': self.windows,
            'evaluations': self.evaluations,
            'wall_s': round(self.wall_s, 2),
            'selection': self.selection,
        }


def identify(
    records: list[Record],
    prior: PendulumParams,
    opts: dict[str, Any],
    log: Callable[[str], object] = print,
) -> tuple[Identification, Windows]:
    """Fit the model to the records; see the module docstring.

    The base model (``FITTED``) is fitted to all but the held-out windows
    (:func:`~rip_learner.ident_terms.held_out_split`); each of ``TERMS`` is then tried and
    kept only if it lowers the held-out cost (:func:`~rip_learner.ident_terms.select_terms`);
    last, the chosen model is fitted to all the data, and what the data does not determine
    keeps the prior's value.
    """
    t0 = time.monotonic()
    period = 1.0 / float(opts['rate_hz'])
    win, seconds = _windows(records, opts, log)
    deadline = t0 + opts['time_limit_s']
    fit_win, held_win = held_out_split(win)
    if held_win is None:
        log('  too few windows to hold any out: the base model, no term tried')
        kept: list[Term] = []
        selection, start, evaluations = None, prior, 0
    else:
        selection, kept, start, evaluations = select_terms(
            fit_win, held_win, prior, period, opts, deadline, log
        )
    # Without a selection the full search; after one, the chosen model refined on all the
    # data, with a polish's first step: it starts at the optimum of three quarters of them.
    refine = {**quick_options(opts), 'initial_step': opts['initial_step'] * POLISH_STEP}
    fit_opts, margin = (opts, 0.05) if selection is None else (refine, 0.0)
    fitted = [*FITTED, *(t.fitted for t in kept)]
    best, std, fitted, undetermined, n_eval = fit_determined(
        fitted, win, prior, start, period, fit_opts, deadline, log, margin
    )
    by_name = {f.name: float(s) for f, s in zip(fitted, std, strict=True)}
    estimates = [
        Estimate(f.name, getattr(prior, f.name), getattr(best, f.name), by_name[f.name], True)
        if f.name in by_name
        else Estimate(f.name, getattr(prior, f.name), getattr(prior, f.name), math.nan, False)
        for f in ALL_FITTED
    ]
    res = rms(residuals([best], win)[0])
    prior_res = rms(residuals([prior], win)[0])
    result = Identification(
        params=best,
        estimates=estimates,
        rms_theta_rad=res[0],
        rms_alpha_rad=res[1],
        prior_rms_theta_rad=prior_res[0],
        prior_rms_alpha_rad=prior_res[1],
        seconds_of_data=seconds,
        windows=win.count,
        evaluations=evaluations + n_eval,
        wall_s=time.monotonic() - t0,
        undetermined=[u for u in undetermined if u in {f.name for f in FITTED}],
        selection=selection,
    )
    return result, win


def _windows(
    records: list[Record], opts: dict[str, Any], log: Callable[[str], object]
) -> tuple[Windows, float]:
    """The chosen records cut into windows, and their seconds of data."""
    period = 1.0 / float(opts['rate_hz'])
    chosen = select(records, opts['max_seconds'])
    if not chosen:
        raise ValueError('no unbroken run of transitions to identify from')
    ticks = max(2, round(opts['window_seconds'] / period))
    upright = max(2, round(opts['upright_window_seconds'] / period))
    win = make_windows(chosen, ticks, LATENCY_PERIODS + 1, upright)
    seconds = sum(r.seconds for r in chosen)
    n_exc = sum(r.excitation for r in chosen)
    log(
        f'identifying from {seconds:.1f} s of rig data ({len(chosen)} records, {n_exc} of them '
        f'excitation; {win.count} windows of up to {ticks} ticks)'
    )
    return win, seconds


# -- input and output -------------------------------------------------------------------------


def load_records(opts: dict[str, Any]) -> tuple[list[Record], str]:
    """The records of the one data source given, and a description of it.

    The source: ``run:=``, ``buffer:=`` or ``bag:=``. Raises :class:`ValueError` naming a
    missing or unreadable source.
    """
    from rip_control import buffer_file

    given = [k for k in ('run', 'buffer', 'bag') if opts[k]]
    if len(given) != 1:
        raise ValueError(
            'give exactly one of run:=DIR, buffer:=FILE or bag:=DIR'
            + (f' (got {", ".join(given)})' if given else '')
        )
    rate, max_v = float(opts['rate_hz']), float(opts['max_action_v'])
    if opts['bag']:
        from rip_control.bags import KEY_SIZES, custom_data, read_transitions
        from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

        path = Path(opts['bag'])
        if not path.exists():
            raise ValueError(f'bag:={path}: no such bag')
        sizes = custom_data(path).get(KEY_SIZES, f'{OBS_SIZE},{ACTION_SIZE}')
        obs_size, action_size = (int(v) for v in sizes.split(','))
        got = read_transitions(
            [path],
            rate_hz=rate,
            obs_size=obs_size,
            action_size=action_size,
            dt_tolerance_s=1.0 / rate,  # a late tick is data too: its dt was measured
        )
        arrays = buffer_file.arrays_from_transitions(list(got.transitions))
        source = f'bag {path} ({len(got.transitions)} transitions)'
    else:
        paths = (
            [Path(f) for f in str(opts['buffer']).split(',')]
            if opts['buffer']
            else [Path(opts['run']) / run_files.BUFFER]
        )
        parts: list[str] = []
        records: list[Record] = []
        for path in paths:
            if not path.exists():
                raise ValueError(
                    f'{"buffer" if opts["buffer"] else "run"}:= no replay buffer at {path}'
                )
            arrays, meta = buffer_file.load(path, rate_hz=rate, obs_size=None, action_size=None)
            if not len(arrays['rewards']):
                raise ValueError(f'replay buffer {path} (0 transitions): no transitions')
            # Each file numbers its episodes from 0: a later file's are the newer ones.
            first = 1 + max((r.episode for r in records), default=-1)
            arrays = {**arrays, 'episodes': arrays['episodes'] + first}
            records += records_from_arrays(arrays, 1.0 / rate, max_v)
            parts.append(f'{path} ({meta.count} transitions)')
        source = ('replay buffers ' if len(paths) > 1 else 'replay buffer ') + ' and '.join(parts)
        return records, source
    if not arrays or not len(arrays['rewards']):
        raise ValueError(f'{source}: no transitions')
    return records_from_arrays(arrays, 1.0 / rate, max_v), source


def records_from_arrays(
    arrays: dict[str, np.ndarray], period_s: float, max_action_v: float
) -> list[Record]:
    """Unbroken records from buffer arrays.

    From buffer arrays (:data:`rip_learner.buffer_file.FIELDS` and
    ``PROVENANCE``). A transition continues the previous one when its observation is the
    previous next-observation and no episode ended between them; without provenance the dt is
    taken as the period and the episode as unknown.
    """
    obs, nxt = arrays['observations'], arrays['next_observations']
    acts = np.clip(arrays['actions'][:, 0].astype(np.float64), -1.0, 1.0) * max_action_v
    dones = arrays['dones'] > 0.5
    steps, episodes = arrays['steps'], arrays['episodes']
    dts = np.where(arrays['dts'] > 0, arrays['dts'], period_s)
    versions = arrays['policy_versions']
    out: list[Record] = []
    start = 0
    n = len(acts)
    for i in range(1, n + 1):
        broken = (
            i == n
            or dones[i - 1]
            or not np.array_equal(obs[i], nxt[i - 1])
            or episodes[i] != episodes[i - 1]
            or (steps[i] >= 0 and steps[i] != steps[i - 1] + 1)
        )
        if not broken:
            continue
        if i - start >= 2:
            chain = np.concatenate([obs[start : start + 1], nxt[start:i]])
            theta, alpha = _angles(chain)
            out.append(
                Record(
                    theta=theta,
                    alpha=alpha,
                    volts=acts[start:i],
                    dt=dts[start:i].astype(np.float64),
                    episode=int(episodes[start]),
                    excitation=bool((versions[start:i] == EXCITATION_VERSION).all()),
                    from_rest=bool(steps[start] == 0),
                )
            )
        start = i
    return out


def _angles(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    theta = obs[:, 0].astype(np.float64)
    phi = np.arctan2(obs[:, 1].astype(np.float64), obs[:, 2].astype(np.float64))
    return theta, np.unwrap(phi + math.pi)  # alpha: zero hanging, continuous


def _yaml_text(result: Identification, source: str, prior_name: str) -> str:
    """The rig YAML's text.

    ``rig:`` every parameter (what the emulator and pretrain load),
    ``identification:`` how each fitted value was found.
    """
    import yaml

    shipped = PendulumParams()  # each field's type (int or float), for a plain YAML
    rig = {
        f.name: type(getattr(shipped, f.name))(getattr(result.params, f.name))
        for f in fields(PendulumParams)
    }
    ident = {'source': source, 'prior': prior_name, **result.summary()}
    head = (
        '# Rig physics identified from its own transitions (python -m rip_learner.identify).\n'
        '# rig: what the emulator and pretrain load (rig_params:=THIS_FILE);\n'
        '# identification: each fitted value with its uncertainty (one std), the prior and\n'
        '# whether the data determined it (if not, the prior value is kept).\n'
    )
    body = yaml.safe_dump({'rig': rig, 'identification': ident}, sort_keys=False)
    return head + body


def write_yaml(path: Path, result: Identification, source: str, prior_name: str) -> None:
    """Write the rig YAML atomically."""
    atomic_write_bytes(path, _yaml_text(result, source, prior_name).encode())


def plot(path: Path, result: Identification, prior: PendulumParams, win: Windows) -> None:
    """Plot predicted (identified and prior) against measured angles.

    Over the first record's windows (the newest excitation's, if any), each window simulated
    from its measured start.
    """
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    by_record: dict[int, list[int]] = {}
    for i, (ri, _) in enumerate(win.source):
        by_record.setdefault(ri, []).append(i)
    record = min(by_record)  # the first chosen: the newest excitation, if there is one
    rows = by_record[record]
    sub = subset(win, np.array(rows))
    (th_fit, al_fit), (th_pri, al_pri) = (
        (a[0], b[0]) for a, b in (simulate([p], sub) for p in (result.params, prior))
    )
    fig, ax = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    offset = 0.0
    for j in range(sub.count):
        m = sub.mask[j]
        t = offset + sub.read_t[j][m]
        for row, (meas, fit, pri) in enumerate(
            ((sub.theta, th_fit, th_pri), (sub.alpha, al_fit, al_pri))
        ):
            ax[row].plot(
                t, meas[j][m], color='black', lw=1.2, label='measured' if j == 0 else None
            )
            ax[row].plot(
                t, fit[j][m], color='tab:blue', lw=1.0, label='identified' if j == 0 else None
            )
            ax[row].plot(
                t, pri[j][m], color='tab:red', lw=0.8, ls='--', label='prior' if j == 0 else None
            )
        offset = t[-1]
    ax[0].set(ylabel='arm angle theta (rad)')
    ax[1].set(ylabel='pendulum angle alpha (rad, 0 hanging)', xlabel='time in the record (s)')
    ax[0].set_title(
        f'each {win.read_t.shape[1] - 1}-tick window simulated from its measured start; RMS '
        f'identified {result.rms_theta_rad:.3g}/{result.rms_alpha_rad:.3g} rad, '
        f'prior {result.prior_rms_theta_rad:.3g}/{result.prior_rms_alpha_rad:.3g} rad',
        fontsize=9,
    )
    ax[0].legend(fontsize=8, loc='upper right')
    fig.tight_layout()
    tmp = path.with_name(f'.{path.name}.tmp.png')
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)


def run(opts: dict[str, Any], log: Callable[[str], object] = print) -> tuple[Identification, Path]:
    """Load, identify, write the YAML (and the plot); return the result and the YAML's path."""
    records, source = load_records(opts)
    return run_records(records, source, opts, log)


def run_records(
    records: list[Record], source: str, opts: dict[str, Any], log: Callable[[str], object] = print
) -> tuple[Identification, Path]:
    """:func:`run` on records already loaded (``source`` describes them)."""
    log(f'identify: {source}: {len(records)} unbroken records')
    if opts['prior']:
        prior, prior_name = PendulumParams.from_yaml(opts['prior']), str(opts['prior'])
    else:
        prior, prior_name = PendulumParams(), 'QUBE-Servo 2 defaults (PendulumParams)'
    if opts['out']:
        out = Path(opts['out'])
    elif opts['run']:
        out = Path(opts['run']) / run_files.IDENTIFIED_RIG
    else:
        raise ValueError('out:=PATH.yaml is needed with buffer:= or bag:=')
    result, win = identify(records, prior, opts, log)
    write_yaml(out, result, source, prior_name)
    log(f'identify: wrote {out}')
    for e in result.estimates:
        verdict = (
            f'{e.value:.4g} ± {e.std:.2g}'
            if e.determined
            else f'not determined: kept the prior {e.prior:.4g}'
        )
        log(f'  {e.name:38s} {verdict}')
    log(
        f'  residual RMS theta {result.rms_theta_rad:.4f} rad, alpha {result.rms_alpha_rad:.4f} '
        f'rad (prior: {result.prior_rms_theta_rad:.4f}, {result.prior_rms_alpha_rad:.4f}); '
        f'{result.wall_s:.1f} s'
    )
    if opts['plot']:
        figure = out.with_suffix('.png')
        plot(figure, result, prior, win)
        log(f'identify: wrote {figure}')
    return result, out


def main(argv: list[str] | None = None) -> int:
    """Command line: ``name:=value`` options (see ``--help``)."""
    argv = sys.argv[1:] if argv is None else argv
    if help_requested(argv, __doc__, OPTIONS):
        return 0
    try:
        opts = parse_options(argv, OPTIONS)
        run(opts, log=lambda line: print(line, flush=True))
    except (ValueError, FileNotFoundError) as exc:
        print(f'identify: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print('identify: interrupted', file=sys.stderr)
        return 130
    return 0


if __name__ == '__main__':
    sys.exit(main())
