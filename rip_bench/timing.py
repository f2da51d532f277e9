"""``timing``: the control node's tick timing under load, beside the floor of this machine.

``python -m rip_bench timing --rate 50 --seconds 60 --load sac [--baseline floor|rclpy-timer]``

The real control node (its own process, started as the runner starts it, lifecycle-activated,
its loop in its real-time process) against the rig emulator while a load runs beside it
(``none``; ``hog``: a busy process per core; ``sac``: SB3 SAC ``train()`` flat out on a
pre-filled buffer in another process). Policy weights of realistic size arrive at
``--weights-hz`` throughout. With ``--baseline floor`` the bare single-threaded pacer process
(:mod:`rip_bench.floor`) is measured next, in the same run under the same load, and every
figure is also given as a ratio to it; with ``--baseline rclpy-timer`` the same tick work
driven by an rclpy timer (:mod:`rip_bench.timer_baseline`) is.
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
import json
import math
import os
from pathlib import Path
import subprocess
import tempfile
import time
from typing import Any

import numpy as np

from rip_bench import floor, timer_baseline
from rip_bench.common import add_run_arguments, machine, print_stats
from rip_bench.load import LOADS, Load
from rip_control.params import CONTROL_PARAMETERS, convert_all, defaults, parse_args
from rip_control.procs import child_env, stop_process
from rip_control.rig.emulator_process import EmulatorProcess
from rip_control.rig.host_firmware import FIRMWARES
from rip_control.run.launching import ProcessSpec
from rip_control.stats import overrun_causes, tick_stats

NAME = 'timing'
HELP = 'control node tick timing under load'


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``timing`` options."""
    add_run_arguments(ap, 'rate')
    ap.add_argument('--seconds', type=float, default=60.0)
    ap.add_argument('--load', choices=LOADS, default='sac')
    ap.add_argument(
        '--baseline',
        choices=('none', 'rclpy-timer', 'floor'),
        default='none',
        help='also measure, under the same load: an rclpy-timer loop, or the floor (the bare '
        'single-threaded pacer process)',
    )
    ap.add_argument(
        '--floor-seconds', type=float, default=0.0, help='length of the floor run (0: --seconds)'
    )
    ap.add_argument('--weights-hz', type=float, default=10.0)
    ap.add_argument(
        '--load-nice', type=int, default=0, help='niceness of the sac load (the learner uses 10)'
    )
    ap.add_argument(
        '--emulator-cpu',
        type=int,
        default=-1,
        help='pin the emulator to this CPU (default -1: no pinning; measured: pinning it to '
        'the control CPU makes the control loop wait behind it)',
    )
    ap.add_argument(
        '--firmware',
        choices=FIRMWARES,
        default='python',
        help='the rig: the Python emulator, or the C firmware built for the host (answers in '
        'microseconds, as a microcontroller does; make firmware-host)',
    )
    ap.add_argument(
        '--node-param',
        action='append',
        default=[],
        metavar='NAME:=VALUE',
        help='extra control node parameter (e.g. fifo_priority:=0)',
    )


class _WeightsSource:
    """Publishes fresh actor weights (new version each time), as a learner would."""

    def __init__(self, node: Any, rate_hz: float, hidden: tuple[int, ...]) -> None:
        from std_msgs.msg import UInt8MultiArray

        from rip_control.ros.qos import POLICY_WEIGHTS, WEIGHTS_QOS

        self._msg_type = UInt8MultiArray
        self.pub = node.create_publisher(UInt8MultiArray, POLICY_WEIGHTS, WEIGHTS_QOS)
        self.rate_hz = rate_hz
        self.hidden = hidden
        self.version = 0
        self.nbytes = 0

    def publish(self) -> None:
        from rip_control.policy import encode_actor, random_actor
        from rip_control.rig.env import ACTION_SIZE, OBS_SIZE

        self.version += 1
        actor = random_actor(
            OBS_SIZE,
            ACTION_SIZE,
            self.hidden,
            self.rate_hz,
            version=self.version,
            seed=self.version,
        )
        data = encode_actor(actor.meta, actor.tensors)
        self.nbytes = len(data)
        msg = self._msg_type()
        msg.data = data
        self.pub.publish(msg)


def _spin_for(node: Any, seconds: float, every_s: float, action: Any) -> None:
    import rclpy

    end = time.monotonic() + seconds
    next_action = time.monotonic()
    while (now := time.monotonic()) < end:
        if every_s > 0 and now >= next_action:
            action()
            next_action += every_s
        rclpy.spin_once(node, timeout_sec=min(0.01, max(0.0, end - now)))


