"""Benchmarks of rip_control that print numbers and save them as JSON (not installed).

``python -m rip_bench NAME [options] --json PATH`` runs one; ``python -m rip_bench table KIND
FILE...`` makes a markdown table of saved records (the README's and results.md's). This
package sits beside ``bench/`` (the shell scripts and ``bench/results/``) and is found from a
source checkout (``PYTHONPATH``); ``setup.py`` and colcon leave it out of the installed
package.

Every benchmark is one module with the same small interface
(:class:`rip_bench.registry.Benchmark`):

* ``NAME``: the subcommand (``timing``, ``v5``, ...) and its table's kind;
* ``HELP``: one line for ``--help``;
* ``add_arguments(parser)``: its options (``--json`` is added for all of them);
* ``run(args) -> dict``: runs it, printing as it goes, and returns the JSON record;
* ``TABLES``: ``{kind: table(records: list[dict]) -> str}``, where it has tables.

:mod:`rip_bench.cli` builds the command line from that registry (:mod:`rip_bench.registry`)
and wraps every run once: loopback DDS, the host's CPU steal during the run (printed and
recorded as ``host_steal``), and the atomic write of the record.
"""
