"""Run configuration: frozen dataclasses, one per concern, each validated once.

`TrainConfig` groups `env`, `agent`, `actors`, `learner`, `loss`, `optimizer`
and `run`. The command line builds it once, its flags generated from these
fields (`impala_rep.run.flags`); below the entry point each part receives the
group it needs, as it is (the `Learner` takes `LossConfig` and
`OptimizerConfig`, the actors `EnvConfig` and `ActorConfig`).

A field's metadata holds its help text and, where it is not `--` + its name,
its flag. Presets, `--resume` changes and error messages name a field by its
*key*: the flag without dashes (`--learner-devices` -> `learner_devices`).
It imports only `impala_rep.devices` and the config package's `validation`, `code_specs`
and `legacy`: values are checked without importing TensorFlow, gymnasium or Ray.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from impala_rep.config.code_specs import parse_code_spec
from impala_rep.config.legacy import flat_keys_of
from impala_rep.config.validation import (
    SEED_RANGE,
    STICKY_ACTIONS_RANGE,
    ConfigField,
    is_int,
    is_seed,
    is_sticky_probability,
    require,
)
from impala_rep.config.validation import bools as _bools
from impala_rep.config.validation import declared_choices as _declared_choices
from impala_rep.config.validation import field as _field
from impala_rep.config.validation import key_of as _key_of
from impala_rep.config.validation import numbers as _numbers
from impala_rep.config.validation import positive_ints as _positive_ints
from impala_rep.devices import parse_devices

__all__ = [
    "TrainConfig",
    "EnvConfig",
    "AgentConfig",
    "ActorConfig",
    "LearnerConfig",
    "LossConfig",
    "OptimizerConfig",
    "RunConfig",
    "NETWORKS",
    "REWARD_CLIPPING",
    "LAUNCHERS",
    "LEARNER_PROCESSES",
    "OPTIMIZERS",
    "TORSOS",
    "config_fields",
    "field_for",
]

# The built-in networks, named once here (TensorFlow-free, for the flag's choices):
# `impala_rep.networks` builds a torso class for each CNN name (tests/test_networks.py checks
# they agree), `impala_rep.agent_factory` picks among them.
TORSOS = ("shallow", "deep", "minatar")  # the CNN torsos
NETWORKS = ("auto", "mlp", *TORSOS)
REWARD_CLIPPING = ("abs_one", "none")
LAUNCHERS = ("ray", "local")
LEARNER_PROCESSES = ("driver", "ray")
OPTIMIZERS = ("rmsprop", "adam")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvConfig:
    """The environment the actors step."""

    id: str = _field(
        "CartPole-v1",
        "gymnasium environment id; one you register yourself as path/to/file.py:EnvId or "
        "module:EnvId",
        flag="--env",
    )
    sticky_actions: float | None = _field(
        None,
        "Atari and MinAtar: probability of repeating the previous action instead of the "
        "chosen one; none keeps the env's own (ALE/...-v5 0.25, ...NoFrameskip-v4 0 as in "
        "the IMPALA paper, MinAtar 0.1)",
        metavar="PROB",
    )
    episodic_life: bool = _field(
        False,
        "Atari: a lost life ends the episode for training (ale-py then restarts the game, "
        "so returns are one life's score)",
    )
    max_episode_steps: int | None = _field(
        None,
        "gymnasium ids: end an episode after this many steps (truncated: its targets "
        "bootstrap from the last observation's value), replacing the id's registered time "
        "limit; none keeps the registered one (CliffWalking-v1 has none). Not for Atari or "
        "MinAtar ids",
        metavar="STEPS",
    )
    observation_keys: tuple[str, ...] | None = _field(
        None,
        "Dict observations: the keys to keep, e.g. image,direction for MiniGrid (its mission "
        "string cannot be fed to a network); none keeps every key. One kept part goes to the "
        "network as it is (an image to a CNN); several are flattened and joined into one "
        "vector, discrete parts as one-hot codes, or kept apart as a nest with an image "
        "among them (a CNN for the image, the other parts joined to its features) or "
        "with --observation-nests",
        metavar="KEYS",
    )
    observation_nests: bool | None = _field(
        None,
        "a Dict or Tuple of vectors and discrete parts only reaches the agent as a nest (a "
        "dict of arrays, one per part) rather than flattened into one vector; with an image "
        "among the parts it is always a nest",
    )

    def __post_init__(self):
        require(
            isinstance(self.id, str) and bool(self.id), "env", self.id, "must be a gymnasium id"
        )
        keys = self.observation_keys
        require(
            keys is None
            or (
                isinstance(keys, tuple)
                and len(keys) >= 1
                and all(isinstance(k, str) and k for k in keys)
                and len(set(keys)) == len(keys)
            ),
            "observation_keys",
            keys,
            "must be distinct non-empty keys such as ('image', 'direction'), or None for all",
        )
        _bools(self, "observation_nests", auto=True)
        sticky = self.sticky_actions
        require(
            sticky is None or is_sticky_probability(sticky),
            "sticky_actions",
            sticky,
            f"must be {STICKY_ACTIONS_RANGE}, or None for the env's own",
        )
        _bools(self, "episodic_life")
        _numbers(
            self,
            ("max_episode_steps",),
            lambda v: is_int(v) and v >= 1,
            "must be a positive integer",
            optional=True,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """The agent's architecture: what its checkpoint's variables are (locked on resume)."""

    network: str = _field(
        "auto",
        "agent network: auto (MLP for vectors, shallow IMPALA CNN for "
        "images, minatar for images under 20x20), " + ", ".join(NETWORKS[1:]),
        choices=NETWORKS,
    )
    use_lstm: bool = _field(
        False,
        "add an LSTM core (state carried across unrolls, reset at episode ends); on vectors, "
        "over the MLP, as wide as its last layer",
    )
    hidden_sizes: tuple[int, ...] = _field(
        (64, 64), "the MLP's layer sizes, e.g. 64,64", metavar="N,N,..."
    )
    initial_log_std: float | None = _field(
        None,
        "where a Gaussian policy's log standard deviations start, relative to each action "
        "dimension's half range (continuous actions; SB3's log_std_init on [-1, 1])",
        metavar="X",
    )
    separate_value_network: bool | None = _field(
        None,
        "MLP: the value head on an MLP of its own, of the same sizes, instead of sharing the "
        "policy's (feed-forward MLP only)",
    )
    value_hidden_sizes: tuple[int, ...] | None = _field(
        None,
        "MLP with a separate value network: its layer sizes, e.g. 256,256; none: the same "
        "as --hidden-sizes",
        metavar="N,N,...",
    )
    scale_observations: bool = _field(
        True,
        "MLP: map each observation dimension with finite bounds (as the env's Box declares "
        "them) onto [-1, 1]",
    )
    factory: str | None = _field(
        None,
        "your own agent: FACTORY(observation_shape=..., num_actions=...) returns a new Agent; "
        "MODULE is a module name (the current directory is searched) or a path/to/file.py. "
        "Replaces --network/--use-lstm/--hidden-sizes (docs/guide/custom-agents.md). "
        "It runs your code",
        flag="--agent",
        metavar="MODULE:FACTORY",
    )

    def __post_init__(self):
        _declared_choices(self, "network")
        _bools(self, "use_lstm", "scale_observations")
        _bools(self, "separate_value_network", auto=True)
        require(
            not (self.separate_value_network and self.use_lstm),
            "separate_value_network",
            self.separate_value_network,
            "applies to the feed-forward MLP, not with use_lstm",
        )
        require(
            not (self.separate_value_network and self.factory is not None),
            "separate_value_network",
            self.separate_value_network,
            "applies to the built-in MLP, not to an --agent of your own",
        )
        in_range = lambda v: -10 <= v <= 2  # noqa: E731
        _numbers(self, ("initial_log_std",), in_range, "must be in [-10, 2]", optional=True)
        for key in ("hidden_sizes", "value_hidden_sizes"):  # None: value's are hidden_sizes
            sizes = getattr(self, key)
            require(
                (sizes is None and key == "value_hidden_sizes")
                or isinstance(sizes, tuple)
                and len(sizes) >= 1
                and all(is_int(h) and h >= 1 for h in sizes),
                key,
                sizes,
                "must be one or more positive layer sizes"
                + (", or None (those of hidden_sizes)" if key == "value_hidden_sizes" else ""),
            )
        require(
            self.value_hidden_sizes is None or self.separate_value_network is not False,
            "value_hidden_sizes",
            self.value_hidden_sizes,
            "applies to a separate value network, not with separate_value_network False",
        )
        if self.factory is not None:
            parse_code_spec(self.factory, what="agent")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActorConfig:
    """The actor processes: how many, how many envs each, how long an unroll is."""

    num_actors: int = _field(2, "actor processes (or threads, with --launcher local)")
    # Many envs per policy call: a call costs about the same whatever its batch.
    envs_per_actor: int = _field(64, "environments each actor steps together")
    unroll_length: int = _field(20, "T, steps per unroll")
    max_actor_failures: int = _field(
        10, "actor failures (each replaced) tolerated within 10 minutes before the run stops"
    )
    # Far above an unroll (milliseconds to a second); start-up (a process, envs, TensorFlow's
    # import for agents without a twin) has its own, longer limit.
    actor_timeout_s: float = _field(
        120.0,
        "an actor that sends no unroll for this long once started (waiting on the "
        "learner's full queue is not silence; start-up may take 300 s, or this if longer) "
        "is treated as hung and replaced",
        flag="--actor-timeout",
        metavar="SECONDS",
    )

    def __post_init__(self):
        _positive_ints(self, "num_actors", "envs_per_actor", "unroll_length", "max_actor_failures")
        _numbers(self, ("actor_timeout_s",), lambda v: v > 0, "must be a positive number")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LearnerConfig:
    """The learner: its devices and hosts, its batch, its queue and checkpoints."""

    devices: str = _field(
        "cpu",
        "Replicator device spec per learner host, e.g. cpu:2, gpu or tpu:NAME",
        flag="--learner-devices",
    )
    hosts: int = _field(
        1,
        "learner processes forming one MultiWorkerMirroredStrategy group, each "
        "fed by its round-robin share of the actors (docs/guide/scaling.md)",
        flag="--learner-hosts",
    )
    batch_size: int = _field(32, "B, unrolls (env columns) per learner step")
    # 8 (docs/notebook.md, "How the defaults were chosen"); V-trace corrects the drift.
    passes: int = _field(
        8,
        "learner updates on each batch (sample reuse); the learning-rate "
        "schedule counts every update",
    )
    target_kl: float | None = _field(
        None,
        "stop a batch's passes after the first whose kl metric (actors' "
        "vs. learner's policy) exceeds this; none: every pass",
    )
    loss_grad_norms: bool = _field(
        False,
        "also report each loss part's own gradient norm "
        "(grad_norm_pg_loss, ...); one more backward pass each",
    )
    queue_capacity: int = _field(
        1, "unroll blocks the learner queues before actors wait; bounds policy lag"
    )
    checkpoint_every_s: float = _field(
        600.0,
        "seconds between checkpoints in LOGDIR/checkpoints; one is also written at the end "
        "and on Ctrl-C/SIGTERM",
        flag="--checkpoint-every",
        metavar="SECONDS",
    )
    # None is auto: impala_rep.config.auto decides it (and says how in the help).
    xla: bool | None = _field(
        None,
        "compile the learner's step with XLA; one device on one host only",
        flag="--learner-xla",
    )
    autograph: bool | None = _field(
        None,
        "convert the learner's step with AutoGraph (Python control flow on tensors)",
        flag="--learner-autograph",
    )
    xla_cache: str = _field(
        "auto",
        "where the learner keeps its XLA-compiled steps for later runs to load instead of "
        "compiling (seconds of start-up), on the learner's machine: a directory, auto "
        "($XDG_CACHE_HOME/impala-rep/xla, else ~/.cache/impala-rep/xla) or none",
        flag="--xla-cache",
        metavar="DIR",
    )

    def __post_init__(self):
        _positive_ints(self, "hosts", "batch_size", "passes", "queue_capacity")
        _bools(self, "loss_grad_norms")
        _numbers(self, ("target_kl",), lambda v: v > 0, "must be > 0", optional=True)
        _bools(self, "xla", "autograph", auto=True)
        require(
            isinstance(self.xla_cache, str) and self.xla_cache.strip() != "",
            "xla_cache",
            self.xla_cache,
            "must be a directory, 'auto' or 'none'",
        )
        _numbers(self, ("checkpoint_every_s",), lambda v: v > 0, "must be a positive number")
        spec = parse_devices(self.devices)  # raises naming the spec and what is allowed
        if self.hosts > 1:
            # MultiWorkerMirroredStrategy replicates over a host's GPUs, or over ONE
            # CPU device: logical CPU devices are not used across hosts, and a TPU
            # slice is one TPUStrategy, not a group of hosts.
            require(
                spec.kind in ("cpu", "gpu", "auto") and not (spec.kind == "cpu" and spec.count > 1),
                "learner_devices",
                self.devices,
                f"with learner_hosts {self.hosts} each host uses its GPUs or one CPU; "
                "use 'cpu', 'gpu', 'gpu:N' or 'auto'",
            )
        if self.xla:
            require(
                self.hosts == 1 and spec.kind in ("cpu", "gpu") and spec.count == 1,
                "learner_xla",
                self.xla,
                f"takes one device on one host ('cpu', 'cpu:1' or "
                f"'gpu:1'), not {self.devices!r} on {self.hosts} learner host(s)",
            )
        if spec.count or self.hosts > 1:
            total = self.hosts * (spec.count or 1)
            where = (
                f"the {spec.count} learner replicas of {self.devices!r}"
                if self.hosts == 1
                else f"{self.hosts} learner hosts x {spec.count or 1} replicas each"
            )
            require(
                self.batch_size % total == 0,
                "batch_size",
                self.batch_size,
                f"must split evenly over {where}; use a multiple of {total}",
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossConfig:
    """The V-trace actor-critic loss (IMPALA paper's values; CartPole's are the same)."""

    discount: float = _field(0.99, "gamma")
    baseline_cost: float = _field(0.5, "weight of the baseline (value) loss")
    entropy_cost: float = _field(0.0, "weight of the entropy bonus")
    clip_rho_threshold: float | None = _field(1.0, "V-trace rho-bar (none: no clipping)")
    clip_pg_rho_threshold: float | None = _field(
        1.0, "V-trace policy-gradient rho clip (none: no clipping)"
    )
    lambda_: float | None = _field(
        None, "V-trace lambda (1: the paper's V-trace)", flag="--lambda", metavar="LAMBDA"
    )
    surrogate_clip: float | None = _field(
        0.2,
        "none: IMPALA's policy gradient; a number epsilon: APPO's clipped surrogate "
        "min(rA, clip(r, 1-epsilon, 1+epsilon)A) on V-trace advantages, r = pi/mu",
    )
    # lambda_, kl_cost, normalize_advantages and rnd_cost: None is auto, decided (and
    # described in the help) by impala_rep.config.auto.
    kl_cost: float | None = _field(
        None, "weight of KL(behaviour policy || learner policy) in the loss", metavar="C"
    )
    normalize_advantages: bool | None = _field(
        None,
        "standardise the policy term's advantages over each batch (PPO's), so its "
        "size does not depend on the rewards' scale",
    )
    # Without it Acrobot's policy went deterministic within its first few thousand frames
    # (docs/notebook.md, "How the defaults were chosen").
    normalize_rewards: bool = _field(
        True,
        "divide rewards by the running standard deviation of the discounted return, "
        "measured by the actors (before any clipping)",
    )
    normalize_observations: bool | None = _field(
        None,
        "standardise vector observations by the running mean and variance of all those "
        "trained on (clipped to +-10), in place of --scale-observations' declared bounds",
    )
    rnd_cost: float | None = _field(
        None,
        "weight of random network distillation's novelty bonus, added to the (scaled) "
        "rewards: exploration for tasks whose reward random play never finds; 0: off",
        metavar="C",
    )
    rnd_step_costs_only: bool = _field(
        True,
        "apply the novelty bonus only to batches whose rewards (episode ends aside) are one "
        "constant cost per step, as MountainCar's and Acrobot's -1; others train without it or "
        "its networks",
    )
    popart: bool = _field(
        False,
        "PopArt: the value head learns targets normalised by their running "
        "mean and std, rescaled as those move so its values stay",
    )
    popart_step_size: float = _field(
        3e-4,
        "PopArt: how far the statistics move towards each update's V-trace targets",
        metavar="BETA",
    )
    reward_clipping: str = _field(
        "none",
        "clip rewards to [-1, 1] in the learner (abs_one) or not (none)",
        choices=REWARD_CLIPPING,
    )
    function: str | None = _field(
        None,
        "your own learner loss (keyword arguments as impala_rep.loss_fn documents); "
        "none: the IMPALA V-trace loss. It runs your code",
        flag="--loss",
        metavar="MODULE:FUNCTION",
    )

    def __post_init__(self):
        _numbers(self, ("discount",), lambda v: 0 <= v <= 1, "must be in [0, 1]")
        _numbers(self, ("lambda_",), lambda v: 0 <= v <= 1, "must be in [0, 1]", optional=True)
        _numbers(self, ("baseline_cost", "entropy_cost"), lambda v: v >= 0, "must be >= 0")
        _numbers(self, ("kl_cost", "rnd_cost"), lambda v: v >= 0, "must be >= 0", optional=True)
        _numbers(
            self,
            ("clip_rho_threshold", "clip_pg_rho_threshold", "surrogate_clip"),
            lambda v: v > 0,
            "must be > 0",
            optional=True,
        )
        _numbers(self, ("popart_step_size",), lambda v: 0 < v <= 1, "must be in (0, 1]")
        _bools(self, "normalize_rewards", "rnd_step_costs_only", "popart")
        _bools(self, "normalize_advantages", "normalize_observations", auto=True)
        require(
            self.reward_clipping in REWARD_CLIPPING,
            "reward_clipping",
            self.reward_clipping,
            "must be " + " or ".join(repr(c) for c in REWARD_CLIPPING),
        )
        if self.function is not None:
            parse_code_spec(self.function, what="loss")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """The optimizer (the paper's RMSProp, or Adam), its learning-rate schedule, gradient clipping."""  # noqa: E501 (--help and docs show line 1 only)

    optimizer: str = _field(
        "rmsprop",
        "rmsprop: the IMPALA paper's; adam: Adam (beta1 0.9, beta2 0.999), as APPO and PPO use",
        choices=OPTIMIZERS,
    )
    # CartPole's; the paper's Atari value is 6e-4 (--preset atari-paper).
    learning_rate: float = _field(5e-3, "learning rate, decayed linearly to 0 over the run")
    rmsprop_decay: float = _field(0.99, "RMSProp rho")
    rmsprop_epsilon: float = _field(0.01, "RMSProp epsilon (inside the square root, as in TF1)")
    rmsprop_momentum: float = _field(0.0, "RMSProp momentum")
    adam_epsilon: float = _field(1e-5, "Adam epsilon (added to the root, as PPO's 1e-5)")
    max_grad_norm: float | None = _field(40.0, "global gradient-norm clip (none: no clipping)")

    def __post_init__(self):
        _declared_choices(self, "optimizer")
        _numbers(
            self,
            ("learning_rate", "rmsprop_epsilon", "adam_epsilon"),
            lambda v: v > 0,
            "must be a positive number",
        )
        _numbers(
            self, ("max_grad_norm",), lambda v: v > 0, "must be a positive number", optional=True
        )
        _numbers(
            self, ("rmsprop_decay", "rmsprop_momentum"), lambda v: 0 <= v < 1, "must be in [0, 1)"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """The run as a whole: its length, seed, directory, where it runs, how it reports."""

    total_frames: int = _field(
        1_000_000,
        "env frames to train on (learner-consumed; Atari: "
        "x4 frame skip); MinAtar ids default to 5,000,000",
    )
    seed: int = _field(0, "random seed")
    logdir: str | None = _field(
        None, "new directory for config.json, metrics.jsonl, TensorBoard events and checkpoints"
    )
    ray_address: str | None = _field(
        None, "join this Ray cluster (e.g. auto or HOST:PORT); none: start an embedded local Ray"
    )
    launcher: str = _field(
        "ray",
        "ray: actors and learner in Ray processes; local: all in this "
        "process, as threads, no Ray (debugging, tests)",
        choices=LAUNCHERS,
    )
    learner_process: str | None = _field(
        None,
        "where the learner runs: driver (this process, which imports TensorFlow while Ray "
        "starts; actors are Ray processes it pulls unrolls from) or ray (a Ray actor process "
        "of its own)",
        choices=LEARNER_PROCESSES,
    )
    report_every_s: float = _field(
        2.0,
        "seconds between progress lines and metrics records",
        flag="--report-every",
        metavar="SECONDS",
    )
    verbose: bool = _field(
        False,
        "also show TensorFlow's, CUDA's and Ray's own log lines (worker "
        "output included) on the console",
    )
    eval_every: int | None = _field(
        None,
        "every this many trained frames, play greedy episodes of the newest weights on fresh "
        "envs in a process of their own (not counted as training frames); none: no "
        "evaluation while training",
        metavar="FRAMES",
    )
    eval_episodes: int = _field(10, "episodes each evaluation of --eval-every plays", metavar="N")

    def __post_init__(self):
        _positive_ints(self, "total_frames", "eval_episodes")
        if self.eval_every is not None:
            _positive_ints(self, "eval_every")
        require(is_seed(self.seed), "seed", self.seed, f"must be {SEED_RANGE}")
        _bools(self, "verbose")
        _numbers(self, ("report_every_s",), lambda v: v > 0, "must be a positive number")
        _declared_choices(self, "launcher")
        if self.learner_process is not None:
            _declared_choices(self, "learner_process")
        require(
            not (self.launcher == "local" and self.learner_process == "ray"),
            "learner_process",
            self.learner_process,
            "the local launcher runs the learner in this process; use driver or leave it auto",
        )
        require(
            not (self.launcher == "local" and self.ray_address),
            "ray_address",
            self.ray_address,
            "the local launcher starts no Ray; use --launcher ray to join a cluster",
        )


_GROUPS = {
    "env": EnvConfig,
    "agent": AgentConfig,
    "actors": ActorConfig,
    "learner": LearnerConfig,
    "loss": LossConfig,
    "optimizer": OptimizerConfig,
    "run": RunConfig,
}


def config_fields() -> Iterator[ConfigField]:
    """Every field a user may set, group by group, in declaration order."""
    for group, cls in _GROUPS.items():
        for field in dataclasses.fields(cls):
            yield ConfigField(key=_key_of(field), group=group, name=field.name, field=field)


def field_for(key: str) -> ConfigField:
    field = next((f for f in config_fields() if f.key == key), None)
    if field is None:
        raise ValueError(f"unknown config field {key!r}")
    return field


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything a training run needs. Defaults are good CartPole settings.

    Build one from groups (`TrainConfig(actors=ActorConfig(num_actors=4))`) or from
    keys (`TrainConfig.from_keys({"num_actors": 4})`, as presets and flags do).
    """

    env: EnvConfig = EnvConfig()
    agent: AgentConfig = AgentConfig()
    actors: ActorConfig = ActorConfig()
    learner: LearnerConfig = LearnerConfig()
    loss: LossConfig = LossConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    run: RunConfig = RunConfig()

    def __post_init__(self):
        for group, cls in _GROUPS.items():
            require(
                isinstance(getattr(self, group), cls),
                group,
                getattr(self, group),
                f"must be a {cls.__name__}",
            )
        # Only what spans two groups is checked here; each group checked itself.
        hosts = self.learner.hosts
        require(
            self.actors.num_actors >= hosts,
            "num_actors",
            self.actors.num_actors,
            f"every one of the {hosts} learner hosts needs an actor; use at least {hosts}",
        )
        # The local launcher runs one learner in its own process: a group of hosts needs Ray.
        require(
            self.run.launcher == "ray" or hosts == 1,
            "learner_hosts",
            hosts,
            "must be 1 with --launcher local (several learner hosts need --launcher ray)",
        )
        require(
            self.run.learner_process != "driver" or hosts == 1,
            "learner_hosts",
            hosts,
            "must be 1 with --learner-process driver (each host of a group is a Ray process)",
        )
        require(
            self.learner.target_kl is None or self.loss.function is None,
            "target_kl",
            self.learner.target_kl,
            "needs the built-in loss's kl metric; leave it unset with --loss",
        )

    # --- keys: the flat names flags, presets and resume use -------------------------
    def get(self, key: str) -> Any:
        field = field_for(key)
        return getattr(getattr(self, field.group), field.name)

    def replace(self, changes: Mapping[str, Any]) -> TrainConfig:
        """A copy with `changes` ({key: value}) applied; each changed group is validated again."""
        per_group: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            field = field_for(key)
            per_group.setdefault(field.group, {})[field.name] = value
        groups = {
            group: dataclasses.replace(getattr(self, group), **values)
            for group, values in per_group.items()
        }
        return dataclasses.replace(self, **groups)

    @classmethod
    def from_keys(cls, values: Mapping[str, Any]) -> TrainConfig:
        """The defaults with `values` ({key: value}) applied."""
        return cls().replace(values)

    # --- config.json ------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Nested by group, as the dataclasses are."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainConfig:
        """The inverse of `to_json`; also reads config.json files of earlier versions
        (`impala_rep.config.legacy`). Unknown fields raise ValueError."""
        return cls.from_keys(flat_keys_of(data, config_fields()))

    # --- derived quantities --------------------------------------------------------------
    @property
    def steps_per_update(self) -> int:
        """Agent steps the learner consumes per update: T * B."""
        return self.actors.unroll_length * self.learner.batch_size

    def total_agent_steps(self, frame_skip: int = 1) -> int:
        """`run.total_frames` (env frames) in agent steps, for an env that skips `frame_skip`
        frames."""
        return -(-self.run.total_frames // frame_skip)

    def total_learner_steps(self, frame_skip: int = 1) -> int:
        """Learner updates in the run (every pass over a batch counted), over which the
        learning rate decays to 0."""
        batches = -(-self.total_agent_steps(frame_skip) // self.steps_per_update)
        return max(1, batches * self.learner.passes)
