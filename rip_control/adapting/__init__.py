"""The parts of rip_control.adapt, the real -> sim -> real loop (python -m rip_control.adapt)."""
