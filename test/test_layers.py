"""The packages' layers point one way: rip_bench -> rip_learner -> rip_control.

``rip_control`` (the rig, the runtime, the runner, adapt) imports neither the learner nor the
benchmarks; ``rip_learner`` does not import the benchmarks. adapt drives identification and
re-training as the programs they are (``python -m rip_learner.identify``/``pretrain``), the
runner the learner node. Read from the source's import statements, those inside functions
included (a lazy import is a dependency too).
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ('rip_control', 'rip_learner', 'rip_bench')
"""Lowest first: a package may import those before it, never one after."""


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """The top-level packages ``path`` imports (absolute imports), with the line of each."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {(a.name.split('.')[0], node.lineno) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add((node.module.split('.')[0], node.lineno))
    return out


@pytest.mark.parametrize('package', LAYERS[:-1])
def test_no_package_imports_one_above_it(package: str) -> None:
    above = set(LAYERS[LAYERS.index(package) + 1 :])
    files = sorted((REPO / package).rglob('*.py'))
    assert len(files) > 5, files  # not vacuous: the package's modules are read
    found = [
        f'{path.relative_to(REPO)}:{line} imports {name}'
        for path in files
        for name, line in sorted(imported_packages(path))
        if name in above
    ]
    assert not found, '\n'.join(found)


def test_the_reader_sees_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / 'm.py'
    source.write_text('def f():\n    from rip_learner import identify\n    import rip_bench.cli\n')
    assert imported_packages(source) == {('rip_learner', 2), ('rip_bench', 3)}
