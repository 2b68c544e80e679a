"""Extensions: what a run adds to any agent and loss, behind one interface.

PopArt (`--popart`) and random network distillation (`--rnd-cost`) are not agents or losses of
their own: each wraps whatever agent and loss the run has (built-in or the user's). An
`Extension` says everything the rest of the package needs to know about one, so the `Learner`,
the actors and the launchers call the interface and know none of them by name:

- `wrap_agent(builder)` and `wrap_loss(loss)`: the run's agent builder and loss with the
  extension added. Both stay picklable and TensorFlow-free until called (the driver imports no
  TensorFlow; actors and the learner build their own copies).
- the acting twin: an `AgentBuilder` may carry a TensorFlow-free twin that actors act with
  (`impala_rep.agent_factory.acting_agent`); an extension that leaves acting unchanged (RND:
  actors act with the policy alone) passes the inner builder's twin on, one that changes it
  (PopArt: the values actors bootstrap from) drops it.
- `check_agent(agent)` and `check_output(output)`: the learner refuses an agent or a loss that
  does not honour the extension (a `Learner` built by hand with `LossConfig(popart=True)` and a
  plain loss would otherwise train without PopArt, silently).
- `checks_base_loss`: whether a user's loss is checked before the run as the extension will
  call it (PopArt asks its base loss for the V-trace targets' moments).
- `metrics`: the metrics the wrapped loss adds, and what each means (the docs' metric reference
  is generated from them).
- state: what an extension keeps in the graph lives in its agent's variables, so it is
  checkpointed with the agent (`Agent.non_trainable_variables`) and published to the actors with
  the weights; its updates are all-reduced inside the update, so the replicas and the learner
  hosts of a group agree with nothing more.
- `batch_transform()`: the learner-host side, for an extension that changes the batches before
  they reach the devices (reward scaling divides the rewards), or None. A `BatchTransform` says
  what each batch contributes to its state (`part`), how parts merge (every host of a group
  merges every host's, in host order, so all of them transform alike), what it does to a batch
  (`apply`), its metrics, and its state in a checkpoint (`checkpoint_key`, `state_size`,
  `state`, `restore`). The learner service runs them in the order of the extensions.
- `return_discount` (optional, None when absent): the actors keep each env's discounted return
  with this discount and send its moments with every unroll (`EpisodeStats.return_moments`),
  for a batch transform that needs them (reward scaling). `actor_return_discount` is what the
  launchers ask.

`extensions_for(loss_config)` is the one place that maps the configuration to extensions, in
the order they wrap: reward scaling, PopArt, then RND, which sees PopArt's agent and loss as
the run's own. A user's own extension implements `Extension` and is given to
`Learner(extensions=...)` and `with_extensions(..., extensions=...)`
(docs/guide/custom-agents.md).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from impala_rep.agent_factory import AgentBuilder
from impala_rep.observation_nest import is_nest, is_vectors
from impala_rep.observation_scaling import declared_bounds_normalization

__all__ = [
    "Extension",
    "BatchTransform",
    "RewardScaling",
    "ObservationNormalization",
    "PopArt",
    "RandomNetworkDistillation",
    "EXTENSION_TYPES",
    "extensions_for",
    "batch_transforms",
    "actor_return_discount",
    "wrap",
]


@runtime_checkable
class BatchTransform(Protocol):
    """The learner-host side of an extension (see the module docstring)."""

    checkpoint_key: str  # its state's key in a run's checkpoints
    state_size: int  # floats in its state

    def part(self, stats: Sequence[Any]) -> Sequence[float]:
        """What a batch with these `EpisodeStats` (None for some) contributes to the state."""

    def merge(self, part: Sequence[float]) -> None:
        """Folds one host's `part` into the state."""

    def apply(self, batch: Any) -> Any:
        """`batch` (an `Unroll`) transformed with the state as it is now."""

    def metrics(self) -> dict[str, float]:
        """The metrics of the last `apply`."""

    @property
    def state(self) -> Sequence[float]:
        """`state_size` floats, for a checkpoint."""

    def restore(self, state: Sequence[float]) -> None:
        """Takes the state back from a checkpoint."""


