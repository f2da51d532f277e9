"""What runs in the real-time control process, and the channels it shares with the node.

The control loop runs in a process of its own with one Python thread (no rclpy, no DDS, no
GIL shared with anything): :mod:`rip_control.rt.process`. The lifecycle node talks to it only
through shared memory (:mod:`rip_control.rt.channels`), from its own side
(:mod:`rip_control.rt.handle`).
"""
