"""The ``python -m rip_bench`` command line, built from the benchmarks' registry.

One subcommand per benchmark module of :mod:`rip_bench.registry` (its ``NAME``, ``HELP``,
``add_arguments``), each with ``--json PATH``; ``table KIND FILE...``, which prints the
markdown table of saved records (``KIND``: a benchmark's name or one of its further tables,
e.g. ``v5-seeds``); and ``docs``, which writes the generated pages of ``docs/``
(:mod:`rip_bench.docs`). Every run is wrapped here, once: DDS kept on loopback (unless the
caller set ``ROS_AUTOMATIC_DISCOVERY_RANGE`` / ``ROS_DOMAIN_ID``), the host's CPU steal
measured around it, the record written atomically.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import time
from typing import Any

from rip_bench import docs
from rip_bench.registry import BENCHMARKS, TABLES, Benchmark
from rip_control.files import atomic_write_bytes
from rip_control.procs import ensure_loopback_dds
from rip_control.stats import cpu_times, steal_fraction


def build_parser() -> argparse.ArgumentParser:
    """The parser: one subcommand per benchmark, and ``table``."""
    import rip_bench

    ap = argparse.ArgumentParser(
        prog='python -m rip_bench',
        description='\n\n'.join((rip_bench.__doc__ or '').split('\n\n')[:2]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest='command', required=True, metavar='COMMAND')
    for module in BENCHMARKS:
        p = sub.add_parser(
            module.NAME,
            allow_abbrev=False,  # an option renamed is refused, not matched by its prefix
            help=module.HELP,
            description=getattr(module, '__doc__', None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.add_argument('--json', default='', metavar='PATH', help='write the record here')
    t = sub.add_parser('table', help='markdown table of saved records, e.g. table timing FILE...')
    t.add_argument('kind', choices=sorted(TABLES), metavar='KIND', help=', '.join(sorted(TABLES)))
    t.add_argument('files', nargs='+', metavar='FILE')
    d = sub.add_parser(
        docs.NAME,
        help=docs.HELP,
        description=docs.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    docs.add_arguments(d)
    return ap


def read_records(paths: list[str]) -> list[dict[str, Any]]:
    """The JSON records in ``paths``, in order.

    :raises ValueError: a file that is missing or is not a JSON object, named.
    """
    records = []
    for path in paths:
        try:
            record = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ValueError(f'{path}: cannot be read ({exc.strerror})') from exc
        except json.JSONDecodeError as exc:
            raise ValueError(f'{path}: not JSON ({exc})') from exc
        if not isinstance(record, dict):
            raise ValueError(f'{path}: a record is a JSON object, this is {type(record).__name__}')
        records.append(record)
    return records


def run_measured(benchmark: Benchmark, args: argparse.Namespace) -> dict[str, Any]:
    """Run a benchmark; its record, with host steal, commit and machine.

    ``benchmark.run(args)``, its record with the host's CPU steal meanwhile (``host_steal``),
    the code it measured (``commit``) and the machine (``machine``: CPU model and count,
    kernel, torch and the device it would train on).

    The VM's host taking CPU time is a stall no code here can prevent: a figure measured
    under it says so.
    """
    start, t0 = cpu_times(), time.monotonic()
    commit = code_version()
    record = benchmark.run(args)
    record['commit'] = commit
    record['machine'] = machine()
    record['host_steal'] = {
        'fraction': steal_fraction(start, cpu_times()),
        'wall_s': time.monotonic() - t0,
    }
    return record


def machine() -> dict[str, Any]:
    """What the record was measured on: CPU model, logical CPUs, torch and its device."""
    import os
    import platform

    model = platform.processor() or 'unknown'
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                model = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        torch_info: dict[str, str | None] = {
            'version': torch.__version__,
            'device': 'cuda' if torch.cuda.is_available() else 'cpu',
        }
    except ImportError:
        torch_info = {'version': None, 'device': None}
    return {
        'cpu_model': model,
        'cpus': os.cpu_count(),
        'kernel': platform.release(),
        'torch': torch_info,
    }


def code_version() -> str:
    """The code version a record measured.

    The commit of the checkout the benchmark runs from (``git describe --always``), with
    ``-dirty`` when a tracked file outside ``bench/results/`` differs from it: the results of
    earlier runs (a seed loop writes them one by one) are not code. 'unknown' outside a git
    checkout.
    """
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ['git', *args],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()

    try:
        commit = git('describe', '--always')
        changed = git(
            'status', '--porcelain', '--untracked-files=no', '--', ':/', ':!/bench/results'
        )
    except (OSError, subprocess.SubprocessError):
        return 'unknown'
    return (commit + ('-dirty' if changed else '')) if commit else 'unknown'


def write_record(path: str, record: dict[str, Any]) -> None:
    """The record as indented JSON at ``path``, atomically (a crash leaves the old file)."""
    atomic_write_bytes(path, (json.dumps(record, indent=2) + '\n').encode())


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring. Exit status 2 for bad arguments or files."""
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.command == 'table':
        try:
            # a table refuses records it cannot make (two rigs, a seed twice, no pair) by name
            print(TABLES[a.kind](read_records(a.files)))
        except (KeyError, ValueError) as exc:
            what = f'not a {a.kind} record: no {exc}' if isinstance(exc, KeyError) else exc
            ap.exit(2, f'{ap.prog} table {a.kind}: error: {what}\n')
        return 0
    if a.command == docs.NAME:
        try:
            return docs.run(a)
        except (OSError, ValueError) as exc:  # a record or a block's markers missing
            ap.exit(2, f'{ap.prog} docs: error: {exc}\n')
    benchmark = next(m for m in BENCHMARKS if m.NAME == a.command)
    ensure_loopback_dds()
    record = run_measured(benchmark, a)
    share = record['host_steal']['fraction']
    print(f'host steal: {100 * share:.1f} % of the CPU time during the benchmark', flush=True)
    if a.json:
        write_record(a.json, record)
        print(f'wrote {a.json}', flush=True)
    return 0
