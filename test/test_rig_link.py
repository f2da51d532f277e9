"""LowLevelClient against the rig firmware in another process, through a real pty.

Every test runs against both firmwares: the Python emulator and the host build of the C
firmware (``firmware/``), which must behave alike.
"""

import os
from pathlib import Path
import subprocess
import sys
import threading
import time

import pytest

from rip_control.procs import child_env
from rip_control.rig.client import (
    LowLevelClient,
    RigDisconnected,
    RigError,
    RigProtocolError,
    RigTimeout,
)
from rip_control.rig.host_firmware import FIRMWARES
from rip_control.rig.protocol import ErrorCode, Status

pytestmark = [pytest.mark.alone, pytest.mark.parametrize('firmware', FIRMWARES, indirect=True)]


def _open(emu, **kw):
    client = LowLevelClient(str(emu.link), **kw)
    client.open()
    return client


def test_ping_reports_protocol_and_limits(emulator):
    with LowLevelClient(str(emulator.link)) as client:
        info = client.device_info
        assert (info.protocol_version, info.counts_per_rev, info.deadman_timeout_ms) == (
            1,
            2048,
            100,
        )
        state = client.get_state()
        assert not state.engaged
        assert abs(state.pendulum_counts) <= 1  # hanging still at power-on


def test_firmware_time_advances_with_wall_time(emulator):
    # Each sample is taken somewhere between its request's send and its reply: bracket it.
    with LowLevelClient(str(emulator.link)) as client:
        sent0 = time.monotonic()
        t0 = client.get_state().timestamp_us
        got0 = time.monotonic()
        time.sleep(0.2)  # the span being measured, not a synchronisation
        sent1 = time.monotonic()
        t1 = client.get_state().timestamp_us
        got1 = time.monotonic()
    step = 0.001  # the firmware's clock advances in physics steps (0.5 ms at 2 kHz)
    assert sent1 - got0 - step <= (t1 - t0) / 1e6 <= got1 - sent0 + step


def test_voltage_without_engage_is_refused_and_motor_stays_off(emulator):
    with LowLevelClient(str(emulator.link)) as client:
        with pytest.raises(RigProtocolError, match='refused SET_VOLTAGE: NOT_ENGAGED') as err:
            client.set_voltage(5.0)
        assert err.value.error == ErrorCode.NOT_ENGAGED
        assert client.get_state().applied_voltage_mv == 0


@pytest.mark.parametrize('volts', [3.0, -3.0])
def test_voltage_moves_the_arm_in_its_direction(emulator, volts):
    with LowLevelClient(str(emulator.link)) as client:
        client.engage()
        for _ in range(10):
            client.set_voltage(volts)
            time.sleep(0.01)
        arm = client.get_state().arm_counts
        client.disengage_motor()
    assert arm * volts > 0 and abs(arm) > 20


def test_deadman_disengages_after_its_timeout_when_the_host_goes_quiet(emulator):
    # The heartbeat was processed between its send and its ACK; each state between its
    # request's send and its reply. Bracketing both keeps the bounds free of reply delays.
    with LowLevelClient(str(emulator.link)) as client:
        client.engage()
        heartbeat_sent = time.monotonic()
        client.set_voltage(1.0)
        heartbeat_acked = time.monotonic()
        last_engaged_sent = heartbeat_acked
        while True:  # GET_STATE is not a heartbeat
            sent = time.monotonic()
            state = client.get_state()
            got = time.monotonic()
            if not state.engaged:
                break
            last_engaged_sent = sent
            assert got - heartbeat_sent < 0.5, 'deadman never tripped'
            time.sleep(0.002)
        assert state.status & Status.DEADMAN_TRIPPED
        assert got - heartbeat_sent >= 0.1, 'tripped before its timeout'
        assert last_engaged_sent - heartbeat_acked <= 0.1 + 0.05, 'tripped late'
        client.engage()  # engage clears the latch
        assert not client.get_state().status & Status.DEADMAN_TRIPPED


def test_heartbeats_keep_the_motor_engaged_past_the_deadman_timeout(emulator):
    with LowLevelClient(str(emulator.link)) as client:
        client.engage()
        end = time.monotonic() + 0.4
        while time.monotonic() < end:
            client.set_voltage(0.0)
            time.sleep(0.02)
        assert client.get_state().engaged


def test_missing_port_raises_rig_disconnected_naming_it(tmp_path, firmware):
    port = str(tmp_path / 'no_such_rig')
    with pytest.raises(RigDisconnected, match='no_such_rig'):
        LowLevelClient(port).open()


