"""Building gymnasium vector environments in the form the actor needs.

Autoreset decision
------------------
The `Unroll` layout (see `impala_rep.unroll`) requires that when an episode
ends at t -> t+1, obs[t+1] is already the new episode's first observation. That
is gymnasium's `AutoresetMode.SAME_STEP`, so `make_vector_env` always returns a
SAME_STEP vector env:

* CartPole-v1 is `impala_rep.envs.cartpole.CartPoleSameStepVectorEnv`: numpy
  vectorised like gymnasium's `CartPoleVectorEnv`, but SAME_STEP, and checked
  step for step against gymnasium's CartPole-v1 by tests/test_cartpole.py.
* Another id with a `vector_entry_point` is built that way first and kept only
  if it reports SAME_STEP. CartPole-v1's `CartPoleVectorEnv` (gymnasium 1.4) is
  fixed to NEXT_STEP and its `reset` ignores `options["reset_mask"]`, so a
  finished sub-env cannot be reset on its own: its reset step would cost every
  other sub-env a recorded transition. No correct unroll can be built from it
  through its public API, so such ids fall back to the next path.
* Atari ids ("ALE/<Game>-v5", "<Game>NoFrameskip-v4") are ale_py's C++
  `AtariVectorEnv` with DeepMind preprocessing, SAME_STEP, observations
  `[N, 84, 84, 4]` uint8 channels-last: see `impala_rep.envs.atari`.
* MinAtar ids ("MinAtar/<Game>-v0", "-v1") are gymnasium's
  `SyncVectorEnv(autoreset_mode=SAME_STEP)` of MinAtar games, observations
  `[N, 10, 10, C]` uint8 (0/255) channels-last: see `impala_rep.envs.minatar`.
* Observations that are not a Box but are made of discrete parts (gymnasium's
  toy_text: FrozenLake and Taxi's `Discrete`, Blackjack's `Tuple` of them;
  `MultiDiscrete`, `MultiBinary`, and `Tuple`/`Dict` of these and vector Boxes)
  are flattened in each sub-env by gymnasium's `FlattenObservation`: one-hot
  codes, concatenated, as SB3 feeds them to an MLP. All-discrete observations
  become uint8 (0/1), mixed ones float32.
* Dict observations keep the keys `observation_keys` names (all by default). One
  kept key gives that part alone (MiniGrid's `image` goes to a CNN as any image
  would); several without an image are flattened as above, unless `observation_nests`
  (on for a user's agent) asks for them as a nest. A `Dict` or `Tuple` with an image
  among other parts is always a nest (`impala_rep.observation_nest`): a dict of
  the image, as it is, and each other part flattened to its own vector (a Tuple's
  parts under the keys "0", "1", ...), which the agent encodes part by part.
  MiniGrid's image codes cells by object, colour and state indices: they become
  one-hot planes first (`impala_rep.envs.minigrid`). A part no network here takes
  (MiniGrid's `Text` mission) is refused, naming the key and the flag that leaves it
  out.
* Everything else is a `SyncVectorEnv(autoreset_mode=SAME_STEP)`, which steps
  its sub-envs one by one in Python: for a cheap env such as CartPole that costs
  more than the actor's policy call; scale with more actors if the env is the
  bottleneck.

Env options
-----------
`sticky_actions` (a repeat-action probability) applies to Atari and MinAtar
ids; None keeps the env's own default (the id's registered value for Atari:
0.25 for "ALE/<Game>-v5", 0 for "<Game>NoFrameskip-v4"; 0.1 for MinAtar).
`episodic_life` (a lost life ends the episode) applies to Atari ids only.
`max_episode_steps` replaces a gymnasium id's registered time limit (gymnasium.make's
own argument: a `TimeLimit` that truncates); Atari and MinAtar ids have their own
episode rules and refuse it.
`check_env_options` rejects an option the env does not have, rather than
ignoring it.

The actor also handles NEXT_STEP/DISABLED envs whose `reset` honours
`options["reset_mask"]` (gymnasium's sync and async vector envs), for callers
that build their own env.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from impala_rep.distributions import DiagGaussian, for_action_space
from impala_rep.envs import atari, minatar, minigrid
from impala_rep.envs.cartpole import CartPoleSameStepVectorEnv
from impala_rep.envs.sync_vector import same_step_sync_vector_env
from impala_rep.observation_nest import Shape, dtype_of, of_space, shape_of

__all__ = ["EnvSpec", "check_env_options", "describe_env", "make_vector_env", "register_env"]


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What the agent needs to know about an environment.

    observation_shape: one env's observation shape (no batch dim), e.g. `(4,)`; for a
      nest (`impala_rep.observation_nest`) a dict of them, one per part.
    observation_dtype: the observations' numpy dtype; for a nest a dict of them.
    num_actions: the policy's parameters per step: the size of a Discrete action
      space, in general the `action_distribution`'s `num_params`.
    action_distribution: the policy's distribution over the env's actions
      (`impala_rep.distributions.for_action_space`).
    frame_skip: env frames one agent step spans (4 for Atari). Frame counts shown
      to users (flags, metrics) are env frames, so they compare with the literature.
    observation_bounds: `(low, high)` of vector observations; None for images and
      one-hot codes.
    """

    observation_shape: Shape
    observation_dtype: Any
    num_actions: int
    action_distribution: Any
    frame_skip: int = 1
    # (low, high) of a gymnasium env's vector observations as its Box declares them; None
    # for images, Atari, MinAtar and one-hot codes of discrete observations.
    observation_bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    def __post_init__(self):
        object.__setattr__(self, "observation_shape", shape_of(self.observation_shape))
        object.__setattr__(
            self, "observation_dtype", dtype_of(self.observation_dtype, self.observation_shape)
        )

    @property
    def continuous_actions(self) -> bool:
        """A Box action space: the policy is a Gaussian."""
        return isinstance(self.action_distribution, DiagGaussian)


