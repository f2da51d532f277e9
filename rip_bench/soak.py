"""``soak``: hours of fine-tuning on emulated rigs; every process's memory, files and threads.

``python -m rip_bench soak --minutes 120 --rigs 1 --json bench/results/soak_1rig.json``

The whole fine-tune (runner, learner, control node per rig) against emulators this benchmark
starts itself, each with its firmware clock set ``--wrap-after-s`` before its 32-bit
microsecond wrap (71.6 minutes on a real board), so every run crosses it. Every
``--sample-s`` it reads, for each process of the run (this one, which hosts the runner's
node, and its descendants), the resident memory, the open file descriptors and the threads
from ``/proc``. The run stops by the runner's own rig-time limit (``rig_seconds``).

The record: the samples; each process's memory slope (MiB per hour, a least-squares line
through the samples after the first ``--warmup-s``, its last sample left out: it may fall in
the ordered stop) and its growth; timing violations and
serial errors per episode (from ``timing.csv``); transitions published against received;
whether the replay buffer filled (``buffer_evicted``). A plot of memory against time goes
beside the JSON.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from pathlib import Path
import tempfile
import threading
import time
from typing import Any

import numpy as np

from rip_control import run_files

NAME = 'soak'
HELP = 'hours of running: memory, files, threads per process; violations over time'

#: The firmware clock's wrap, seconds (2**32 microseconds).
WRAP_S = 2**32 / 1e6


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``soak`` options."""
    ap.add_argument('--minutes', type=float, default=120.0, help='rig time to run (default 120)')
    ap.add_argument('--rigs', type=int, default=1, help='emulated rigs, one control node each')
    ap.add_argument('--sample-s', type=float, default=60.0, help='seconds between samples')
    ap.add_argument(
        '--warmup-s',
        type=float,
        default=600.0,
        help='samples before this are left out of the memory slope (imports, first fills)',
    )
    ap.add_argument(
        '--wrap-after-s',
        type=float,
        default=600.0,
        help="each emulator's firmware clock wraps this long after it starts (default 600)",
    )
    ap.add_argument('--rig-params', default='', help='rig YAML for the emulators (default QUBE)')
    ap.add_argument('--plots', default='', help='folder for the PNG (default: beside --json)')
    ap.add_argument(
        '--set', nargs='*', default=[], metavar='NAME:=VALUE', help='more runner arguments'
    )


def parents() -> dict[int, int]:
    """Every process's parent, from ``/proc``."""
    out: dict[int, int] = {}
    for entry in Path('/proc').iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / 'stat').read_text()
            except OSError:
                continue  # ended meanwhile
            # field 4 (ppid) follows the command name in parentheses, which may hold spaces
            out[int(entry.name)] = int(stat.rsplit(')', 1)[1].split()[1])
    return out


def descendants(root: int, parent: dict[int, int] | None = None) -> list[int]:
    """``root`` and every process below it."""
    parent = parents() if parent is None else parent
    out, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, ppid in parent.items() if ppid in frontier]
        out += frontier
    return out


def label(pid: int, own: int, parent_label: str = '') -> str:
    """Which process of the run: ``runner``, or the module it runs and its rig.

    The rig is the node's namespace (``__ns:=``) or the emulator's link name; a process
    without either (a control node's real-time process) takes its parent's.
    """
    if pid == own:
        return 'runner'
    try:
        args = (Path('/proc') / str(pid) / 'cmdline').read_bytes().split(b'\0')
    except OSError:
        return f'pid {pid}'
    words = [a.decode(errors='replace') for a in args if a]
    if not words:
        return f'pid {pid}'  # a zombie
    if '-m' in words:
        module = words[words.index('-m') + 1].removeprefix('rip_control.')
        module = module.removeprefix('rip_learner.')
    else:
        module = Path(words[0]).name
    ns = next((w.split(':=', 1)[1].strip('/') for w in words if w.startswith('__ns:=')), '')
    if not ns and '--link' in words[:-1]:
        ns = Path(words[words.index('--link') + 1]).name
    if not ns and '/' in parent_label:
        ns = parent_label.split('/', 1)[1]
    return f'{module}/{ns}' if ns else module


def sample(pid: int) -> dict[str, int] | None:
    """Resident memory (KiB), open file descriptors and threads of ``pid`` (None: gone)."""
    base = Path('/proc') / str(pid)
    try:
        status = dict(
            line.split(':', 1)
            for line in (base / 'status').read_text().splitlines()
            if ':' in line
        )
        fds = sum(1 for _ in (base / 'fd').iterdir())
    except OSError:
        return None
    if 'VmRSS' not in status:
        return None  # a zombie: nothing resident
    return {
        'rss_kib': int(status['VmRSS'].split()[0]),
        'fds': fds,
        'threads': int(status['Threads']),
    }


