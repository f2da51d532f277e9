"""Benchmarks that print numbers and save them as JSON.

``python -m rip_control.benchmarks.bench timing --rate 50 --seconds 60 --load sac --json PATH
[--baseline floor|rclpy-timer]``: the real control node (its own process, lifecycle-activated,
its loop in its real-time process) against the rig emulator while a load runs beside it
(``none``; ``hog``: a busy process per core; ``sac``: SB3 SAC ``train()`` flat out on a
pre-filled buffer in another process). Policy weights of realistic size arrive at
``--weights-hz`` throughout. With ``--baseline floor`` the bare single-threaded pacer
process (:mod:`rip_control.rt.floor`) is measured next, in the same run under the same load,
and every figure is also given as a ratio to it; with ``--baseline rclpy-timer`` the same
tick work driven by an rclpy timer is.

Every DDS participant stays on loopback in a domain of its own unless the caller set
``ROS_AUTOMATIC_DISCOVERY_RANGE`` / ``ROS_DOMAIN_ID``.
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
import itertools
import json
import math
import os
from pathlib import Path
import platform
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from rip_control.benchmarks import serial_rt as bench_serial_rt
from rip_control.files import atomic_write_bytes
from rip_control.params import CONTROL_PARAMETERS, convert_all
from rip_control.rig.emulator_process import EmulatorProcess, child_env, stop_process
from rip_control.run.launching import ProcessSpec, ensure_loopback_dds, parse_args
from rip_control.stats import cpu_times, overrun_causes, steal_fraction, tick_stats


def _print_stats(title: str, s: dict[str, Any]) -> None:
    print(
        f'{title}: {s["measured_rate_hz"]:.4f} Hz (target {s["target_rate_hz"]:g}), '
        f'{s["n_ticks"]} ticks, dt {s["dt_mean_ms"]:.4f} ± {s["dt_std_ms"]:.4f} ms, '
        f'p99 |dev| {s["dt_p99_abs_dev_ms"]:.3f} ms, max |dev| {s["dt_max_abs_dev_ms"]:.3f} ms, '
        f'max overrun {s["max_overrun_ms"]:.3f} ms, violations {s["n_violations"]}'
        + (
            f'; work p99 {s["work_p99_ms"]:.3f} ms, late releases {s["late_releases"]} '
            f'({s["late_after_long_work"]} after long work, {s["late_woke_late"]} woke late)'
            if 'late_releases' in s
            else ''
        ),
        flush=True,
    )


class _Load:
    """Background CPU load for a benchmark; stopped when the ExitStack closes."""

    def __init__(self, kind: str, workdir: Path, nice: int = 0) -> None:
        self.kind = kind
        self.nice = nice
        self.procs: list[subprocess.Popen[str]] = []
        self.json_path = workdir / 'load.json'

    def __enter__(self) -> _Load:
        if self.kind == 'hog':
            for _ in range(os.cpu_count() or 1):
                self.procs.append(
                    subprocess.Popen([sys.executable, '-c', 'while True: pass'], text=True)
                )
        elif self.kind == 'sac':
            # Plain SB3 train() in another process: normal priority, no pinning (the
            # learner node itself runs at nice +10, a kinder neighbour than this load).
            cmd = [sys.executable, '-m', 'rip_learner.train_load', '--json', str(self.json_path)]
            cmd += ['--nice', str(self.nice)]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=child_env())
            self.procs.append(proc)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith('READY'):
                raise RuntimeError(f'the SAC load did not start: {line!r}')
        elif self.kind != 'none':
            raise ValueError(f'unknown load {self.kind!r}: use none, hog or sac')
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def result(self) -> dict[str, Any]:
        if self.json_path.exists():
            return dict(json.loads(self.json_path.read_text()))
        return {}


class _WeightsSource:
    """Publishes fresh actor weights (new version each time), as a learner would."""

    def __init__(self, node: Any, rate_hz: float, hidden: tuple[int, ...]) -> None:
        from std_msgs.msg import UInt8MultiArray

        from rip_control.ros.qos import WEIGHTS_QOS

        self._msg_type = UInt8MultiArray
        self.pub = node.create_publisher(UInt8MultiArray, 'policy_weights', WEIGHTS_QOS)
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


def _machine() -> dict[str, Any]:
    """What the timing figures depend on beyond the code: CPUs, kernel, idle polling."""
    doc: dict[str, Any] = {'cpus': os.cpu_count(), 'platform': platform.platform()}
    # In a VM, how long an idle vCPU polls before it halts (0: it halts at once, and a
    # wake-up then waits for the hypervisor to run the vCPU again).
    poll = Path('/sys/module/haltpoll/parameters/guest_halt_poll_ns')
    if poll.exists():
        doc['guest_halt_poll_ns'] = int(poll.read_text())
    idle = Path('/sys/devices/system/cpu/cpuidle/current_driver')
    if idle.exists():
        doc['cpuidle_driver'] = idle.read_text().strip()
    return doc


def bench_timing(a: argparse.Namespace) -> dict[str, Any]:
    """The ``timing`` benchmark; returns the JSON document."""
    import rclpy

    from rip_control.ros.lifecycle_driver import LifecycleDriver

    ensure_loopback_dds()
    rate = a.rate
    workdir = Path(tempfile.mkdtemp(prefix='rip_bench_'))
    trace = workdir / 'trace.npz'
    node_name = f'rip_bench_control_{os.getpid()}'
    params: dict[str, Any] = {
        'rate_hz': rate,
        'allow_random_policy': True,
        'max_action_v': 1.0,
        'episode_seconds': 6.0,
        'run_name': 'bench',
        'runs_dir': str(workdir / 'runs'),
        'tick_trace': str(trace),
    }
    params.update(convert_all(parse_args(a.node_param), CONTROL_PARAMETERS, 'node parameter'))
    doc: dict[str, Any] = {
        'benchmark': 'timing',
        'load': a.load,
        'load_nice': a.load_nice,
        'seconds': a.seconds,
        'weights_hz': a.weights_hz,
        'emulator_cpu': a.emulator_cpu,
        'firmware': a.firmware,
        'node_params': {k: v for k, v in params.items() if k not in ('runs_dir', 'tick_trace')},
        'machine': _machine(),
    }
    rclpy.init()
    node = rclpy.create_node(f'rip_bench_{os.getpid()}')
    with ExitStack() as stack:
        # The emulator stands in for the rig's microcontroller (SCHED_FIFO 70, unpinned).
        emu_args = ['--cpu', str(a.emulator_cpu)] if a.emulator_cpu >= 0 else []
        emu = stack.enter_context(EmulatorProcess(workdir / 'rig', emu_args, firmware=a.firmware))
        params['serial_port'] = str(emu.link)
        print(f'emulator up on {emu.link}; starting load {a.load!r}', flush=True)
        load = stack.enter_context(_Load(a.load, workdir, a.load_nice))
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
        _print_stats('control node (real-time process)', ours)
        if a.baseline == 'rclpy-timer':
            out = workdir / 'baseline.json'
            base_proc = subprocess.Popen(
                [
                    sys.executable,
                    '-m',
                    'rip_control.benchmarks.timer_baseline',
                    '--port',
                    str(emu.link),
                    '--rate',
                    str(rate),
                    '--seconds',
                    str(a.seconds),
                    '--json',
                    str(out),
                ],
                env=child_env(),
                text=True,
            )
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
            _print_stats('rclpy timer baseline', base)
        if a.baseline == 'floor':
            floor_s = a.floor_seconds or a.seconds
            print(f'floor: the bare pacer process, same load, {floor_s:g} s', flush=True)
            out = workdir / 'floor.npz'
            cpu = params.get('control_cpu', -1)
            cpu = cpu if cpu >= 0 else max(os.sched_getaffinity(0))
            floor_proc = subprocess.Popen(
                [
                    sys.executable,
                    '-m',
                    'rip_control.rt.floor',
                    '--rate',
                    str(rate),
                    '--seconds',
                    str(floor_s),
                    '--cpu',
                    str(cpu),
                    '--fifo',
                    str(params.get('fifo_priority', 80)),
                    '--cpu-latency-us',
                    str(params.get('cpu_idle_latency_us', 0)),
                    '--out',
                    str(out),
                ],
                env=dict(child_env(), OPENBLAS_NUM_THREADS='1', OMP_NUM_THREADS='1'),
                text=True,
            )
            stack.callback(stop_process, floor_proc)
            deadline = time.monotonic() + floor_s + 60.0
            while floor_proc.poll() is None and time.monotonic() < deadline:
                _spin_for(node, 0.1, 0.0, weights.publish)
            if floor_proc.wait(timeout=30) != 0:
                raise RuntimeError('the floor baseline failed (see its log)')
            with np.load(out, allow_pickle=False) as z:
                fdt, fov = z['dt_s'][1:], z['overrun_s'][1:]
                floor = tick_stats(fdt, fov, rate)
                floor.update(overrun_causes(fov, z['prev_work_s'][1:], 1.0 / rate))
                floor['fifo'] = bool(z['fifo'])
            floor['seconds'] = floor_s
            doc['floor'] = floor
            doc['ratio_to_floor'] = {
                k: ours[k] / floor[k] if floor[k] > 0 else math.inf
                for k in ('dt_std_ms', 'dt_p99_abs_dev_ms', 'dt_max_abs_dev_ms', 'max_overrun_ms')
            }
            _print_stats('floor (bare pacer process)', floor)
            print(
                'ratio to the floor: '
                + ', '.join(f'{k} {v:.1f}x' for k, v in doc['ratio_to_floor'].items()),
                flush=True,
            )
        doc['load_result'] = load.result() if a.load == 'sac' else {}
    node.destroy_node()
    rclpy.try_shutdown()
    return doc


def bench_sync_baseline(a: argparse.Namespace) -> dict[str, Any]:
    """SB3 ``SAC.learn()`` with a self-pacing env through the emulator: the bug, measured."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    from rip_control.rig.client import LowLevelClient, RigError
    from rip_control.rig.env import RealRotaryInvertedPendulumEnv, TaskConfig

    workdir = Path(tempfile.mkdtemp(prefix='rip_sync_'))
    dts: list[float] = []
    stopped_by = ''

    class _Stop(BaseCallback):
        def __init__(self, seconds: float) -> None:
            super().__init__()
            self.end = time.monotonic() + seconds

        def _on_step(self) -> bool:
            for info in self.locals.get('infos', []):
                if 'dt_s' in info:
                    dts.append(float(info['dt_s']))
            return time.monotonic() < self.end

    with EmulatorProcess(workdir / 'rig', []) as emu:
        client = LowLevelClient(str(emu.link))
        client.open()
        task = TaskConfig.from_params(
            rate_hz=a.rate, episode_seconds=6.0, max_action_v=a.max_action_v
        )
        env = RealRotaryInvertedPendulumEnv(client, task)
        try:
            model = SAC(
                'MlpPolicy',
                env,
                learning_starts=a.learning_starts,
                batch_size=256,
                train_freq=1,
                gradient_steps=a.gradient_steps,
                policy_kwargs={'net_arch': [int(h) for h in a.hidden.split(',')]},
                device='cpu',
                seed=0,
            )
            import torch

            torch.set_num_threads(1)
            print(
                f'SAC.learn() with a self-paced {a.rate:g} Hz env, K={a.gradient_steps}, '
                f'{a.seconds:g} s ...',
                flush=True,
            )
            try:
                model.learn(total_timesteps=10**9, callback=_Stop(a.seconds))
            except RigError as exc:  # e.g. the firmware deadman tripped on a stretched step
                stopped_by = f'{type(exc).__name__}: {exc}'
                print(f'SAC.learn() stopped by the rig: {stopped_by}', flush=True)
        finally:
            env.disengage_safely()
            client.close()
    # Only the ticks after learning started show the stretch; report both.
    dt = np.asarray(dts)
    learning = dt[a.learning_starts :] if len(dt) > a.learning_starts else dt
    doc: dict[str, Any] = {
        'benchmark': 'sync-baseline',
        'gradient_steps': a.gradient_steps,
        'hidden_sizes': a.hidden,
        'seconds': a.seconds,
        'learning_starts': a.learning_starts,
        'stopped_by': stopped_by,
        'all_steps': tick_stats(dt, np.maximum(dt - 1.0 / a.rate, 0.0), a.rate),
        'while_learning': tick_stats(learning, np.maximum(learning - 1.0 / a.rate, 0.0), a.rate),
    }
    _print_stats('sync SAC.learn(), while learning', doc['while_learning'])
    return doc