def describe_env(
    env_id: str,
    *,
    observation_keys: tuple[str, ...] | None = None,
    observation_nests: bool = False,
) -> EnvSpec:
    """Builds one `env_id` environment, reads its spaces and closes it.

    `observation_keys`: the keys of a Dict observation to keep (see the module docstring);
    None keeps them all. `observation_nests`: a Dict or Tuple of vectors and discrete parts
    only is a nest too, rather than flattened into one vector.

    Raises a one-line ValueError for unknown ids, ids whose package is missing
    (Atari without `ale_py`, MinAtar without `minatar`, gymnasium's optional
    dependencies such as Box2D), action spaces no policy here can act in, observations
    the actors and networks cannot take, and `observation_keys` that are not there.
    """
    check_env_options(env_id, observation_keys=observation_keys)
    _check_env_id(env_id)
    if atari.is_atari_id(env_id):
        # One sub-env, for its spaces: [84, 84, 4] uint8 and the minimal action set.
        env = atari.make_atari_vector_env(env_id, num_envs=1, seed=0)
        try:
            return EnvSpec(
                observation_shape=tuple(env.single_observation_space.shape),
                observation_dtype=np.dtype(env.single_observation_space.dtype),
                **_actions(env_id, env.single_action_space),
                frame_skip=atari.FRAME_SKIP,
            )
        finally:
            env.close()
    if minatar.is_minatar_id(env_id):
        # The vector env's spaces: [10, 10, C] uint8, where gymnasium.make's are bool.
        env = minatar.make_minatar_vector_env(env_id, num_envs=1, seed=0)
        try:
            return EnvSpec(
                observation_shape=tuple(env.single_observation_space.shape),
                observation_dtype=np.dtype(env.single_observation_space.dtype),
                **_actions(env_id, env.single_action_space),
            )
        finally:
            env.close()
    try:
        env = gymnasium.make(env_id.rpartition(":")[2])  # registered by now (_check_env_id)
    except gymnasium.error.DependencyNotInstalled as err:
        # gymnasium's message names what to install (e.g. `pip install "gymnasium[box2d]"`).
        raise ValueError(
            f"environment id {env_id!r} needs a package that is not installed: {_first_line(err)}"
        ) from None
    try:
        actions = _actions(env_id, env.action_space)
        env = _kept_observations(_coded(env), env_id=env_id, observation_keys=observation_keys)
        one_hot = _is_flattened(env.observation_space, nests=observation_nests) and _all_discrete(
            env.observation_space
        )
        env = _flattened_if_needed(env, nests=observation_nests)
        _check_observation_space(env_id, env.observation_space)
        space = env.observation_space
        if isinstance(space, gymnasium.spaces.Dict):  # a nest: a CNN's images, no bounds
            shape, dtype = of_space(space)
            return EnvSpec(observation_shape=shape, observation_dtype=dtype, **actions)
        bounds = None
        # One-hot codes go to the MLP as 0/1, as SB3 feeds them: mapped onto [-1, 1], Taxi's
        # 500-wide code would be 499 inputs of -1. A mixed space keeps its bounds, the codes'
        # [0, 1] included, for its Box parts' sake.
        if len(space.shape) == 1 and not one_hot:
            bounds = (tuple(float(v) for v in space.low), tuple(float(v) for v in space.high))
        return EnvSpec(
            observation_shape=tuple(space.shape),
            observation_dtype=np.dtype(space.dtype),
            **actions,
            observation_bounds=bounds,
        )
    finally:
        env.close()


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _is_flattened(space: gymnasium.Space, *, nests: bool) -> bool:
    """Whether observations of `space` are flattened into a vector (see the module
    docstring): a space of discrete parts, alone or in a Tuple or Dict with vector Boxes."""
    return (
        not isinstance(space, gymnasium.spaces.Box)
        and _flattens_to_a_vector(space)
        and not _is_nest(space, nests=nests)
    )