class Sampler(threading.Thread):
    """Samples the run's processes every ``period_s`` until stopped."""

    def __init__(self, period_s: float) -> None:
        super().__init__(name='soak-sampler', daemon=True)
        self.period_s = period_s
        self.samples: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        self._done = threading.Event()

    def run(self) -> None:
        """Sample at once, then every ``period_s``."""
        own = os.getpid()
        labels: dict[int, str] = {}
        while True:
            t = time.monotonic() - self.t0
            parent = parents()
            for pid in descendants(own, parent):  # parents before their children
                try:
                    if pid not in labels:
                        labels[pid] = label(pid, own, labels.get(parent.get(pid, -1), ''))
                    got = sample(pid)
                except (OSError, ValueError, KeyError, IndexError):
                    continue  # a process ending as it is read: the next sample has it
                if got is not None:
                    self.samples.append(
                        {'t_s': round(t, 1), 'process': labels[pid], 'pid': pid, **got}
                    )
            if self._done.wait(self.period_s):
                return

    def stop(self) -> None:
        """End the sampling and wait for the thread."""
        self._done.set()
        self.join()


def slopes(samples: list[dict[str, Any]], warmup_s: float) -> dict[str, dict[str, Any]]:
    """Per process: memory slope (MiB/h) after the warm-up, growth, fds and threads."""
    import numpy as np

    out: dict[str, dict[str, Any]] = {}
    for name in sorted({s['process'] for s in samples}):
        # Each process's last sample may fall in the run's ordered stop: left out.
        every = [s for s in samples if s['process'] == name]
        mine = every[:-1] or every
        late = [s for s in mine if s['t_s'] >= warmup_s]
        t = np.array([s['t_s'] for s in late]) / 3600.0
        rss = np.array([s['rss_kib'] for s in late]) / 1024.0
        slope = float(np.polyfit(t, rss, 1)[0]) if len(late) >= 3 and np.ptp(t) > 0 else None
        out[name] = {
            'samples': len(mine),
            'rss_mib_first': round(mine[0]['rss_kib'] / 1024.0, 1),
            'rss_mib_last': round(mine[-1]['rss_kib'] / 1024.0, 1),
            'rss_mib_max': round(max(s['rss_kib'] for s in mine) / 1024.0, 1),
            'rss_slope_mib_per_h': None if slope is None else round(slope, 2),
            'fds_first_last': [mine[0]['fds'], mine[-1]['fds']],
            'threads_first_last': [mine[0]['threads'], mine[-1]['threads']],
        }
        if late:  # after the warm-up: what a leak would show
            out[name]['after_warmup'] = {
                'samples': len(late),
                'rss_mib_growth': round((late[-1]['rss_kib'] - late[0]['rss_kib']) / 1024.0, 1),
                'fds_max_minus_min': max(s['fds'] for s in late) - min(s['fds'] for s in late),
                'threads_max_minus_min': max(s['threads'] for s in late)
                - min(s['threads'] for s in late),
            }
    return out


def buffer_full_s(doc: dict[str, Any], capacity: int) -> float | None:
    """About when the learner's buffer (of ``capacity``) filled, seconds into the run.

    Transitions arrive at a steady rate (every rig's episodes and resets alike), so the time is
    the run's mean arrival rate's; ``None`` when nothing was evicted.
    """
    if not doc['buffer_evicted'] or not doc['transitions_received']:
        return None
    return float(doc['wall_seconds']) * capacity / int(doc['transitions_received'])


def learner_slope_when_full(doc: dict[str, Any], capacity: int) -> float | None:
    """The learner's memory slope (MiB/h) from the buffer's filling on, as :func:`slopes`."""
    full = buffer_full_s(doc, capacity)
    if full is None:
        return None
    return slopes(doc['samples'], full).get('learner_node', {}).get('rss_slope_mib_per_h')


