"""The package's topics and their QoS, in one place.

Every node, the learner, the recorder, ``evaluate`` and the supervisor take a topic's name
and QoS from here (:data:`TOPICS` is what ``docs/parameters.md`` lists):

* ``transitions``: reliable, volatile, a deep queue (1000): no transition is lost to a slow
  subscriber in bursts, and a late joiner does not get old ones.
* ``policy_weights``: reliable, transient-local, depth 1: the latest weights only, and a node
  that starts later still gets them.
* ``~/tick``: best effort, shallow: sensor-style data for plotting.
"""

from __future__ import annotations

from dataclasses import dataclass

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from rip_control import policy, transitions

TRANSITIONS_QOS = QoSProfile(
    depth=1000,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
WEIGHTS_QOS = QoSProfile(
    depth=1,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
TICK_QOS = QoSProfile(
    depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT
)
STATUS_QOS = QoSProfile(depth=10)  # rclpy's default: reliable, volatile
EPISODE_QOS = QoSProfile(depth=100)  # the supervisor misses no summary of a short episode

# Names as the nodes use them (relative: a control node's namespace applies; with several
# rigs the launch file remaps TRANSITIONS and POLICY_WEIGHTS to the learner's absolute ones).
TRANSITIONS = transitions.TOPIC
POLICY_WEIGHTS = policy.TOPIC
TICK = '~/tick'
EPISODE = '~/episode'
DIAGNOSTICS = '/diagnostics'


@dataclass(frozen=True)
class Topic:
    """A topic of the package: what ``docs/parameters.md`` says of it."""

    name: str
    message: str
    qos: QoSProfile
    publishers: str
    subscribers: str
    content: str


TOPICS = (
    Topic(
        TRANSITIONS,
        'std_msgs/Float32MultiArray',
        TRANSITIONS_QOS,
        'control node',
        'learner, recorder, evaluate',
        'one tick, its fields in order: '
        + ', '.join(label for label, _ in transitions.field_layout(0, 0))
        + ' (dt as measured); `layout.dim` labels name each field and its size, and the run '
        'identity in a last empty dimension',
    ),
    Topic(
        POLICY_WEIGHTS,
        'std_msgs/UInt8MultiArray',
        WEIGHTS_QOS,
        'learner',
        'control node',
        'the actor as safetensors bytes, with its metadata (version, rate, sizes, run identity)',
    ),
    Topic(
        TICK,
        'std_msgs/Float64MultiArray',
        TICK_QOS,
        'control node',
        'rqt_plot',
        'per tick (rate-limited by `tick_topic_max_hz`): dt_ms, overrun_ms',
    ),
    Topic(
        EPISODE,
        'std_msgs/Float64MultiArray',
        EPISODE_QOS,
        'control node',
        'runner, launch supervisor',
        "each episode's summary, its fields named by `layout.dim` labels",
    ),
    Topic(
        DIAGNOSTICS,
        'diagnostic_msgs/DiagnosticArray',
        STATUS_QOS,
        'control node, learner',
        'rqt_robot_monitor, runner, launch supervisor',
        "about 1 Hz: each node's status and counters (tick rate, violations, policy version, "
        'buffer, updates, refusals)',
    ),
)


def qos_text(qos: QoSProfile) -> str:
    """A profile in words: reliability, durability, history depth."""
    reliability = 'reliable' if qos.reliability == ReliabilityPolicy.RELIABLE else 'best effort'
    durability = (
        'transient-local' if qos.durability == DurabilityPolicy.TRANSIENT_LOCAL else 'volatile'
    )
    return f'{reliability}, {durability}, depth {qos.depth}'
