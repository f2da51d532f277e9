"""``docs``: the generated pages of ``docs/``, written from the code's own tables.

``python -m rip_bench docs`` rewrites them; ``python -m rip_bench docs --check`` writes
nothing and exits 1 naming each page that differs from what the code gives (the tests run
it). A generated page is never edited by hand: change the table it comes from.

* the README's headline results (a block between markers), from ``bench/results/``.
* ``docs/parameters.md``: every parameter of both nodes (:data:`CONTROL_PARAMETERS`,
  :data:`LEARNER_PARAMETERS`), the launch arguments, the options of ``adapt``, ``record``,
  ``pretrain`` and ``identify``, and the topics with their QoS
  (:data:`rip_control.ros.qos.TOPICS`).
* ``docs/results.md`` and ``docs/results_history.md``: every result and every superseded one,
  from the records in ``bench/results/`` (:mod:`rip_bench.results`: each result's
  question, set-up, tables, conclusion and replicate block; every number in their text is
  computed from the records or read from the code).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rip_bench.generated import HEADER, rig_name
from rip_bench.paths import REPO, RESULTS
from rip_bench.results.pages import history_page, results_page
from rip_control.files import atomic_write_bytes
from rip_control.params import CONTROL_PARAMETERS, LEARNER_PARAMETERS, Param, bound_text

DOCS = REPO / 'docs'

NAME = 'docs'
HELP = 'write the generated pages of docs/ from the code (--check: compare only)'


def _cell(text: Any) -> str:
    """Text safe inside a markdown table cell."""
    return str(text).replace('|', '\\|').replace('\n', ' ')


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return f'`{str(value).lower()}`'
    if value == '':
        return "`''`"
    if isinstance(value, list):
        return f'`[{",".join(str(v) for v in value)}]`'
    return f'`{value}`'


def _range(p: Param) -> str:
    if p.lo is None or p.hi is None:
        return ''
    return f'{bound_text(p.lo)} … {bound_text(p.hi)}'


def param_table(table: Iterable[Param]) -> str:
    """A markdown table of parameters: name, type, default, range, description."""
    rows = ['| name | type | default | range | description |', '|---|---|---|---|---|']
    rows += [
        f'| `{p.name}` | {p.type} | {_value(p.default)} | {_range(p)} | {_cell(p.description)} |'
        for p in table
    ]
    return '\n'.join(rows)


def _launch_arguments() -> str:
    from rip_control.run.launching import LAUNCH_ARGUMENTS

    rows = ['| argument | type | default | sets | description |', '|---|---|---|---|---|']
    for a in LAUNCH_ARGUMENTS:
        p = a.param()
        if a.targets:
            default = f"the params file's, else {_value(p.default)}"
            sets = ', '.join(f'`{node}.{name}`' for node, name in a.targets)
        else:
            default, sets = _value(p.default), ''
        rows.append(f'| `{a.name}` | {p.type} | {default} | {sets} | {_cell(a.description)} |')
    return '\n'.join(rows)


def _topics() -> str:
    from rip_control.ros.qos import TOPICS, qos_text

    rows = [
        '| topic | message | QoS | published by | read by | content |',
        '|---|---|---|---|---|---|',
    ]
    rows += [
        f'| `{t.name}` | {t.message} | {qos_text(t.qos)} | {t.publishers} | {t.subscribers} '
        f'| {_cell(t.content)} |'
        for t in TOPICS
    ]
    return '\n'.join(rows)


def parameters_page() -> str:
    """``docs/parameters.md``."""
    from rip_control.adapt import LAUNCH_SWITCH
    from rip_control.adapt import OPTIONS as ADAPT
    from rip_control.record import OPTIONS as RECORD
    from rip_control.run.supervisor import OPTIONS as SUPERVISOR
    from rip_learner.identify import OPTIONS as IDENTIFY
    from rip_learner.pretrain import OPTIONS as PRETRAIN

    parts = [
        HEADER.format(
            source='the parameter tables (`rip_control/params.py` and each '
            "program's `OPTIONS`) and `rip_control/ros/qos.py`"
        ),
        '# Parameters and topics\n',
        'Every value below is typed as `name:=value` on a command line (`rate:=50`), in a '
        'params file (`rate_hz: 50`) or with `ros2 param set` on an unconfigured node. A '
        'value outside its range, or of another type, is refused naming the parameter and '
        'what it accepts. Parameters take effect at configure: a configured node refuses '
        'changes (deactivate and clean up first).\n',
        '## Control node (`control_node`, node name `rip_control`)\n',
        param_table(CONTROL_PARAMETERS),
        '',
        '## Learner node (`learner_node`, node name `rip_learner`)\n',
        param_table(LEARNER_PARAMETERS),
        '',
        '## Launch arguments (`ros2 launch rip_control finetune.launch.py`, '
        '`python -m rip_control.finetune`)\n',
        'An argument that sets node parameters overrides the params file only when typed.\n',
        _launch_arguments(),
        '',
        f'## Adapting (`python -m rip_control.adapt`, or `{LAUNCH_SWITCH.name}:=true` on the '
        'launch line)\n',
        'With the launch arguments above (but `rig_seconds` and `episodes`, which the loop '
        'sets phase by phase).\n',
        param_table(ADAPT),
        '',
        '## Driving control nodes (`python -m rip_control.run.supervisor`)\n',
        "The launch file's supervisor; by hand, it drives control nodes you started yourself "
        '(a learner on another machine: [networking.md](networking.md)).\n',
        param_table(SUPERVISOR),
        '',
        '## Recording a bag (`python -m rip_control.record`)\n',
        param_table(RECORD),
        '',
        '## Pre-training in simulation (`python -m rip_learner.pretrain`)\n',
        param_table(PRETRAIN),
        '',
        '## Identifying a rig (`python -m rip_learner.identify`)\n',
        param_table(IDENTIFY),
        '',
        '## Topics\n',
        "Relative names take the control node's namespace (`rig0`, `rig1`... with several "
        'rigs, where the launch file remaps `transitions` and `policy_weights` to the '
        "learner's `/transitions` and `/policy_weights`).\n",
        _topics(),
    ]
    return '\n'.join(parts) + '\n'


def _records(pattern: str) -> list[dict[str, Any]]:
    import json

    paths = sorted(RESULTS.glob(pattern))
    if not paths:
        raise FileNotFoundError(f'no record bench/results/{pattern}')
    return [json.loads(path.read_text()) for path in paths]


def _spread(values: list[float], unit: str = ' s', digits: int = 2) -> str:
    """``mean (min-max)``; one value alone."""
    import numpy as np

    if len(values) == 1:
        return f'{values[0]:.{digits}f}{unit}'
    return (
        f'{np.mean(values):.{digits}f}{unit} ({min(values):.{digits}f}-{max(values):.{digits}f})'
    )


def _seeds(runs: list[dict[str, Any]]) -> str:
    seeds = [str(d['seed']) for d in runs]
    return ('seed ' if len(seeds) == 1 else 'seeds ') + ', '.join(seeds)


def _adapt_row(question: str, pattern: str) -> str:
    runs = _records(pattern)
    rigs = sorted({rig_name(d['rig']) for d in runs})
    seeds = _seeds(runs)
    before = [d['deployment']['prior_balance_s'] for d in runs]
    after = [d['deployment']['adapted_balance_s'] for d in runs]
    minutes = [d['rig_seconds'] / 60 for d in runs]
    return (
        f'| {question} | {", ".join(rigs)}; {seeds} | {_spread(before)} → '
        f'{_spread(after)} | {_spread(minutes, " min", 1)} | `{pattern}` |'
    )


def _budget_row() -> str:
    pattern = 'adapt_budget2_stuck_seed*.json'
    runs = _records(pattern)
    before = [d['deployment']['prior_balance_s'] for d in runs]
    after = [d['check']['balance_s'] for d in runs]
    minutes = [d['rig_seconds'] / 60 for d in runs]
    return (
        '| ... within a 2-minute rig budget (`rig_minutes:=2`); after: the deployed policy '
        f'measured again, 5 x 10 s | stuck; {_seeds(runs)} | {_spread(before)} → '
        f'{_spread(after)} | {_spread(minutes, " min", 1)} | `{pattern}` |'
    )


def _v5_row() -> str:
    runs = _records('v5_*_seed*.json')
    cells = []
    for rig in ('nominal', 'worn', 'mild', 'heavy'):
        mine = [d for d in runs if rig_name(d['rig']) == rig]
        if not mine:
            continue

        def balance(d: dict[str, Any], arm: str) -> float:
            return float(d['deployment'][arm]['summary']['longest_balance_s']['mean'])

        sync = [d for d in mine if 'sync_finetuned' in d['deployment']]
        if not sync:
            continue
        a = [balance(d, 'async_finetuned') for d in sync]
        s = [balance(d, 'sync_finetuned') for d in sync]
        cells.append(f'{rig} ({len(sync)} seeds): async {_spread(a)}, sync {_spread(s)}')
    one = runs[0]
    budget = f'{one["finetune_episodes"]} episodes of {one["episode_seconds"]:g} s per arm'
    return (
        '| Guard off, is the asynchronous fine-tune at least as good as a synchronous one '
        f'(V5)? Balance of {one["eval_seconds"]:g} s after | by rig | '
        + '; '.join(cells)
        + f' | {budget} | `v5_*_seed*.json` |'
    )


def _timing_row() -> str:
    (d,) = _records('timing_50hz_sac.json')
    c = d['control_node']
    return (
        '| Does the control loop hold its rate while SAC trains on the same 2 cores? | '
        f'{c["target_rate_hz"]:g} Hz, one run of {d["seconds"]:g} s | '
        f'{c["measured_rate_hz"]:.4f} Hz, {c["n_violations"]} violations, '
        f'{c["missed_ticks"]} missed ticks, tick std {c["dt_std_ms"]:.3f} ms | | '
        '`timing_50hz_sac.json` |'
    )


def _demo_row() -> str:
    runs = _records('demo_run*.json')
    hz = [d['ticks']['measured_rate_hz'] for d in runs]
    violations = sum(int(d['ticks']['n_violations']) for d in runs)
    balance = [float(sum(d['balance_s']) / len(d['balance_s'])) for d in runs]
    return (
        f'| Does `make demo` run as the README says? | nominal; {len(runs)} runs in a row | '
        f'{_spread(hz, " Hz", 4)}, {violations} violations; mean balance per episode '
        f'{_spread(balance)} | '
        f'{_spread([d["wall_seconds"] / 60 for d in runs], " min", 1)} wall | '
        '`demo_run*.json` |'
    )


def headline_table() -> str:
    """The README's results: one row per question, each with its spread and its records."""
    rows = [
        '| question | rigs, seeds | result: mean (min-max) | rig time | records in '
        '`bench/results/` |',
        '|---|---|---|---|---|',
        _adapt_row(
            '`adapt`: is a rig the simulation cannot balance (arm stiction, 30 ms latency) '
            'rescued? Balance of 10 s, before → after',
            'adapt_stuck_k2_seed*.json',
        ),
        _budget_row(),
        _adapt_row('`adapt` on a worn rig, before → after', 'adapt_worn_k2_seed*.json'),
        _adapt_row(
            '`adapt` on a rig the simulation covers: never worse? before → after',
            'adapt_qube_servo2_k2_seed*.json',
        ),
        _adapt_row('... and on a heavy one', 'adapt_heavy_k2_seed*.json'),
        _adapt_row(
            '`adapt` on a rig outside the model (reality gap: stick-slip friction, a dead zone '
            'wider one way), before → after',
            'adapt_gap_sticky_seed*.json',
        ),
        _adapt_row(
            '... and on a laggy one (command delay, a ringing driver, jittery readings, backlash)',
            'adapt_gap_laggy_seed*.json',
        ),
        _adapt_row(
            '... and on one whose pendulum is not a rod (a 30 g tip, a stiff cable, a coarse '
            'encoder)',
            'adapt_gap_heavy_tip_seed*.json',
        ),
        _v5_row(),
        _timing_row(),
        _demo_row(),
    ]
    return '\n'.join(rows)


