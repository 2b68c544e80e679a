"""The IMPALA loss of a whole batch written out without the Learner or a Replicator, for tests
that check a learner step against a hand-made update (shared by test files)."""

import numpy as np
import tensorflow as tf

from impala_rep.agent import AgentInputs
from impala_rep.losses import impala_loss


def manual_impala_loss(agent, batch, config) -> tf.Tensor:
    """`impala_loss` of `agent` on `batch` with `config` (a LossConfig): rewards clipped to
    [-1, 1] unless `config.reward_clipping` is "none", truncation as an episode end that
    bootstraps from `truncation_values`; call inside a GradientTape to get the manual gradient."""
    discounts = config.discount * (1.0 - (batch.terminated | batch.truncated)).astype(np.float32)
    rewards = batch.rewards if config.reward_clipping == "none" else np.clip(batch.rewards, -1, 1)
    cut = batch.truncated & ~batch.terminated
    rewards = rewards + np.where(cut, config.discount * batch.truncation_values, 0).astype(
        np.float32
    )
    out, _ = agent.unroll(
        AgentInputs(batch.observations, batch.prev_actions, batch.prev_rewards, batch.first), ()
    )
    loss, _, _ = impala_loss(
        target_logits=out.policy_logits[:-1],
        behaviour_logits=batch.behaviour_logits,
        actions=batch.actions,
        values=out.baseline[:-1],
        bootstrap_value=out.baseline[-1],
        rewards=rewards,
        discounts=discounts,
        baseline_cost=config.baseline_cost,
        entropy_cost=config.entropy_cost,
        clip_rho_threshold=config.clip_rho_threshold,
        clip_pg_rho_threshold=config.clip_pg_rho_threshold,
        lambda_=1.0 if config.lambda_ is None else config.lambda_,  # auto: 1 by hand
        surrogate_clip=config.surrogate_clip,
        kl_cost=config.kl_cost or 0.0,
        normalize_advantages=config.normalize_advantages,
    )
    return loss
