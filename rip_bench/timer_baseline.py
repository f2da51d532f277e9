"""Baseline for the benchmarks: the same tick work driven by an rclpy timer.

This is how a control loop is usually written in ROS 2 — a ``create_timer`` callback on the
executor, the weights subscription and the transition publisher in the same process and
the same GIL. It exists only to be measured beside the dedicated paced thread of
:mod:`rip_control.ros.control_node`; do not drive a rig with it.

``python -m rip_bench.timer_baseline --port DEV --rate 50 --seconds 60 --json out.json``
(``python -m rip_bench timing --baseline rclpy-timer`` runs it, through :func:`command`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from rip_bench.common import module_command
from rip_control.policy import PolicyRejected, decode_actor, random_actor
from rip_control.rig.client import LowLevelClient, RigError
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE, RealRotaryInvertedPendulumEnv, TaskConfig
from rip_control.transitions import Transition


def run(port: str, rate_hz: float, seconds: float, max_action_v: float) -> dict:
    """Tick the rig from an rclpy timer for ``seconds``; return the raw tick times."""
    import rclpy  # here: the benchmarks build this program's command line without ROS
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import Float32MultiArray, UInt8MultiArray

    from rip_control.ros.qos import POLICY_WEIGHTS, TRANSITIONS, TRANSITIONS_QOS, WEIGHTS_QOS

    rclpy.init()
    node = rclpy.create_node('rip_timer_baseline')
    client = LowLevelClient(port)
    client.open()
    task = TaskConfig.from_params(rate_hz=rate_hz, episode_seconds=6.0, max_action_v=max_action_v)
    env = RealRotaryInvertedPendulumEnv(client, task)
    # The latest actor: replaced whole by the weights callback, read once per tick (one
    # thread here, so a plain slot is the whole hand-off).
    latest = [random_actor(OBS_SIZE, ACTION_SIZE, (64, 64), rate_hz)]
    pub = node.create_publisher(Float32MultiArray, TRANSITIONS, TRANSITIONS_QOS)
    rng = np.random.default_rng(0)
    times: list[float] = []
    serial_errors: list[str] = []
    state: dict = {'obs': None, 'in_episode': False, 'last_action': np.zeros(1, np.float32)}

    def on_weights(msg: UInt8MultiArray) -> None:
        try:
            actor = decode_actor(
                bytes(msg.data),
                rate_hz=rate_hz,
                obs_size=OBS_SIZE,
                action_size=ACTION_SIZE,
                min_version=latest[0].version,
            )
            latest[0] = actor
        except PolicyRejected:
            pass

    def on_tick() -> None:
        times.append(time.monotonic())
        try:
            _tick()
        except RigError as exc:  # counted; the measurement goes on
            serial_errors.append(str(exc))
            state['in_episode'] = False
            env.begin_reset()

    def _tick() -> None:
        if not state['in_episode']:
            done, _ = env.reset_step()
            state['in_episode'], state['obs'] = done, None
            return
        if state['obs'] is None:
            obs = env.begin_episode()
        else:
            next_obs, reward, term, trunc, info = env.observe_and_step()
            t = Transition(
                0,
                env.episode_steps_done,
                state['obs'],
                state['last_action'],
                reward,
                next_obs,
                term,
                trunc,
                float(info['dt_s']),
                latest[0].version,
            )
            pub.publish(Float32MultiArray(data=t.pack().tolist()))
            if term or trunc:
                state['in_episode'] = False
                env.begin_reset()
                return
            obs = next_obs
        action = latest[0].act(obs, rng.standard_normal(1).astype(np.float32))
        env.apply_action(action)
        state['obs'], state['last_action'] = obs, action

    node.create_subscription(UInt8MultiArray, POLICY_WEIGHTS, on_weights, WEIGHTS_QOS)
    env.begin_reset()
    node.create_timer(1.0 / rate_hz, on_tick)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.1)
    finally:
        env.disengage_safely()
        client.close()
        node.destroy_node()
        rclpy.try_shutdown()
    return {'tick_times_s': times, 'serial_errors': len(serial_errors)}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog='python -m rip_bench.timer_baseline', description=__doc__)
    ap.add_argument('--port', required=True)
    ap.add_argument('--rate', type=float, default=50.0)
    ap.add_argument('--seconds', type=float, default=10.0)
    ap.add_argument('--max-action-v', type=float, default=1.0)
    ap.add_argument('--json', required=True)
    return ap


def command(**options: Any) -> list[str]:
    """The command line that runs the baseline with ``options`` (its long options' names).

    :raises ValueError: an option it does not have, named.
    """
    return module_command('rip_bench.timer_baseline', _parser(), options)


def main(argv: list[str] | None = None) -> int:
    """Command line: run the baseline and write its tick times as JSON."""
    a = _parser().parse_args(argv)
    result = run(a.port, a.rate, a.seconds, a.max_action_v)
    with open(a.json, 'w') as f:
        json.dump(result, f)
    return 0


if __name__ == '__main__':
    sys.exit(main())
