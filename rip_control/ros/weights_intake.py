"""``policy_weights`` messages into the real-time process: decoded, validated, handed over.

Everything that can be wrong with a message a learner sent (not safetensors, another rate,
other sizes, a non-finite weight, a version not newer than the running one, too large for
the weights box) is found here, in the node process, and the message is refused with its
reason counted and logged; the real-time process only ever sees a validated actor.
"""

from __future__ import annotations

from typing import Any

from rip_control.policy import PolicyRejected, decode_actor
from rip_control.rig.env import ACTION_SIZE, OBS_SIZE
from rip_control.rt.handle import RtProcess


class WeightsIntake:
    """Counts of accepted and refused weights, and what the learner reported with them.

    :param logger: where refusals are reported (throttled).
    """

    def __init__(self, logger: Any) -> None:
        self._log = logger
        self.accepted = 0
        self.rejected = 0
        self.last_rejection = ''
        # The learner's (train calls, train seconds) so far, from the last accepted weights.
        self.learner_stats: tuple[int, float] = (0, 0.0)

    def take(self, data: bytes, rt: RtProcess, rate_hz: float) -> bool:
        """Validate ``data`` and hand it to ``rt`` (it swaps at its next tick); whether it did."""
        try:
            actor = decode_actor(
                data,
                rate_hz=rate_hz,
                obs_size=OBS_SIZE,
                action_size=ACTION_SIZE,
                min_version=rt.weights_version,
            )
            md = actor.metadata
            stats = (  # before the hand-over: a refused message changes nothing
                int(md.get('learner_train_calls', '0')),
                float(md.get('learner_total_train_s', '0')),
            )
            rt.write_weights(actor)
        except (PolicyRejected, ValueError) as exc:
            self.rejected += 1
            self.last_rejection = str(exc)
            self._log.warning(
                f'policy weights rejected ({self.rejected} so far): {exc}',
                throttle_duration_sec=5.0,
            )
            return False
        self.learner_stats = stats
        self.accepted += 1
        return True
