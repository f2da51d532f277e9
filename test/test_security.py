"""SROS2 (DDS-Security) with the pip wheels: asked for, refused by name, never run open.

The issue asked: if the Fast DDS in the pip wheels has the security plugins, test access
control with a keystore made here; if not, show that. It has not: Fast DDS refuses a
participant with security properties ("This Fast DDS version doesn't have the security
libraries"). These tests make a real keystore (a CA, an enclave's identity certificate, a
governance and a permissions document signed by the CA, with ``openssl``) and show that every
process of the package that was told to run secured refuses to start, exit status 2 with
the settings named and no traceback, instead of running unsecured. In a ROS 2 built with
DDS-Security the same keystore layout is what ``ros2 security create_enclave`` makes
(docs/networking.md).
"""

from __future__ import annotations

import os
from pathlib import Path
import re
import shutil
import subprocess
import sys

import pytest

from rip_control.procs import child_env
from rip_control.ros.node_params import (
    SECURITY_ENV,
    SecurityRefused,
    check_security_settings,
    security_named,
)

ENCLAVE = '/rip_control'

GOVERNANCE = """<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <domain_access_rules>
    <domain_rule>
      <domains><id_range><min>0</min><max>230</max></id_range></domains>
      <allow_unauthenticated_participants>false</allow_unauthenticated_participants>
      <enable_join_access_control>true</enable_join_access_control>
      <discovery_protection_kind>ENCRYPT</discovery_protection_kind>
      <liveliness_protection_kind>ENCRYPT</liveliness_protection_kind>
      <rtps_protection_kind>SIGN</rtps_protection_kind>
      <topic_access_rules>
        <topic_rule>
          <topic_expression>*</topic_expression>
          <enable_discovery_protection>true</enable_discovery_protection>
          <enable_liveliness_protection>true</enable_liveliness_protection>
          <enable_read_access_control>true</enable_read_access_control>
          <enable_write_access_control>true</enable_write_access_control>
          <metadata_protection_kind>ENCRYPT</metadata_protection_kind>
          <data_protection_kind>ENCRYPT</data_protection_kind>
        </topic_rule>
      </topic_access_rules>
    </domain_rule>
  </domain_access_rules>
</dds>
"""

