"""A node started by hand takes what the runner takes, and refuses what the table refuses.

``-p rate_hz:=50`` (rcl reads an INTEGER) and ``-p run_name:=2024`` are converted by the
table before they are declared; the declared ranges travel in the descriptors, so a live
``ros2 param set`` outside them is refused.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import DescribeParameters, GetParameters, ListParameters, SetParameters
import rclpy

from rip_control.procs import child_env

pytestmark = pytest.mark.ros


#: How long one request may go unanswered before it is sent again.
RESEND_S = 5.0


def _call(node, srv_type, name, request, timeout_s=10.0):
    """The service's answer, within ``timeout_s``.

    A request is sent again when ``RESEND_S`` pass unanswered: the service being discovered
    (``wait_for_service``) does not mean the server has matched this client's reply reader
    yet, and DDS drops a reply sent before that (a CI run: a bare node's get_parameters
    unanswered for 60 s, the node up and discovered). Every call here is idempotent.
    """
    client = node.create_client(srv_type, name)
    try:
        assert client.wait_for_service(timeout_sec=timeout_s), name
        deadline = time.monotonic() + timeout_s
        while True:
            future = client.call_async(request)
            left = deadline - time.monotonic()
            rclpy.spin_until_future_complete(node, future, timeout_sec=min(RESEND_S, left))
            if future.done() or time.monotonic() >= deadline:
                break
            client.remove_pending_request(future)
        assert future.done(), f'{name} did not answer'
        return future.result()
    finally:
        node.destroy_client(client)


def _double(name, value):
    return Parameter(
        name=name, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
    )


def test_whole_numbers_and_numeric_names_given_to_a_node_by_hand_take_the_tables_types(
    control_rig, ros_node
):
    rig = control_rig(rate_hz=50, max_action_v=1, run_name=2024, episode_seconds=1)
    got = _call(
        ros_node,
        GetParameters,
        f'/{rig.name}/get_parameters',
        GetParameters.Request(names=['rate_hz', 'max_action_v', 'run_name']),
    )
    rate, volts, name = got.values
    assert rate.type == ParameterType.PARAMETER_DOUBLE and rate.double_value == 50.0
    assert volts.type == ParameterType.PARAMETER_DOUBLE and volts.double_value == 1.0
    assert name.type == ParameterType.PARAMETER_STRING and name.string_value == '2024'
    assert rig.driver.change('configure')


def test_a_live_parameter_set_outside_the_tables_range_is_refused(control_rig, ros_node):
    rig = control_rig()
    described = _call(
        ros_node,
        DescribeParameters,
        f'/{rig.name}/describe_parameters',
        DescribeParameters.Request(names=['rate_hz']),
    )
    (rate,) = described.descriptors
    assert (rate.floating_point_range[0].from_value, rate.floating_point_range[0].to_value) == (
        1.0,
        1000.0,
    )
    result = _call(
        ros_node,
        SetParameters,
        f'/{rig.name}/set_parameters',
        SetParameters.Request(parameters=[_double('rate_hz', 5000.0)]),
    )
    assert not result.results[0].successful
    assert 'rate_hz' in result.results[0].reason or 'range' in result.results[0].reason


def test_no_parameter_changes_on_a_configured_node_least_of_all_under_an_engaged_motor(
    control_rig, ros_node
):
    rig = control_rig(max_action_v=2, episode_seconds=30)

    def set_(*params):
        req = SetParameters.Request(parameters=list(params))
        return _call(ros_node, SetParameters, f'/{rig.name}/set_parameters', req).results[0]

    def volts():
        req = GetParameters.Request(names=['max_action_v'])
        return _call(ros_node, GetParameters, f'/{rig.name}/get_parameters', req).values[0]

    assert set_(_double('max_action_v', 3.0)).successful  # unconfigured: for the next configure
    assert rig.driver.change('configure') and rig.driver.change('activate'), rig.why()
    assert rig.emulator.wait_for_line('EVENT', 5.0) is not None, f'never engaged: {rig.why()}'
    for param in (_double('max_action_v', 24.0), _double('fault_tick_delay_ms', 26.0)):
        result = set_(param)
        assert not result.successful
        assert f'{param.name} cannot change while the node is configured (now active)' in (
            result.reason
        )
    assert volts().double_value == 3.0
    assert rig.driver.state() == 'active' and rig.engaged_now(), rig.why()
    assert rig.driver.change('deactivate')
    assert 'now inactive' in set_(_double('max_action_v', 24.0)).reason
    assert rig.driver.change('cleanup')
    assert set_(_double('max_action_v', 4.0)).successful and volts().double_value == 4.0


@pytest.mark.parametrize(
    ('given', 'says'),
    [
        ('rate_hz:=abc', 'rate_hz'),
        ('episodes:=2.5', 'episodes'),
        ('max_strikes:=0', 'max_strikes'),
    ],
)
def test_a_bad_value_given_to_a_node_by_hand_is_named_and_exits_2(given, says):
    proc = subprocess.run(
        [sys.executable, '-m', 'rip_control.ros.control_node', '--ros-args', '-p', given],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert says in out and 'Traceback' not in out, out


def _value(v):
    """A ``ParameterValue`` as Python."""
    return {
        ParameterType.PARAMETER_BOOL: lambda: v.bool_value,
        ParameterType.PARAMETER_INTEGER: lambda: v.integer_value,
        ParameterType.PARAMETER_DOUBLE: lambda: v.double_value,
        ParameterType.PARAMETER_STRING: lambda: v.string_value,
        ParameterType.PARAMETER_INTEGER_ARRAY: lambda: list(v.integer_array_value),
    }[v.type]()


@pytest.mark.parametrize('which', ['control', 'learner'])
def test_a_bare_node_declares_the_tables_defaults_which_make_demo_runs(ros_node, tmp_path, which):
    import os

    from rip_control.params import CONTROL_PARAMETERS, LEARNER_PARAMETERS, defaults
    from rip_control.procs import stop_process
    from rip_control.run.launching import CONTROL, LEARNER, plan

    table = CONTROL_PARAMETERS if which == 'control' else LEARNER_PARAMETERS
    module = 'rip_control.ros.control_node' if which == 'control' else 'rip_learner.learner_node'
    name = f'bare_{which}_{os.getpid()}'
    # No parameter at all: what `ros2 run rip_control control_node` declares.
    proc = subprocess.Popen(
        [sys.executable, '-m', module, '--ros-args', '-r', f'__node:={name}'],
        cwd=tmp_path,  # a bare learner writes runs/default/ here
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        got = _call(
            ros_node,
            GetParameters,
            f'/{name}/get_parameters',
            GetParameters.Request(names=[p.name for p in table]),
            timeout_s=60.0,
        )
        listed = _call(
            ros_node,
            ListParameters,
            f'/{name}/list_parameters',
            ListParameters.Request(),
            timeout_s=60.0,
        ).result.names
    finally:
        stop_process(proc, timeout_s=30)
    # What the node declares is the table, no more: docs/parameters.md (generated from the
    # table, test_docs) lists every parameter the node has, but rclpy's own.
    ros_own = {'use_sim_time', 'start_type_description_service'}
    assert {n for n in listed if n not in ros_own and not n.startswith('qos_overrides.')} == {
        p.name for p in table
    }
    declared = {p.name: _value(v) for p, v in zip(table, got.values, strict=True)}
    assert declared == defaults(table)
    kinds = {
        'double': ParameterType.PARAMETER_DOUBLE,
        'integer': ParameterType.PARAMETER_INTEGER,
        'bool': ParameterType.PARAMETER_BOOL,
        'string': ParameterType.PARAMETER_STRING,
        'integer[]': ParameterType.PARAMETER_INTEGER_ARRAY,
    }
    assert [v.type for v in got.values] == [kinds[p.type] for p in table]  # 50.0, not 50
    # make demo (`finetune run_name:=demo resume_buffer:=auto policy:=auto`) runs the same
    # values, but for what it names, the rig the runner starts, and the files it resolves.
    specs, _ = plan({'run_name': 'demo', 'resume_buffer': 'auto', 'policy': 'auto'}, pid=1)
    node = CONTROL if which == 'control' else LEARNER
    demo = next(s for s in specs if s.node_name == node).params
    resolved = {'run_name', 'policy', 'resume_buffer', 'serial_port', 'run_id'}
    assert declared['run_id'] == '' and len(demo['run_id']) == 19  # the run's fresh identity
    assert {k: v for k, v in demo.items() if k not in resolved} == {
        k: v for k, v in declared.items() if k not in resolved
    }


@pytest.mark.parametrize('peers', [None, '127.0.0.1'])
def test_a_bare_node_warns_when_its_discovery_is_widened_beyond_this_machine(peers):
    # Unset, the node takes LOCALHOST itself (node_params.init_rclpy) and says nothing. A
    # static peer widens it (the README's way to reach a remote learner); the peer here is
    # loopback, so the test's traffic stays on this machine (SUBNET would not: below).
    env = child_env()
    env.pop('ROS_AUTOMATIC_DISCOVERY_RANGE', None)
    env.pop('ROS_STATIC_PEERS', None)
    if peers is not None:
        env['ROS_STATIC_PEERS'] = peers
    name = f'rip_scope_{os.getpid()}_{bool(peers)}'
    proc = subprocess.Popen(
        [sys.executable, '-m', 'rip_control.ros.control_node']
        + ['--ros-args', '-r', f'__node:={name}'],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if 'unconfigured, waiting for configure' in line:
                break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = ''.join(lines) + rest
    assert 'unconfigured, waiting for configure' in out, out
    widened = 'DDS discovery widened (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, ROS_STATIC_PEERS='
    if peers is not None:
        assert widened + peers in out and 'can publish policy_weights and transitions' in out, out
    else:
        assert 'DDS discovery widened' not in out, out


@pytest.mark.parametrize(
    ('scope', 'peers', 'warned'),
    [
        ('LOCALHOST', '', False),
        ('OFF', '', False),
        ('LOCALHOST', '10.0.0.2', True),
        ('SUBNET', '', True),
        ('SYSTEM_DEFAULT', '', True),
        ('', '', True),  # set but empty: rmw's default, the subnet
    ],
)
def test_which_discovery_settings_are_warned_about(monkeypatch, scope, peers, warned):
    # The ranges a process test cannot use here without traffic beyond loopback.
    from rip_control.ros.node_params import widened_discovery

    monkeypatch.setenv('ROS_AUTOMATIC_DISCOVERY_RANGE', scope)
    monkeypatch.setenv('ROS_STATIC_PEERS', peers)
    text = widened_discovery()
    assert bool(text) == warned, text
    if warned:
        assert f'ROS_AUTOMATIC_DISCOVERY_RANGE={scope or "unset"}' in text, text
