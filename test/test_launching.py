"""The launch file and the standalone runner start the same processes with the same parameters."""

import ast
from pathlib import Path

import pytest
import yaml

from rip_control import run_files
from rip_control.params import parse_args
from rip_control.run import launching
from rip_control.run.launching import (
    CONTROL,
    LAUNCH_ARGUMENTS,
    LEARNER,
    RunnerInput,
)

REPO = Path(__file__).resolve().parent.parent
LAUNCH = REPO / 'launch' / 'finetune.launch.py'
REQUIRED = {
    'rate',
    'serial_port',
    'run_name',
    'episodes',
    'episode_seconds',
    'gradient_steps',
    'resume_buffer',
    'policy',
    'params_file',
}


def test_the_launch_file_declares_every_required_argument_from_the_shared_table():
    names = {a.name for a in LAUNCH_ARGUMENTS}
    assert REQUIRED <= names
    assert 'LAUNCH_ARGUMENTS' in _launch_file_imports('rip_control.run.launching')


def _launch_file_imports(module):
    """Names the launch file imports from ``module``."""
    tree = ast.parse(LAUNCH.read_text())
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == module
        for alias in node.names
    }


def _launch_executables():
    tree = ast.parse(LAUNCH.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == 'executable':
            found.add(node.value.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith('/lib/rip_control/'):
                found.add(node.value.rsplit('/', 1)[1])
    return found


def test_runner_plan_has_the_launch_files_executables_and_parameters():
    args = {'rate': '50', 'episodes': '3', 'gradient_steps': '2', 'run_name': '2024'}
    specs, _ = launching.plan(args, pid=1)
    # The launch file starts the plan's executables and the supervisor that drives them (with
    # adapt:=true, the adapt loop instead, which starts each phase's own).
    launched = {s.executable for s in specs} | {'finetune_supervisor', 'adapt'}
    assert launched == _launch_executables()
    by = {s.label: s for s in specs}
    params = RunnerInput.parse(args).nodes
    for key, value in params[CONTROL].items():
        if key not in ('serial_port', 'policy', 'run_id'):  # resolved by the plan
            assert by['control'].params[key] == value
    # Typed by the table, whatever the spelling: rate:=50 is the double the nodes declare.
    assert by['control'].params['rate_hz'] == 50.0 and by['learner'].params['rate_hz'] == 50.0
    assert isinstance(by['control'].params['rate_hz'], float)
    assert by['control'].params['episodes'] == 3
    assert by['learner'].params['gradient_steps'] == 2
    assert by['control'].params['serial_port'] == '/tmp/rip_rig_1'  # the emulator's link
    # An empty policy is the one shipped for the rate.
    assert by['control'].params['policy'] == str(run_files.packaged_policy(50.0))
    cmd = by['control'].command()
    assert '-p' in cmd and 'rate_hz:=50.0' in cmd and 'episodes:=3' in cmd
    assert "run_name:='2024'" in cmd  # quoted: rcl would read a bare 2024 as an integer
    # A value other than the default, spelled as a user types it.
    params = RunnerInput.parse({'rate': '100'}).nodes
    assert params[CONTROL]['rate_hz'] == params[LEARNER]['rate_hz'] == 100.0
    assert isinstance(params[CONTROL]['rate_hz'], float)


def test_a_plan_reads_the_params_file_once_and_knows_what_the_user_set(tmp_path, monkeypatch):
    """One parse of the input: the file read once, typed names and the file's both count."""
    path = tmp_path / 'p.yaml'
    path.write_text(
        'rip_control:\n  ros__parameters:\n    episodes: 4\n    run_id: mine\n'
        'rip_learner:\n  ros__parameters:\n    run_id: mine\n'
    )
    reads: list[Path] = []
    real = launching.read_params_file

    def once(p: Path) -> dict:  # the file is gone after its first read: a second would fail
        reads.append(p)
        out = real(p)
        p.rename(p.with_suffix('.read'))
        return out

    monkeypatch.setattr(launching, 'read_params_file', once)
    args = {'params_file': str(path), 'seed': '3', 'run_name': '', 'runs_dir': str(tmp_path)}
    specs, _ = launching.plan(args, pid=1)
    assert reads == [path], reads
    path.with_suffix('.read').rename(path)
    inp = RunnerInput.parse(args)
    assert inp.set_by_user('seed') and inp.set_by_user('episodes')  # typed; in the file
    assert not inp.set_by_user('run_name')  # typed empty: the launch file's "not given"
    assert not inp.set_by_user('eval_episodes')
    control = next(s for s in specs if s.label == 'control')
    assert control.params['episodes'] == 4 and control.params['seed'] == 3
    # run_id set in the file counts as the user's: the plan keeps it instead of drawing one.
    assert control.params['run_id'] == 'mine'


def test_a_params_file_is_typed_by_the_table_and_unknown_keys_are_refused(tmp_path):
    path = tmp_path / 'p.yaml'
    path.write_text(
        'rip_control:\n  ros__parameters:\n    max_action_v: 3\n    max_strikes: 4.0\n'
        'rip_learner:\n  ros__parameters:\n    learning_rate: 1\n    run_name: 2024\n'
    )
    params = RunnerInput.parse({'params_file': str(path)}).nodes
    assert params[CONTROL]['max_action_v'] == 3.0 and isinstance(
        params[CONTROL]['max_action_v'], float
    )
    assert params[CONTROL]['max_strikes'] == 4 and isinstance(params[CONTROL]['max_strikes'], int)
    assert params[LEARNER]['learning_rate'] == 1.0
    path.write_text('rip_control:\n  ros__parameters:\n    max_strike: 4\n')
    with pytest.raises(ValueError, match=r'p.yaml.*max_strike.*did you mean max_strikes'):
        RunnerInput.parse({'params_file': str(path)})
    path.write_text('rip_control:\n  ros__parameters:\n    max_strikes: 2.5\n')
    with pytest.raises(ValueError, match=r'max_strikes: 2.5: expected an integer'):
        RunnerInput.parse({'params_file': str(path)})


def test_a_params_file_value_stands_unless_the_argument_is_typed(tmp_path):
    path = tmp_path / 'mine.yaml'
    path.write_text(
        'rip_control:\n  ros__parameters:\n    episodes: 1\n    episode_seconds: 2.0\n'
        '    serial_port: /dev/ttyACM0\n'
        'rip_learner:\n  ros__parameters:\n    gradient_steps: 8\n'
    )
    given = {'params_file': str(path)}
    params = RunnerInput.parse(given).nodes
    assert params[CONTROL]['episodes'] == 1 and params[CONTROL]['episode_seconds'] == 2.0
    assert params[CONTROL]['serial_port'] == '/dev/ttyACM0'
    assert params[LEARNER]['gradient_steps'] == 8
    # Typed, an argument wins; typed empty (the launch file's "not given"), it does not.
    params = RunnerInput.parse(
        {**given, 'episodes': '3', 'gradient_steps': '', 'rate': '50'}
    ).nodes
    assert params[CONTROL]['episodes'] == 3 and params[LEARNER]['gradient_steps'] == 8
    assert params[CONTROL]['rate_hz'] == params[LEARNER]['rate_hz'] == 50.0
    # No file: the table's defaults, which are what the product ships.
    from rip_control.params import CONTROL_PARAMETERS, LEARNER_PARAMETERS, defaults

    assert RunnerInput.parse({}).nodes == {
        CONTROL: defaults(CONTROL_PARAMETERS),
        LEARNER: defaults(LEARNER_PARAMETERS),
    }


def test_the_example_params_file_loads_and_names_only_declared_parameters():
    import re

    example = REPO / 'config' / 'finetune.yaml'
    text = example.read_text()
    assert set(yaml.safe_load(text)) == {CONTROL, LEARNER}
    params = RunnerInput.parse({'params_file': str(example)}).nodes
    assert params[CONTROL]['rate_hz'] == params[LEARNER]['rate_hz'] == 50.0
    # Its commented-out suggestions name parameters of the section they stand in, with values
    # the table takes: uncommented, each would load.
    section = None
    for line in text.splitlines():
        if line in (f'{CONTROL}:', f'{LEARNER}:'):
            section = line[:-1]
        m = re.match(r'^    # (\w+): (\S+)', line)
        if m:
            name, value = m.groups()
            assert name in launching.NODE_TABLES[section], (section, name)
            launching.NODE_TABLES[section][name].convert(yaml.safe_load(value))


def test_a_params_file_section_no_node_reads_is_refused_by_name(tmp_path):
    path = tmp_path / 'typo.yaml'
    path.write_text('rip_contrl:\n  ros__parameters:\n    episodes: 1\n')
    with pytest.raises(ValueError, match=r"typo.yaml: 'rip_contrl' is not a node"):
        RunnerInput.parse({'params_file': str(path)})


def test_unknown_or_malformed_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="argument 'rat' does not exist; did you mean rate"):
        RunnerInput.parse({'rat': '50'})
    with pytest.raises(ValueError, match=r'rate:=abc: expected a double'):
        RunnerInput.parse({'rate': 'abc'})
    with pytest.raises(ValueError, match=r'episodes:=2.5: expected an integer'):
        RunnerInput.parse({'episodes': '2.5'})
    with pytest.raises(ValueError, match='episodes=3'):
        parse_args(['episodes=3'])


def test_the_launch_file_builds_its_processes_from_the_runners_plan():
    assert 'plan' in _launch_file_imports('rip_control.run.launching')
    tree = ast.parse(LAUNCH.read_text())
    actions = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == '_actions'
    )
    calls = {
        n.func.id
        for n in ast.walk(actions)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert 'plan' in calls
    # Every node's parameters are the plan's (spec.params), never a dict written in the file.
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, 'id', '') == 'Node':
            for kw in call.keywords:
                if kw.arg == 'parameters':
                    assert 'spec.params' in ast.unparse(kw.value) or 'arguments' in ast.unparse(
                        kw.value
                    ), ast.unparse(kw.value)
                    assert not any(isinstance(n, ast.Dict) for n in ast.walk(kw.value))


