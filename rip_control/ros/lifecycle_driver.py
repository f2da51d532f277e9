"""Drive a lifecycle node through its standard services (what ``ros2 lifecycle set`` does).

Used by the standalone runner, benchmarks and tests; bounded waits everywhere.
"""

from __future__ import annotations

import time
from typing import Any

from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
import rclpy
from rclpy.node import Node

TRANSITIONS = {
    'configure': Transition.TRANSITION_CONFIGURE,
    'cleanup': Transition.TRANSITION_CLEANUP,
    'activate': Transition.TRANSITION_ACTIVATE,
    'deactivate': Transition.TRANSITION_DEACTIVATE,
    'shutdown': Transition.TRANSITION_ACTIVE_SHUTDOWN,
}


class LifecycleDriver:
    """Client of one lifecycle node's ``change_state`` / ``get_state`` services.

    :param node: the calling node (spun here while waiting).
    :param target: fully qualified name of the lifecycle node, e.g. ``/rip_control``.
    """

    def __init__(self, node: Node, target: str) -> None:
        self.node = node
        self.target = target
        self._change: Any = node.create_client(ChangeState, f'{target}/change_state')
        self._get: Any = node.create_client(GetState, f'{target}/get_state')

    def wait_for_services(self, timeout_s: float = 10.0) -> bool:
        """Wait until the services are matched *and* a get_state round trip succeeded.

        A request sent before the server's reply writer has matched this client can be lost,
        so discovery alone is not enough before a non-idempotent ``change_state``.
        """
        deadline = time.monotonic() + timeout_s
        for client in (self._change, self._get):
            while not client.wait_for_service(timeout_sec=0.1):
                if time.monotonic() > deadline:
                    return False
        while time.monotonic() < deadline:
            try:
                self.state(timeout_s=min(1.0, max(0.1, deadline - time.monotonic())))
                return True
            except TimeoutError:
                continue
        return False

    def _call(self, client: Any, request: Any, timeout_s: float) -> Any:
        future = client.call_async(request)
        rclpy.spin_until_future_complete(self.node, future, timeout_sec=timeout_s)
        if not future.done():
            raise TimeoutError(f'{self.target}: no answer from {client.srv_name} in {timeout_s} s')
        return future.result()

    def change(self, transition: str, timeout_s: float = 10.0) -> bool:
        """Request a transition by name; return whether the node reported success."""
        req = ChangeState.Request()
        req.transition.id = TRANSITIONS[transition]
        return bool(self._call(self._change, req, timeout_s).success)

    def state(self, timeout_s: float = 5.0) -> str:
        """The node's current state label (``unconfigured``, ``inactive``, ``active``...)."""
        return str(self._call(self._get, GetState.Request(), timeout_s).current_state.label)

    def wait_for_state(self, label: str, timeout_s: float) -> bool:
        """Poll the state (bounded) until it is ``label``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.state() == label:
                return True
            time.sleep(0.05)
        return False