def _is_nest(space: gymnasium.Space, *, nests: bool) -> bool:
    """Whether observations of `space` travel as a nest (see the module docstring): a
    Tuple or Dict of several parts, an image among them or, with `nests`, any."""
    parts = _parts(space)
    return (
        parts is not None
        and len(parts) > 1
        and (nests or any(_is_image(part) for part in parts))
        and all(_flattens_to_a_vector(part) for part in parts)
    )


def _is_image(space: gymnasium.Space) -> bool:
    return isinstance(space, gymnasium.spaces.Box) and len(space.shape) == 3 and _is_numeric(space)


_DISCRETE = (
    gymnasium.spaces.Discrete,
    gymnasium.spaces.MultiDiscrete,
    gymnasium.spaces.MultiBinary,
)


def _parts(space: gymnasium.Space) -> list[gymnasium.Space] | None:
    """The member spaces of a Tuple or Dict; None for any other space."""
    if isinstance(space, gymnasium.spaces.Dict):
        return list(space.spaces.values())
    if isinstance(space, gymnasium.spaces.Tuple):
        return list(space.spaces)
    return None


def _flattens_to_a_vector(space: gymnasium.Space) -> bool:
    parts = _parts(space)
    if parts is not None:
        return len(parts) > 0 and all(_flattens_to_a_vector(part) for part in parts)
    if isinstance(space, gymnasium.spaces.Box):
        # Any numeric Box has a vector form; an image among other parts still travels as
        # an image in a nest (`_is_nest`), and alone (a Box, or one key kept) goes to a CNN.
        return _is_numeric(space)
    # Text, Sequence, Graph, OneOf: no fixed-size vector an MLP could take.
    return isinstance(space, _DISCRETE)


def _is_numeric(space: gymnasium.spaces.Box) -> bool:
    return np.issubdtype(space.dtype, np.number) or space.dtype == np.bool_


def _kept_observations(
    env: gymnasium.Env, *, env_id: str, observation_keys: tuple[str, ...] | None
) -> gymnasium.Env:
    """`env` with only the `observation_keys` of its Dict observations (the part itself when
    one key is kept); ValueError naming a key that is not there, a part no network here can
    take and the flag that leaves it out, or keys given for observations that are no Dict."""
    space = env.observation_space
    if observation_keys is None:
        if isinstance(space, gymnasium.spaces.Dict):
            for key, part in space.spaces.items():
                if not _flattens_to_a_vector(part):
                    raise ValueError(
                        f"environment {env_id!r}: observation key {key!r} is a "
                        f"{type(part).__name__} space, which no network here takes; keep the "
                        f"others with --observation-keys (its keys: {', '.join(space.spaces)})"
                    )
        return env
    if not isinstance(space, gymnasium.spaces.Dict):
        raise ValueError(_not_a_dict(env_id, observation_keys, type(space).__name__))
    missing = [key for key in observation_keys if key not in space.spaces]
    if missing:
        raise ValueError(
            f"bad observation_keys {','.join(observation_keys)!r}: environment {env_id!r} has "
            f"no observation key {missing[0]!r}; its keys: {', '.join(space.spaces)}"
        )
    kept = gymnasium.wrappers.FilterObservation(env, list(observation_keys))
    for key in observation_keys:
        if not _flattens_to_a_vector(space.spaces[key]):
            raise ValueError(
                f"bad observation_keys {','.join(observation_keys)!r}: environment {env_id!r}'s "
                f"observation key {key!r} is a {type(space.spaces[key]).__name__} space, which "
                "no network here takes"
            )
    if len(observation_keys) == 1:
        (key,) = observation_keys
        return gymnasium.wrappers.TransformObservation(
            kept, lambda obs: obs[key], space.spaces[key]
        )
    return kept