def bench_e2e(a: argparse.Namespace) -> dict[str, Any]:
    """V4: the full fine-tune through the standalone runner; our rate and the learner's."""
    from rip_control.run import finetune

    workdir = Path(tempfile.mkdtemp(prefix='rip_e2e_'))
    args = {
        'rate': str(a.rate),
        'episodes': str(a.episodes),
        'episode_seconds': str(a.episode_seconds),
        'gradient_steps': str(a.gradient_steps),
        'run_name': 'e2e',
        'runs_dir': str(workdir / 'runs'),
        'rigs': str(a.rigs),
    }
    args.update(parse_args(a.set))  # the runner refuses unknown names by itself
    summary = finetune.run(args, stream_logs=False)
    learner = summary.get('learner', {})
    rigs = summary.get('rigs') or [summary]
    ingest = None
    if learner.get('transitions_received') and summary.get('wall_seconds'):
        ingest = float(learner['transitions_received']) / float(summary['wall_seconds'])
    doc = {
        'benchmark': 'e2e',
        'rigs': [
            {
                'rig': r.get('rig', ''),
                'ticks': r.get('ticks', {}),
                'returns': r.get('episode_returns'),
            }
            for r in rigs
        ],
        'learner_transitions_per_wall_second': ingest,
        'args': args,
        'control_node': summary.get('ticks', {}),
        'episode_returns': summary.get('episode_returns'),
        'policy_versions': summary.get('policy_versions'),
        'learner': learner,
        'learner_updates_per_train_second': (
            float(learner['gradient_steps_done']) / float(learner['train_seconds'])
            if learner.get('train_seconds') not in (None, '0', '0.0')
            else None
        ),
        'failure': summary.get('failure'),
    }
    for r in doc['rigs']:
        if r['ticks']:
            _print_stats(f'fine-tune control node {r["rig"]}'.strip(), r['ticks'])
        else:
            print(f'{r["rig"] or "control node"}: no tick trace (it stopped early)')
    if ingest is not None:
        print(f'learner ingest: {ingest:.1f} transitions per wall second (resets included)')
    return doc


