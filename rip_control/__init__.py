"""rip_control: rate-exact SAC fine-tuning on a rotary inverted pendulum."""