def test_a_plan_for_several_rigs_gives_each_its_namespace_emulator_and_folder():
    specs, _ = launching.plan({'rigs': '3', 'run_name': 'many'}, pid=7)
    controls = [s for s in specs if s.executable == 'control_node']
    emulators = [s for s in specs if s.executable == 'rig_emulator']
    assert [s.namespace for s in controls] == ['rig0', 'rig1', 'rig2']
    assert [s.fqn for s in controls] == [
        '/rig0/rip_control',
        '/rig1/rip_control',
        '/rig2/rip_control',
    ]
    links = [s.args[s.args.index('--link') + 1] for s in emulators]
    assert links == ['/tmp/rip_rig_7_0', '/tmp/rip_rig_7_1', '/tmp/rip_rig_7_2']
    assert [s.params['serial_port'] for s in controls] == links
    assert [s.params['run_name'] for s in controls] == ['many/rig0', 'many/rig1', 'many/rig2']
    assert len({s.params['seed'] for s in controls}) == 3
    for s in controls:
        assert s.remaps == {'transitions': '/transitions', 'policy_weights': '/policy_weights'}
        assert '-r' in s.command() and 'transitions:=/transitions' in s.command()
    assert sum(s.executable == 'learner_node' for s in specs) == 1
    with pytest.raises(ValueError, match=r'serial_port lists 1 port\(s\) but rigs:=2'):
        launching.plan({'rigs': '2', 'serial_port': '/dev/ttyUSB0'})
    with pytest.raises(ValueError, match=r'rigs:=0: expected a value in \[1, 16\]'):
        launching.plan({'rigs': '0'})


