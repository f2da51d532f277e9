"""The benchmarks' registry: every benchmark module, and every table kind they print.

:data:`BENCHMARKS` are the subcommands of ``python -m rip_bench`` (:mod:`rip_bench.cli`);
:data:`TABLES` the kinds of ``python -m rip_bench table KIND FILE...``, which the results pages
(:mod:`rip_bench.results`) print too. Both read it from here, below them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from rip_bench import (
    action_history,
    adapt_loop,
    bag_roundtrip,
    demo,
    e2e,
    identification,
    learner_throughput,
    long_deployment,
    matrix,
    reset,
    serial_roundtrip,
    sim_finetune,
    soak,
    sync_baseline,
    timing,
    v5,
)

Table = Callable[[list[dict[str, Any]]], str]


class Benchmark(Protocol):
    """What a benchmark module defines (``TABLES`` too, where it has tables)."""

    NAME: str
    HELP: str

    def add_arguments(self, ap: argparse.ArgumentParser) -> None:
        """Add the benchmark's options to its subcommand's parser."""

    def run(self, args: argparse.Namespace) -> dict[str, Any]:
        """Run the benchmark with the parsed options; the JSON record."""


# In the order ``--help`` lists them.
BENCHMARKS: tuple[Benchmark, ...] = (
    timing,
    sync_baseline,
    e2e,
    learner_throughput,
    v5,
    matrix,
    sim_finetune,
    identification,
    adapt_loop,
    long_deployment,
    reset,
    action_history,
    bag_roundtrip,
    serial_roundtrip,
    soak,
)


def _tables() -> dict[str, Table]:
    """Every table kind, from the modules that have tables; a kind named twice is refused."""
    out: dict[str, Table] = {}
    modules: list[Any] = [*BENCHMARKS, demo]  # demo has a table and no run
    for module in modules:
        for kind, table in getattr(module, 'TABLES', {}).items():
            if kind in out:
                raise ValueError(f'table kind {kind!r} is defined twice ({module.__name__})')
            out[kind] = table
    return out


TABLES = _tables()