def test_a_second_emulator_on_a_served_link_is_refused_and_the_first_serves_on(
    start_emulator, firmware
):
    # Before, the second took the link over without a word, and a client that had opened it
    # went on talking to the first while a new one found the second. The second is the other
    # firmware: the C program must hold the claim it inherits, and the Python one be refused
    # by it (and the other way round).
    first = start_emulator()
    second = next(f for f in FIRMWARES if f != firmware)
    served = os.readlink(first.link)
    cmd = [sys.executable, '-m', 'rip_control.rig.emulator', '--link', str(first.link)]
    out = subprocess.run(
        [*cmd, '--firmware', second], capture_output=True, text=True, env=child_env(), timeout=30
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f'{first.link} is served by a running emulator' in out.stderr, out.stderr
    assert 'stop it first, or pass another --link' in out.stderr
    assert 'READY' not in out.stdout
    assert os.readlink(first.link) == served
    with LowLevelClient(str(first.link)) as client:
        assert client.get_state().timestamp_us > 0  # the first still answers there
    # The claim ends with its holder, however it ends: the link is free again. The Python
    # firmware's clean stop also removes the lock's file (one per link name would pile up).
    lock = first.link.with_name(f'.{first.link.name}.lock')
    assert lock.exists()
    first.stop()
    assert lock.exists() == (firmware == 'c')
    again = start_emulator()
    assert again.link == first.link and os.readlink(again.link) == again.device


def test_dropped_replies_time_out_and_retries_recover(start_emulator):
    emu = start_emulator('--drop-every', '3')
    client = _open(emu, timeout_s=0.02)  # PING is request 1
    client.get_state()  # 2
    t0 = time.monotonic()
    with pytest.raises(RigTimeout, match='no valid reply to GET_STATE'):
        client.get_state()  # 3: dropped
    assert time.monotonic() - t0 < 0.1
    client.retries = 1
    for _ in range(9):
        client.get_state()
    assert client.stats.timeouts >= 3
    client.close()


def test_garbage_before_replies_is_skipped(start_emulator):
    emu = start_emulator('--garbage-every', '2', '--garbage-bytes', '24')
    client = _open(emu, timeout_s=0.05, retries=1)
    for _ in range(40):
        client.get_state()
    assert client._parser.n_bytes_skipped >= 19 * 24 - 24
    client.close()


def test_a_stalled_reply_times_out_and_is_discarded_as_stale(start_emulator):
    emu = start_emulator('--stall-every', '4', '--stall-ms', '60')
    client = _open(emu, timeout_s=0.02)
    outcomes = []
    for _ in range(12):
        try:
            client.get_state()
            outcomes.append('ok')
        except RigTimeout:
            outcomes.append('timeout')
        time.sleep(0.03)
    assert 'timeout' in outcomes and outcomes.count('ok') >= 6
    time.sleep(0.06 + 0.02)  # a reply still held back by the stall comes out meanwhile
    client.get_state()  # served again, the stale reply discarded
    assert client.stats.stale_replies >= 1
    client.close()


def test_a_frozen_firmware_gives_bounded_timeouts_not_a_hang(start_emulator):
    emu = start_emulator('--freeze-after', '1.0')
    client = _open(emu, timeout_s=0.02)
    deadline = time.monotonic() + 2.0
    with pytest.raises(RigTimeout):
        while time.monotonic() < deadline:
            client.get_state()
            time.sleep(0.01)
    t0 = time.monotonic()
    with pytest.raises(RigTimeout):
        client.get_state()
    assert time.monotonic() - t0 < 0.1
    client.close()


def test_an_abruptly_exiting_emulator_gives_rig_disconnected(start_emulator):
    emu = start_emulator('--exit-after', '1.0')
    client = _open(emu, timeout_s=0.02)
    deadline = time.monotonic() + 3.0
    with pytest.raises(RigDisconnected):
        while time.monotonic() < deadline:
            try:
                client.get_state()
            except RigTimeout:
                pass  # the last request may go unanswered as it dies
            time.sleep(0.01)
    assert emu.proc.wait(timeout=2) == 3
    client.close()


def test_disengage_from_another_thread_never_interleaves_with_the_control_thread(emulator):
    client = _open(emulator, timeout_s=0.02)
    client.engage()
    stop = threading.Event()
    errors: list[Exception] = []

    def control_thread():
        while not stop.is_set():
            try:
                client.get_state()
                client.set_voltage(0.5)
            except RigProtocolError as exc:  # NOT_ENGAGED after the disengage is expected
                if exc.error != ErrorCode.NOT_ENGAGED:
                    errors.append(exc)
            except RigError as exc:
                errors.append(exc)

    worker = threading.Thread(target=control_thread)
    worker.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    ack = client.disengage_motor()
    took = time.monotonic() - t0
    time.sleep(0.1)
    stop.set()
    worker.join()
    assert not ack.status & Status.ENGAGED
    assert took <= 2 * client.timeout_s
    assert errors == [] and client.parser_errors == 0
    assert not client.get_state().engaged
    client.close()


@pytest.mark.parametrize('sig', ['SIGINT', 'SIGTERM'])
@pytest.mark.parametrize('engaged', [False, True])
def test_a_signal_stops_the_emulator_with_the_motor_off_and_the_device_gone(
    start_emulator, sig, engaged
):
    import signal

    emu = start_emulator('--events')
    client = _open(emu)
    try:
        if engaged:
            client.engage()
            client.set_voltage(0.5)
        assert client.get_state().engaged == engaged
        emu.signal(getattr(signal, sig))
        assert emu.proc.wait(timeout=5) == 0
    finally:
        client.close()
    emu.stop()  # joins the stdout reader: every EVENT line is in
    events = [what for _, what in emu.events()]
    engaged_events = ['engaged command', 'disengaged stopping'] if engaged else []
    assert events == [*engaged_events, 'powered down']
    assert not emu.link.exists()
    with pytest.raises(RigDisconnected):
        LowLevelClient(str(emu.link)).open()


def test_the_emulator_serves_on_when_the_reader_of_its_output_dies(tmp_path, firmware):
    # A runner killed with SIGKILL leaves its emulator writing EVENT lines into a pipe nobody
    # reads: the firmware must still take the host's disengage and power down on SIGTERM,
    # not die at its next line (the device vanishing under an engaged motor).
    import signal
    import subprocess
    import sys

    from rip_control.procs import child_env

    events, link = tmp_path / 'events', tmp_path / 'rig'
    cmd = [sys.executable, '-m', 'rip_control.rig.emulator', '--link', str(link), '--events']
    cmd += ['--firmware', firmware]
    proc = subprocess.Popen(
        [*cmd, '--events-file', str(events)],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith('READY ')
        client = LowLevelClient(str(link))
        client.open()
        client.engage()
        proc.stdout.close()  # the reader dies
        client.disengage_motor()  # its EVENT line meets the broken pipe
        assert not client.get_state().engaged
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0, proc.stderr.read()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    whats = [line.split(' ', 2)[2] for line in events.read_text().splitlines()]
    assert whats == ['engaged command', 'disengaged command', 'powered down']


def test_an_idle_emulator_wakes_rarely_not_once_per_physics_step(emulator, firmware):
    # It runs at real-time priority: a wake-up per physics step (2 kHz) cost 8 % of a core
    # per emulator and starved a 3-rig run. Physics catches up on each wake instead. The C
    # firmware has a 1 kHz timer thread by design (a microcontroller's timer interrupt);
    # its serial loop must still wake rarely.
    tasks = Path(f'/proc/{emulator.proc.pid}/task')

    def switches() -> dict[str, int]:
        out = {}
        for task in tasks.iterdir():
            status = (task / 'status').read_text()
            out[task.name] = int(status.split('voluntary_ctxt_switches:')[1].split()[0])
        return out

    before, t0 = switches(), time.monotonic()
    time.sleep(2.0)  # measuring a rate over a span: the span is the point
    after, span = switches(), time.monotonic() - t0
    rates = {tid: (after[tid] - before.get(tid, 0)) / span for tid in after}
    main = rates[str(emulator.proc.pid)]
    assert main < 300, f'serial loop: {main:.0f} wake-ups/s'
    total = sum(rates.values())
    if firmware == 'c':
        assert len(rates) == 2 and total < 1300, f'{rates} wake-ups/s by thread'
    else:
        assert total < 300, f'{rates} wake-ups/s by thread'


def test_rig_check_counts_the_ticks_a_paused_rig_missed_and_goes_on(start_emulator, tmp_path):
    """The firmware's process stopped for 150 ms: rig_check counts the ticks, and goes on.

    This VM's hypervisor takes a vCPU away for ~100 ms now and then. rig_check counts the
    ticks that got no answer, engages again after the deadman tripped, and reports, instead
    of ending at the first timeout.
    """
    import json
    import signal
    import subprocess
    import sys

    from rip_control.procs import child_env

    emu = start_emulator('--events')
    out = tmp_path / 'check.json'
    cmd = [sys.executable, '-m', 'rip_control.rig_check', '--port', str(emu.link)]
    check = subprocess.Popen(
        cmd + ['--seconds', '2', '--json', str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=child_env(),
    )
    assert check.stdout is not None
    lines = []
    for line in check.stdout:  # the first state line: engaged and fed by heartbeats
        lines.append(line)
        if line.lstrip().startswith('t='):
            break
    emu.signal(signal.SIGSTOP)
    time.sleep(0.15)  # the pause itself, not a synchronisation
    emu.signal(signal.SIGCONT)
    lines += check.stdout.read().splitlines(keepends=True)
    assert check.wait(timeout=30) == 0, ''.join(lines)
    result = json.loads(out.read_text())
    assert result['failed_ticks'] >= 2, result  # 150 ms at 50 Hz, 20 ms a try
    assert result['re_engaged'] == 1, result
    assert 'ticks got no answer in time' in ''.join(lines)
    causes = [what for _, what in emu.events()]
    assert causes[:3] == ['engaged command', 'disengaged deadman', 'engaged command'], causes
