"""rip_learner: the SAC learner process (owns the replay buffer, publishes weights)."""
