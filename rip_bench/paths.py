"""Where the benchmarks' files are: the checkout's root and its saved records.

rip_bench runs from a source checkout only (it is not installed), so both are found from this
file. It imports nothing of rip_bench: every module may read it.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
"""The repository's root."""
RESULTS = REPO / 'bench' / 'results'
"""The saved records, one JSON file each (``bench/results/``)."""