def _has_own_pipeline(env_id: str) -> bool:
    """Atari and MinAtar ids: image observations of their own making."""
    return atari.is_atari_id(env_id) or minatar.is_minatar_id(env_id)


def _not_a_dict(env_id: str, observation_keys: tuple[str, ...], kind: str) -> str:
    return (
        f"bad observation_keys {','.join(observation_keys)!r}: they select parts of Dict "
        f"observations, and environment {env_id!r} has {kind} observations; leave them out"
    )


def _all_discrete(space: gymnasium.Space) -> bool:
    parts = _parts(space)
    if parts is not None:
        return all(_all_discrete(part) for part in parts)
    return isinstance(space, _DISCRETE)


def _flatten_observations(env: gymnasium.Env) -> gymnasium.Env:
    """`env` with observations flattened by gymnasium into one vector (one-hot codes for
    discrete parts): uint8 when every part is discrete (0/1; gymnasium's int64 would make
    Taxi's 500-wide codes 8 times the bytes in every unroll), float32 otherwise."""
    dtype = np.uint8 if _all_discrete(env.observation_space) else np.float32
    flat = gymnasium.wrappers.FlattenObservation(env)
    # The Box built here with bounds already cast: gymnasium's DtypeObservation would warn
    # about float64 bounds going to float32 in every sub-env of every actor.
    space = gymnasium.spaces.Box(
        flat.observation_space.low.astype(dtype),
        flat.observation_space.high.astype(dtype),
        dtype=dtype,
    )
    return gymnasium.wrappers.TransformObservation(flat, lambda obs: obs.astype(dtype), space)


def _flattened_if_needed(env: gymnasium.Env, *, nests: bool) -> gymnasium.Env:
    if _is_nest(env.observation_space, nests=nests):
        return _as_nest(env)
    return _flatten_observations(env) if _is_flattened(env.observation_space, nests=nests) else env


def _as_nest(env: gymnasium.Env) -> gymnasium.Env:
    """`env` with its Dict or Tuple observations as a nest of arrays: a dict of its images,
    as they are (bool ones as uint8 0/255, as the CNNs take pixels), and of its other parts,
    each flattened to a vector as `_flatten_observations` flattens a whole observation; a
    Tuple's parts under the keys "0", "1", ...."""
    space = env.observation_space
    # Keys as strings: the nest's keys are sorted as tf.nest sorts them, and a Dict may have
    # keys of other types.
    if isinstance(space, gymnasium.spaces.Dict):
        parts = {str(key): part for key, part in space.spaces.items()}
    else:
        parts = {str(i): part for i, part in enumerate(space.spaces)}
    encoders = {key: _part_encoder(key, part) for key, part in parts.items()}
    nest_space = gymnasium.spaces.Dict({key: encoders[key][0] for key in parts})

    def encode(observation):
        items = observation.items() if isinstance(observation, dict) else enumerate(observation)
        return {str(key): encoders[str(key)][1](value) for key, value in items}

    return gymnasium.wrappers.TransformObservation(env, encode, nest_space)


