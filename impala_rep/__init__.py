"""impala_rep: IMPALA (V-trace) with Ray actors and a replicated TensorFlow learner.

Conventions used everywhere in this package
-------------------------------------------
Tensors are time-major: `T` is the unroll length and `B` the batch (number of
unrolls), so per-step data has shape `[T, B, ...]`.

Time indexing (written down once, here): an unroll holds `T + 1` observations
`obs[0..T]`. For `t < T`, the agent's outputs `logits[t]` and `values[t]` are
computed from `obs[t]`; `actions[t]` is the action taken at `obs[t]`;
`rewards[t]` and `discounts[t]` belong to the transition `obs[t] -> obs[t+1]`.
`obs[T]` is only used to compute the bootstrap value `V(obs[T])`, shape `[B]`.
`discounts[t] = gamma * (1 - terminated[t])`: a zero discount marks an episode
that ended inside the unroll.

Public names are imported lazily so that `import impala_rep` (and the CLI's
argument checking) does not pay for importing TensorFlow.
"""

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "Replicator": "impala_rep.learner.replicator",
    "CrossReplicaBatchNorm": "impala_rep.learner.replicator",
    "Actor": "impala_rep.actors.actor",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'impala_rep' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
