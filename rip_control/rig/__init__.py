"""The rig: serial protocol, client, firmware emulator, physics, envs, rig check."""
