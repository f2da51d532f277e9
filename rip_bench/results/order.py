"""The order of results.md's sections, by key: what numbers them.

A section's number ('question 3'; ``{v5}`` in a superseded result's text) is its place in
:data:`ORDER`, and :data:`rip_bench.results.pages.CURRENT` lists the sections in this order. It
lives below the sections' modules because their prose refers to one another by number.
"""

ORDER = (
    'adapt',
    'v5',
    'identification',
    'history',
    'timing',
    'firmware',
    'e2e',
    'finetune',
    'safeguards',
    'throughput',
    'pretrain',
    'bags',
    'soak',
    'not-measured',
)
"""Each section's key, in the page's order. The page leaves the soak's out where it has no
records; only 'not-measured', which no text refers to, comes after it."""


def section_number(key: str) -> int:
    """The number of the section ``key`` on results.md."""
    return ORDER.index(key) + 1


def _numbers() -> dict[str, int]:
    """Each section's number on results.md, by key (what ``{key}`` in a text stands for)."""
    return {key: i for i, key in enumerate(ORDER, 1)}
