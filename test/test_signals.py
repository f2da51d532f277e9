"""Stop signals at any moment: the helper, in this process (no ROS)."""

from __future__ import annotations

import signal

import pytest

from rip_control.signals import StopRequested, StopSignals

# ---- the helper, in this process ---------------------------------------------------------


def test_stop_signals_are_recorded_and_nothing_is_raised_outside_an_interruptible_block():
    with StopSignals() as stop:
        assert not stop.requested and stop.signum is None
        signal.raise_signal(signal.SIGTERM)  # the handler runs before this returns
        signal.raise_signal(signal.SIGINT)
        assert stop.requested and stop.signum == signal.SIGTERM and stop.count == 2
        assert stop.wait(0.0)


def test_restore_puts_the_previous_handlers_back():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    stop = StopSignals().install()
    assert signal.getsignal(signal.SIGINT) == stop._on_signal
    stop.restore()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_the_first_signal_inside_an_interruptible_block_raises_once():
    with StopSignals() as stop:
        with pytest.raises(StopRequested) as caught, stop.interruptible():
            signal.raise_signal(signal.SIGTERM)
            pytest.fail('not interrupted')
        assert caught.value.signum == signal.SIGTERM
        assert isinstance(caught.value, KeyboardInterrupt)  # code written for Ctrl-C catches it
        with stop.interruptible():  # a later block: the stop was already raised
            signal.raise_signal(signal.SIGINT)
        assert stop.count == 2


def test_a_signal_before_the_block_raises_on_entering_it():
    with StopSignals() as stop:
        signal.raise_signal(signal.SIGINT)  # e.g. while the runner builds its plan
        with pytest.raises(StopRequested), stop.interruptible():
            pytest.fail('the block body must not run')


def test_a_swallowed_stop_is_raised_again_by_check():
    with StopSignals() as stop:
        with pytest.raises(StopRequested), stop.interruptible():
            try:
                signal.raise_signal(signal.SIGINT)
            except StopRequested:
                pass  # as Python does with one raised in an at-fork hook or a finaliser
            with pytest.raises(StopRequested):
                stop.check()  # a wait inside the block acts on it
        with stop.interruptible():  # delivered: a later signal is recorded only
            signal.raise_signal(signal.SIGINT)
            stop.check()
        assert stop.count == 2


def test_a_swallowed_stop_leaves_the_block_when_it_ends():
    with StopSignals() as stop:
        with pytest.raises(StopRequested), stop.interruptible():
            try:
                signal.raise_signal(signal.SIGTERM)
            except StopRequested:
                pass
        assert stop.signum == signal.SIGTERM


def test_a_held_part_is_not_interrupted_and_the_stop_comes_at_its_end():
    steps = []
    with StopSignals() as stop, pytest.raises(StopRequested), stop.interruptible():
        with stop.held():  # e.g. starting a child and putting it on the list to stop
            signal.raise_signal(signal.SIGINT)
            steps.append('child started')
            stop.check()  # held: nothing
            steps.append('child listed')
        steps.append('not reached')
    assert steps == ['child started', 'child listed']


def test_a_second_signal_during_the_ordered_stop_does_not_abort_it(capfd):
    steps = []
    with StopSignals(repeat_note='stopping in the safe order, please wait') as stop:
        try:
            with stop.interruptible():
                signal.raise_signal(signal.SIGINT)
        except StopRequested:
            steps.append('motor off')
            signal.raise_signal(signal.SIGINT)  # the impatient second Ctrl-C
            steps.append('learner saved')
            signal.raise_signal(signal.SIGTERM)
            steps.append('emulator stopped')
    assert steps == ['motor off', 'learner saved', 'emulator stopped']
    assert stop.count == 3
    assert capfd.readouterr().err.count('stopping in the safe order, please wait') == 2


def test_a_stop_signals_installed_over_another_one_owns_the_stop():
    # An entry point installs one first; the runner it calls installs its own: the signal is
    # recorded by both, and the outer one does not raise it again once the runner returned.
    with StopSignals() as outer:
        with outer.interruptible():  # the entry point's block around the runner
            with StopSignals() as inner:  # the runner's
                try:
                    with inner.interruptible():
                        signal.raise_signal(signal.SIGTERM)
                except StopRequested:
                    pass  # the runner's ordered stop
                assert inner.requested and outer.requested
            signal.raise_signal(signal.SIGINT)  # after the runner: recorded, not raised
        assert outer.count == 2
