"""Shared node plumbing: parameter tables declared from one list, and the spin of ``main()``.

Both nodes keep their parameters as a tuple of :class:`Param`; :func:`declare` turns it into
``declare_parameter`` calls with a ``ParameterDescriptor`` (a floating-point range for float
defaults, an integer range for int defaults), so ``ros2 param describe`` shows the same text
and limits that the table says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor


@dataclass(frozen=True)
class Param:
    """One parameter: name, default, description and an optional inclusive range."""

    name: str
    default: Any
    description: str
    lo: float | None = None
    hi: float | None = None


def descriptor(p: Param) -> ParameterDescriptor:
    """The ROS descriptor of a table entry."""
    desc = ParameterDescriptor(description=p.description)
    if p.lo is None or p.hi is None:
        return desc
    if isinstance(p.default, float):
        desc.floating_point_range = [
            FloatingPointRange(from_value=float(p.lo), to_value=float(p.hi), step=0.0)
        ]
    elif isinstance(p.default, int) and not isinstance(p.default, bool):
        desc.integer_range = [IntegerRange(from_value=int(p.lo), to_value=int(p.hi), step=1)]
    return desc


def declare(node: Any, table: tuple[Param, ...]) -> None:
    """Declare every parameter of ``table`` on ``node``."""
    for p in table:
        node.declare_parameter(p.name, p.default, descriptor(p))


def spin_until_shutdown(node: Any, executor: Any) -> int:
    """Spin until SIGINT/SIGTERM shuts the context down; 0 for that, 1 if the executor failed.

    A callback racing the signal's context shutdown (a publish on a dead context) is part of
    a normal stop; an exception while the context is still up is a failure, logged as fatal.
    The caller's own ``finally`` does its clean-up (disengage, save) in every case.
    """
    from rclpy.executors import ExternalShutdownException

    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure becomes an exit status
        if node.context.ok():
            node.get_logger().fatal(f'executor failed: {exc!r}')
            return 1
    return 0
