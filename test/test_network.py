"""The networked set-up for real: a learner and a rig's nodes on two hosts, a stranger on a third.

Three network namespaces of the test's own stand for three machines: the learner's (A), the
rig's (B: its control node and the supervisor the launch file runs), and a stranger's (C).
A veth pair joins A and B, another C and B, with private addresses of the test's own; nothing
else is reachable from any of them. Discovery is widened the way docs/networking.md tells
users to: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and the other host as a static peer.
A short fine-tune runs across the link (the learner's weights drive the rig), while the
stranger, who knows the rig's address and the domain, publishes weights of its own: the
control node refuses every one of them (another run's identity) and counts them.

Needs root (``ip netns``); with ``CI=true`` it fails rather than skips without it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time

from conftest import CONTROL_TEST_PARAMETERS, LEARNER_TEST_PARAMETERS
import pytest

from rip_control.procs import child_env, die_with_parent
from rip_control.run.launching import ProcessSpec

pytestmark = [pytest.mark.alone, pytest.mark.ros, pytest.mark.slow]

# Addresses of the test's own (RFC 1918), one /30 per link.
A_IP, B_IP_A = '10.213.0.1', '10.213.0.2'
C_IP, B_IP_C = '10.213.0.5', '10.213.0.6'


def _ip(*args: str) -> None:
    subprocess.run(['ip', *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def hosts():
    """Three namespaces (A, B, C) and two veth links (A-B, C-B); removed at teardown."""
    if os.geteuid() != 0 or shutil.which('ip') is None:
        message = 'network namespaces need root and iproute2 (ip)'
        if os.environ.get('CI') == 'true':
            pytest.fail(message)
        pytest.skip(message)
    tag = secrets.token_hex(3)  # concurrent runs, and one a SIGKILL left behind, never collide
    names = {h: f'rip{h}{tag}' for h in 'ABC'}
    made: list[str] = []
    links: list[str] = []
    try:
        for ns in names.values():
            _ip('netns', 'add', ns)
            made.append(ns)
            _ip('-n', ns, 'link', 'set', 'lo', 'up')
        for (left, left_ip), (right, right_ip), link in (
            (('A', A_IP), ('B', B_IP_A), 'ab'),
            (('C', C_IP), ('B', B_IP_C), 'cb'),
        ):
            one, two = f'v{link}{tag}l', f'v{link}{tag}r'
            _ip('link', 'add', one, 'type', 'veth', 'peer', 'name', two)
            links.append(one)  # deleted with its namespace, or below if it never got there
            _ip('link', 'set', one, 'netns', names[left])
            _ip('link', 'set', two, 'netns', names[right])
            for host, dev, addr in ((left, one, left_ip), (right, two, right_ip)):
                _ip('-n', names[host], 'addr', 'add', f'{addr}/30', 'dev', dev)
                _ip('-n', names[host], 'link', 'set', dev, 'up')
        yield {**names, 'tag': tag}
    finally:
        for ns in made:
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True, timeout=30)
        for one in links:  # a veth still in this namespace (a failure before it moved)
            subprocess.run(['ip', 'link', 'del', one], capture_output=True, timeout=30)
        left = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
        assert not [ns for ns in made if ns in left], left


def _in(ns: str, cmd: list[str], peers: str, log: Path) -> subprocess.Popen:
    """``cmd`` in namespace ``ns``, discovery on loopback plus ``peers``, output to ``log``.

    UDP only: the namespaces share this machine's ``/etc/machine-id`` and ``/dev/shm``, so
    Fast DDS would otherwise pass the data through shared memory and only discovery would
    cross the links. Machines apart have no shared memory; here the links carry everything.
    """
    env = child_env(
        {
            'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST',
            'ROS_STATIC_PEERS': peers,
            'FASTDDS_BUILTIN_TRANSPORTS': 'UDPv4',
        }
    )
    return subprocess.Popen(
        ['ip', 'netns', 'exec', ns, *cmd],
        env=env,
        stdout=log.open('w'),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,  # survives ip's exec: nothing outlives a killed pytest
    )


def _link_bytes(ns: str, dev: str) -> tuple[int, int]:
    """(received, sent) bytes of ``dev`` in namespace ``ns``."""
    out = subprocess.run(
        ['ip', '-n', ns, '-s', '-j', 'link', 'show', 'dev', dev],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    stats = json.loads(out)[0]['stats64']
    return int(stats['rx']['bytes']), int(stats['tx']['bytes'])


STRANGER = """
import sys, time
import rclpy
from std_msgs.msg import UInt8MultiArray
from rip_control.policy import random_actor, encode_actor
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
from rip_control.ros.qos import WEIGHTS_QOS

