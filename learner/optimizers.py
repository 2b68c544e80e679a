"""Optimizer factories for `Learner(make_optimizer=...)`.

The Learner calls its factory with no arguments inside `replicator.scope()`,
so bind the settings first, e.g.
`functools.partial(paper_rmsprop, config, decay_steps=total_steps)`.
"""

from __future__ import annotations

import numbers

import tensorflow as tf

from impala_rep.config import OptimizerConfig

__all__ = ["paper_rmsprop"]


def paper_rmsprop(config: OptimizerConfig, *, decay_steps: int) -> tf.keras.optimizers.Optimizer:
    """The IMPALA paper's RMSProp, its learning rate decaying linearly to 0 over `decay_steps`.

    Uses `config`'s learning rate and RMSProp settings; `config.max_grad_norm` is
    the Learner's to apply (it needs the global gradient), not the optimizer's.

    Raises:
      ValueError: `decay_steps` is not an integer >= 1.
    """
    if isinstance(decay_steps, bool) or not isinstance(decay_steps, numbers.Integral) or decay_steps < 1:
        raise ValueError(f"decay_steps must be an integer >= 1, got {decay_steps!r}")
    # Linear decay to 0 over decay_steps, evaluated by Keras at the optimizer's own
    # step counter, so a restored checkpoint (which holds that counter) continues
    # the schedule where it stopped. Past decay_steps PolynomialDecay stays at
    # end_learning_rate = 0.
    schedule = tf.keras.optimizers.schedules.PolynomialDecay(
        initial_learning_rate=config.learning_rate,
        decay_steps=int(decay_steps),
        end_learning_rate=0.0,
        power=1.0,
    )
    return tf.keras.optimizers.RMSprop(
        learning_rate=schedule,
        rho=config.rmsprop_decay,
        momentum=config.rmsprop_momentum,
        epsilon=config.rmsprop_epsilon,
    )
