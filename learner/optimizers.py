"""Optimizer factories for `Learner(make_optimizer=...)`.

The Learner calls its factory with no arguments inside `replicator.scope()`,
so bind the settings first, e.g.
`functools.partial(make_optimizer, config, decay_steps=total_steps)`, which
builds the one `config.optimizer` names.
"""

from __future__ import annotations

import tensorflow as tf

from impala_rep.config import OptimizerConfig
from impala_rep.config.validation import is_int

__all__ = ["make_optimizer", "paper_rmsprop", "adam"]


def make_optimizer(config: OptimizerConfig, *, decay_steps: int) -> tf.keras.optimizers.Optimizer:
    """The optimizer `config.optimizer` names: `paper_rmsprop` or `adam`."""
    return {"rmsprop": paper_rmsprop, "adam": adam}[config.optimizer](
        config, decay_steps=decay_steps
    )


def paper_rmsprop(config: OptimizerConfig, *, decay_steps: int) -> tf.keras.optimizers.Optimizer:
    """The IMPALA paper's RMSProp, its learning rate decaying linearly to 0 over `decay_steps`.

    Uses `config`'s learning rate and RMSProp settings; `config.max_grad_norm` is
    the Learner's to apply (it needs the global gradient), not the optimizer's.

    Raises:
      ValueError: `decay_steps` is not an integer >= 1.
    """
    return tf.keras.optimizers.RMSprop(
        learning_rate=_linear_decay(config.learning_rate, decay_steps),
        rho=config.rmsprop_decay,
        momentum=config.rmsprop_momentum,
        epsilon=config.rmsprop_epsilon,
    )


def adam(config: OptimizerConfig, *, decay_steps: int) -> tf.keras.optimizers.Optimizer:
    """Adam (beta1 0.9, beta2 0.999, `config.adam_epsilon`), as APPO and PPO train with,
    on the same linearly decaying learning rate as `paper_rmsprop`.

    Raises:
      ValueError: `decay_steps` is not an integer >= 1.
    """
    return tf.keras.optimizers.Adam(
        learning_rate=_linear_decay(config.learning_rate, decay_steps),
        beta_1=0.9,
        beta_2=0.999,
        epsilon=config.adam_epsilon,
    )


def _linear_decay(learning_rate: float, decay_steps: int):
    if not is_int(decay_steps) or decay_steps < 1:
        raise ValueError(f"decay_steps must be an integer >= 1, got {decay_steps!r}")
    # Linear decay to 0 over decay_steps, evaluated by Keras at the optimizer's own
    # step counter, so a restored checkpoint (which holds that counter) continues
    # the schedule where it stopped. Past decay_steps PolynomialDecay stays at
    # end_learning_rate = 0.
    return tf.keras.optimizers.schedules.PolynomialDecay(
        initial_learning_rate=learning_rate,
        decay_steps=int(decay_steps),
        end_learning_rate=0.0,
        power=1.0,
    )
