"""The real-time set-up's requests to the OS, checked without root where they can be.

``hold_cpu_latency`` writes the kernel's PM QoS request (a native 32-bit integer) into
``/dev/cpu_dma_latency`` and keeps the file open, because the kernel drops the request
when the file is closed. Here the device is a file or a FIFO, so that what was written
and how long it stayed open can be seen.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
import struct
import subprocess
import sys
import textwrap

import pytest

from rip_control.rt import realtime

pytestmark = pytest.mark.alone


def test_the_request_is_a_native_int32_held_open_and_not_inherited(tmp_path):
    dev = tmp_path / 'cpu_dma_latency'
    dev.write_bytes(b'')
    note = realtime.hold_cpu_latency(0, device=str(dev))
    try:
        assert note == 'cpu idle latency <= 0 us held'
        assert dev.read_bytes() == struct.pack('=i', 0)
        fd = realtime._held_latency_fd
        assert fd is not None and os.readlink(f'/proc/self/fd/{fd}') == str(dev)
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC  # children do not hold it
    finally:
        if realtime._held_latency_fd is not None:
            os.close(realtime._held_latency_fd)
            realtime._held_latency_fd = None


def test_minus_one_asks_nothing_and_a_refusal_is_a_note_naming_the_device(tmp_path):
    assert realtime.hold_cpu_latency(-1, device=str(tmp_path / 'never')) == (
        'cpu idle latency not requested'
    )
    assert not (tmp_path / 'never').exists()
    missing = tmp_path / 'no' / 'such' / 'device'
    note = realtime.hold_cpu_latency(0, device=str(missing))
    assert note.startswith('cpu idle latency 0 us refused') and str(missing) in note


def test_the_request_lasts_as_long_as_the_process_that_made_it(tmp_path):
    fifo = tmp_path / 'fifo'
    os.mkfifo(fifo)
    go = tmp_path / 'go'
    child = subprocess.Popen(
        [
            sys.executable,
            '-c',
            textwrap.dedent(
                f"""
                import os, sys, time
                from rip_control.rt.realtime import hold_cpu_latency
                print(hold_cpu_latency(5, device={str(fifo)!r}), flush=True)
                while not os.path.exists({str(go)!r}):
                    time.sleep(0.01)
                """
            ),
        ],
        env=dict(os.environ, PYTHONPATH=str(Path(realtime.__file__).parents[2])),
        stdout=subprocess.PIPE,
        text=True,
    )
    reader = os.open(fifo, os.O_RDONLY)  # returns once the child has it open for writing
    try:
        assert os.read(reader, 4) == struct.pack('=i', 5)
        assert child.stdout.readline().strip() == 'cpu idle latency <= 5 us held'
        os.set_blocking(reader, False)
        with pytest.raises(BlockingIOError):  # still open: no end of file, nothing more
            os.read(reader, 1)
        go.touch()
        assert child.wait(timeout=10) == 0
        assert os.read(reader, 1) == b''  # the writer is gone with its process
    finally:
        os.close(reader)
        if child.poll() is None:
            child.kill()
