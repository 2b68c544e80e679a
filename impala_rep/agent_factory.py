"""Choosing the built-in agent for an observation shape: TensorFlow-free until one is built.

`make_agent` checks a configuration (observation shape, network name) and returns a
picklable zero-argument factory; actors and the learner each build their own copy
with it. The driver calls it before anything starts, so it imports no TensorFlow:
the factory imports the agent's module only when it is called, in the process that
builds the agent.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from impala_rep.config.schema import NETWORKS, TORSOS  # the built-in networks, named once
from impala_rep.observation_nest import Shape, is_nest, shape_of

__all__ = ["AgentBuilder", "make_agent", "acting_agent", "SHALLOW_MIN_IMAGE_SIZE"]

# The shallow torso's "valid" convolutions need this many pixels in height and
# width: 8x8 stride 4 must leave at least 4x4 for the 4x4 stride 2 conv.
SHALLOW_MIN_IMAGE_SIZE = 20

# "'shallow', 'deep' or 'minatar'": the networks for images, as messages name them.
_IMAGE_NETWORKS = ", ".join(repr(t) for t in TORSOS[:-1]) + f" or {TORSOS[-1]!r}"


@dataclasses.dataclass(frozen=True)
class AgentBuilder:
    """A picklable zero-argument agent factory, with the TensorFlow-free twin actors may act
    with instead (`acting_agent`).

    `build()` returns a new, unbuilt agent; `twin()`, where given, an object with
    `is_acting_twin`, `num_actions`, `weight_shapes(observation_shape)` and `host_step` that
    takes the agent's weights and acts exactly as it does, in numpy (a recurrent twin has
    `initial_state` too, and its `host_step` takes and returns the state)."""

    build: Callable[[], Any]
    twin: Callable[[], Any] | None = None

    def __call__(self) -> Any:
        return self.build()


def make_agent(
    *,
    observation_shape: Shape,
    num_actions: int,
    network: str = "auto",
    use_lstm: bool = False,
    hidden_sizes: Sequence[int] = (64, 64),
    observation_normalization: tuple[Sequence[float], Sequence[float]] | None = None,
    action_distribution: Any = None,
    initial_log_std: float = 0.0,
    separate_value_network: bool = False,
    value_hidden_sizes: Sequence[int] | None = None,
) -> Callable[[], Any]:
    """A picklable zero-argument factory (an `AgentBuilder`) building the chosen agent.

    Args:
      observation_shape: shape of ONE observation: `[D]` vectors or `[H, W, C]` images; for
        a nest (`impala_rep.observation_nest`) a dict of them, images among them, which
        goes to a `NetworkAgent` with a pixel torso per image (`network`'s, "auto" choosing
        as for one image by the smallest) and the vectors joined to their features.
      num_actions: A >= 1.
      network: "auto" (MLP for `[D]`; for `[H, W, C]` the shallow CNN if H and W
        are at least `SHALLOW_MIN_IMAGE_SIZE`, else the minatar CNN), "mlp",
        "shallow", "deep" or "minatar".
      use_lstm: an LSTM core (`impala_rep.networks.NetworkAgent`; on vectors, over the
        MLP torso, as wide as its last layer).
      hidden_sizes: MLP layer sizes (MLP only).
      observation_normalization: `(mean, std)` per observation dimension; the MLP
        standardises its inputs with them (`MLPAgent`). None: unscaled.
      action_distribution: what the agent acts with (`impala_rep.distributions`, e.g.
        `for_action_space(env.action_space)`); None: a softmax over `num_actions`, which
        is then the distribution's `num_params`.
      initial_log_std: where a Gaussian policy's log standard deviations start (the
        learner's; actors take them with the weights).
      separate_value_network: the value head on an MLP of its own (the feed-forward MLP
        only; `MLPAgent`), of `value_hidden_sizes` (None: `hidden_sizes`).

    Raises:
      ValueError: unknown network, a network that does not fit the observation rank, or a
        separate value network for another agent than the feed-forward MLP.
    """
    shape = shape_of(observation_shape)
    log_std = float(initial_log_std)  # the learner's agent's; a twin takes it with the weights
    if network not in NETWORKS:
        raise ValueError(f"network must be one of {NETWORKS}, got {network!r}")
    if isinstance(num_actions, bool) or int(num_actions) != num_actions or num_actions < 1:
        raise ValueError(f"num_actions must be an integer >= 1, got {num_actions!r}")
    if is_nest(shape):
        return _nest_agent(
            shape,
            num_actions=int(num_actions),
            network=network,
            use_lstm=bool(use_lstm),
            separate_value_network=separate_value_network,
            action_distribution=action_distribution,
            initial_log_std=log_std,
        )
    if network == "auto":
        if len(shape) == 1:
            network = "mlp"
        elif len(shape) == 3:
            # Atari's 84x84 gets the paper's net; MinAtar's 10x10 is too small for it.
            network = "shallow" if min(shape[:2]) >= SHALLOW_MIN_IMAGE_SIZE else "minatar"
        else:
            raise ValueError(
                f"network='auto' needs observations of rank 1 (vectors, MLP) or 3 "
                f"(images [H, W, C], CNN), got shape {shape}"
            )
    _check_separate_value_network(separate_value_network, network, use_lstm)
    if network == "mlp":
        if len(shape) != 1:
            raise ValueError(
                f"network='mlp' needs rank-1 observations, got shape {shape}; "
                f"use {_IMAGE_NETWORKS} for images"
            )
        normalization = (
            None
            if observation_normalization is None
            else tuple(tuple(float(v) for v in side) for side in observation_normalization)
        )
        settings = dict(
            num_actions=int(num_actions),
            hidden_sizes=tuple(int(h) for h in hidden_sizes),
            observation_normalization=normalization,
        )
        if use_lstm:
            # The core as wide as the torso's output: memory for a vector task without
            # making the network the LSTM's (a CNN's core has 256 units over 256 features).
            # Its twin acts in numpy, carrying the state (`impala_rep.host_mlp`).
            lstm = dict(lstm_size=settings["hidden_sizes"][-1], **settings)
            return AgentBuilder(
                build=functools.partial(
                    _network,
                    torso="mlp",
                    use_lstm=True,
                    **lstm,
                    action_distribution=action_distribution,
                    initial_log_std=log_std,
                ),
                twin=functools.partial(
                    _mlp_lstm_twin, **lstm, action_distribution=action_distribution
                ),
            )
        settings["separate_value_network"] = bool(separate_value_network)
        check_value_network(
            separate_value_network=separate_value_network, value_hidden_sizes=value_hidden_sizes
        )
        if value_hidden_sizes is not None:
            settings["value_hidden_sizes"] = tuple(int(h) for h in value_hidden_sizes)
        return AgentBuilder(
            build=functools.partial(
                _mlp,
                **settings,
                action_distribution=action_distribution,
                initial_log_std=log_std,
            ),
            twin=functools.partial(_mlp_twin, **settings, action_distribution=action_distribution),
        )
    if len(shape) != 3:
        raise ValueError(
            f"network={network!r} needs image observations [H, W, C], got shape "
            f"{shape}; use 'mlp' for vectors"
        )
    _check_shallow_fits(network, min(shape[:2]), shape)
    return AgentBuilder(
        build=functools.partial(
            _network,
            num_actions=int(num_actions),
            torso=network,
            use_lstm=bool(use_lstm),
            action_distribution=action_distribution,
            initial_log_std=log_std,
        )
    )


def acting_agent(factory: Callable[[], Any]) -> Any | None:
    """What an actor can act with instead of building `factory`'s agent: the twin of an
    `AgentBuilder` that has one (the built-in MLP; RND's agent, which acts with its policy);
    None for any other agent (CNN, LSTM, PopArt, a user's), which the actor builds. With a
    twin, the actor process imports no TensorFlow."""
    twin = getattr(factory, "twin", None) if isinstance(factory, AgentBuilder) else None
    return None if twin is None else twin()


def _check_shallow_fits(network: str, smallest: int, shape: Any) -> None:
    """ValueError if `network` is the shallow CNN and an image's side (`smallest`) is too small."""
    if network == "shallow" and smallest < SHALLOW_MIN_IMAGE_SIZE:
        raise ValueError(
            f"network='shallow' needs images of at least {SHALLOW_MIN_IMAGE_SIZE}x"
            f"{SHALLOW_MIN_IMAGE_SIZE}, got shape {shape}; use 'minatar' or 'deep'"
        )


def _check_separate_value_network(separate: bool, network: str, use_lstm: bool) -> None:
    """ValueError if a separate value network is asked of another agent than the feed-forward
    MLP (the one that has it)."""
    if separate and (network != "mlp" or use_lstm):
        raise ValueError(
            "separate_value_network applies to the feed-forward MLP (vector observations, "
            f"no use_lstm), not to network={network!r}" + (" with use_lstm" if use_lstm else "")
        )


def _nest_agent(
    shape: dict[str, tuple[int, ...]], *, network: str, separate_value_network: bool, **settings
) -> AgentBuilder:
    """`make_agent` for a nest of observations: one pixel torso per image part."""
    images = {key: part for key, part in shape.items() if len(part) == 3}
    others = {key: part for key, part in shape.items() if len(part) != 1 and key not in images}
    if not images and not others:
        raise ValueError(
            f"the built-in agents take a nest of observations only with an image among its "
            f"parts, got shape {shape}: vectors and discrete parts alone go to them flattened "
            "(--no-observation-nests), or to your own --agent as a nest"
        )
    if others:
        raise ValueError(
            f"a nest of observations needs images [H, W, C] among vectors [D], got shape {shape}"
        )
    smallest = min(min(part[:2]) for part in images.values())
    if network == "auto":
        network = "shallow" if smallest >= SHALLOW_MIN_IMAGE_SIZE else "minatar"
    if network == "mlp":
        raise ValueError(
            f"network='mlp' takes vectors; observations with images ({sorted(images)}) go to "
            f"{_IMAGE_NETWORKS}, one per image"
        )
    _check_shallow_fits(network, smallest, shape)
    _check_separate_value_network(separate_value_network, network, settings["use_lstm"])
    return AgentBuilder(
        build=functools.partial(
            _network, torso=network, image_keys=tuple(sorted(images)), **settings
        )
    )


def _mlp(**kwargs: Any) -> Any:
    from impala_rep.agent import MLPAgent

    return MLPAgent(**kwargs)


def _mlp_twin(**kwargs: Any) -> Any:
    from impala_rep.host_mlp import MLPHostAgent

    return MLPHostAgent(**kwargs)


def _mlp_lstm_twin(**kwargs: Any) -> Any:
    from impala_rep.host_mlp import MLPLSTMHostAgent

    return MLPLSTMHostAgent(**kwargs)


def _network(**kwargs: Any) -> Any:
    from impala_rep.networks import NetworkAgent

    return NetworkAgent(**kwargs)


def check_value_network(*, separate_value_network: bool, value_hidden_sizes: Any) -> None:
    """ValueError for a value network's own layer sizes where it has no network of its own
    (`MLPAgent`; and `make_agent`, whose builder would otherwise fail only when called)."""
    if value_hidden_sizes is not None and not separate_value_network:
        raise ValueError(
            "value_hidden_sizes applies to a separate value network (separate_value_network True)"
        )
