"""Deployment evaluation: run a policy on the rig without learning and measure how it does.

``python -m rip_control.evaluate policy:=PATH rate:=50 episodes:=5 episode_seconds:=10``

The same processes and parameters as the fine-tune (:mod:`rip_control.finetune`), without the
learner: the control node runs the policy deterministically (the mean action, no
exploration noise) at the configured rate, through its lifecycle, on the rig at
``serial_port`` or on the emulator (``rig_params:=config/rig_*.yaml`` picks its physics). This
process records every tick's transition from the ``transitions`` topic and reports, per
episode (:mod:`rip_control.run.evaluation`): the longest continuous balance window
(|phi| < 0.2 rad), the time to swing up, action chatter (total variation per second, sign
changes per second) and tick statistics. It writes ``runs/<run_name>/evaluation.json``,
``evaluation.png`` (angle and action traces) and every transition it recorded as a replay-buffer
file (``evaluation_transitions.safetensors``, what ``rip_learner.identify buffer:=`` reads).
With ``excitation_episodes:=1`` the rig first runs the excitation episode (recorded, not
scored). Exit status as the fine-tune runner's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
import json
from pathlib import Path
import sys
from typing import Any

import numpy as np

from rip_control import run_files
from rip_control.files import atomic_write_bytes
from rip_control.params import help_text
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
from rip_control.run.evaluation import EpisodeMetrics, episode_metrics, phi_from_obs, summarize
from rip_control.run.launching import LAUNCH_ARGUMENTS, LEARNER, arguments_help
from rip_control.transitions import EXCITATION_VERSION

LEARNER_ONLY = tuple(
    a.name for a in LAUNCH_ARGUMENTS if a.targets and all(n == LEARNER for n, _ in a.targets)
)
DEFAULTS = {'episodes': '5', 'episode_seconds': '10.0', 'run_name': 'evaluate'}


def _attempts(ticks: list[Any]) -> list[list[Any]]:
    """Split one episode number's ticks (in arrival order) where the step count starts over.

    An episode cut by a fault (a timing or serial trip) has sent what it had; the control node
    then runs that episode again under the same number, from step 0. Merged, the two would
    read as one episode longer than ``episode_seconds`` with their angles interleaved.
    """
    out: list[list[Any]] = []
    for t in ticks:
        if not out or t.step <= out[-1][-1].step:
            out.append([])
        out[-1].append(t)
    return out


class TransitionRecorder:
    """Collects the control node's transitions, per episode, in arrival order.

    ``ticks`` holds the policy's episodes (scored); ``received`` every transition, the
    excitation's too (for the identification).
    """

    def __init__(self) -> None:
        self.ticks: dict[int, list[Any]] = defaultdict(list)
        self.received: list[Any] = []
        self.rejected = 0
        self.foreign = 0  # transitions of another run on this DDS domain, not recorded
        self.run_id = ''
        self.cut_attempts = 0  # episodes cut by a fault and run again under the same number

    def attach(self, node: Any, run_id: str = '') -> Callable[[], bool]:
        """Subscribe ``node`` to ``/transitions`` with the control node's QoS.

        :param run_id: the run's identity: transitions of any other run (or untagged ones) are
            counted in ``foreign`` and not recorded ('': every run's are taken).
        :returns: whether a publisher has matched (the runner waits for it before activating).
        """
        self.run_id = run_id
        from std_msgs.msg import Float32MultiArray

        from rip_control.bags import TOPIC
        from rip_control.ros.qos import TRANSITIONS_QOS

        sub = node.create_subscription(
            Float32MultiArray, TOPIC, self._on_transition, TRANSITIONS_QOS
        )
        return lambda: sub.get_publisher_count() > 0

    def _on_transition(self, msg: Any) -> None:
        from rip_control.transitions import TransitionRejected, split_run_id, unpack

        labels = [(d.label, d.size) for d in msg.layout.dim]
        if self.run_id and split_run_id(labels)[1] != self.run_id:
            self.foreign += 1  # another runner's control node on this domain
            return
        obs_size = dict(labels).get('obs', OBS_SIZE)  # the node's own (its action_history)
        try:
            t = unpack(labels, np.asarray(msg.data, dtype=np.float32), obs_size, ACTION_SIZE)
        except TransitionRejected:
            self.rejected += 1
            return
        self.received.append(t)
        if t.policy_version != EXCITATION_VERSION:
            self.ticks[t.episode].append(t)

    def complete(self, n: int) -> bool:
        """True once ``n`` episodes have ended (a terminated or truncated tick each)."""
        ended = sum(
            1 for ticks in self.ticks.values() if ticks[-1].terminated or ticks[-1].truncated
        )
        return ended >= n

    def episodes(self, period_s: float) -> list[tuple[int, EpisodeMetrics, dict[str, np.ndarray]]]:
        """``(episode, metrics, traces)`` of every episode recorded, in order."""
        out = []
        self.cut_attempts = 0
        for ep in sorted(self.ticks):
            attempts = _attempts(self.ticks[ep])
            ended = [a for a in attempts if a[-1].terminated or a[-1].truncated]
            ticks = ended[-1] if ended else attempts[-1]
            self.cut_attempts += len(attempts) - 1
            traces = {
                'phi': phi_from_obs(np.stack([t.next_obs for t in ticks])),
                'action': np.array([float(t.action[0]) for t in ticks]),
                'dt': np.array([t.dt_s for t in ticks]),
                'reward': np.array([t.reward for t in ticks]),
            }
            m = episode_metrics(
                traces['phi'], traces['action'], traces['dt'], period_s, traces['reward']
            )
            out.append((ep, m, traces))
        return out


def plot_traces(
    episodes: list[tuple[int, EpisodeMetrics, dict[str, np.ndarray]]], path: Path, title: str
) -> None:
    """Angle and action against time, one line per episode."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    for ep, m, tr in episodes:
        t = np.cumsum(tr['dt'])
        label = f'ep {ep}: balance {m.longest_balance_s:.1f} s'
        ax[0].plot(t, np.degrees(tr['phi']), lw=0.8, label=label)
        ax[1].plot(t, tr['action'], lw=0.6)
    ax[0].axhspan(-np.degrees(0.2), np.degrees(0.2), color='0.9', zorder=0)
    ax[0].set(ylabel='pendulum from upright (deg)', title=title)
    ax[0].legend(fontsize=7, ncol=2)
    ax[1].set(xlabel='time in episode (s)', ylabel='action')
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def with_defaults(args: dict[str, str]) -> dict[str, str]:
    """The runner's arguments an evaluation runs with: its own defaults, then the typed."""
    return {**DEFAULTS, **args}


def evaluate(
    args: dict[str, str],
    stream_logs: bool = True,
    stop_when: Callable[[list[EpisodeMetrics]], str] | None = None,
) -> dict[str, Any]:
    """Deploy and measure; return the report also written to ``evaluation.json``.

    :param stop_when: ``stop_when(metrics)`` of the episodes ended so far says why they
        decide what the deployment is for ('' while they do not, e.g.
        :func:`rip_control.rt.guard.certain_miss`); the deployment then ends before its next
        episode, and the report (``stopped_decided``) says why.
    """
    from rip_control import finetune

    bad = sorted(set(args) & set(LEARNER_ONLY))
    if bad:
        raise ValueError(f'{bad} configure learning; an evaluation runs no learner')
    policy = args.get('policy', '')
    if policy not in ('', 'auto') and not Path(policy).is_file():
        raise ValueError(f'policy:={policy}: no such file')
    args = with_defaults(args)
    recorder = TransitionRecorder()
    verdicts: dict[int, str] = {}  # stop_when's answer for the first n episodes, asked once

    def decided(ended: int, rate_hz: float) -> str:
        if stop_when is None:
            return ''
        if ended not in verdicts:
            if not recorder.complete(ended):
                return ''  # its transitions still on the way
            done = [m for _, m, _ in recorder.episodes(1.0 / rate_hz)][:ended]
            verdicts[ended] = stop_when(done)
        return verdicts[ended]

    run = finetune.run(
        args,
        stream_logs=stream_logs,
        learn=False,
        observe=recorder.attach,
        complete=recorder.complete,
        decided=decided,
    )
    rate = float(run['rate_hz'])
    episodes = recorder.episodes(1.0 / rate)
    if run.get('stopped_decided'):  # the episodes that decided it, not one begun after them
        episodes = episodes[: max(n for n, why in verdicts.items() if why)]
    run_dir = Path(run['run_dir'])
    deployed = str(run['policy'])  # as the plan resolved it (empty: the shipped one)
    report = {
        'policy': deployed,
        'rig_params': args.get('rig_params', ''),
        'serial_port': args.get('serial_port', ''),
        'rate_hz': rate,
        'episodes': [{'episode': ep, **m.as_dict()} for ep, m, _ in episodes],
        'summary': summarize([m for _, m, _ in episodes]),
        'transitions_rejected': recorder.rejected,
        'transitions_foreign': recorder.foreign,
        'excitation_transitions': sum(
            t.policy_version == EXCITATION_VERSION for t in recorder.received
        ),
        'cut_attempts_dropped': recorder.cut_attempts,
        'ticks': run.get('ticks'),
        'reset_seconds': run.get('reset_seconds', 0.0),
        'stopped_decided': run.get('stopped_decided'),
        'failure': run['failure'],
        'interrupted': run['interrupted'],
    }
    text = json.dumps(report, indent=1) + '\n'
    atomic_write_bytes(run_dir / run_files.EVALUATION, text.encode())
    traces: dict[str, Any] = {f'ep{ep}_{k}': v for ep, _, tr in episodes for k, v in tr.items()}
    np.savez(run_dir / run_files.EVALUATION_TRACES, **traces)
    if recorder.received:
        from rip_control import buffer_file

        arrays = buffer_file.arrays_from_transitions(recorder.received)
        n_obs = len(recorder.received[0].obs)
        meta = buffer_file.BufferMeta(rate, n_obs, ACTION_SIZE, len(recorder.received), 0)
        buffer_file.save(run_dir / run_files.EVALUATION_TRANSITIONS, arrays, meta)
    if episodes:
        plot_traces(
            episodes,
            run_dir / run_files.EVALUATION_PLOT,
            f'{Path(deployed).name} at '
            f'{rate:g} Hz on {args.get("rig_params") or "the nominal rig"}',
        )
    s = report['summary']
    if episodes:
        print(
            '\n== evaluation ==\n'
            + '\n'.join(
                f'episode {ep}: balance {m.longest_balance_s:5.2f} s, swing-up '
                + (f'{m.swing_up_s:4.2f} s' if m.swing_up_s is not None else '  -   ')
                + f', chatter {m.action_tv_per_s:5.2f}/s ({m.sign_changes_per_s:4.1f} sign '
                f'changes/s), tick {m.dt_mean_ms:.3f} ± {m.dt_std_ms:.3f} ms'
                for ep, m, _ in episodes
            )
            + f'\nlongest balance window: mean {s["longest_balance_s"]["mean"]:.2f} s, '
            f'min {s["longest_balance_s"]["min"]:.2f} s; swung up in {s["swung_up"]} of '
            f'{s["episodes"]} episodes\nreport: {run_dir / run_files.EVALUATION}',
            flush=True,
        )
    return report


def main(argv: list[str] | None = None) -> int:
    """Command line: the fine-tune's ``name:=value`` arguments (no learner's).

    Exit status as the runner's, 130 for a signal at any moment from here on.
    """
    from rip_control.signals import StopSignals

    # First: until the runner's own handling takes over (the first thing run_command does),
    # a signal interrupts the evaluation as Ctrl-C would, once.
    stop = StopSignals().install()
    try:
        with stop.interruptible():
            from rip_control.finetune import run_command

            argv = list(sys.argv[1:] if argv is None else argv)
            if any(a in ('-h', '--help') for a in argv):
                print(help_text(__doc__))
                print(arguments_help(skip=LEARNER_ONLY, defaults=DEFAULTS))
                return 0
            return run_command(
                'evaluate', argv, lambda args, stream: evaluate(args, stream_logs=stream)
            )
    except KeyboardInterrupt:  # a signal outside the runner's own handling (nothing running)
        print('evaluate: interrupted', file=sys.stderr, flush=True)
        return 130


if __name__ == '__main__':
    sys.exit(main())
