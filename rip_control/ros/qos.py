"""The QoS of the package's topics, in one place.

The node, the learner, the recorder and evaluate import them from here, not from the
control node.

* ``transitions``: reliable, volatile, a deep queue (1000): no transition is lost to a slow
  subscriber in bursts, and a late joiner does not get old ones.
* ``policy_weights``: reliable, transient-local, depth 1: the latest weights only, and a node
  that starts later still gets them.
* ``~/tick``: best effort, shallow: sensor-style data for plotting.
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

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
