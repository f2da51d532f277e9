"""``docs/architecture.md``'s module map is the tree: a fresh reader's map.

The map (the text block under "Where each concern lives") nests by indentation, two spaces a
level. Every module of the installed packages (``rip_control``, ``rip_learner``) is on it, and
everything on it exists; ``rip_bench``, not installed, shows its entry points only, which
must exist too.
"""

from pathlib import Path
import re

REPO = Path(__file__).resolve().parent.parent
INSTALLED = ('rip_control', 'rip_learner')


def map_paths(text: str) -> set[str]:
    """The paths of the map's ``.py`` files and folders, from its indentation."""
    block = text.split('## Where each concern lives', 1)[1].split('```text', 1)[1]
    block = block.split('```', 1)[0]
    stack: list[tuple[int, str]] = []  # (indent, folder)
    out = set()
    for line in block.splitlines():
        m = re.match(r'^( *)(\S+)', line)
        if not m or not (m.group(2).endswith('.py') or m.group(2).endswith('/')):
            continue
        indent, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ''.join(folder for _, folder in stack) + name
        out.add(path)
        if name.endswith('/'):
            stack.append((indent, name))
    return out


def test_the_map_holds_every_installed_module_and_nothing_that_is_not_there() -> None:
    on_map = map_paths((REPO / 'docs' / 'architecture.md').read_text())
    modules = {
        str(p.relative_to(REPO))
        for package in INSTALLED
        for p in (REPO / package).rglob('*.py')
        if p.name not in ('__init__.py', '__main__.py')
    }
    assert len(modules) > 40, modules  # not vacuous: the packages were read
    missing = sorted(modules - on_map)
    assert not missing, f'modules not on the map: {missing}'
    stale = sorted(p for p in on_map if not (REPO / p).exists())
    assert not stale, f'on the map but not in the tree: {stale}'


def test_the_reader_nests_by_indentation() -> None:
    text = (
        '## Where each concern lives\n\n```text\n'
        'pkg/          the package\n'
        '  a.py        a\n'
        '  sub/        a folder\n'
        '    b.py      b\n'
        '  c.py        c\n'
        'top.py        not nested\n'
        '```\n'
    )
    assert map_paths(text) == {
        'pkg/',
        'pkg/a.py',
        'pkg/sub/',
        'pkg/sub/b.py',
        'pkg/c.py',
        'top.py',
    }
