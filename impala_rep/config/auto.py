"""Settings left to `auto` (None in the config), and the one place they are made concrete.

Each `AutoRule` states in words how its setting resolves and decides it from what the
run is (`RunKind`). `resolve_auto_settings` applies the rules before a run starts, so
config.json (and a resumed run) holds what the run did; the flags' help and the
generated reference (docs/reference/cli.md) print the same words. Why each rule is what
it is: docs/notebook.md, the entry named in the rule's `why`.

It imports no numpy, TensorFlow or Ray, as none of `impala_rep.config` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from impala_rep.config.legacy import BEFORE_THE_FIELD
from impala_rep.config.schema import TrainConfig
from impala_rep.devices import DeviceSpec, parse_devices
from impala_rep.observation_nest import is_nest, is_vectors

__all__ = [
    "AutoRule",
    "RunKind",
    "AUTO_RULES",
    "AUTO_KL_COST",
    "AUTO_CONTINUOUS_LAMBDA",
    "AUTO_INITIAL_LOG_STD",
    "ENV_AUTO_KEYS",
    "AUTO_RND_COST",
    "resolve_auto_settings",
]

# Settings that shape the env's observations: resolved before the env is described
# (`resolve_auto_settings(..., only=ENV_AUTO_KEYS)`), as its description depends on them.
ENV_AUTO_KEYS = ("observation_nests",)

# The novelty bonus's weight on vector observations: MountainCar needs the bonus, and at
# this weight Acrobot ends where it does without it (docs/notebook.md, "Exploration by
# default").
AUTO_RND_COST = 10.0

# The KL term's weight on vector observations: it holds back the passes that overshoot once
# CartPole is solved without slowing Acrobot (docs/notebook.md, "A KL term").
AUTO_KL_COST = 0.3
# V-trace's lambda for continuous actions: PPO's GAE lambda, traces cut sooner (lower variance).
AUTO_CONTINUOUS_LAMBDA = 0.95
# Where a Gaussian policy's log-stds start: noise of std 0.37 on actions bounded to [-1, 1].
AUTO_INITIAL_LOG_STD = -1.0


@dataclasses.dataclass(frozen=True)
class RunKind:
    """What the auto rules decide from."""

    vectors: bool  # the env's observations are vectors (not images): one, or a nest of them
    nest: bool  # the observations are a nest (`impala_rep.observation_nest`)
    own_agent: bool  # the user's agent (--agent, or an agent object given to train())
    continuous: bool  # the env's actions are continuous (a Box: a Gaussian policy)
    mlp_agent: bool  # the built-in feed-forward MLP agent (vectors, no user agent, no core)
    built_in_mlp: bool  # that agent and the IMPALA loss (no user loss either)
    one_cpu: bool  # the learner is one CPU device on one host
    cluster: bool  # the run joins a Ray cluster (--ray-address)


@dataclasses.dataclass(frozen=True)
class AutoRule:
    """How one setting's auto resolves: `rule` in words, `decide` in code."""

    key: str
    rule: str
    decide: Callable[[RunKind], Any]
    why: str  # the notebook entry that measured it
    kept_on_resume: bool = True  # False: decided again for the resumed command's layout


