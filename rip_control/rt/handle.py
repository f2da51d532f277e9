"""The node's side of its real-time process: start it, talk to it, watch it, end it.

:class:`RtHandle` owns the child process and the shared mapping. Its ``*_from_pump``
methods are for the node's one pump thread (each ring has exactly one consumer); the others
may be called from any node thread.
"""

from __future__ import annotations

from dataclasses import asdict
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from rip_control.policy import NumpyActor, PolicyMeta, PolicyRejected
from rip_control.rt.channels import SharedMemory
from rip_control.rt.layout import (
    TICK_RECORD,
    ChannelSizes,
    RtChannels,
    RtStatus,
    decode_json,
    encode_json,
    encode_weights,
    weights_bytes_needed,
)
from rip_control.rt.process import EXIT_NODE_LOST, EXIT_START_FAILED, SINGLE_THREAD_ENV, RtConfig

_COMMAND_IDS = itertools.count(1)


class RtStartFailed(RuntimeError):
    """The real-time process did not come up; the message says why (its own words if any)."""


def describe_exit(code: int | None) -> str:
    """An exit status in words."""
    if code is None:
        return 'running'
    if code < 0:
        try:
            return f'killed by {signal.Signals(-code).name}'
        except ValueError:
            return f'killed by signal {-code}'
    if code == EXIT_NODE_LOST:
        return 'exited: it lost its node'
    if code == EXIT_START_FAILED:
        return 'exited: start-up failed'
    return f'exited with status {code}'


