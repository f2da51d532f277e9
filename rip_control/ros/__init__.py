"""The ROS side: the control node, QoS, node parameters, lifecycle driver, recorder, bags."""