def bench_learner_throughput(a: argparse.Namespace) -> dict[str, Any]:
    """SAC updates/s per network size, torch threads and implementation.

    ``sb3``: SB3's own ``train()``; ``fast``: :mod:`rip_learner.fast_sac`'s update;
    ``shipped``: the same with config/finetune.yaml's safeguards (prior data, CAPS term).

    With ``--control-loop-hz`` the bare pacer process (:mod:`rip_control.rt.floor`, SCHED_FIFO,
    pinned to the last CPU) ticks at that rate throughout, as a control loop would.
    """
    rows = []
    with ExitStack() as stack:
        loop_note = 'none'
        if a.control_loop_hz > 0:
            total = a.seconds * len(a.hidden) * len(a.threads) * len(a.impl) * a.repeat * 2 + 120
            out = Path(tempfile.mkdtemp(prefix='rip_thr_loop_')) / 'floor.npz'
            loop = subprocess.Popen(
                [
                    sys.executable,
                    '-m',
                    'rip_control.rt.floor',
                    '--rate',
                    str(a.control_loop_hz),
                    '--seconds',
                    str(total),
                    '--cpu-latency-us',
                    '0',
                    '--out',
                    str(out),
                ],
                env=child_env(),
                stdout=subprocess.DEVNULL,
            )
            stack.callback(stop_process, loop)
            loop_note = f'bare pacer process at {a.control_loop_hz:g} Hz on the last CPU'
        for hidden, threads, rep in itertools.product(a.hidden, a.threads, range(a.repeat)):
            by_impl = {}
            for impl in a.impl:
                out = Path(tempfile.mkdtemp(prefix='rip_thr_')) / 'r.json'
                cmd = [
                    sys.executable,
                    '-m',
                    'rip_learner.train_load',
                    '--hidden',
                    hidden,
                    '--threads',
                    str(threads),
                    '--batch',
                    str(a.batch),
                    '--seconds',
                    str(a.seconds),
                    '--prefill',
                    '5000',
                    '--chunk',
                    str(a.chunk),
                    '--impl',
                    impl,
                    '--json',
                    str(out),
                ]
                subprocess.run(cmd, env=child_env(), check=True, stdout=subprocess.DEVNULL)
                row = json.loads(out.read_text())
                row['repeat'] = rep
                rows.append(row)
                by_impl[impl] = row['updates_per_s']
                print(
                    f'nets [{hidden}] batch {a.batch} torch threads {threads} {impl}: '
                    f'{row["updates_per_s"]:.0f} updates/s',
                    flush=True,
                )
            for impl in ('fast', 'shipped'):
                if impl in by_impl and by_impl.get('sb3', 0) > 0:
                    print(f'  {impl} / sb3: {by_impl[impl] / by_impl["sb3"]:.2f}x', flush=True)
    return {
        'benchmark': 'learner-throughput',
        'control_loop': loop_note,
        'chunk': a.chunk,
        'rows': rows,
    }