PERMISSIONS = """<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <permissions>
    <grant name="{enclave}">
      <subject_name>CN={enclave}</subject_name>
      <validity><not_before>2020-01-01T00:00:00</not_before>
        <not_after>2040-01-01T00:00:00</not_after></validity>
      <allow_rule>
        <domains><id_range><min>0</min><max>230</max></id_range></domains>
        <publish><topics><topic>*</topic></topics></publish>
        <subscribe><topics><topic>*</topic></topics></subscribe>
      </allow_rule>
      <default>DENY</default>
    </grant>
  </permissions>
</dds>
"""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(['openssl', *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_keystore(root: Path, enclave: str = ENCLAVE) -> Path:
    """A keystore with one enclave, in the layout rcl and rmw_fastrtps read."""
    ca = root / 'ca'
    ca.mkdir(parents=True)
    _openssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', 'ca.key.pem', cwd=ca)
    _openssl(
        'req', '-new', '-x509', '-key', 'ca.key.pem', '-out', 'ca.cert.pem', '-days', '2',
        '-subj', '/CN=rip_control test CA', cwd=ca,
    )  # fmt: skip
    where = root / 'enclaves' / enclave.strip('/')
    where.mkdir(parents=True)
    _openssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', 'key.pem', cwd=where)
    subject = '/CN=' + enclave.replace('/', '\\/')  # openssl's -subj escapes a '/' in a value
    _openssl('req', '-new', '-key', 'key.pem', '-out', 'req.csr', '-subj', subject, cwd=where)
    _openssl(
        'x509', '-req', '-in', 'req.csr', '-CA', str(ca / 'ca.cert.pem'), '-CAkey',
        str(ca / 'ca.key.pem'), '-CAcreateserial', '-out', 'cert.pem', '-days', '2', cwd=where,
    )  # fmt: skip
    for name in ('identity_ca.cert.pem', 'permissions_ca.cert.pem'):
        shutil.copy(ca / 'ca.cert.pem', where / name)
    (where / 'governance.xml').write_text(GOVERNANCE)
    (where / 'permissions.xml').write_text(PERMISSIONS.format(enclave=enclave))
    for doc in ('governance', 'permissions'):
        _openssl(
            'smime', '-sign', '-text', '-in', f'{doc}.xml', '-out', f'{doc}.p7s', '-signer',
            str(ca / 'ca.cert.pem'), '-inkey', str(ca / 'ca.key.pem'), cwd=where,
        )  # fmt: skip
    return root


@pytest.fixture(scope='module')
def keystore(tmp_path_factory) -> Path:
    if shutil.which('openssl') is None:
        if os.environ.get('CI'):
            pytest.fail('openssl is needed to make the test keystore')
        pytest.skip('no openssl to make a keystore with')
    return make_keystore(tmp_path_factory.mktemp('keystore'))


def test_the_keystore_made_here_is_signed_by_its_ca(keystore):
    # So a refusal below is the DDS's, not a broken keystore's.
    where = keystore / 'enclaves' / ENCLAVE.strip('/')
    ca = str(keystore / 'ca' / 'ca.cert.pem')
    _openssl('verify', '-CAfile', ca, str(where / 'cert.pem'), cwd=keystore)
    for doc in ('governance', 'permissions'):
        _openssl(
            'smime', '-verify', '-in', str(where / f'{doc}.p7s'), '-CAfile', ca, '-out',
            os.devnull, cwd=keystore,
        )  # fmt: skip


PROGRAMS = {
    'control_node': ['rip_control.ros.control_node'],
    'learner_node': ['rip_learner.learner_node'],
    # the runner: refused before the emulator or any node starts
    'finetune': ['rip_control.finetune', 'episodes:=1', 'runs_dir:={tmp}/runs'],
    'record': ['rip_control.record', 'out:={tmp}/bag'],
    # the launch file's supervisor
    'supervisor': ['rip_control.run.supervisor', 'controls:=/rig0/rip_control', 'episodes:=0'],
}


def _run_secured(program, keystore, tmp_path, strategy, enclave):
    """``program`` of :data:`PROGRAMS` run to its end, told to run secured by ``keystore``."""
    env = child_env(
        {
            'ROS_SECURITY_ENABLE': 'true',
            'ROS_SECURITY_STRATEGY': strategy,
            'ROS_SECURITY_KEYSTORE': str(keystore),
            'ROS_SECURITY_ENCLAVE_OVERRIDE': enclave,
        }
    )
    args = [a.format(tmp=tmp_path) for a in PROGRAMS[program]]
    return subprocess.run(
        [sys.executable, '-m', *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.ros
@pytest.mark.parametrize('strategy', ['Enforce', 'Permissive'])
@pytest.mark.parametrize('program', sorted(PROGRAMS))
def test_a_process_told_to_run_secured_refuses_to_start_rather_than_run_open(
    keystore, tmp_path, program, strategy
):
    proc = _run_secured(program, keystore, tmp_path, strategy, ENCLAVE)
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stdout, err)
    assert 'SROS2 refused (ROS_SECURITY_ENABLE=true' in err, err
    assert f'ROS_SECURITY_STRATEGY={strategy}' in err and str(keystore) in err, err
    assert "This Fast DDS version doesn't have the security libraries" in err, err
    assert 'built without DDS-Security' in err, err
    assert 'Traceback' not in err, err
    if program == 'finetune':  # refused before anything started: no process said a word
        assert not [line for line in proc.stdout.splitlines() if line.startswith('[')], proc.stdout


@pytest.mark.ros
@pytest.mark.parametrize('program', sorted(PROGRAMS))
def test_an_enclave_missing_from_the_keystore_is_refused_by_name(keystore, tmp_path, program):
    # Refused before rclpy starts (under Permissive rcl would run it unsecured), by each
    # program's own path: exit 2, named, no traceback, nothing left behind.
    proc = _run_secured(program, keystore, tmp_path, 'Permissive', '/somebody_else')
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stdout, err)
    assert 'SROS2 refused' in err and 'enclave /somebody_else lacks' in err, err
    assert '(Permissive would run this process unsecured)' in err, err
    assert 'Traceback' not in err, err
    assert not (tmp_path / 'bag').exists()  # the recorder made no bag


def _env(monkeypatch, **values: str) -> None:
    for key in SECURITY_ENV:
        monkeypatch.delenv(key, raising=False)
    for key, value in values.items():
        monkeypatch.setenv(key, value)


#: Short names for the cases below: E enable, S strategy, K the keystore made here (any
#: value), N the enclave override (default: the keystore's enclave).
_SHORT = {
    'E': 'ROS_SECURITY_ENABLE',
    'S': 'ROS_SECURITY_STRATEGY',
    'N': 'ROS_SECURITY_ENCLAVE_OVERRIDE',
}


@pytest.mark.parametrize(
    ('settings', 'refused_for'),
    [
        ({}, None),  # security off: nothing to check
        ({'E': 'false', 'S': 'Enforce'}, None),
        ({'E': 'True', 'S': 'Enforce', 'K': ''}, "ROS_SECURITY_ENABLE='True'"),
        ({'E': 'true', 'S': 'enforce', 'K': ''}, "ROS_SECURITY_STRATEGY='enforce'"),
        ({'E': 'true', 'K': ''}, "ROS_SECURITY_STRATEGY=''"),
        ({'E': 'true', 'S': 'Enforce'}, 'ROS_SECURITY_KEYSTORE is not set'),
        ({'E': 'true', 'S': 'Enforce', 'K': ''}, None),
        ({'E': 'true', 'S': 'Enforce', 'K': '', 'N': '/nope'}, 'enclave /nope lacks identity_ca'),
    ],
)
def test_settings_rcl_would_quietly_run_unsecured_are_refused(
    monkeypatch, keystore, settings, refused_for
):
    values = {_SHORT[k]: v for k, v in settings.items() if k in _SHORT}
    if 'K' in settings:
        values['ROS_SECURITY_KEYSTORE'] = str(keystore)
    values.setdefault(_SHORT['N'], ENCLAVE)
    _env(monkeypatch, **values)
    if refused_for is None:
        check_security_settings()
    else:
        with pytest.raises(SecurityRefused, match=re.escape(refused_for)):
            check_security_settings()


def test_an_enclave_given_as_a_ros_argument_is_the_one_checked(monkeypatch, keystore):
    _env(
        monkeypatch,
        ROS_SECURITY_ENABLE='true',
        ROS_SECURITY_STRATEGY='Enforce',
        ROS_SECURITY_KEYSTORE=str(keystore),
    )
    check_security_settings(['--ros-args', '--enclave', ENCLAVE])
    with pytest.raises(SecurityRefused, match='enclave / lacks'):
        check_security_settings([])  # no enclave named: rcl takes the root one, which is empty


def test_only_securitys_own_failures_are_renamed(monkeypatch, keystore):
    _env(
        monkeypatch,
        ROS_SECURITY_ENABLE='true',
        ROS_SECURITY_STRATEGY='Enforce',
        ROS_SECURITY_KEYSTORE=str(keystore),
        ROS_SECURITY_ENCLAVE_OVERRIDE=ENCLAVE,
    )
    with pytest.raises(RuntimeError, match='^node name is invalid$'):
        with security_named():
            raise RuntimeError('node name is invalid')
    with pytest.raises(SecurityRefused, match='SROS2 refused .*: no security here'):
        with security_named():
            raise RuntimeError('no security here, at /project/src/x.c:1')
    _env(monkeypatch)  # security off: a failure that mentions it passes unchanged
    with pytest.raises(RuntimeError, match='^security plugin$'):
        with security_named():
            raise RuntimeError('security plugin')