def _part_encoder(
    key: str, part: gymnasium.Space
) -> tuple[gymnasium.spaces.Box, Callable[[Any], Any]]:
    """One part of a nest: its space as the agent takes it and the function that makes it so;
    ValueError for an image no CNN here takes."""
    if _is_image(part):
        if part.dtype == np.uint8 or np.issubdtype(part.dtype, np.floating):
            return part, np.array  # a copy: an env may reuse its image's buffer
        pixels = gymnasium.spaces.Box(0, 255, part.shape, np.uint8)
        if part.dtype == np.bool_:
            return pixels, lambda value: np.asarray(value, np.uint8) * np.uint8(255)
        # Other integer pixels (int32, int64) are the CNNs' uint8 where their bounds allow.
        if np.all(part.low >= 0) and np.all(part.high <= 255):
            return pixels, lambda value: np.asarray(value, np.uint8)
        raise ValueError(
            f"observation part {key!r} is an image of dtype {part.dtype} with bounds beyond "
            "[0, 255]; the CNNs take uint8 pixels, or floats already scaled"
        )
    dtype = np.uint8 if _all_discrete(part) else np.float32
    flat = gymnasium.spaces.flatten_space(part)
    vector = gymnasium.spaces.Box(flat.low.astype(dtype), flat.high.astype(dtype), dtype=dtype)
    return vector, lambda value: gymnasium.spaces.flatten(part, value).astype(dtype)


def _agent_observations(
    env: gymnasium.Env, *, env_id: str, observation_keys: tuple[str, ...] | None, nests: bool
) -> gymnasium.Env:
    """`env` with its observations as the agent takes them: the kept keys, flattened where
    they need it (see the module docstring)."""
    return _flattened_if_needed(
        _kept_observations(_coded(env), env_id=env_id, observation_keys=observation_keys),
        nests=nests,
    )


def _coded(env: gymnasium.Env) -> gymnasium.Env:
    """`env` with MiniGrid's image codes as one-hot planes (`impala_rep.envs.minigrid`)."""
    return minigrid.one_hot_image(env) if minigrid.is_minigrid_env(env) else env


def _check_observation_space(env_id: str, space: gymnasium.Space) -> None:
    """One-line ValueError unless the actors and networks can take `space`: a numeric Box
    of rank 1 (vectors, MLP) or 3 (images [H, W, C], CNN), or a nest of them."""
    if isinstance(space, gymnasium.spaces.Dict):  # a nest (`_as_nest`), checked part by part
        for part in space.spaces.values():
            _check_observation_space(env_id, part)
        return
    if not isinstance(space, gymnasium.spaces.Box):
        raise ValueError(
            f"environment {env_id!r} has observation space {space}; only Box "
            "observations (arrays of rank 1 or 3) and spaces of discrete parts "
            "(Discrete, MultiDiscrete, MultiBinary, and Tuple or Dict of them and "
            "vector Boxes, flattened to one-hot vectors) are supported"
        )
    if len(space.shape) not in (1, 3):
        raise ValueError(
            f"environment {env_id!r} has observations of shape {space.shape}; only "
            "rank 1 (vectors, MLP) or rank 3 (images [H, W, C], CNN) are supported"
        )
    if not (np.issubdtype(space.dtype, np.number) or space.dtype == np.bool_):
        raise ValueError(
            f"environment {env_id!r} has observations of dtype {space.dtype}; "
            "only numeric observations are supported"
        )