class RtHandle:
    """A real-time control process and the channels to it.

    :param config: what the process runs with.
    :param actor: the initial policy.
    :param transition_floats: length of a packed transition.
    """

    def __init__(self, config: RtConfig, *, actor: NumpyActor, transition_floats: int) -> None:
        self.sizes = ChannelSizes.for_run(config.task.rate_hz, transition_floats, actor)
        self._shm = SharedMemory(RtChannels.bytes_needed(self.sizes))
        self.ch = RtChannels(self._shm.buf, self.sizes)
        self.weights_version = actor.version
        self.ch.weights.write(encode_weights(actor))
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None
        self._command_lock = threading.Lock()  # the commands ring has one producer at a time
        self._ids = _COMMAND_IDS  # unique across processes of one node: no stale answer fits
        self._spawner_done = threading.Event()
        self._beat = 0
        self.ready: dict[str, Any] = {}
        self.status = RtStatus()
        self._pending_events: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        """The process id (0 before start)."""
        return self.proc.pid if self.proc is not None else 0

    def start(self, timeout_s: float = 15.0) -> dict[str, Any]:
        """Start the process and wait until it has the rig open; its ``ready`` event.

        :raises RtStartFailed: it reported a failure, exited, or was not ready in time.
        """
        env = dict(os.environ, **SINGLE_THREAD_ENV)
        cmd = [
            sys.executable,
            '-m',
            'rip_control.rt.process',
            '--fd',
            str(self._shm.fd),
            '--config',
            self.config.to_json(),
            '--sizes',
            json.dumps(asdict(self.sizes)),
            '--parent-pid',
            str(os.getpid()),
        ]
        self._spawn(cmd, env)
        assert self.proc is not None
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.beat()
            for ev in self._events():
                if ev.get('event') == 'ready':
                    self.ready = ev
                    return ev
                if ev.get('event') == 'failed':
                    self.wait(2.0)
                    raise RtStartFailed(str(ev.get('message')))
                self._pending_events.append(ev)
            if self.proc.poll() is not None:
                raise RtStartFailed(f'the real-time process {describe_exit(self.proc.returncode)}')
            time.sleep(0.005)
        self.kill()
        raise RtStartFailed(f'the real-time process was not ready after {timeout_s:g} s')

    def _spawn(self, cmd: list[str], env: dict[str, str]) -> None:
        """Start the process from a thread that lives as long as this handle.

        The child asks for SIGTERM on its parent's death (``PR_SET_PDEATHSIG``), which Linux
        ties to the *thread* that forked it: an executor worker that exited would kill a
        running loop. This thread ends only at :meth:`close`, after the child has exited.
        """
        started = threading.Event()
        failure: list[BaseException] = []

        def spawner() -> None:
            try:
                self.proc = subprocess.Popen(cmd, env=env, pass_fds=(self._shm.fd,))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                failure.append(exc)
            started.set()
            self._spawner_done.wait()

        threading.Thread(target=spawner, name='rip-rt-spawner', daemon=True).start()
        started.wait()
        if failure:
            raise RtStartFailed(f'could not start the real-time process: {failure[0]}')

    # -- any thread -------------------------------------------------------------------------

    def beat(self) -> None:
        """The node is alive (bumps the counter the RT process watches)."""
        self._beat += 1
        self.ch.node_beat.write(self._beat)

    def command(self, cmd: str, blocking: bool = True, **fields: Any) -> int:
        """Send ``activate``, ``stop`` or ``quit``; its id, or 0 if the ring was full.

        A ``stopped`` event echoes the ids of the stops it answers. ``blocking=False`` (from a
        signal handler, which may have interrupted a sender): 0 if another send is under way.
        """
        if not self._command_lock.acquire(blocking=blocking):
            return 0
        try:
            if self.ch is None:
                return 0
            cid = next(self._ids)
            return (
                cid if self.ch.commands.push(encode_json({'cmd': cmd, 'id': cid, **fields})) else 0
            )
        finally:
            self._command_lock.release()

    def check_fits(self, meta: PolicyMeta) -> None:
        """Refuse an actor of this architecture if it would not fit the weights box.

        :raises PolicyRejected: naming its size and the box's.
        """
        need = weights_bytes_needed(meta)
        if need > self.sizes.weights_bytes:
            raise PolicyRejected(
                f'weights of hidden sizes {list(meta.hidden_sizes)} take {need} bytes, more '
                f'than the {self.sizes.weights_bytes} the real-time process was configured for'
            )

    def write_weights(self, actor: NumpyActor) -> None:
        """Hand a validated, newer actor to the loop (it swaps at its next tick).

        :raises PolicyRejected: too large for the weights box, or not newer than the last.
        """
        self.check_fits(actor.meta)
        if actor.version <= self.weights_version:
            raise PolicyRejected(
                f'weights version {actor.version} is not newer than the running '
                f'{self.weights_version}'
            )
        self.ch.weights.write(encode_weights(actor))
        self.weights_version = actor.version

    def poll(self) -> int | None:
        """Its exit status, or ``None`` while it runs."""
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """SIGKILL (works on a stopped process too) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait(self, timeout_s: float) -> int | None:
        """Wait for its exit; the status, or ``None`` on timeout."""
        if self.proc is None:
            return 0
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop_process(self, timeout_s: float = 2.0) -> int | None:
        """``quit``, then SIGKILL if it has not exited within ``timeout_s``; its status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.command('quit')
            end = time.monotonic() + timeout_s
            while self.proc.poll() is None and time.monotonic() < end:
                self.beat()  # it must not take the wait for a lost node
                time.sleep(0.005)
            self.kill()
        return self.proc.returncode

    def close(self) -> None:
        """Release the mapping (the process must have exited); ends the spawner thread."""
        with self._command_lock:
            self.ch = None  # type: ignore[assignment]
        self._shm.close()
        self._spawner_done.set()

    # -- the pump thread --------------------------------------------------------------------

    def _events(self) -> list[dict[str, Any]]:
        out = []
        for raw in self.ch.events.pop_all():
            try:
                out.append(decode_json(raw))
            except ValueError as exc:  # never from our own process; named if it happens
                out.append({'event': 'log', 'level': 'error', 'text': f'bad event: {exc}'})
        return out

    def events_from_pump(self) -> list[dict[str, Any]]:
        """Events since the last call (any kept from the start first)."""
        pending, self._pending_events = self._pending_events, []
        return pending + self._events()

    def transitions_from_pump(self, limit: int = 1 << 30) -> list[bytes]:
        """Packed transitions, oldest first."""
        return self.ch.transitions.pop_all(limit)

    def ticks_from_pump(self) -> list[tuple[float, float, float, bool]]:
        """Tick samples: (dt_s, overrun_s, prev_work_s, strike)."""
        return [TICK_RECORD.unpack(r) for r in self.ch.ticks.pop_all()]

    def status_from_pump(self) -> RtStatus:
        """The newest status record (the last good one if a write is in flight)."""
        got = self.ch.status.read()
        if got is not None:
            self.status = RtStatus.unpack(got[1])
        return self.status