def soak_block() -> str:
    """docs/safety.md's hours of running: each soak's memory slope per process."""
    from rip_bench import soak
    from rip_control.params import LEARNER_PARAMETERS, defaults

    runs = _records('soak_*rig.json')
    capacity = int(defaults(LEARNER_PARAMETERS)['buffer_size'])
    lines = [soak.table(runs), '']
    for d in runs:
        full = soak.buffer_full_s(d, capacity)
        published, received = d['transitions_published'], d['transitions_received']
        lines.append(
            f'- {d["rigs"]} rig{"s" * (d["rigs"] > 1)}, {d["wall_seconds"] / 60:.0f} minutes '
            f'(`soak_{d["rigs"]}rig.json`, commit `{d.get("commit", "?")}`): '
            f'{sum(e["violations"] for e in d["episodes"])} timing violations in '
            f'{len(d["episodes"])} episodes; {published} transitions published, {received} '
            'received; '
            + (
                f'the buffer full about {full / 60:.0f} minutes in, {d["buffer_evicted"]} '
                "replaced, the learner's slope from then on "
                f'{soak.learner_slope_when_full(d, capacity):+.1f} MiB/h.'
                if full is not None
                else f'the buffer (of {capacity}) never filled.'
            )
        )
    lines.append(
        '\nA slope is a least-squares line through the samples after the warm-up '
        f'({runs[0]["warmup_s"]:g} s); the set-up and the plots are in '
        '[results.md](results.md), "Does a fine-tune run for hours without growing?".'
    )
    return '\n'.join(lines)