def throughput_table(doc: dict[str, Any]) -> str:
    """Markdown: updates/s per implementation, and each repeat's against SB3's.

    The implementations of one repeat run back to back, so only they compare.
    """
    rows = [
        '| nets | batch | torch threads | implementation | updates/s, mean (min-max) | '
        'x SB3 train(), per repeat |',
        '|---|---|---|---|---|---|',
    ]
    groups: dict[tuple[Any, ...], dict[str, dict[int, float]]] = {}
    for r in doc['rows']:
        key = (tuple(r['hidden_sizes']), r['batch_size'], r['torch_threads'])
        groups.setdefault(key, {}).setdefault(r['impl'], {})[r.get('repeat', 0)] = r[
            'updates_per_s'
        ]
    for (hidden, batch, threads), impls in groups.items():
        for impl, by_rep in impls.items():
            v = list(by_rep.values())
            sb3 = impls.get('sb3', {})
            ratios = [f'{by_rep[k] / sb3[k]:.2f}' if sb3.get(k) else '-' for k in sorted(by_rep)]
            ratio = ', '.join(ratios) if impl != 'sb3' else ''
            rows.append(
                f'| {list(hidden)} | {batch} | {threads} | {impl} | {np.mean(v):.0f} '
                f'({min(v):.0f}-{max(v):.0f}) | {ratio} |'
            )
    return '\n'.join(rows)


