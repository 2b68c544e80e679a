"""The IMPALA loss of a whole batch written out without the Learner or a Replicator, for tests
that check a learner step against a hand-made update (shared by test files)."""

import numpy as np
import tensorflow as tf

from impala_rep.agent import AgentInputs
from impala_rep.losses import impala_loss


def manual_impala_loss(agent, batch, hp) -> tf.Tensor:
    """`impala_loss` of `agent` on `batch` (rewards clipped to [-1, 1], truncation as an end);
    call inside a GradientTape to get the manual gradient."""
    discounts = hp.discount * (1.0 - (batch.terminated | batch.truncated)).astype(np.float32)
    out, _ = agent.unroll(AgentInputs(batch.observations, batch.prev_actions, batch.prev_rewards,
                                      batch.first), ())
    loss, _ = impala_loss(
        target_logits=out.policy_logits[:-1], behaviour_logits=batch.behaviour_logits,
        actions=batch.actions, values=out.baseline[:-1], bootstrap_value=out.baseline[-1],
        rewards=np.clip(batch.rewards, -1, 1), discounts=discounts,
        baseline_cost=hp.baseline_cost, entropy_cost=hp.entropy_cost,
        clip_rho_threshold=hp.clip_rho_threshold, clip_pg_rho_threshold=hp.clip_pg_rho_threshold,
        lambda_=hp.lambda_)
    return loss
