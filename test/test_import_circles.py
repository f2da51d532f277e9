"""The project's modules import one another without a circle.

Within each package; the packages themselves point one way (test_layers).

Read from the source's import statements, those inside functions included: a lazy import is a
dependency too, one that only hides a circle until the day it runs first.
"""

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def module_name(path: Path, root: Path) -> str:
    """``root/pkg/sub/mod.py`` -> ``pkg.sub.mod``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(root).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` (a folder) -> the modules of the package it imports.

    ``import a.b``, ``from a import b`` (``b`` a module, else ``a``), ``from a.b import c``,
    and the relative forms (``from . import b``, ``from .b import c``), wherever they are.
    """
    root = package.parent
    paths = {module_name(p, root): p for p in sorted(package.rglob('*.py'))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == '__init__.py' else name.rpartition('.')[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = '.'.join(here.split('.')[: len(here.split('.')) - node.level + 1])
                    source = f'{base}.{node.module}' if node.module else base
                else:
                    source = node.module or ''
                targets |= {
                    f'{source}.{a.name}' if f'{source}.{a.name}' in paths else source
                    for a in node.names
                }
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str]:
    """A circle of imports, as ``[a, b, ..., a]``; ``[]`` when there is none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str]:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return []
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            cycle = visit(nxt)
            if cycle:
                return cycle
        path.pop()
        done.add(node)
        return []

    for start in sorted(graph):
        cycle = visit(start)
        if cycle:
            return cycle
    return []


@pytest.mark.parametrize(
    ('package', 'seen'),
    [
        ('rip_control', ('rip_control.finetune', 'rip_control.run.launching')),
        ('rip_learner', ('rip_learner.learner_node', 'rip_learner.trainer')),
        ('rip_bench', ('rip_bench.results.pages', 'rip_bench.results.model')),
    ],
)
def test_no_module_imports_itself_through_others(package: str, seen: tuple[str, str]) -> None:
    graph = import_graph(REPO / package)
    # not vacuous: every module is read, and their imports of one another are seen
    assert len(graph) > 5, sorted(graph)
    assert seen[1] in graph[seen[0]], graph[seen[0]]
    cycle = find_cycle(graph)
    assert not cycle, 'import circle: ' + ' -> '.join(cycle)


def test_a_circle_is_found_and_named() -> None:
    graph = {'a': {'b'}, 'b': {'c', 'd'}, 'c': {'a'}, 'd': set()}
    assert find_cycle(graph) == ['a', 'b', 'c', 'a']
    assert find_cycle({**graph, 'c': set()}) == []


def test_the_reader_sees_every_form_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / 'pkg'
    (pkg / 'sub').mkdir(parents=True)
    (pkg / '__init__.py').write_text('NAME = 1\n')
    (pkg / 'sub' / '__init__.py').write_text('')
    (pkg / 'low.py').write_text('')
    (pkg / 'sub' / 'leaf.py').write_text('from .. import low\nfrom . import other\n')
    (pkg / 'sub' / 'other.py').write_text('from .leaf import x\n')
    (pkg / 'top.py').write_text(
        'from pkg import NAME, low\n'
        'def f():\n'
        '    from pkg.sub.leaf import thing\n'
        '    import pkg.sub\n'
    )
    graph = import_graph(pkg)
    assert graph['pkg.top'] == {'pkg', 'pkg.low', 'pkg.sub.leaf', 'pkg.sub'}
    assert graph['pkg.sub.leaf'] == {'pkg.low', 'pkg.sub.other'}
    assert find_cycle(graph) == ['pkg.sub.leaf', 'pkg.sub.other', 'pkg.sub.leaf']
