"""``docs/results.md`` and ``docs/results_history.md``, written from ``bench/results/``.

Each result is a :class:`~rip_bench.results.model.Result`: its question, its set-up, the tables
``python -m rip_bench table KIND FILE...`` prints of its records
(:data:`rip_bench.registry.TABLES`, the same text), its conclusion and how to replicate it. The
set-up and the conclusion are functions of the loaded records: every measured number they give
is formatted from a JSON value (a mean, a range, a count), and every other number is the code's
(a default of ``rip_control/params.py``, a constant, a rig file). A line under each set-up says
what the records themselves hold: the commit they measured, the host's CPU steal, the CPU
model, the seeds; the replicate block gives the wall time they recorded. Prose written here
carries no measured number.

The modules, lowest first: :mod:`~rip_bench.results.model` (what a result is; loading and
rendering one), :mod:`~rip_bench.results.order` (the sections' order, which numbers them),
:mod:`~rip_bench.results.text` (the prose's number formats and the code's values),
:mod:`~rip_bench.results.goals` (the targets results are judged by); one module per section of
results.md, each with its results and its ``SECTION`` (:mod:`~rip_bench.results.adapt`,
:mod:`~rip_bench.results.v5`, ... :mod:`~rip_bench.results.not_measured`);
:mod:`~rip_bench.results.superseded` (results_history.md's); and
:mod:`~rip_bench.results.pages`, the two pages. This file imports none of them.

To add a result: commit its JSON under ``bench/results/``, add a ``Result`` to its section's
module (a new section: a module with its ``SECTION``, its key in
:data:`~rip_bench.results.order.ORDER`, the module in :data:`~rip_bench.results.pages.CURRENT`),
moving what it replaces to :data:`~rip_bench.results.superseded.HISTORY_RESULTS`, saying why,
and run ``python -m rip_bench docs``.
"""
