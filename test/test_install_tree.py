"""The installed package holds the product and no benchmark code.

The package as ``colcon build`` installs it (the session's ``colcon_install``, from a copy of
the source tree).
"""

from pathlib import Path
import re

REPO = Path(__file__).resolve().parent.parent


def test_the_install_tree_holds_no_benchmark_module(colcon_install: Path) -> None:
    prefix = colcon_install
    installed = [p.relative_to(prefix) for p in prefix.rglob('*')]
    # Every benchmark module, by file name (all of them live in rip_bench/); the check is not
    # vacuous: they are in the source tree that was installed.
    benchmark_files = {p.name for p in (REPO / 'rip_bench').glob('*.py')} - {'__init__.py'}
    assert len(benchmark_files) > 10, benchmark_files
    (site,) = prefix.glob('lib/python3*/site-packages')
    assert (site / 'rip_control' / 'ros' / 'control_node.py').is_file()
    assert (site / 'rip_learner' / 'learner_node.py').is_file()
    launch = prefix / 'share' / 'rip_control' / 'launch' / 'finetune.launch.py'
    assert launch.is_file()
    benchmark = [
        p
        for p in installed
        if 'rip_bench' in p.parts or 'benchmarks' in p.parts or p.name in benchmark_files
    ]
    assert not benchmark, f'benchmark code installed: {benchmark}'
    # And nothing installed needs it.
    importing = re.compile(r'^\s*(from|import) rip_bench\b', re.M)
    needing = [p for p in site.rglob('*.py') if importing.search(p.read_text(errors='replace'))]
    assert not needing, f'installed modules that import rip_bench: {needing}'