def run(a: argparse.Namespace) -> dict[str, Any]:
    """The control node, then the baseline if one is asked for: the JSON record."""
    import rclpy

    from rip_control.ros.lifecycle_driver import LifecycleDriver

    rate = a.rate
    workdir = Path(tempfile.mkdtemp(prefix='rip_bench_'))
    trace = workdir / 'trace.npz'
    node_name = f'rip_bench_control_{os.getpid()}'
    params: dict[str, Any] = {
        'rate_hz': rate,
        'allow_random_policy': True,
        'max_action_v': 1.0,
        'episode_seconds': 6.0,
        # The loop ticks for the whole --seconds: no episode count, no guard evaluations, and
        # SAC's own sampling (the subject is timing, not what the policy does).
        'episodes': 0,
        'eval_every_episodes': 0,
        'train_noise_scale': 1.0,
        'run_name': 'bench',
        'runs_dir': str(workdir / 'runs'),
        'tick_trace': str(trace),
    }
    params.update(convert_all(parse_args(a.node_param), CONTROL_PARAMETERS, 'node parameter'))
    node_values = {**defaults(CONTROL_PARAMETERS), **params}  # what the node runs with
    doc: dict[str, Any] = {
        'benchmark': 'timing',
        'load': a.load,
        'load_nice': a.load_nice,
        'seconds': a.seconds,
        'weights_hz': a.weights_hz,
        'emulator_cpu': a.emulator_cpu,
        'firmware': a.firmware,
        'node_params': {k: v for k, v in params.items() if k not in ('runs_dir', 'tick_trace')},
        'machine': machine(),
    }
    rclpy.init()
    node = rclpy.create_node(f'rip_bench_{os.getpid()}')
    with ExitStack() as stack:
        # The emulator stands in for the rig's microcontroller (SCHED_FIFO 70, unpinned).
        emu_args = ['--cpu', str(a.emulator_cpu)] if a.emulator_cpu >= 0 else []
        emu = stack.enter_context(EmulatorProcess(workdir / 'rig', emu_args, firmware=a.firmware))
        params['serial_port'] = str(emu.link)
        print(f'emulator up on {emu.link}; starting load {a.load!r}', flush=True)
        load = stack.enter_context(Load(a.load, workdir, a.load_nice))
        weights = _WeightsSource(node, rate, (64, 64))
        spec = ProcessSpec('control', 'control_node', node_name, params=params)
        proc = subprocess.Popen(spec.command(), env=child_env(), text=True)
        stack.callback(stop_process, proc)
        driver = LifecycleDriver(node, spec.fqn)
        if not driver.wait_for_services(20.0):
            raise RuntimeError('the control node never offered its lifecycle services')
        if not (driver.change('configure') and driver.change('activate')):
            raise RuntimeError('the control node refused configure/activate (see its log)')
        print(f'control node active at {rate:g} Hz; measuring {a.seconds:g} s', flush=True)
        every = 1.0 / a.weights_hz if a.weights_hz > 0 else 0.0
        t_start = time.monotonic()
        while time.monotonic() - t_start < a.seconds:
            _spin_for(
                node, min(2.0, a.seconds - (time.monotonic() - t_start)), every, weights.publish
            )
            if driver.state() != 'active':  # it stopped itself (a violation): nothing to measure
                print('the control node left active: measuring stops here', flush=True)
                break
        active_s = time.monotonic() - t_start
        state = driver.state()
        if state == 'active':
            driver.change('deactivate')
        stop_process(proc)
        with np.load(trace, allow_pickle=False) as z:
            dt, overrun = z['dt_s'][1:], z['overrun_s'][1:]  # the first dt is from the anchor
            ours = tick_stats(dt, overrun, rate)
            ours['n_violations'] = int(z['violations'])
            ours.update(overrun_causes(z['overrun_s'][1:], z['prev_work_s'][1:], 1.0 / rate))
            ours['fifo'] = bool(z['fifo'])
            ours['missed_ticks'] = int(z['missed_ticks'])
            ours['ticks_not_traced'] = int(z['ticks_dropped'])
            ours['node_state_at_end'] = state
            ours['active_s'] = round(active_s, 1)
            z_swap_max = float(z['swap_max_s']) if 'swap_max_s' in z else math.nan
        ours['weights_published'] = weights.version
        ours['weights_bytes'] = weights.nbytes
        doc['control_node'] = ours
        ours['policy_swap_max_ms'] = float(z_swap_max) * 1e3
        print_stats('control node (real-time process)', ours)
        if a.baseline == 'rclpy-timer':
            out = workdir / 'baseline.json'
            cmd = timer_baseline.command(port=emu.link, rate=rate, seconds=a.seconds, json=out)
            base_proc = subprocess.Popen(cmd, env=child_env(), text=True)
            stack.callback(stop_process, base_proc)
            deadline = time.monotonic() + a.seconds + 60.0
            while base_proc.poll() is None and time.monotonic() < deadline:
                _spin_for(node, 0.1, every, weights.publish)
            if base_proc.wait(timeout=30) != 0:
                raise RuntimeError('the rclpy-timer baseline failed (see its log)')
            base_doc = json.loads(out.read_text())
            times = np.asarray(base_doc['tick_times_s'])
            bdt = np.diff(times)
            base = tick_stats(bdt, np.maximum(bdt - 1.0 / rate, 0.0), rate)
            base['fifo'] = False
            base['serial_errors'] = int(base_doc.get('serial_errors', 0))
            doc['rclpy_timer'] = base
            print_stats('rclpy timer baseline', base)
        if a.baseline == 'floor':
            floor_s = a.floor_seconds or a.seconds
            print(f'floor: the bare pacer process, same load, {floor_s:g} s', flush=True)
            out = workdir / 'floor.npz'
            cpu = node_values['control_cpu']
            cmd = floor.command(
                rate=rate,
                seconds=floor_s,
                cpu=cpu if cpu >= 0 else max(os.sched_getaffinity(0)),
                fifo=node_values['fifo_priority'],
                cpu_latency_us=node_values['cpu_idle_latency_us'],
                out=out,
            )
            # One thread each for numpy's pools: the floor is one thread, as the loop is.
            one_thread = {'OPENBLAS_NUM_THREADS': '1', 'OMP_NUM_THREADS': '1'}
            floor_proc = subprocess.Popen(cmd, env=child_env(one_thread), text=True)
            stack.callback(stop_process, floor_proc)
            deadline = time.monotonic() + floor_s + 60.0
            while floor_proc.poll() is None and time.monotonic() < deadline:
                _spin_for(node, 0.1, 0.0, weights.publish)
            if floor_proc.wait(timeout=30) != 0:
                raise RuntimeError('the floor baseline failed (see its log)')
            with np.load(out, allow_pickle=False) as z:
                fdt, fov = z['dt_s'][1:], z['overrun_s'][1:]
                bare = tick_stats(fdt, fov, rate)
                bare.update(overrun_causes(fov, z['prev_work_s'][1:], 1.0 / rate))
                bare['fifo'] = bool(z['fifo'])
            bare['seconds'] = floor_s
            doc['floor'] = bare
            doc['ratio_to_floor'] = {
                k: ours[k] / bare[k] if bare[k] > 0 else math.inf
                for k in ('dt_std_ms', 'dt_p99_abs_dev_ms', 'dt_max_abs_dev_ms', 'max_overrun_ms')
            }
            print_stats('floor (bare pacer process)', bare)
            print(
                'ratio to the floor: '
                + ', '.join(f'{k} {v:.1f}x' for k, v in doc['ratio_to_floor'].items()),
                flush=True,
            )
        doc['load_result'] = load.result() if a.load == 'sac' else {}
    node.destroy_node()
    rclpy.try_shutdown()
    return doc


