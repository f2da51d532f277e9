"""The generated pages of docs/ are what the code gives (``python -m rip_bench docs``)."""

from pathlib import Path

from rip_bench.cli import main as bench_main
from rip_bench.docs import PAGES

REPO = Path(__file__).resolve().parent.parent


def test_the_generated_pages_are_current(capsys) -> None:
    status = bench_main(['docs', '--check'])
    assert status == 0, capsys.readouterr().out


def test_a_page_that_differs_is_named_and_regenerated(tmp_path, capsys) -> None:
    for name in PAGES:
        (tmp_path / name).write_text((REPO / 'docs' / name).read_text().replace('|', '!', 1))
    assert bench_main(['docs', '--check', '--out', str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert all(str(tmp_path / name) in out for name in PAGES), out
    assert bench_main(['docs', '--out', str(tmp_path)]) == 0
    for name in PAGES:
        assert (tmp_path / name).read_text() == (REPO / 'docs' / name).read_text()


def test_the_parameter_page_lists_every_parameter_of_both_nodes_with_its_default() -> None:
    from rip_control.params import CONTROL_PARAMETERS, LEARNER_PARAMETERS

    page = (REPO / 'docs' / 'parameters.md').read_text()
    control = page.split('## Control node')[1].split('\n## ')[0]
    learner = page.split('## Learner node')[1].split('\n## ')[0]
    for section, table in ((control, CONTROL_PARAMETERS), (learner, LEARNER_PARAMETERS)):
        rows = [r for r in section.splitlines() if r.startswith('| `')]
        assert [r.split('`')[1] for r in rows] == [p.name for p in table]
    assert '| `rate_hz` | double | `50.0` | 1 … 1000 |' in control
