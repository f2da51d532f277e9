"""A loose tick-rate bound for tests, with one host stop allowed."""

from __future__ import annotations


def rate_but_the_longest_tick(ticks: dict) -> float:
    """The measured tick rate with the longest tick's excess taken out.

    This VM's host stops a vCPU for ~100 ms now and then (README, "Timing in the tests"):
    one such stop takes a short run's measured rate 1 % below its target. The benchmarks hold
    the rate claim; a test's loose bound allows one stop.
    """
    n = ticks['n_ticks']
    return n / (n / ticks['measured_rate_hz'] - ticks['dt_max_abs_dev_ms'] / 1e3)