def _episodes(run_dir: Path) -> list[dict[str, Any]]:
    """Each episode's violations, kind, return and verdict from ``timing.csv`` (per rig)."""
    rows: list[dict[str, Any]] = []
    # Several rigs: each rig's own file (the run's own, written at the end, merges them).
    paths = sorted(run_dir.glob(f'*/{run_files.TIMING_CSV}')) or [run_dir / run_files.TIMING_CSV]
    for path in paths:
        with path.open(newline='') as f:
            for r in csv.DictReader(f):
                rows.append(
                    {
                        'rig': path.parent.name,
                        'episode': int(r['episode']),
                        'kind': r.get('kind', ''),
                        'ticks': int(r['n_ticks']),
                        'violations': int(r['n_violations']),
                        'max_overrun_ms': float(r['max_overrun_ms']),
                        # what the learner made of the hours: each evaluation's candidate
                        'return': float(r['episode_return']),
                        'balance_s': float(r['balance_s']),
                        'policy_version': int(r['policy_version']),
                        'verdict': r.get('verdict', ''),
                        'live_version': int(r.get('live_version') or 0),
                    }
                )
    return rows


def run(a: argparse.Namespace) -> dict[str, Any]:
    """The soak: the JSON record (and the plot)."""
    from rip_control import finetune
    from rip_control.params import parse_args
    from rip_control.rig.emulator import WRAP_EVENT
    from rip_control.rig.emulator_process import EmulatorProcess

    if not 0 < a.wrap_after_s < min(WRAP_S, a.minutes * 60.0):
        raise ValueError(
            f'--wrap-after-s must be in (0, {min(WRAP_S, a.minutes * 60.0):.3f}) (the run must '
            f'cross the wrap), got {a.wrap_after_s}'
        )
    workdir = Path(tempfile.mkdtemp(prefix='rip_soak_'))
    emu_args = ['--clock-offset-s', repr(WRAP_S - a.wrap_after_s), '--events']
    if a.rig_params:
        emu_args += ['--params', a.rig_params]
    emulators = [EmulatorProcess(workdir / f'rig{i}', emu_args).start() for i in range(a.rigs)]
    sampler = Sampler(a.sample_s)
    args = {
        'rate': '50',
        'episodes': '0',  # until the rig-time limit
        'rig_seconds': repr(a.minutes * 60.0),
        'rigs': str(a.rigs),
        'serial_port': ','.join(str(e.link) for e in emulators),
        'run_name': 'soak',
        'runs_dir': str(workdir / 'runs'),
    }
    args.update(parse_args(a.set))
    print(
        f'soak: {a.minutes:g} min of rig time on {a.rigs} emulated rig(s), a sample every '
        f'{a.sample_s:g} s, firmware clocks wrapping {a.wrap_after_s:g} s in; run in {workdir}',
        flush=True,
    )
    sampler.start()
    try:
        summary = finetune.run(args, stream_logs=False)
    finally:
        sampler.stop()
        for emu in emulators:
            emu.stop()
    learner = summary.get('learner', {})
    rigs = summary.get('rigs') or [summary]
    published = sum(int(r.get('transitions_published', 0)) for r in rigs)
    doc: dict[str, Any] = {
        'benchmark': 'soak',
        'minutes': a.minutes,
        'rigs': a.rigs,
        'sample_s': a.sample_s,
        'warmup_s': a.warmup_s,
        'wall_seconds': summary.get('wall_seconds'),
        'wrap_after_s': a.wrap_after_s,
        'args': args,
        'set': list(a.set),  # the runner arguments given beyond the soak's own
        'processes': slopes(sampler.samples, a.warmup_s),
        'samples': sampler.samples,
        'episodes': _episodes(Path(args['runs_dir']) / 'soak'),
        'transitions_published': published,
        'transitions_received': int(learner.get('transitions_received', 0)),
        'buffer_evicted': int(learner.get('buffer_evicted', 0)),
        # Per rig: the emulator saw the control node read its clock on both sides of the wrap.
        'clock_wraps_read': [
            sum(what == WRAP_EVENT for _, what in emu.events()) for emu in emulators
        ],
        'violation_restarts': sum(int(r.get('violation_restarts', 0)) for r in rigs),
        'serial_errors': sum(int(r.get('serial_errors', 0)) for r in rigs),
        'failure': summary.get('failure'),
    }
    for name, p in doc['processes'].items():
        print(
            f'{name:24s} RSS {p["rss_mib_first"]:7.1f} -> {p["rss_mib_last"]:7.1f} MiB '
            f'(slope {p["rss_slope_mib_per_h"]} MiB/h), fds {p["fds_first_last"]}, '
            f'threads {p["threads_first_last"]}'
        )
    print(
        f'transitions published {published}, received {doc["transitions_received"]}; buffer '
        f'evicted {doc["buffer_evicted"]}; clock wraps read per rig {doc["clock_wraps_read"]}; '
        f'episodes {len(doc["episodes"])}, violations '
        f'{sum(e["violations"] for e in doc["episodes"])}'
    )
    plots = Path(a.plots) if a.plots else (Path(a.json).parent if a.json else workdir)
    _plot(doc, plots / f'{Path(a.json).stem if a.json else f"soak_{a.rigs}rig"}.png')
    return doc