PAGES: dict[str, Callable[[], str]] = {
    'parameters.md': parameters_page,
    'results.md': results_page,
    'results_history.md': history_page,
}

#: Generated blocks inside hand-written files: (file, block name) -> what goes between
#: ``<!-- NAME: generated by python -m rip_bench docs -->`` and ``<!-- end NAME -->``.
BLOCKS: dict[tuple[str, str], Callable[[], str]] = {
    ('README.md', 'headline results'): headline_table,
    ('docs/safety.md', 'soak memory'): soak_block,
}


def with_block(text: str, name: str, body: str, where: str) -> str:
    """``text`` with the block ``name`` holding ``body``.

    :raises ValueError: the markers are missing or out of order (named with ``where``).
    """
    start = f'<!-- {name}: generated by python -m rip_bench docs -->'
    end = f'<!-- end {name} -->'
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f'{where}: no block {start!r} ... {end!r}')
    return text[: i + len(start)] + '\n' + body + '\n' + text[j:]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``docs`` options."""
    ap.add_argument(
        '--check', action='store_true', help='write nothing; exit 1 naming each page that differs'
    )
    ap.add_argument('--out', default=str(DOCS), help='folder of the pages (default: docs/)')
    ap.add_argument(
        '--root',
        default=str(REPO),
        help='folder of the files with generated blocks (default: the repository)',
    )


def run(a: argparse.Namespace) -> int:
    """Write (or check) every generated page; the exit status."""
    stale = []
    outputs: dict[Path, str] = {Path(a.out) / name: page() for name, page in PAGES.items()}
    root = Path(a.root)
    for (name, block), body in BLOCKS.items():
        path = root / name
        text = outputs.get(path, path.read_text())
        outputs[path] = with_block(text, block, body(), str(path))
    for path, text in outputs.items():
        on_disk = path.read_text() if path.exists() else None
        if on_disk == text:
            continue
        if a.check:
            stale.append(str(path))
        else:
            atomic_write_bytes(path, text.encode())
            print(f'wrote {path}')
    for name in stale:
        print(f'{name} is not what the code gives: run python -m rip_bench docs')
    return 1 if stale else 0