def make_vector_env(
    env_id: str,
    *,
    num_envs: int,
    seed: int,
    sticky_actions: float | None = None,
    episodic_life: bool = False,
    max_episode_steps: int | None = None,
    observation_keys: tuple[str, ...] | None = None,
    observation_nests: bool = False,
    frames: list | None = None,
) -> gymnasium.vector.VectorEnv:
    """A SAME_STEP-autoreset vector env of `num_envs` copies of `env_id`, seeded.

    `sticky_actions`, `episodic_life` and `max_episode_steps`: see "Env options" in
    the module docstring; ValueError (from `check_env_options`) where they do not apply.
    `observation_keys`, `observation_nests`: as `describe_env` takes them.
    `frames`: a list that sub-env 0's rendered frames (`render_mode="rgb_array"`, uint8
    `[H, W, 3]`) of its first episode are appended to, its first observation's included
    (`FirstEpisodeFrames`; Atari ids: `atari.AtariFirstEpisodeFrames`, one env only), ValueError
    for an env that cannot render.

    Observations come batched `[num_envs, *obs_shape]`; actions are `[num_envs]`
    integers. The env is already reset with `reset(seed=seed)` (sync envs seed
    sub-env i with `seed + i`; CartPole-v1 draws every env's initial state from
    one generator seeded with `seed`); callers get their first observation with
    a plain `reset()`, which continues from the seeded generators. The autoreset
    mode is in `env.metadata["autoreset_mode"]` (always `AutoresetMode.SAME_STEP`).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    check_env_options(
        env_id,
        sticky_actions=sticky_actions,
        episodic_life=episodic_life,
        max_episode_steps=max_episode_steps,
        observation_keys=observation_keys,
    )
    _check_env_id(env_id)
    if atari.is_atari_id(env_id):
        # Already reset with `seed` (sub-env i gets seed + i).
        return atari.make_atari_vector_env(
            env_id,
            num_envs=num_envs,
            seed=seed,
            sticky_action_prob=sticky_actions,
            episodic_life=episodic_life,
            frames=frames,
        )
    if minatar.is_minatar_id(env_id):
        # Already reset with `seed` (sub-env i gets seed + i).
        return minatar.make_minatar_vector_env(
            env_id,
            num_envs=num_envs,
            seed=seed,
            sticky_action_prob=sticky_actions,
            frames=frames,
        )
    # gymnasium.make_vec does not take the "module:EnvId" form; the module is
    # imported by now (_check_env_id), so the bare id is registered.
    env = _make_same_step_vector_env(
        env_id.rpartition(":")[2],
        num_envs=num_envs,
        max_episode_steps=max_episode_steps,
        observations=functools.partial(
            _agent_observations,
            env_id=env_id,
            observation_keys=observation_keys,
            nests=observation_nests,
        ),
        keeps_keys=observation_keys is not None,
        frames=frames,
    )
    try:
        _actions(env_id, env.single_action_space)
    except ValueError:
        env.close()
        raise
    env.reset(seed=seed)
    return env


def check_env_options(
    env_id: str,
    *,
    sticky_actions: float | None = None,
    episodic_life: bool = False,
    max_episode_steps: int | None = None,
    observation_keys: tuple[str, ...] | None = None,
) -> None:
    """Raises a one-line ValueError if an option does not apply to `env_id` (its range is
    `EnvConfig`'s to check, and the env builders').

    Only the id's form is read (nothing is imported or built), so the run's
    configuration can call it before anything starts.
    """
    if sticky_actions is not None:
        if not _has_own_pipeline(env_id):
            raise ValueError(
                f"bad sticky_actions {sticky_actions!r}: sticky actions apply to Atari "
                "('ALE/<Game>-v5', '<Game>NoFrameskip-v4') and MinAtar "
                f"('MinAtar/<Game>-v1') ids, not {env_id!r}"
            )
    if episodic_life and not atari.is_atari_id(env_id):
        raise ValueError(
            f"bad episodic_life {episodic_life!r}: a life loss ending the episode applies "
            f"to Atari ids ('ALE/<Game>-v5', '<Game>NoFrameskip-v4'), not {env_id!r}"
        )
    if max_episode_steps is not None and _has_own_pipeline(env_id):
        raise ValueError(
            f"bad max_episode_steps {max_episode_steps!r}: a time limit applies to "
            f"gymnasium's own ids, not the Atari or MinAtar id {env_id!r}"
        )
    if observation_keys is not None and _has_own_pipeline(env_id):
        raise ValueError(_not_a_dict(env_id, observation_keys, "Box"))


def _make_same_step_vector_env(
    env_id: str,
    *,
    num_envs: int,
    max_episode_steps: int | None,
    observations: Callable[[gymnasium.Env], gymnasium.Env],
    keeps_keys: bool,
    frames: list | None = None,
) -> gymnasium.vector.VectorEnv:
    # Why CartPole-v1 has its own class and not always the vector entry point:
    # see the module docstring. Frames to record: gymnasium's own envs render them, in the
    # sync vector env below.
    if env_id == "CartPole-v1" and frames is None:
        limit = max_episode_steps or gymnasium.spec(env_id).max_episode_steps
        return CartPoleSameStepVectorEnv(num_envs=num_envs, max_episode_steps=limit)
    # A vector entry point takes its own kwargs, not gymnasium.make's time limit nor a choice
    # of observation keys: with either given, the sub-envs are made one by one below.
    if (
        gymnasium.spec(env_id).vector_entry_point is not None
        and max_episode_steps is None
        and not keeps_keys
        and frames is None
    ):
        env = gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
        if env.metadata.get("autoreset_mode") == AutoresetMode.SAME_STEP and isinstance(
            env.single_observation_space, gymnasium.spaces.Box
        ):
            return env
        env.close()
    # Each sub-env keeps and flattens its own observations where they need it, so
    # SAME_STEP's `info["final_obs"]` (a truncated episode's last observation) is as the
    # agent takes it too.
    limit = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    try:
        return same_step_sync_vector_env(
            env_id, num_envs=num_envs, wrap=observations, frames=frames, **limit
        )
    except TypeError as err:
        if frames is None:
            raise
        # A user's env class that takes no render_mode.
        raise ValueError(
            f"environment {env_id!r} cannot render a video: {_first_line(err)}"
        ) from None


# The ids minigrid registers when imported (gymnasium does not know them before).
_MINIGRID_PREFIXES = ("MiniGrid-", "BabyAI-")
# gymnasium's envs that need a package of their own: {entry-point package: (module, extra)}.
_GYMNASIUM_EXTRAS = {
    "gymnasium.envs.mujoco": ("mujoco", "mujoco"),
    "gymnasium.envs.box2d": ("Box2D", "box2d"),
}


def register_env(registration: gymnasium.envs.registration.EnvSpec | None) -> None:
    """Registers `registration` (a gymnasium `EnvSpec`, or None for nothing) with gymnasium
    in this process unless its id is registered already. The commands send a user's env
    this way to processes that cannot import its module (`impala_rep.run.user_code.load_env`:
    the entry point is the callable itself, pickled by value)."""
    if registration is not None and registration.id not in gymnasium.envs.registry:
        gymnasium.envs.registry[registration.id] = registration


def _check_env_id(env_id: str) -> None:
    """Raises a one-line ValueError unless `env_id` can be built here."""
    if _needs_ale_py(env_id):
        if importlib.util.find_spec("ale_py") is None:
            raise ValueError(
                f"environment id {env_id!r} needs ale_py: "
                "install the atari extra: pip install -e '.[atari]'"
            )
        import ale_py

        gymnasium.register_envs(ale_py)  # registers the ALE/... and *NoFrameskip* ids
    if minatar.is_minatar_id(env_id):
        if importlib.util.find_spec("minatar") is None:
            raise ValueError(
                f"environment id {env_id!r} needs minatar: "
                "install the minatar extra: pip install -e '.[minatar]'"
            )
        minatar.register_minatar_envs()  # registers the MinAtar/... ids
    if env_id.startswith(_MINIGRID_PREFIXES):
        if importlib.util.find_spec("minigrid") is None:
            raise ValueError(
                f"environment id {env_id!r} needs minigrid: "
                "install the minigrid extra: pip install -e '.[minigrid]'"
            )
        import minigrid  # noqa: F401  (importing it registers the MiniGrid-... and BabyAI-... ids)
    module, _, registered_id = env_id.rpartition(":")
    if module and registered_id not in gymnasium.envs.registry:
        # gymnasium's "module:EnvId" form: importing the module registers the id. The
        # commands import a user's module or file themselves (`impala_rep.run.user_code.
        # load_env`) and register the id in their workers, which may not find the module.
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(
                f"environment id {env_id!r}: cannot import module {module!r} ({err})"
            ) from None
    registered = gymnasium.envs.registry.get(registered_id)
    if registered is None:
        close = difflib.get_close_matches(registered_id, list(gymnasium.envs.registry), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown environment id {env_id!r}: not registered with gymnasium{hint}")
    for package, (module, extra) in _GYMNASIUM_EXTRAS.items():
        if (
            str(registered.entry_point).startswith(package)
            and importlib.util.find_spec(module) is None
        ):
            raise ValueError(
                f"environment id {env_id!r} needs {module}: "
                f"install the {extra} extra: pip install -e '.[{extra}]'"
            )


def _needs_ale_py(env_id: str) -> bool:
    """Whether `env_id` is one ale_py registers (e.g. also "ALE/Pong-ram-v5").

    Broader than `atari.is_atari_id`, which picks the ids that get the DeepMind
    pixel pipeline; this one only decides whether ale_py must be imported.
    """
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def _actions(env_id: str, action_space: gymnasium.Space) -> dict[str, Any]:
    """`EnvSpec`'s action fields for `action_space`; ValueError naming the env and what is
    allowed for a space no policy here can act in."""
    try:
        distribution = for_action_space(action_space)
    except ValueError as err:
        raise ValueError(f"environment {env_id!r}: {err}") from None
    return {"num_actions": distribution.num_params, "action_distribution": distribution}
