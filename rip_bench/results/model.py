"""What a result is, and how one is loaded and rendered as markdown.

A :class:`Result` (a question, its set-up, its tables, its conclusion, the commands that
measure it again) belongs to a :class:`Section` of a page. :func:`load` reads its records from
``bench/results/``; :func:`render` writes it, the tables as ``python -m rip_bench table``
prints them (:data:`rip_bench.registry.TABLES`), with the line saying what the records hold of
themselves (:func:`recorded`) and the wall time they took (:func:`wall_minutes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
import json
from pathlib import Path
from typing import Any

from rip_bench.paths import REPO, RESULTS
from rip_bench.registry import TABLES
from rip_bench.results.order import _numbers
from rip_bench.results.text import _span

Records = Mapping[str, dict[str, Any]]
"""Loaded records by the name a :class:`Result` gives them."""
Text = Callable[[Records], str]


def _none(_: Records) -> str:
    return ''


@dataclass(frozen=True)
class Table:
    """A table of records, as ``python -m rip_bench table KIND FILE...`` prints it.

    :param kind: a key of :data:`rip_bench.registry.TABLES`.
    :param files: record names, in the order the table lists them.
    :param caption: the sentence before the table (a function of the records, or '').
    """

    kind: str
    files: tuple[str, ...]
    caption: Text = _none


@dataclass(frozen=True)
class Result:
    """One result: a question, its records, what they show and how to measure it again.

    A record name is a file of ``bench/results/``, or a path from the repository's root
    when it has a ``/`` (a policy's ``pretrain.json``).

    :param heading: the result's heading ('' when it is its section's only result).
    :param question: one sentence.
    :param setup: what was run, as markdown (the records' own line is added under it).
    :param conclusion: what the tables show and what it means, as markdown.
    :param tables: the tables, in order.
    :param files: further records the result measured (no table of them).
    :param compare: records the text reads for comparison, measured by another result.
    :param replicate: the commands that measure the records, one a line (each table's
        ``python -m rip_bench table`` command follows them).
    :param superseded: for a superseded result: what replaced it and why.
    """

    heading: str
    question: str
    setup: Text
    conclusion: Text
    tables: tuple[Table, ...] = ()
    files: tuple[str, ...] = ()
    compare: tuple[str, ...] = ()
    replicate: tuple[str, ...] = ()
    superseded: str = ''

    @property
    def measured(self) -> tuple[str, ...]:
        """The records this result measured: its tables' files, then ``files``."""
        names = [n for t in self.tables for n in t.files] + list(self.files)
        return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Section:
    """A question of the page, with its results (a numbered ``##`` heading on results.md)."""

    key: str
    title: str
    results: tuple[Result, ...]
    intro: Text = _none


def record_path(name: str) -> Path:
    """Where the record ``name`` is."""
    return REPO / name if '/' in name else RESULTS / name


def load(result: Result) -> dict[str, dict[str, Any]]:
    """The result's records, read from disk.

    :raises FileNotFoundError: a record is missing (named).
    """
    out = {}
    for name in (*result.measured, *result.compare):
        path = record_path(name)
        if not path.exists():
            raise FileNotFoundError(f'no record {path.relative_to(REPO)}')
        out[name] = json.loads(path.read_text())
    return out


def recorded(result: Result, records: Records) -> str:
    """What the result's records say of themselves: commit, host steal, CPU, seeds."""
    docs = {n: records[n] for n in result.measured}
    by_commit: dict[str, list[str]] = {}
    for name, d in docs.items():
        if d.get('commit'):
            by_commit.setdefault(str(d['commit']), []).append(Path(name).stem)
    if not by_commit:
        commits = 'no commit (the records predate the field)'
    elif len(by_commit) == 1 and sum(map(len, by_commit.values())) == len(docs):
        commits = f'commit `{next(iter(by_commit))}`'
    else:
        commits = 'commit ' + '; '.join(
            f'`{c}` for {", ".join(names)}' for c, names in by_commit.items()
        )
        missing = len(docs) - sum(map(len, by_commit.values()))
        if missing:
            commits += f'; none for the other {missing}'
    steal = [
        d['host_steal']['fraction'] for d in docs.values() if 'fraction' in d.get('host_steal', {})
    ]
    steal_text = (
        f'host steal {_span([100 * s for s in steal], 1, " %")} of the CPU time'
        if steal
        else 'host steal not recorded'
    )
    machines = [d['machine'] for d in docs.values() if isinstance(d.get('machine'), dict)]
    models = sorted({m['cpu_model'] for m in machines if m.get('cpu_model')})
    cpus = sorted({int(m['cpus']) for m in machines if m.get('cpus')})
    if models:
        cpu = 'CPU ' + ', '.join(models)
    elif cpus:
        cpu = f'{", ".join(map(str, cpus))} CPUs, model not recorded'
    else:
        cpu = 'CPU not recorded'
    seeds = sorted({s for d in docs.values() for s in _seeds_of(d)})
    parts = [commits, steal_text, cpu]
    if not by_commit and not steal and not machines:
        parts = ['no commit, host steal or CPU (the records predate those fields)']
    if seeds:
        parts.append(('seed ' if len(seeds) == 1 else 'seeds ') + ', '.join(map(str, seeds)))
    return '*Recorded:* ' + '; '.join(parts) + '.'


def _seeds_of(d: dict[str, Any]) -> list[int]:
    if isinstance(d.get('seed'), int):
        return [d['seed']]
    if isinstance(d.get('seeds'), list):
        return [int(s) for s in d['seeds']]
    return [int(r['seed']) for r in d.get('runs', []) if isinstance(r, dict) and 'seed' in r]


def wall_minutes(result: Result, records: Records) -> list[float]:
    """Each measured record's wall time (``wall_seconds``, else ``host_steal.wall_s``), min."""
    out = []
    for name in result.measured:
        d = records[name]
        wall = d.get('wall_seconds', d.get('host_steal', {}).get('wall_s'))
        if wall is not None:
            out.append(float(wall) / 60)
    return out


def render(result: Result, records: Records, level: int = 3) -> str:
    """The result as markdown, from ``records`` (what :func:`load` gives, or a copy)."""
    parts = []
    if result.heading:
        parts.append(f'{"#" * level} {result.heading}\n')
    if result.superseded:
        parts.append(f'**Superseded by** {result.superseded.format(**_numbers())}\n')
    if result.question:
        parts.append(f'**Question.** {result.question}\n')
    setup = result.setup(records)
    if setup:
        parts.append(f'**Set-up.** {setup}\n')
    if result.measured:
        parts.append(recorded(result, records) + '\n')
    for t in result.tables:
        caption = t.caption(records)
        if caption:
            parts.append(caption + '\n')
        parts.append(TABLES[t.kind]([records[n] for n in t.files]) + '\n')
    conclusion = result.conclusion(records)
    if conclusion:
        sep = '\n' if conclusion.startswith('- ') else ' '
        parts.append(f'**Conclusion.**{sep}{conclusion}\n')
    commands = [*result.replicate] + [
        f'python -m rip_bench table {t.kind} '
        + ' '.join(str(record_path(n).relative_to(REPO)) for n in t.files)
        for t in result.tables
    ]
    if commands:
        walls = wall_minutes(result, records)
        head = (
            f'**Replicate** (each record took {_span(walls, 1, " min")} of wall time):'
            if walls
            else '**Replicate:**'
        )
        block = '\n'.join(commands)
        parts.append(f'{head}\n\n```text\n{block}\n```\n')
    return '\n'.join(parts)
