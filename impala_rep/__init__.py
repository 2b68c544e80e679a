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
`discounts[t] = gamma * (1 - ended[t])`: a zero discount marks an episode that
ended (or was cut by a time limit) inside the unroll; `impala_rep.transitions`
is where an unroll becomes these inputs.

The public API is the names in `__all__` (documented in docs/reference/api.md); every
other module and name is private. Public names are imported lazily so that
`import impala_rep` (and the CLI's argument checking) does not pay for
importing TensorFlow.
"""

import importlib

__version__ = "0.1.0"

# public name -> module that defines it (docs/reference/api.md documents each one)
_EXPORTS = {
    # the Replicator and its cross-replica primitives
    "Replicator": "impala_rep.learner.replicator",
    "all_reduce": "impala_rep.learner.replicator",
    "all_gather": "impala_rep.learner.replicator",
    "broadcast": "impala_rep.learner.replicator",
    "replica_id": "impala_rep.learner.replicator",
    "num_replicas": "impala_rep.learner.replicator",
    "all_reduce_gradients": "impala_rep.learner.replicator",
    "CrossReplicaBatchNorm": "impala_rep.learner.replicator",
    # the agent interface and the built-in agents
    "Agent": "impala_rep.agent",
    "AgentInputs": "impala_rep.agent",
    "AgentOutput": "impala_rep.agent",
    "MLPAgent": "impala_rep.agent",
    "NetworkAgent": "impala_rep.networks",
    "make_agent": "impala_rep.agent_factory",
    "AgentBuilder": "impala_rep.agent_factory",
    "Extension": "impala_rep.extensions",
    "wrap_extensions": ("impala_rep.extensions", "wrap"),
    # the learner and its loss hook
    "Learner": "impala_rep.learner.learner",
    "paper_rmsprop": "impala_rep.learner.optimizers",
    "make_optimizer": "impala_rep.learner.optimizers",
    "LossFn": "impala_rep.loss_fn",
    "LossOutput": "impala_rep.loss_fn",
    "vtrace_inputs": "impala_rep.transitions",
    "Transitions": "impala_rep.transitions",
    "impala_loss_fn": "impala_rep.loss_fn",
    "impala_loss": "impala_rep.losses",
    "vtrace_from_importance_weights": ("impala_rep.vtrace", "from_importance_weights"),
    "vtrace_from_logits": ("impala_rep.vtrace", "from_logits"),
    # the actor
    "Actor": "impala_rep.actors.actor",
    "run_actor_loop": "impala_rep.actors.actor_loop",
    "Unroll": "impala_rep.unroll",
    # the configuration
    "TrainConfig": "impala_rep.config",
    "EnvConfig": "impala_rep.config",
    "AgentConfig": "impala_rep.config",
    "ActorConfig": "impala_rep.config",
    "LearnerConfig": "impala_rep.config",
    "LossConfig": "impala_rep.config",
    "OptimizerConfig": "impala_rep.config",
    "RunConfig": "impala_rep.config",
    "PRESETS": "impala_rep.config.presets",
    # running it
    "train": "impala_rep.run.training",
    "TrainResult": "impala_rep.run.monitor",
    "SetupError": "impala_rep.run.errors",
    "TrainingFailed": "impala_rep.run.errors",
    "TrainingInterrupted": "impala_rep.run.errors",
    "evaluate_run": "impala_rep.run.evaluation",
    "Evaluation": "impala_rep.run.evaluation",
    "EvaluationIncomplete": "impala_rep.run.evaluation",
    "EvaluationSetupError": "impala_rep.run.evaluation",
    "describe_env": "impala_rep.envs.factory",
    "make_vector_env": "impala_rep.envs.factory",
    # a script's console, as impala-rep's own
    "quiet_native_logs": "impala_rep.run.console",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    source = _EXPORTS.get(name)
    if source is None:
        raise AttributeError(f"module 'impala_rep' has no attribute {name!r}")
    # (module, attribute) where the public name differs from the defining one.
    module, attribute = source if isinstance(source, tuple) else (source, name)
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
