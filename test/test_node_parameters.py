"""A node started by hand takes what the runner takes, and refuses what the table refuses.

``-p rate_hz:=50`` (rcl reads an INTEGER) and ``-p run_name:=2024`` are converted by the
table before they are declared; the declared ranges travel in the descriptors, so a live
``ros2 param set`` outside them is refused.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import DescribeParameters, GetParameters, SetParameters
import rclpy

from rip_control.procs import child_env

pytestmark = pytest.mark.ros


def _call(node, srv_type, name, request, timeout_s=10.0):
    client = node.create_client(srv_type, name)
    try:
        assert client.wait_for_service(timeout_sec=timeout_s), name
        future = client.call_async(request)
        rclpy.spin_until_future_complete(node, future, timeout_sec=timeout_s)
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