def bench_bag_roundtrip(a: argparse.Namespace) -> dict[str, Any]:
    """Write N transitions into a rosbag2 bag (MCAP) and import them with the learner's checks."""
    from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
    from rip_control.ros.bags import BagWriter, read_transitions, serialize
    from rip_control.transitions import Transition, field_layout

    layout = list(field_layout(OBS_SIZE, ACTION_SIZE))
    rng = np.random.default_rng(0)
    path = Path(tempfile.mkdtemp(prefix='rip_bag_')) / 'bag'
    period = 1.0 / a.rate
    t0 = time.perf_counter()
    writer = BagWriter(path, a.rate, OBS_SIZE, ACTION_SIZE)
    for i in range(a.transitions):
        t = Transition(
            i // 300,
            i % 300,
            rng.standard_normal(OBS_SIZE).astype(np.float32),
            rng.uniform(-1, 1, ACTION_SIZE).astype(np.float32),
            float(rng.standard_normal()),
            rng.standard_normal(OBS_SIZE).astype(np.float32),
            False,
            i % 300 == 299,
            period + float(rng.normal(0.0, 1e-4)),
            1,
        )
        writer.write(serialize(layout, t.pack()), time.time_ns())
    writer.close()
    write_s = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in path.iterdir())
    t0 = time.perf_counter()
    got = read_transitions(
        [path], rate_hz=a.rate, obs_size=OBS_SIZE, action_size=ACTION_SIZE, dt_tolerance_s=0.005
    )
    read_s = time.perf_counter() - t0
    doc = {
        'benchmark': 'bag-roundtrip',
        'transitions': a.transitions,
        'rate_hz': a.rate,
        'write_s': write_s,
        'write_per_s': a.transitions / write_s,
        'read_and_check_s': read_s,
        'read_per_s': a.transitions / read_s,
        'imported': len(got.transitions),
        'rejected': dict(got.rejected),
        'bytes': size,
        'bytes_per_transition': size / a.transitions,
    }
    print(
        f'{a.transitions} transitions: written {doc["write_per_s"]:.0f}/s, read and checked '
        f'{doc["read_per_s"]:.0f}/s, {doc["bytes_per_transition"]:.0f} B each, '
        f'{doc["imported"]} imported, rejected {doc["rejected"] or "none"}'
    )
    return doc


