"""Question 'bags': how fast transitions go into a rosbag2 bag and back."""

from __future__ import annotations

from rip_bench.results.model import Records, Result, Section

BAGS = 'bag_roundtrip.json'


def _bags_conclusion(r: Records) -> str:
    d = r[BAGS]
    rejected = sum(d['rejected'].values()) if d['rejected'] else 0
    return (
        f'{d["transitions"]} transitions ({d["transitions"] / d["rate_hz"] / 60:g} minutes of a '
        f'{d["rate_hz"]:g} Hz rig) written at {d["write_per_s"]:.0f}/s and read back with every '
        f'check at {d["read_per_s"]:.0f}/s; {d["bytes_per_transition"]:.0f} B each on disk, '
        f'{rejected} rejected.'
    )


BAGS_RESULT = Result(
    heading='',
    question='How fast do transitions go into a rosbag2 bag and back, with every check?',
    setup=lambda r: '`python -m rip_bench bag-roundtrip`; `bash bench/run_learning.sh` runs it.',
    files=(BAGS,),
    conclusion=_bags_conclusion,
    replicate=('python -m rip_bench bag-roundtrip --json bench/results/bag_roundtrip.json',),
)


SECTION = Section('bags', 'Bags of transitions', (BAGS_RESULT,))