AUTO_RULES: tuple[AutoRule, ...] = (
    # Decided before the env is described (`ENV_AUTO_KEYS`): it shapes the observations the
    # other rules read.
    AutoRule(
        "observation_nests",
        "on for your own agent (--agent, or an agent given to train()), off for the built-in "
        "agents (one MLP over the flattened parts is what they would build from a nest)",
        lambda kind: kind.own_agent,
        why="Nests of vectors for your own agent",
    ),
    AutoRule(
        "normalize_advantages",
        "on for vector observations, off for images",
        lambda kind: kind.vectors,
        why="Advantage normalisation",
    ),
    AutoRule(
        "kl_cost",
        f"{AUTO_KL_COST:g} for vector observations, 0 for images",
        lambda kind: AUTO_KL_COST if kind.vectors else 0.0,
        why="A KL term",
    ),
    AutoRule(
        "lambda",
        f"{AUTO_CONTINUOUS_LAMBDA:g} for continuous actions, else 1 (the paper's V-trace)",
        lambda kind: AUTO_CONTINUOUS_LAMBDA if kind.continuous else 1.0,
        why="Continuous control, held out",
    ),
    AutoRule(
        "initial_log_std",
        f"{AUTO_INITIAL_LOG_STD:g} for continuous actions (a Gaussian policy), else 0 (unused)",
        lambda kind: AUTO_INITIAL_LOG_STD if kind.continuous else 0.0,
        why="Continuous control, held out",
    ),
    AutoRule(
        "normalize_observations",
        "on for continuous actions and vector observations (one vector, or a nest of them: "
        "statistics per part), else off",
        lambda kind: kind.continuous and kind.vectors,
        why="Continuous control by default",
    ),
    AutoRule(
        "separate_value_network",
        "on for the built-in MLP (no --agent or --use-lstm) with continuous actions, else off",
        lambda kind: kind.continuous and kind.mlp_agent,
        why="Continuous control by default",
    ),
    AutoRule(
        "rnd_cost",
        f"{AUTO_RND_COST:g} for vector observations (one vector, not a nest), 0 (off) for images "
        "and nests",
        lambda kind: AUTO_RND_COST if kind.vectors and not kind.nest else 0.0,
        why="Exploration by default",
    ),
    # XLA changes nothing in the checkpoint, so a resume onto other devices decides again.
    AutoRule(
        "learner_xla",
        "on for the built-in MLP and loss (vector observations, no --agent, --loss or "
        "--use-lstm) on one CPU of one learner host, else off",
        lambda kind: kind.built_in_mlp and kind.one_cpu,
        why="Where the CPU goes",
        kept_on_resume=False,
    ),
    AutoRule(
        "learner_autograph",
        "off for the built-in MLP and loss (they have no Python control flow on tensors), else on",
        lambda kind: not kind.built_in_mlp,
        why="Where the CPU goes",
    ),
    # Where the learner runs changes nothing in the checkpoint: a resume decides again.
    AutoRule(
        "learner_process",
        "driver for one CPU of one learner host on one machine (no --ray-address), else ray",
        lambda kind: "driver" if kind.one_cpu and not kind.cluster else "ray",
        why="The learner in the driver",
        kept_on_resume=False,
    ),
)


def run_kind(
    config: TrainConfig,
    observation_shape,
    *,
    continuous_actions: bool,
    users_agent: bool = False,
    users_loss: bool = False,
) -> RunKind:
    """`continuous_actions`: the env's actions are a Box. `users_agent`, `users_loss`: an
    agent or loss object given through the Python API, which the config does not name."""
    # None: the env is not described yet (`ENV_AUTO_KEYS`, whose rules do not read it).
    nest = observation_shape is not None and is_nest(observation_shape)
    vectors = observation_shape is not None and is_vectors(observation_shape)
    mlp_agent = (
        vectors
        and not nest
        and not users_agent
        and config.agent.factory is None
        and config.agent.network in ("auto", "mlp")
        and not config.agent.use_lstm  # measured as the MLP alone; an LSTM is another agent
    )
    return RunKind(
        vectors=vectors,
        nest=nest,
        own_agent=users_agent or config.agent.factory is not None,
        continuous=continuous_actions,
        mlp_agent=mlp_agent,
        built_in_mlp=mlp_agent and not users_loss and config.loss.function is None,
        one_cpu=(
            config.learner.hosts == 1
            and parse_devices(config.learner.devices) == DeviceSpec("cpu", 1)
        ),
        cluster=bool(config.run.ray_address),
    )


def resolve_auto_settings(
    config: TrainConfig,
    observation_shape,
    *,
    continuous_actions: bool,
    saved: TrainConfig | None = None,
    users_agent: bool = False,
    users_loss: bool = False,
    only: tuple[str, ...] | None = None,
) -> TrainConfig:
    """`config` with every setting left to auto made concrete by its `AUTO_RULES` entry, for
    an env with observations of `observation_shape` and, with `continuous_actions`, a Box
    action space.

    On resume, `saved` is the run's own config, and a rule `kept_on_resume` takes what the
    run trained with (its checkpoint holds RND's networks or not), not what the rule would
    choose now; where the saved config has none (a config.json from before the setting
    existed, or a null in it), what runs without it did (`legacy.BEFORE_THE_FIELD`).

    `only`: the keys to resolve, others left as they are: `ENV_AUTO_KEYS` with
    `observation_shape` None, before the env is described."""
    kind = run_kind(
        config,
        observation_shape,
        continuous_actions=continuous_actions,
        users_agent=users_agent,
        users_loss=users_loss,
    )
    changes = {}
    for rule in AUTO_RULES:
        if config.get(rule.key) is not None or (only is not None and rule.key not in only):
            continue
        if saved is not None and rule.kept_on_resume:
            value = saved.get(rule.key)
            changes[rule.key] = BEFORE_THE_FIELD[rule.key] if value is None else value
        else:
            changes[rule.key] = rule.decide(kind)
    return config.replace(changes) if changes else config