@runtime_checkable
class Extension(Protocol):
    """What a run adds to any agent and loss (see the module docstring)."""

    # Shown in the docs' metric reference: what turns it on, e.g. "PopArt (`--popart`)".
    title: str
    # The metrics the wrapped loss adds: {name: what it means}.
    metrics: Mapping[str, str]
    # Whether the extension asks something of the loss it wraps, so that a user's loss is
    # checked before the run as the extension will call it (PopArt: the targets' moments).
    checks_base_loss: bool

    def wrap_agent(self, builder: Callable[[], Any]) -> Callable[[], Any]:
        """The agent builder with the extension added: picklable, TensorFlow-free until called."""

    def wrap_loss(self, loss: Callable[..., Any] | None) -> Callable[..., Any]:
        """The loss (None: the IMPALA loss) with the extension added: picklable."""

    def check_agent(self, agent: Any) -> None:
        """Raises ValueError if `agent` (unbuilt) lacks what the extension needs."""

    def check_output(self, output: Any) -> None:
        """Raises ValueError if the loss's `LossOutput` shows the extension was not applied."""

    def batch_transform(self) -> BatchTransform | None:
        """A new learner-host side for one learner, or None: the batches go as they are."""


class _AgentAndLossUnchanged:
    """For an extension that works on the batches alone: the agent and loss as they are."""

    checks_base_loss = False

    def wrap_agent(self, builder: Callable[[], Any]) -> Callable[[], Any]:
        return builder

    def wrap_loss(self, loss: Callable[..., Any] | None) -> Callable[..., Any] | None:
        return loss

    def check_agent(self, agent: Any) -> None:
        pass

    def check_output(self, output: Any) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class RewardScaling(_AgentAndLossUnchanged):
    """Rewards divided by the running standard deviation of the discounted return
    (`impala_rep.reward_scale`), on the learner's hosts before each update. The actors send the
    moments of their envs' returns discounted by `discount` (the loss's) with every unroll
    (`EpisodeStats.return_moments`): its `return_discount`."""

    discount: float

    title = "Reward scaling (`--normalize-rewards`)"
    metrics = {"reward_scale": "the standard deviation the last batch's rewards were divided by"}

    def batch_transform(self) -> BatchTransform:
        from impala_rep.reward_scale import RewardScale

        return RewardScale()

    @property
    def return_discount(self) -> float:
        return self.discount


@dataclasses.dataclass(frozen=True)
class ObservationNormalization:
    """Vector observations (each part of a nest of vectors) standardised by the running mean
    and variance of every observation trained on (`impala_rep.observation_normalization`),
    then clipped to [-clip, clip].

    The statistics are the agent's variable (published with the weights, checkpointed with
    them), moved by the learner after each update with the whole batch's moments. It keeps the
    policy's acting twin, itself in numpy: actors normalise as the learner does."""

    clip: float = 10.0

    title = "Observation normalisation (`--normalize-observations`)"
    checks_base_loss = False
    metrics = {"observation_count": "observations the normalisation statistics are made of"}

    def wrap_agent(self, builder: Callable[[], Any]) -> AgentBuilder:
        twin = getattr(builder, "twin", None)
        return AgentBuilder(
            build=functools.partial(_normalizing_agent, policy=builder, clip=self.clip),
            twin=None
            if twin is None
            else functools.partial(_normalizing_twin, policy_twin=twin, clip=self.clip),
        )

    def wrap_loss(self, loss: Callable[..., Any] | None) -> Callable[..., Any]:
        return functools.partial(_normalizing_loss, base_loss=loss)

    def check_agent(self, agent: Any) -> None:
        # The loss's check covers it: only normalizing_loss_fn reports `observation_count`,
        # and it needs the NormalizingAgent (which extensions wrapped after it may hide).
        pass

    def check_output(self, output: Any) -> None:
        if "observation_count" not in output.means:
            raise ValueError(
                "bad normalize_observations True: the loss does not update the statistics (no "
                "'observation_count' metric); give the Learner loss_fn=impala_rep."
                "observation_normalization.normalizing_loss_fn, or normalize_observations False"
            )

    def batch_transform(self) -> None:
        return None