def test_each_plan_gives_its_run_a_fresh_identity_its_nodes_share(tmp_path):
    first, _ = launching.plan({'rigs': '2', 'run_name': 'a'}, pid=7)
    second, _ = launching.plan({'rigs': '2', 'run_name': 'a'}, pid=7)

    def ids(specs):
        return {
            s.params['run_id'] for s in specs if s.executable in ('control_node', 'learner_node')
        }

    (one,), (other,) = ids(first), ids(second)  # learner and both rigs: one identity
    assert (
        one.startswith('run') and len(one) == 19 and one != other
    )  # two runs in one domain never take each other's
    # One a params file names is kept (both nodes must name the same).
    params = tmp_path / 'p.yaml'
    section = {'ros__parameters': {'run_id': 'bench7'}}
    params.write_text(yaml.safe_dump({CONTROL: section, LEARNER: section}))
    named, _ = launching.plan({'params_file': str(params)}, pid=7)
    assert ids(named) == {'bench7'}


def test_a_bad_rig_file_is_refused_before_anything_starts_by_the_emulators_own_check(tmp_path):
    missing = tmp_path / 'no_rig.yaml'
    with pytest.raises(ValueError, match=rf'rig_params:={missing}: rig parameter file not found'):
        launching.plan({'rig_params': str(missing)}, pid=7)
    bad = tmp_path / 'bad_rig.yaml'
    bad.write_text('motor_dead_zone_v: -1.0\n')
    with pytest.raises(ValueError, match=rf'rig_params:={bad}: .*motor_dead_zone_v'):
        launching.plan({'rig_params': str(bad)}, pid=7)