def table(records: list[dict[str, Any]]) -> str:
    """A markdown table of timing records, one row each (what the README shows)."""

    def cell(d: dict[str, Any] | None) -> str:
        if not d:
            return ''
        text = (
            f'{d["measured_rate_hz"]:.4f} Hz, {d["dt_std_ms"]:.3f} / '
            f'{d["dt_p99_abs_dev_ms"]:.3f} / {d["dt_max_abs_dev_ms"]:.2f}, '
            f'{d["n_violations"]} violations'
        )
        if 'late_releases' in d:
            text += (
                f'; late {d["late_releases"]} ({d["late_woke_late"]} woke late, '
                f'{d["late_after_long_work"]} after long work)'
            )
        if d.get('node_state_at_end', 'active') != 'active':  # it stopped itself: say when
            text += f'; **stopped after {d.get("active_s", 0):g} s**'
        return text

    rows = [
        '| run | control loop (real-time process) | floor: bare pacer process (same load) '
        '| std / max ratio to the floor | rclpy timer (same load) |',
        '|---|---|---|---|---|',
    ]
    for doc in records:
        extra = ', '.join(
            f'{k}:={v}'
            for k, v in doc.get('node_params', {}).items()
            if k
            in (
                'fifo_priority',
                'switch_interval_us',
                'gc_off',
                'gil_holders_fifo_priority',
                'cpu_idle_latency_us',
            )
        )
        name = f'{doc["node_params"]["rate_hz"]:g} Hz, {doc["load"]}, {doc["seconds"]:g} s'
        if doc.get('firmware', 'python') != 'python':
            name += f', {doc["firmware"].upper()} firmware'
        if doc.get('emulator_cpu', -1) >= 0:
            name += f' on CPU {doc["emulator_cpu"]}'
        ratio = doc.get('ratio_to_floor')
        ratio_text = (
            f'{ratio["dt_std_ms"]:.1f}x / {ratio["dt_max_abs_dev_ms"]:.1f}x' if ratio else ''
        )
        rows.append(
            f'| {name}{" (" + extra + ")" if extra else ""} | {cell(doc.get("control_node"))} '
            f'| {cell(doc.get("floor"))} | {ratio_text} | {cell(doc.get("rclpy_timer"))} |'
        )
    return '\n'.join(rows)


TABLES = {NAME: table}
