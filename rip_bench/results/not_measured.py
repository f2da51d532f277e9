"""The last section of results.md: what no record here measures."""

from __future__ import annotations

from rip_bench.results.adapt import ADAPT_K2
from rip_bench.results.model import Records, Section
from rip_bench.results.soak import SOAK, _soak_minutes
from rip_bench.results.text import _and, _bullets, _q


def _not_measured(_: Records) -> str:
    return _bullets(
        'Anything on a physical rig.',
        'More than one seed of `adapt` on the '
        + _and([rig for rig, names in ADAPT_K2.items() if len(names) == 1])
        + f' rigs; a second re-training in a benchmark ({_q("adapt")}).',
        "How close identification comes from the emulator's own recordings (only from "
        f'simulated ones, {_q("identification")}).',
        "The heavy rig's V5 and the safeguards and standard-prior matrices at today's "
        'configuration (they were measured before the smoothness reference, the best margin, '
        'the balance bar and the narrower sampling).',
        (
            'A soak with the C firmware, or longer than '
            f'{max(_soak_minutes(n) for n in SOAK):g} minutes.'
            if SOAK
            else 'A soak of hours: `python -m rip_bench soak` exists '
            '([benchmarks.md](benchmarks.md)); no result is recorded here yet.'
        ),
        'Several rigs with the C firmware, and three rigs on a machine with more cores.',
    )


SECTION = Section('not-measured', 'Not measured', (), intro=_not_measured)