def bench_serial_roundtrip(a: argparse.Namespace) -> dict[str, Any]:
    """Serial round trips of both firmwares, under the chosen load."""
    with _Load(a.load, Path(tempfile.mkdtemp(prefix='rip_rtt_load_')), 0) as load:
        doc = bench_serial_rt.run(a)
        doc['load_result'] = load.result()
    doc['machine'] = _machine()
    print(bench_serial_rt.roundtrip_table(doc))
    return doc


def timing_table(paths: list[str]) -> str:
    """A markdown table of timing results (what the README shows), from their JSON files."""

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
    for path in paths:
        doc = json.loads(Path(path).read_text())
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


def _write_json(path: str, doc: dict[str, Any]) -> None:
    if not path:
        return
    atomic_write_bytes(path, (json.dumps(doc, indent=2) + '\n').encode())
    print(f'wrote {path}', flush=True)


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    ap = argparse.ArgumentParser(
        prog='python -m rip_control.benchmarks.bench', description=__doc__
    )
    sub = ap.add_subparsers(dest='bench', required=True)
    t = sub.add_parser('timing', help='control node tick timing under load')
    t.add_argument('--rate', type=float, default=50.0)
    t.add_argument('--seconds', type=float, default=60.0)
    t.add_argument('--load', choices=('none', 'hog', 'sac'), default='sac')
    t.add_argument(
        '--baseline',
        choices=('none', 'rclpy-timer', 'floor'),
        default='none',
        help='also measure, under the same load: an rclpy-timer loop, or the floor (the bare '
        'single-threaded pacer process)',
    )
    t.add_argument(
        '--floor-seconds', type=float, default=0.0, help='length of the floor run (0: --seconds)'
    )
    t.add_argument('--weights-hz', type=float, default=10.0)
    t.add_argument(
        '--load-nice', type=int, default=0, help='niceness of the sac load (the learner uses 10)'
    )
    t.add_argument(
        '--emulator-cpu',
        type=int,
        default=-1,
        help='pin the emulator to this CPU (default -1: no pinning; measured: pinning it to '
        'the control CPU makes the control loop wait behind it)',
    )
    t.add_argument(
        '--firmware',
        choices=('python', 'c'),
        default='python',
        help='the rig: the Python emulator, or the C firmware built for the host (answers in '
        'microseconds, as a microcontroller does; make firmware-host)',
    )
    t.add_argument(
        '--node-param',
        action='append',
        default=[],
        metavar='NAME:=VALUE',
        help='extra control node parameter (e.g. fifo_priority:=0)',
    )
    t.add_argument('--json', default='')
    y = sub.add_parser('sync-baseline', help='SB3 SAC.learn() with a self-paced env')
    y.add_argument('--rate', type=float, default=50.0)
    y.add_argument('--gradient-steps', type=int, default=4)
    y.add_argument('--seconds', type=float, default=60.0)
    y.add_argument('--learning-starts', type=int, default=256)
    y.add_argument('--hidden', default='64,64')
    y.add_argument('--max-action-v', type=float, default=8.0)
    y.add_argument('--json', default='')
    e = sub.add_parser('e2e', help='V4: the whole fine-tune, timed')
    e.add_argument('--rate', type=float, default=50.0)
    e.add_argument('--episodes', type=int, default=10)
    e.add_argument('--episode-seconds', type=float, default=6.0)
    e.add_argument('--gradient-steps', type=int, default=4)
    e.add_argument('--rigs', type=int, default=1, help='control nodes feeding the learner')
    e.add_argument(
        '--set',
        nargs='*',
        default=[],
        metavar='NAME:=VALUE',
        help='more runner arguments (e.g. params_file:=my.yaml for node parameters)',
    )
    e.add_argument('--json', default='')
    th = sub.add_parser('learner-throughput', help='SAC updates/s by configuration')
    th.add_argument('--hidden', nargs='+', default=['256,256', '128,128', '64,64'])
    th.add_argument('--threads', nargs='+', type=int, default=[1, 2])
    th.add_argument(
        '--impl',
        nargs='+',
        choices=('sb3', 'fast', 'shipped'),
        default=['sb3', 'fast'],
        help="SB3's train(); fast_sac's; fast_sac's with finetune.yaml's prior data and CAPS",
    )
    th.add_argument('--chunk', type=int, default=4, help='gradient steps per train() call')
    th.add_argument('--repeat', type=int, default=1, help='runs of each configuration')
    th.add_argument(
        '--control-loop-hz',
        type=float,
        default=0.0,
        help='run the bare pacer process at this rate throughout (0: none)',
    )
    th.add_argument('--batch', type=int, default=256)
    th.add_argument('--seconds', type=float, default=15.0)
    th.add_argument('--json', default='')
    from rip_control.benchmarks import matrix as bench_matrix
    from rip_control.benchmarks import sim_finetune as bench_sim_finetune
    from rip_control.benchmarks import v5 as bench_v5

    v5 = sub.add_parser('v5', help='V5: sim-only vs async vs sync fine-tune on a shifted rig')
    bench_v5.add_arguments(v5)
    mx = sub.add_parser('matrix', help='the shipped fine-tune over seeds and rigs, with its goals')
    bench_matrix.add_arguments(mx)
    sf = sub.add_parser(
        'sim-finetune', help="the fine-tune's learning side on a simulated rig (minutes)"
    )
    bench_sim_finetune.add_arguments(sf)
    sft = sub.add_parser('sim-finetune-table', help='markdown table of sim-finetune files')
    sft.add_argument('files', nargs='+')
    st = sub.add_parser('safeguards-table', help='markdown table of safeguard runs (v5 --label)')
    st.add_argument('files', nargs='+')
    dt = sub.add_parser('demo-table', help='markdown table of make demo summary.json files')
    dt.add_argument('files', nargs='+')
    mt = sub.add_parser('matrix-table', help='markdown table of matrix result files')
    mt.add_argument('files', nargs='+')
    bg = sub.add_parser('bag-roundtrip', help='write and import a rosbag2 bag of transitions')
    bg.add_argument('--transitions', type=int, default=30_000)
    bg.add_argument('--rate', type=float, default=50.0)
    bg.add_argument('--json', default='')
    rt = sub.add_parser(
        'serial-roundtrip', help='serial round trips: the Python emulator beside the C firmware'
    )
    bench_serial_rt.add_arguments(rt)
    rtt = sub.add_parser('roundtrip-table', help='markdown table of a serial-roundtrip file')
    rtt.add_argument('file')
    tb = sub.add_parser('table', help='markdown table of timing result files')
    tb.add_argument('files', nargs='+')
    tt = sub.add_parser('throughput-table', help='markdown table of a learner-throughput file')
    tt.add_argument('file')
    vt = sub.add_parser('v5-table', help='markdown table of V5 result files')
    vt.add_argument('files', nargs='+')
    vs = sub.add_parser('v5-seeds-table', help='markdown table of V5 over seeds, per rig')
    vs.add_argument('files', nargs='+')
    a = ap.parse_args(argv)
    if a.bench == 'table':
        print(timing_table(a.files))
        return 0
    if a.bench == 'roundtrip-table':
        print(bench_serial_rt.roundtrip_table(json.loads(Path(a.file).read_text())))
        return 0
    if a.bench == 'throughput-table':
        print(throughput_table(json.loads(Path(a.file).read_text())))
        return 0
    if a.bench == 'v5-table':
        print(bench_v5.v5_table([json.loads(Path(f).read_text()) for f in a.files]))
        return 0
    if a.bench == 'v5-seeds-table':
        print(bench_v5.v5_seeds_table([json.loads(Path(f).read_text()) for f in a.files]))
        return 0
    if a.bench == 'safeguards-table':
        docs = [json.loads(Path(f).read_text()) for f in a.files]
        print(bench_v5.safeguards_table(docs))
        return 0
    if a.bench == 'demo-table':
        print(bench_matrix.demo_table([json.loads(Path(f).read_text()) for f in a.files]))
        return 0
    if a.bench == 'sim-finetune-table':
        docs = [json.loads(Path(f).read_text()) for f in a.files]
        print(bench_sim_finetune.sim_finetune_table(docs))
        return 0
    if a.bench == 'matrix-table':
        print(bench_matrix.matrix_table([json.loads(Path(f).read_text()) for f in a.files]))
        return 0
    ensure_loopback_dds()
    runners = {
        'timing': bench_timing,
        'sync-baseline': bench_sync_baseline,
        'e2e': bench_e2e,
        'learner-throughput': bench_learner_throughput,
        'v5': bench_v5.bench_v5,
        'matrix': bench_matrix.bench_matrix,
        'sim-finetune': bench_sim_finetune.bench_sim_finetune,
        'bag-roundtrip': bench_bag_roundtrip,
        'serial-roundtrip': bench_serial_roundtrip,
    }
    start, t0 = cpu_times(), time.monotonic()
    doc = runners[a.bench](a)
    # The VM's host taking CPU time meanwhile is stalls no code here can prevent: a figure
    # measured under it says so.
    share = steal_fraction(start, cpu_times())
    doc['host_steal'] = {'fraction': share, 'wall_s': time.monotonic() - t0}
    print(f'host steal: {100 * share:.1f} % of the CPU time during the benchmark', flush=True)
    _write_json(a.json, doc)
    return 0


if __name__ == '__main__':
    sys.exit(main())
