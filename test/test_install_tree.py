"""The installed package holds the product and no benchmark code.

The package is installed as colcon's ament_python build installs it (``setup.py install
--single-version-externally-managed --record``) into a temporary prefix, from a copy of the
source tree (the build writes ``build/`` and an egg-info into the tree it runs in).
"""

from pathlib import Path
import re
import shutil
import subprocess
import sys

REPO = Path(__file__).resolve().parent.parent


def test_the_install_tree_holds_no_benchmark_module(tmp_path: Path) -> None:
    src = tmp_path / 'src'
    ignore = shutil.ignore_patterns(
        '.venv', '.git', 'build', 'install', 'log', '__pycache__', 'runs', 'results'
    )
    shutil.copytree(REPO, src, ignore=ignore)
    prefix = tmp_path / 'prefix'
    proc = subprocess.run(
        [sys.executable, 'setup.py', 'install', '--prefix', str(prefix),
         '--single-version-externally-managed', '--record', str(tmp_path / 'record.txt')],
        cwd=src, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    installed = [p.relative_to(prefix) for p in prefix.rglob('*')]
    # Every benchmark module, by file name (all of them live in rip_bench/); the check is not
    # vacuous: they are in the source tree that was installed.
    benchmark_files = {p.name for p in (src / 'rip_bench').glob('*.py')} - {'__init__.py'}
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