rclpy.init()
node = rclpy.create_node('stranger')
pub = node.create_publisher(UInt8MultiArray, '/policy_weights', WEIGHTS_QOS)
actor = random_actor(OBS_SIZE, ACTION_SIZE, (64, 64), 50.0, version=1)
sent = 0
deadline = time.monotonic() + float(sys.argv[1])
try:
    while time.monotonic() < deadline:
        if pub.get_subscription_count():
            meta = actor.meta.__class__(10**5 + sent, 50.0, OBS_SIZE, ACTION_SIZE, (64, 64))
            data = encode_actor(meta, actor.tensors, {'run_id': 'runstranger0000000'})
            pub.publish(UInt8MultiArray(data=data))
            sent += 1
            print(f'stranger: sent {sent} (matched {pub.get_subscription_count()})', flush=True)
        rclpy.spin_once(node, timeout_sec=0.5)
except KeyboardInterrupt:  # the test's stop
    pass
"""


def test_a_fine_tune_across_a_link_and_a_stranger_refused(hosts, tmp_path):
    from rip_control.rig.emulator_process import EmulatorProcess

    run_id = 'run' + secrets.token_hex(8)
    emu = EmulatorProcess(tmp_path / 'rig', []).start()  # a pty: no network, any namespace
    procs: dict[str, subprocess.Popen] = {}
    logs = {name: tmp_path / f'{name}.log' for name in ('control', 'learner', 'sup', 'stranger')}
    control = ProcessSpec(
        'control',
        'control_node',
        'rip_control',
        params={
            **CONTROL_TEST_PARAMETERS,
            'serial_port': str(emu.link),
            'run_id': run_id,
            'episodes': 2,
            'episode_seconds': 2.0,
            'runs_dir': str(tmp_path / 'runs'),
            'run_name': 'net',
        },
    )
    learner = ProcessSpec(
        'learner',
        'learner_node',
        'rip_learner',
        params={
            **LEARNER_TEST_PARAMETERS,
            'run_id': run_id,
            'runs_dir': str(tmp_path / 'runs'),
            'run_name': 'net_learner',
        },
    )
    try:
        procs['learner'] = _in(hosts['A'], learner.command(), B_IP_A, logs['learner'])
        # the rig's host names the learner's; the stranger names the rig's (a static peer
        # is answered: the rig's host need not know it)
        procs['control'] = _in(hosts['B'], control.command(), A_IP, logs['control'])
        procs['stranger'] = _in(
            hosts['C'], [sys.executable, '-c', STRANGER, '60'], B_IP_C, logs['stranger']
        )
        sup = [sys.executable, '-m', 'rip_control.run.supervisor']
        sup += ['controls:=/rip_control', 'episodes:=2', 'learn:=true']
        procs['sup'] = _in(hosts['B'], sup, A_IP, logs['sup'])
        assert procs['sup'].wait(timeout=180) == 0, logs['sup'].read_text()
        # the stranger's weights reach the node while it runs; wait (bounded) for the
        # node's word on them, in case discovery took longer than the two episodes
        deadline = time.monotonic() + 20
        while 'weights from run runstranger' not in logs['control'].read_text():
            assert time.monotonic() < deadline, logs['control'].read_text()
            time.sleep(0.1)  # polling a log file, bounded
        link_rx, link_tx = _link_bytes(hosts['B'], f'vab{hosts["tag"]}r')
    finally:
        for name in ('stranger', 'control', 'learner', 'sup'):
            proc = procs.get(name)
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        emu.stop()
    sup_log, control_log = logs['sup'].read_text(), logs['control'].read_text()
    assert 'episodes done, motors off, learner has every transition' in sup_log, sup_log
    # transitions crossed B -> A, every one, and the learner's weights A -> B drove the rig
    got = re.search(
        r'transitions published (\d+), unmatched (\d+), received by the learner (\d+)', sup_log
    )
    assert got and int(got[1]) > 0 and got[1] == got[3] and got[2] == '0', sup_log
    versions = [int(v) for v in re.findall(r'^.*episode +\d+: .*policy v(\d+)$', sup_log, re.M)]
    # the learner's (v1 up; v0 the node's own start), never the stranger's (10**5 up)
    assert len(versions) == 2 and 1 <= versions[-1] < 10**5, sup_log
    # and through the link: the transitions went out of B towards A, the weights came in
    assert link_tx > 60 * int(got[1]) and link_rx > 10_000, (link_rx, link_tx)
    stranger_log = logs['stranger'].read_text()
    assert 'stranger: sent ' in stranger_log, stranger_log  # it did reach the rig's node
    refused = re.findall(
        r'policy weights rejected \((\d+) so far\): weights from run runstranger0000000, not '
        f'this run \\({run_id}\\)',
        control_log,
    )
    assert refused, control_log  # each refused, counted (the log is throttled to one in 5 s)
    assert 'Traceback' not in control_log + sup_log + logs['learner'].read_text()
