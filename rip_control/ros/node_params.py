"""Shared node plumbing: parameter tables declared from one list, and the spin of ``main()``.

Both nodes declare from the ROS-free tables of :mod:`rip_control.params`; :func:`declare` makes
them ``declare_parameter`` calls with a ``ParameterDescriptor`` (a floating-point range for
doubles, an integer range for integers), so ``ros2 param describe`` shows the same text
and limits that the table says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
import os
from pathlib import Path
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

from rip_control.params import DOUBLE, INTEGER, Param
from rip_control.signals import StopSignals


def descriptor(p: Param) -> ParameterDescriptor:
    """The ROS descriptor of a table entry."""
    desc = ParameterDescriptor(description=p.description)
    if p.lo is None or p.hi is None:
        return desc
    if p.type == DOUBLE:
        desc.floating_point_range = [
            FloatingPointRange(from_value=float(p.lo), to_value=float(p.hi), step=0.0)
        ]
    elif p.type == INTEGER:
        desc.integer_range = [IntegerRange(from_value=int(p.lo), to_value=int(p.hi), step=1)]
    return desc


def declare(node: Any, table: tuple[Param, ...]) -> None:
    """Declare every parameter of ``table`` on ``node``, overrides converted by the table.

    rcl types ``-p rate_hz:=50`` and ``rate_hz: 50`` in a params file as INTEGER, and
    ``declare_parameter`` would refuse them for a double; each override is converted (and
    range-checked) by its table entry first, so the node takes what the runner and the
    launch file take.

    :raises ValueError: an override the table refuses, naming the parameter and the value.
    """
    from rclpy.parameter import Parameter

    overrides = getattr(node, '_parameter_overrides', None)
    for p in table:
        if isinstance(overrides, dict) and p.name in overrides:
            given = overrides[p.name].value
            value = p.convert(given, f'parameter {p.name}:={given!r}')
            overrides[p.name] = Parameter(p.name, value=value)
        node.declare_parameter(p.name, p.default, descriptor(p))


DISCOVERY_RANGE = 'ROS_AUTOMATIC_DISCOVERY_RANGE'


def init_rclpy(args: list[str] | None = None) -> str:
    """``rclpy.init`` without rclpy's signal handlers (:func:`spin_until_shutdown` adds them).

    rclpy's handlers shut the context down at a signal; during set-up that fails whatever is
    being built (a publisher on a dead context) and skips the code that would stop safely.
    The process's :class:`rip_control.signals.StopSignals`, installed before this, records a
    signal during set-up instead.

    DDS discovery stays on this machine (``LOCALHOST``) unless the user set
    ``ROS_AUTOMATIC_DISCOVERY_RANGE``: a node that drives a motor is not reachable from the
    network by default.

    :returns: a warning to log when discovery was widened ('' when it stays on loopback).
    """
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    os.environ.setdefault(DISCOVERY_RANGE, 'LOCALHOST')
    with security_named(args):
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    return widened_discovery()


SECURITY_ENV = (
    'ROS_SECURITY_ENABLE',
    'ROS_SECURITY_STRATEGY',
    'ROS_SECURITY_KEYSTORE',
    'ROS_SECURITY_ENCLAVE_OVERRIDE',
)


class SecurityRefused(ValueError):
    """SROS2 was asked for (``ROS_SECURITY_ENABLE=true``) and rcl or the DDS refused it.

    A configuration error (exit status 2), raised before the node exists: a process told to
    run secured never falls back to running open.
    """


#: The files rmw_fastrtps reads from an enclave's folder (a certificate revocation list is
#: optional).
ENCLAVE_FILES = (
    'identity_ca.cert.pem',
    'cert.pem',
    'key.pem',
    'permissions_ca.cert.pem',
    'governance.p7s',
    'permissions.p7s',
)


def _refused(reason: str) -> SecurityRefused:
    settings = ', '.join(f'{k}={os.environ[k]}' for k in SECURITY_ENV if k in os.environ)
    return SecurityRefused(f'SROS2 refused ({settings}): {reason}')


def check_security_settings(args: list[str] | None = None) -> None:
    """Refuse SROS2 settings under which rcl would run this process unsecured without a word.

    rcl turns security on only for ``ROS_SECURITY_ENABLE`` exactly ``true`` and enforces it
    only for ``ROS_SECURITY_STRATEGY`` exactly ``Enforce``; anything else (``True``,
    ``enforce``, unset) runs unsecured, and so does ``Permissive`` when the keystore lacks the
    process's enclave. Security off (``ROS_SECURITY_ENABLE`` unset, empty or ``false``) is
    left alone.

    :param args: the process's ROS arguments (``--enclave``/``-e`` names its enclave).
    :raises SecurityRefused: naming the setting and what rcl would do with it.
    """
    env = os.environ
    enable = env.get('ROS_SECURITY_ENABLE', '')
    if enable in ('', 'false'):
        return
    if enable != 'true':
        raise _refused(
            f'ROS_SECURITY_ENABLE={enable!r}: rcl turns security on only for exactly "true" '
            '(this would run unsecured); set true or false'
        )
    strategy = env.get('ROS_SECURITY_STRATEGY', '')
    if strategy not in ('Enforce', 'Permissive'):
        raise _refused(
            f'ROS_SECURITY_STRATEGY={strategy!r}: rcl enforces only exactly "Enforce" (anything '
            'else is Permissive, which runs unsecured where the keystore lacks an enclave); set '
            'Enforce'
        )
    keystore = env.get('ROS_SECURITY_KEYSTORE', '')
    if not keystore:
        raise _refused('ROS_SECURITY_KEYSTORE is not set: no keystore to secure with')
    words = list(args or [])
    given = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ('--enclave', '-e')]
    enclave = env.get('ROS_SECURITY_ENCLAVE_OVERRIDE') or (given[-1] if given else '/')
    folder = Path(keystore) / 'enclaves' / enclave.strip('/')
    missing = [name for name in ENCLAVE_FILES if not (folder / name).is_file()]
    if missing:
        raise _refused(
            f'enclave {enclave} lacks {", ".join(missing)} in {folder}'
            + (
                ' (Permissive would run this process unsecured)'
                if strategy == 'Permissive'
                else ''
            )
            + ': ros2 security create_enclave makes them'
        )


@contextmanager
def security_named(args: list[str] | None = None) -> Iterator[None]:
    """SROS2 settings checked first; rcl's security failure then made a :class:`SecurityRefused`.

    :func:`check_security_settings` refuses what rcl would quietly run unsecured. rcl and the
    DDS raise a bare ``RCLError`` whose text ends in C source locations; this names the
    settings that asked for security and says what to do. Anything else passes unchanged.
    """
    check_security_settings(args)
    try:
        yield
    except Exception as exc:
        if os.environ.get('ROS_SECURITY_ENABLE', '') != 'true':
            raise
        text = str(exc)
        if 'security' not in text.lower():
            raise
        reason = text.split(', at /')[0].replace('\n', ' ').strip()
        hint = (
            ' The Fast DDS of the pip wheels is built without DDS-Security: SROS2 needs a ROS 2 '
            'installed from apt or source (docs/networking.md).'
            if 'security libraries' in text
            else ''
        )
        raise _refused(f'{reason}.{hint}') from None


def widened_discovery() -> str:
    """What a discovery beyond this machine exposes.

    '' for ``LOCALHOST`` without static peers, and for ``OFF``.
    """
    scope = os.environ.get(DISCOVERY_RANGE, '')
    peers = os.environ.get('ROS_STATIC_PEERS', '')
    if scope == 'OFF' or (scope == 'LOCALHOST' and not peers):
        return ''
    return (
        f'DDS discovery widened ({DISCOVERY_RANGE}={scope or "unset"}'
        + (f', ROS_STATIC_PEERS={peers}' if peers else '')
        + f', domain {os.environ.get("ROS_DOMAIN_ID", "0")}): any participant that reaches '
        'this one can publish policy_weights and transitions and call its lifecycle and '
        'parameter services; keep the network private or use SROS2'
    )


def spin_until_shutdown(node: Any, executor: Any, stop: StopSignals | None = None) -> int:
    """Spin until SIGINT/SIGTERM shuts the context down; 0 for that, 1 if the executor failed.

    A callback racing the signal's context shutdown (a publish on a dead context) is part of
    a normal stop; an exception while the context is still up is a failure, logged as fatal.
    The caller's own ``finally`` does its clean-up (disengage, save) in every case.

    With ``stop`` (rclpy initialised by :func:`init_rclpy`), rclpy's signal handlers are
    installed here, once the node and its executor exist: they chain to ``stop``'s, shut the
    context down and wake the executor within a millisecond. A signal that came before them
    (recorded by ``stop``) returns 0 at once, without spinning.
    """
    from rclpy.executors import ExternalShutdownException

    if stop is not None:
        from rclpy.signals import SignalHandlerOptions, install_signal_handlers

        install_signal_handlers(SignalHandlerOptions.ALL)
        if stop.requested:  # checked after installing: a later signal shuts the context down
            return 0
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure becomes an exit status
        if node.context.ok():
            node.get_logger().fatal(f'executor failed: {exc!r}')
            return 1
    return 0


def run_node(
    program: str,
    args: list[str] | None,
    build: Callable[[StopSignals], Any],
    start: Callable[[Any, StopSignals], Any],
    way_out: Callable[[Any, Any, int], int],
) -> int:
    """A node's program, from its first line to its exit status: one start-up for every node.

    Signals are stop requests from the first line (:class:`StopSignals`), rclpy is initialised
    (:func:`init_rclpy`, the security settings checked), the node is built under its
    security name, its executor started and spun until a signal (:func:`spin_until_shutdown`);
    then ``way_out`` runs whatever happened, before rclpy is shut down.

    :param program: the name the errors are printed under.
    :param build: makes the node (``None``: nothing to run, e.g. a stop came first); a
        :class:`ValueError` (a parameter the table refuses, SROS2) is printed, exit 2.
    :param start: makes the node's executor with the node added (and anything else the node
        needs before spinning); returns the executor.
    :param way_out: ``way_out(node, executor, code)``, either possibly ``None``: the node's
        clean-up (disengage, save), its exit status.
    """
    import sys

    import rclpy

    # First: from here on a signal is a stop request, recorded; nothing is raised into the
    # set-up, and the way out below runs whatever the moment.
    stop = StopSignals().install()
    try:
        widened = init_rclpy(args)
    except SecurityRefused as exc:  # nothing exists yet, nothing to clean up
        print(f'{program}: {exc}', file=sys.stderr, flush=True)
        return 2
    node: Any = None
    executor: Any = None
    code = 0
    try:
        try:
            with security_named(args):
                node = build(stop)
        except ValueError as exc:  # a parameter the table refuses, SROS2 refused: named
            print(f'{program}: {exc}', file=sys.stderr, flush=True)
            code = 2
        if node is not None:
            if widened:
                node.get_logger().warning(widened)
            executor = start(node, stop)
            code = spin_until_shutdown(node, executor, stop)
    finally:
        code = way_out(node, executor, code)
        rclpy.try_shutdown()
    return code