@dataclasses.dataclass(frozen=True)
class PopArt:
    """PopArt's head and value normalisation (`impala_rep.popart`), step size `step_size`.

    Its head and statistics are the agent's variables (checkpointed and published with it); the
    statistics move on the whole batch's targets, all-reduced, so replicas and hosts agree.
    Actors build the wrapped agent (their values must be the learner's): no acting twin."""

    step_size: float

    title = "PopArt (`--popart`)"
    checks_base_loss = True
    metrics = {
        "popart_mean": "PopArt's running mean of the V-trace targets",
        "popart_scale": "PopArt's running standard deviation of the V-trace targets",
    }

    def wrap_agent(self, builder: Callable[[], Any]) -> AgentBuilder:
        return AgentBuilder(build=functools.partial(_popart_agent, policy=builder))

    def wrap_loss(self, loss: Callable[..., Any] | None) -> Callable[..., Any]:
        return functools.partial(_popart_loss, step_size=float(self.step_size), base_loss=loss)

    def check_agent(self, agent: Any) -> None:
        pass  # the loss's check covers it: only PopArt's loss reports `popart_scale`

    def batch_transform(self) -> None:
        return None

    def check_output(self, output: Any) -> None:
        if "popart_scale" not in output.means:
            raise ValueError(
                "bad popart True: the loss does not normalise the values (no "
                "'popart_scale' metric); give the Learner impala_rep.popart."
                "PopArtAgent(agent) and loss_fn=functools.partial(impala_rep."
                "popart.popart_loss_fn, step_size=...), or popart False"
            )


@dataclasses.dataclass(frozen=True)
class RandomNetworkDistillation:
    """Random network distillation's novelty bonus (`impala_rep.rnd`), weighted `cost`.

    `observation_normalization`: `(mean, std)` the networks standardise observations with (the
    declared bounds mapped onto [-1, 1]), or None. Its fixed target and trained predictor are
    the agent's variables (checkpointed with it, kept in the learner: actors act with the
    policy alone, through the policy's acting twin where it has one)."""

    cost: float
    step_costs_only: bool = False
    observation_normalization: Any = None

    title = "Random network distillation (`--rnd-cost`)"
    checks_base_loss = False
    metrics = {
        "rnd_loss": "the predictor's loss (summed), trained beside the agent",
        "rnd_novelty": "the predictor's mean error: how novel the batch's observations are",
        "rnd_bonus_rms": "root mean square of the weighted bonus added to the rewards "
        "(0 where off)",
        "rnd_on": "1 where the bonus applied to the batch, 0 where it did not "
        "(--rnd-step-costs-only)",
    }

    def wrap_agent(self, builder: Callable[[], Any]) -> AgentBuilder:
        return AgentBuilder(
            build=functools.partial(
                _rnd_agent, policy=builder, observation_normalization=self.observation_normalization
            ),
            twin=getattr(builder, "twin", None),
        )

    def wrap_loss(self, loss: Callable[..., Any] | None) -> Callable[..., Any]:
        return functools.partial(
            _rnd_loss,
            rnd_cost=float(self.cost),
            base_loss=loss,
            step_costs_only=bool(self.step_costs_only),
        )

    def check_agent(self, agent: Any) -> None:
        if not callable(getattr(agent, "novelty", None)):
            raise ValueError(
                f"bad rnd_cost {self.cost}: a Learner does not add random network "
                "distillation itself; give it impala_rep.rnd.RNDAgent(agent) and "
                "loss_fn=functools.partial(impala_rep.rnd.rnd_loss_fn, rnd_cost=...), "
                "or use rnd_cost 0"
            )

    def batch_transform(self) -> None:
        return None

    def check_output(self, output: Any) -> None:
        if "rnd_loss" not in output.terms:
            raise ValueError(
                f"bad rnd_cost {self.cost}: the loss adds no novelty bonus (no 'rnd_loss' "
                "term); give the Learner loss_fn=functools.partial(impala_rep.rnd."
                "rnd_loss_fn, rnd_cost=...), or use rnd_cost 0"
            )


# Every built-in extension, in the order they wrap (the docs list their metrics from here).
EXTENSION_TYPES = (RewardScaling, ObservationNormalization, PopArt, RandomNetworkDistillation)