def _plot(doc: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name in doc['processes']:
        mine = [s for s in doc['samples'] if s['process'] == name]
        ax.plot([s['t_s'] / 60 for s in mine], [s['rss_kib'] / 1024 for s in mine], label=name)
    ax.axvline(doc['wrap_after_s'] / 60, color='grey', ls=':', label='firmware clock wrap')
    ax.set_xlabel('minutes')
    ax.set_ylabel('resident memory (MiB)')
    ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def table(records: list[dict[str, Any]]) -> str:
    """Markdown: per run and process, memory first/last/max, slope, fds, threads."""
    lines = [
        '| rigs | minutes | process | RSS first → last (max), MiB | slope after warm-up, MiB/h '
        '| fds | threads |',
        '|---|---|---|---|---|---|---|',
    ]
    for r in records:
        for name, p in r['processes'].items():
            lines.append(
                f'| {r["rigs"]} | {r["minutes"]:g} | {name} | {p["rss_mib_first"]} → '
                f'{p["rss_mib_last"]} ({p["rss_mib_max"]}) | {p["rss_slope_mib_per_h"]} | '
                f'{p["fds_first_last"][0]} → {p["fds_first_last"][1]} | '
                f'{p["threads_first_last"][0]} → {p["threads_first_last"][1]} |'
            )
    return '\n'.join(lines)


#: The learning table's bins: training episodes per rig (each the same rig time, all run
#: long, where an evaluation lasts as long as its candidate keeps the arm in its limits).
BIN_EPISODES = 50


def learning_bins(d: dict[str, Any]) -> list[dict[str, Any]]:
    """Per ``BIN_EPISODES`` training episodes of each rig: their balance, candidates judged.

    An evaluation falls in the bin of the training episodes before it.
    """
    bins: dict[int, list[dict[str, Any]]] = {}
    for rig in sorted({e['rig'] for e in d['episodes']}):
        trained = 0
        for e in (e for e in d['episodes'] if e['rig'] == rig):
            bins.setdefault(trained // BIN_EPISODES, []).append(e)
            trained += e['kind'] == 'training'
    out = []
    for b, part in sorted(bins.items()):
        balance = [e['balance_s'] for e in part if e['kind'] == 'training']
        judged = [
            e
            for e in part
            if e['kind'] == 'evaluation' and e['verdict'] not in ('baseline', 'pending')
        ]
        if not balance:
            continue  # only the evaluations after the last training episode
        per_rig = max(
            sum(e['kind'] == 'training' for e in part if e['rig'] == rig)
            for rig in {e['rig'] for e in part}
        )
        out.append(
            {
                # the training episodes of each rig the bin holds, counted from 1
                'training_episodes': (b * BIN_EPISODES + 1, b * BIN_EPISODES + per_rig),
                'training_balance_s': float(np.mean(balance)),
                'judged': len(judged),
                'promoted': sum(e['verdict'] == 'promoted' for e in judged),
                'candidate_return_median': (
                    float(np.median([e['return'] for e in judged])) if judged else math.nan
                ),
            }
        )
    return out


def guard_off(d: dict[str, Any]) -> bool:
    """Whether a soak ran with the regression guard off (``eval_every_episodes:=0``)."""
    return int(d['args'].get('eval_every_episodes', -1)) == 0


def learning_table(records: list[dict[str, Any]]) -> str:
    """Markdown: what the guard made of the learner's candidates as each run went on."""
    lines = [
        '| run | training episodes, per rig | their balance, s | candidates promoted / judged '
        "| candidates' median return |",
        '|---|---|---|---|---|',
    ]
    for r in records:
        run = f'{r["commit"]}, {r["rigs"]} rigs' + (
            f', {", ".join(r["set"])}' if r.get('set') else ''
        )
        for b in learning_bins(r):
            first, last = b['training_episodes']
            judged = (
                ('guard off', '—')
                if guard_off(r)
                else (f'{b["promoted"]} / {b["judged"]}', f'{b["candidate_return_median"]:.1f}')
            )
            lines.append(
                f'| {run} | {first}-{last} | {b["training_balance_s"]:.2f} '
                f'| {judged[0]} | {judged[1]} |'
            )
    return '\n'.join(lines)


TABLES = {'soak': table, 'soak-learning': learning_table}
