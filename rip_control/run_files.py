"""The names of the files in a run folder (``runs/<run_name>/``) and a policy folder.

Every module that writes or reads one of them takes its name from here, so a name is
spelt once. A run folder is written by the control node (``timing.csv``, the guard's best
policy, the tick trace), the learner (buffer, latest policy, SAC checkpoint), the runner
(summary, plots) and ``evaluate``; a policy folder by ``rip_learner.pretrain``.
"""

from __future__ import annotations

from pathlib import Path

# -- a run folder ---------------------------------------------------------------------------
BUFFER = 'replay_buffer.safetensors'  # the learner's replay buffer (tagged with the rate)
POLICY_LATEST = 'policy_latest.safetensors'  # the learner's newest actor
POLICY_BEST = 'policy_best.safetensors'  # the regression guard's best-evaluated actor
CHECKPOINT = 'sac_checkpoint.safetensors'  # the learner's critics, targets and entropy
TIMING_CSV = 'timing.csv'  # one row per episode (the control node)
TICK_TRACE = 'ticks.npz'  # every tick's dt and overrun (when the runner asks for it)
SUMMARY = 'summary.json'  # the runner's summary of the run
TICK_HISTOGRAM = 'tick_dt_hist.png'
EPISODE_RETURNS = 'episode_returns.png'
EVALUATION = 'evaluation.json'  # rip_control.evaluate's report
EVALUATION_TRACES = 'evaluation_traces.npz'
EVALUATION_PLOT = 'evaluation.png'
EVALUATION_TRANSITIONS = 'evaluation_transitions.safetensors'  # every transition it recorded
IDENTIFIED_RIG = 'identified_rig.yaml'  # rip_learner.identify's rig description
REIDENTIFIED_RIG = 'reidentified_rig.yaml'  # rip_control.adapt's second identification
IDENTIFICATION_PLOT = 'identified_rig.png'  # ... its predicted-against-measured plot

# -- a policy folder (policies/sim_50hz/, or pretrain's out:=) ------------------------------
POLICY = 'policy.safetensors'  # the actor the control node loads
PRIOR_DATA = 'prior_data.safetensors'  # simulated transitions the learner mixes in
PRETRAIN_RECORD = 'pretrain.json'
PRETRAIN_PROGRESS = 'progress.csv'
LEARNING_CURVE = 'learning_curve.png'


def packaged_policy(rate_hz: float) -> Path:
    """Where the pre-trained policy for ``rate_hz`` ships: ``policies/sim_<rate>hz/``.

    From the source tree when this module is in one, else from the installed share folder.
    """
    name = f'sim_{rate_hz:g}hz'
    here = Path(__file__).resolve().parents[1] / 'policies' / name / POLICY
    if here.exists():
        return here
    try:
        from ament_index_python.packages import get_package_share_directory

        share = Path(get_package_share_directory('rip_control'))
        return share / 'policies' / name / POLICY
    except (ImportError, LookupError, OSError):  # not installed: the source tree's path
        return here