def extensions_for(loss: Any, env_spec: Any = None) -> tuple[Extension, ...]:
    """The extensions a `LossConfig` turns on, in wrapping order.

    `loss.rnd_cost` None (auto, unresolved) is off here. Given `env_spec` (an
    `impala_rep.envs.EnvSpec`), RND's networks standardise observations by its declared bounds,
    and RND or observation normalisation on image observations is refused (ValueError)."""
    extensions: list[Extension] = []
    if loss.normalize_rewards:
        extensions.append(RewardScaling(discount=float(loss.discount)))
    if loss.normalize_observations:
        _require_vectors(
            env_spec,
            "normalize_observations True",
            "it",
            "images are scaled by their network",
            nests=True,
        )
        extensions.append(ObservationNormalization())
    if loss.popart:
        extensions.append(PopArt(step_size=float(loss.popart_step_size)))
    if loss.rnd_cost:
        normalization = None
        if env_spec is not None:
            _require_vectors(
                env_spec, f"rnd_cost {loss.rnd_cost}", "the novelty bonus", "use 0 (off) on images"
            )
            # RND's networks see the declared bounds mapped onto [-1, 1] whatever the agent
            # does (a user's agent, --no-scale-observations): MountainCar's velocity (+-0.07)
            # would barely move them raw.
            normalization = declared_bounds_normalization(env_spec)
        extensions.append(
            RandomNetworkDistillation(
                cost=float(loss.rnd_cost),
                step_costs_only=bool(loss.rnd_step_costs_only),
                observation_normalization=normalization,
            )
        )
    return tuple(extensions)


def _require_vectors(
    env_spec: Any, setting: str, what: str, remedy: str, *, nests: bool = False
) -> None:
    """ValueError unless `env_spec` (or no spec: nothing to check) has vector observations (or,
    `nests`, a nest of vectors), for an extension whose networks or statistics take those only."""
    shape = None if env_spec is None else env_spec.observation_shape
    if shape is None:
        return
    if not (is_vectors(shape) if nests else (not is_nest(shape) and len(shape) == 1)):
        vectors = "vector observations (or a nest of vectors)" if nests else "vector observations"
        raise ValueError(f"bad {setting}: {what} needs {vectors}, got shape {shape}; {remedy}")


def batch_transforms(extensions: Sequence[Extension]) -> tuple[BatchTransform, ...]:
    """A new learner-host side of each extension that has one, in the extensions' order."""
    return tuple(t for e in extensions if (t := e.batch_transform()) is not None)


def actor_return_discount(extensions: Sequence[Extension]) -> float | None:
    """The discount of the running returns the actors keep for `extensions` (their moments
    go out with every unroll), or None when none asks for them. ValueError when two ask for
    different discounts: the actors keep one."""
    asked = {d for e in extensions if (d := getattr(e, "return_discount", None)) is not None}
    if len(asked) > 1:
        raise ValueError(f"extensions ask the actors for returns discounted by {sorted(asked)}")
    return asked.pop() if asked else None


def wrap(
    extensions: Sequence[Extension],
    *,
    agent_factory: Callable[[], Any],
    loss: Callable[..., Any] | None,
) -> tuple[Callable[[], Any], Callable[..., Any] | None]:
    """`agent_factory` and `loss` wrapped by each extension in turn (unchanged for none)."""
    for extension in extensions:
        agent_factory, loss = extension.wrap_agent(agent_factory), extension.wrap_loss(loss)
    return agent_factory, loss


# The builders below import TensorFlow only when called, in the process that builds the agent.


def _normalizing_agent(*, policy: Callable[[], Any], clip: float) -> Any:
    from impala_rep.observation_normalization import NormalizingAgent

    return NormalizingAgent(policy(), clip=clip)


def _normalizing_twin(*, policy_twin: Callable[[], Any], clip: float) -> Any:
    from impala_rep.observation_normalization import HostNormalizingAgent

    return HostNormalizingAgent(policy_twin(), clip=clip)


def _normalizing_loss(**kwargs: Any) -> Any:
    from impala_rep.observation_normalization import normalizing_loss_fn

    return normalizing_loss_fn(**kwargs)


def _popart_agent(*, policy: Callable[[], Any]) -> Any:
    from impala_rep.popart import PopArtAgent

    return PopArtAgent(policy())


def _popart_loss(**kwargs: Any) -> Any:
    from impala_rep.popart import popart_loss_fn

    return popart_loss_fn(**kwargs)


def _rnd_agent(*, policy: Callable[[], Any], observation_normalization: Any) -> Any:
    from impala_rep.rnd import RNDAgent

    return RNDAgent(policy(), observation_normalization=observation_normalization)


def _rnd_loss(**kwargs: Any) -> Any:
    from impala_rep.rnd import rnd_loss_fn

    return rnd_loss_fn(**kwargs)
