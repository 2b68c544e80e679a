"""MinAtar vector envs (Young & Tian 2019): gymnasium's SyncVectorEnv, SAME_STEP, uint8 pixels.

What `make_minatar_vector_env` builds
-------------------------------------
MinAtar (`pip install -e '.[minatar]'`, the `minatar` package) plays five
miniature Atari games on a 10x10 grid; its `minatar.gym` module registers them
with gymnasium as "MinAtar/<Game>-v0" (all 6 actions) and "MinAtar/<Game>-v1"
(the game's minimal action set, e.g. 3 for Breakout), for Asterix, Breakout,
Freeway, Seaquest and SpaceInvaders. The `minatar` package does not register
them on import; `register_minatar_envs` does.

The vector env is gymnasium's own `SyncVectorEnv` with
`autoreset_mode=SAME_STEP` (the actor's `Unroll` layout needs it, see
`impala_rep.envs.factory`): the step that ends an episode returns the new
episode's first observation and puts the terminal one in
`infos["final_obs"]`. Settings:

* Observations: MinAtar's `[10, 10, C]` bool state (C channels, one per kind
  of object: 4 for Breakout) as uint8 0/255, channels-last. 255 and not 1
  because the pixel networks scale uint8 by 1/255 (`impala_rep.networks`), so
  they see MinAtar's 0/1 state as its own networks do; uint8 keeps the
  observations small on their way to the learner.
* Rewards: the game's raw rewards, float64. `terminated` is MinAtar's game
  over; MinAtar registers no time limit, so `truncated` stays False.
* Sticky actions: MinAtar's `sticky_action_prob` (with that probability the
  previous action is repeated instead of the chosen one), 0.1 unless given, as
  in the MinAtar paper. One frame per step: MinAtar has no frame skip.
* Seeds: `reset(seed=seed)` seeds sub-env i with `seed + i`; MinAtar draws
  the game's randomness and the sticky actions from that one generator.
* Difficulty ramping on (MinAtar's default).
"""

from __future__ import annotations

import importlib.util

import gymnasium
import numpy as np

from impala_rep.config.validation import STICKY_ACTIONS_RANGE, is_sticky_probability
from impala_rep.envs.seeding import NUMPY_SEED_LIMIT, first_sub_env_seed
from impala_rep.envs.sync_vector import same_step_sync_vector_env

__all__ = [
    "DEFAULT_STICKY_ACTION_PROB",
    "is_minatar_id",
    "make_minatar_vector_env",
    "register_minatar_envs",
]

# MinAtar's own default (minatar.Environment) and the MinAtar paper's setting.
DEFAULT_STICKY_ACTION_PROB = 0.1
_PREFIX = "MinAtar/"


def is_minatar_id(env_id: str) -> bool:
    """Whether `env_id` is one MinAtar registers ("MinAtar/<Game>-v0" / "-v1").

    Only the prefix is checked; `register_minatar_envs` then decides whether the
    game exists.
    """
    return env_id.startswith(_PREFIX)


def register_minatar_envs() -> None:
    """Registers MinAtar's gymnasium ids once; ValueError naming the extra if it is missing."""
    if importlib.util.find_spec("minatar") is None:
        raise ValueError(
            "MinAtar environment ids need the minatar package: "
            "install the minatar extra: pip install -e '.[minatar]'"
        )
    if any(key.startswith(_PREFIX) for key in gymnasium.envs.registry):
        return  # registering again would only warn about overriding every id
    from minatar.gym import register_envs

    register_envs()


def make_minatar_vector_env(
    env_id: str,
    *,
    num_envs: int,
    seed: int,
    sticky_action_prob: float | None = None,
    frames: list | None = None,
) -> gymnasium.vector.SyncVectorEnv:
    """`num_envs` `env_id` games stepped by a SAME_STEP `SyncVectorEnv`, reset with `seed`.

    Observations `[num_envs, 10, 10, C]` uint8 in {0, 255}, actions `[num_envs]`
    integers in `range(env.single_action_space.n)`, raw float64 rewards,
    terminated/truncated `[num_envs]` bool (truncated always False).
    `sticky_action_prob`: MinAtar's repeat-action probability in [0, 1); None
    takes MinAtar's default, 0.1. The env is already reset with
    `reset(seed=seed)` (sub-env i gets seed + i; seeds from 2**32 - num_envs + 1 up
    wrap, see `impala_rep.envs.seeding`), so a plain `reset()` afterwards
    is reproducible, as `make_vector_env` promises. `frames`: as `make_vector_env` takes it
    (MinAtar draws `[10, 10, 3]` float colours in [0, 1]).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    sticky = DEFAULT_STICKY_ACTION_PROB if sticky_action_prob is None else sticky_action_prob
    if not is_sticky_probability(sticky):
        raise ValueError(
            f"sticky_action_prob must be {STICKY_ACTIONS_RANGE}, got {sticky_action_prob}"
        )
    sticky = float(sticky)
    register_minatar_envs()
    env = same_step_sync_vector_env(
        env_id,
        num_envs=num_envs,
        wrap=_uint8_pixels,
        frames=frames,
        sticky_action_prob=sticky,
    )
    env.reset(seed=first_sub_env_seed(seed, num_envs=num_envs, limit=NUMPY_SEED_LIMIT))
    return env


def _uint8_pixels(env: gymnasium.Env) -> gymnasium.Env:
    """One MinAtar env whose `[10, 10, C]` bool observations become uint8 0/255.

    Applied to each sub-env (not the vector env) so `infos["final_obs"]`, which
    `SyncVectorEnv` fills from the sub-envs, is converted too.
    """
    space = env.observation_space
    return gymnasium.wrappers.TransformObservation(
        env,
        _bool_to_pixels,
        gymnasium.spaces.Box(low=0, high=255, shape=space.shape, dtype=np.uint8),
    )


def _bool_to_pixels(observation: np.ndarray) -> np.ndarray:
    """`[10, 10, C]` bool -> a new `[10, 10, C]` uint8 array, 255 where True."""
    return observation.astype(np.uint8) * np.uint8(255)
