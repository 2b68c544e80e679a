"""Atari vector envs: ale_py's C++ `AtariVectorEnv`, SAME_STEP, channels-last.

What `make_atari_vector_env` builds
-----------------------------------
`ale_py.vector_env.AtariVectorEnv` (ale_py >= 0.10) steps all sub-envs in C++
threads and does the DeepMind preprocessing there: up to `noop_max` no-op
actions at every reset, frame skip 4 with a max over the last two skipped
frames, 84x84 grayscale, a stack of the last 4 frames: no sub-env's step or
preprocessing goes through Python. Settings used:

* reward_clipping=False: rewards are the game's raw score changes (the learner
  clips; the reported returns stay raw). They come as float64 here (ale_py
  gives int32), like the other envs of `impala_rep.envs`.
* max_num_frames_per_episode=108000 emulator frames (30 minutes; 27000 agent
  steps) as in the literature; reaching it sets `truncated`, game over sets
  `terminated` (kept apart).
* repeat_action_probability (sticky actions): the id's own value unless given:
  0.25 for "ALE/<Game>-v5", 0.0 for "<Game>NoFrameskip-v4" (read from the id's
  gymnasium registration, which also gives the ROM name, e.g. "pong").
* use_fire_reset=False (ale_py's default is True): no FIRE after reset, as in
  gymnasium's ALE envs; the agent has to learn to press FIRE.
* the game's minimal action set (full_action_space=False): 6 actions for Pong.

Autoreset
---------
ale_py's default is NEXT_STEP, but it takes `autoreset_mode=SAME_STEP`, which
the actor's `Unroll` layout needs (see `impala_rep.envs.factory`): the step
that ends an episode returns the new episode's first observation, the terminal
one is in `infos["final_obs"]` (a `[num_envs, 84, 84, 4]` array, only
meaningful where terminated | truncated). A reset observation's stack holds the
first frame in the newest slot and zeros in the three older ones.

Observation layout
------------------
ale_py returns `[N, 4, 84, 84]` (stack first). This env returns
`[N, 84, 84, 4]` uint8, C-contiguous, oldest frame first and newest last on the
channel axis: Keras' Conv2D is channels-last (NHWC; channels-first convolutions
are not implemented on CPU), so the agent can use the observation unchanged.
The transpose copies ~28 KB per sub-env per step, negligible next to emulation.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from impala_rep.config.validation import STICKY_ACTIONS_RANGE, is_sticky_probability
from impala_rep.envs.seeding import ALE_SEED_LIMIT, first_sub_env_seed

__all__ = [
    "AtariChannelsLastVectorEnv",
    "AtariFirstEpisodeFrames",
    "atari_game",
    "is_atari_id",
    "make_atari_vector_env",
]

# "ALE/<Game>-v5" and "<Game>NoFrameskip-v4" (also gymnasium's "-v0": sticky 0.25).
_ATARI_ID = re.compile(r"^(ALE/[A-Za-z0-9]+-v5|[A-Za-z0-9]+NoFrameskip-v[04])$")

MAX_FRAMES_PER_EPISODE = 108_000
FRAME_SKIP = 4
FRAME_STACK = 4
FRAME_SIZE = 84
SCREEN = (210, 160)  # every Atari 2600 game's screen, rows x columns


def is_atari_id(env_id: str) -> bool:
    """Whether `env_id` names an Atari game ("ALE/<Game>-v5", "<Game>NoFrameskip-v4").

    Only the form is checked, not that the game exists (see `atari_game`).
    """
    return bool(_ATARI_ID.match(env_id))


def atari_game(env_id: str) -> tuple[str, float]:
    """`(rom name, registered sticky-action probability)` of an Atari id.

    E.g. "ALE/Pong-v5" -> ("pong", 0.25), "PongNoFrameskip-v4" -> ("pong", 0.0).
    Raises ValueError naming `env_id` if it is not a known Atari game, or if
    ale_py is missing.
    """
    if not is_atari_id(env_id):
        raise ValueError(
            f"{env_id!r} is not an Atari id: expected 'ALE/<Game>-v5' or '<Game>NoFrameskip-v4'"
        )
    try:
        import ale_py
    except ImportError:
        raise ValueError(
            f"environment id {env_id!r} needs ale_py: "
            "install the atari extra: pip install -e '.[atari]'"
        ) from None
    gymnasium.register_envs(ale_py)
    spec = gymnasium.envs.registry.get(env_id)
    if spec is None or "game" not in spec.kwargs:
        raise ValueError(
            f"unknown Atari game in environment id {env_id!r}: not registered by ale_py"
        )
    return str(spec.kwargs["game"]), float(spec.kwargs.get("repeat_action_probability", 0.0))


def make_atari_vector_env(
    env_id: str,
    *,
    num_envs: int,
    seed: int,
    sticky_action_prob: float | None = None,
    episodic_life: bool = False,
    noop_max: int = 30,
    max_num_frames_per_episode: int = MAX_FRAMES_PER_EPISODE,
    frames: list | None = None,
) -> gymnasium.vector.VectorEnv:
    """`num_envs` DeepMind-preprocessed `env_id` games, SAME_STEP autoreset, seeded.

    Observations `[num_envs, 84, 84, 4]` uint8 (newest frame last), actions
    `[num_envs]` integers in the game's minimal action set, raw float64 rewards.
    `sticky_action_prob`: ALE's repeat_action_probability; None takes the
    id's (0.25 for ALE/...-v5, 0.0 for ...NoFrameskip-v4). `episodic_life`: a
    life loss ends the episode (terminated). In ale_py 0.12.1 the autoreset
    that follows restarts the whole game with all its lives, unlike DeepMind's
    EpisodicLifeEnv wrapper (which plays on with one life fewer and resets only
    at game over): every episode is then the first life of a new game
    (tests/test_atari.py pins this). `noop_max`: up to this many no-ops at each reset (0: none).
    `max_num_frames_per_episode`: emulator frames (4 per step) before truncation.
    `frames` (one env only): the first episode's screens, in colour, are appended to it
    (`AtariFirstEpisodeFrames`: ale_py's vector env draws no frames).
    The env is reset with `reset(seed=seed)` (sub-env i gets seed + i; seeds from
    2**31 - num_envs + 1 up wrap into ALE's range, see `impala_rep.envs.seeding`), so a
    plain `reset()` afterwards is reproducible, as `make_vector_env` promises.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    game, registered_sticky = atari_game(env_id)
    sticky = registered_sticky if sticky_action_prob is None else sticky_action_prob
    if not is_sticky_probability(sticky):
        raise ValueError(
            f"sticky_action_prob must be {STICKY_ACTIONS_RANGE}, got {sticky_action_prob}"
        )
    sticky = float(sticky)
    if noop_max < 0:
        raise ValueError(f"noop_max must be >= 0, got {noop_max}")
    if frames is not None and num_envs != 1:
        raise ValueError(f"a video is recorded from 1 env, got num_envs {num_envs}")
    from ale_py.vector_env import AtariVectorEnv

    def game_env(**screen: Any) -> AtariVectorEnv:
        return AtariVectorEnv(
            game,
            num_envs,
            max_num_frames_per_episode=max_num_frames_per_episode,
            repeat_action_probability=sticky,
            full_action_space=False,
            autoreset_mode=AutoresetMode.SAME_STEP,
            frameskip=FRAME_SKIP,
            maxpool=True,
            noop_max=noop_max,
            episodic_life=episodic_life,
            reward_clipping=False,
            use_fire_reset=False,
            **screen,
        )

    agent_screen = {
        "img_height": FRAME_SIZE,
        "img_width": FRAME_SIZE,
        "grayscale": True,
        "stack_num": FRAME_STACK,
    }
    env = AtariChannelsLastVectorEnv(
        game_env(**agent_screen), env_id=env_id, repeat_action_probability=sticky
    )
    if frames is not None:
        # The same game again, drawn whole and in colour: seeded alike and given the same
        # actions, it plays the same frames (the emulator and ale_py's no-op and sticky-action
        # draws are deterministic given the seed).
        colour = {"img_height": SCREEN[0], "img_width": SCREEN[1], "grayscale": False}
        env = AtariFirstEpisodeFrames(env, game_env(**colour, stack_num=1), frames)
    env.reset(seed=first_sub_env_seed(seed, num_envs=num_envs, limit=ALE_SEED_LIMIT))
    return env


class AtariFirstEpisodeFrames(gymnasium.vector.VectorWrapper):
    """A one-game Atari vector env with a twin that plays the same game in colour at full
    size: its screens of the first episode (one per agent step, the max over the last two
    emulator frames, as the agent's) go into `frames`. The twin is reset with the same seed and
    stepped with the same actions; a step where the two disagree on reward or episode end
    raises RuntimeError instead of recording another game."""

    def __init__(self, env: gymnasium.vector.VectorEnv, twin: gymnasium.vector.VectorEnv, frames):
        super().__init__(env)
        self._twin, self._frames = twin, frames
        self._recording, self._stepped = True, False
        # One screen per agent step: the emulator's 60 frames a second, skipped 4 at a time.
        self.metadata = dict(env.metadata, render_fps=60 // FRAME_SKIP)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        result = self.env.reset(seed=seed, options=options)
        screens, _ = self._twin.reset(seed=seed, options=options)
        if self._recording and not self._stepped:
            self._frames[:] = [_screen(screens)]
        return result

    def step(self, actions):
        observations, rewards, terminated, truncated, infos = self.env.step(actions)
        screens, twin_rewards, twin_terminated, twin_truncated, twin_infos = self._twin.step(
            np.asarray(actions, np.int64)
        )
        if not (
            np.array_equal(rewards, np.asarray(twin_rewards, np.float64))
            and np.array_equal(terminated, twin_terminated)
            and np.array_equal(truncated, twin_truncated)
        ):
            raise RuntimeError("the game drawn for the video played differently from the agent's")
        self._stepped = True
        if self._recording:
            ended = bool(terminated[0] or truncated[0])
            self._frames.append(_screen(twin_infos["final_obs"] if ended else screens))
            self._recording = not ended
        return observations, rewards, terminated, truncated, infos

    def close(self, **kwargs):
        self._twin.close()
        return super().close(**kwargs)


def _screen(screens: np.ndarray) -> np.ndarray:
    """Sub-env 0's `[H, W, 3]` uint8 screen from a colour twin's `[1, 1, H, W, 3]` batch."""
    return np.asarray(screens[0]).reshape(SCREEN[0], SCREEN[1], 3)


class AtariChannelsLastVectorEnv(gymnasium.vector.VectorWrapper):
    """An `AtariVectorEnv` (SAME_STEP) with `[N, H, W, stack]` observations and float64 rewards.

    `repeat_action_probability` and `env_id` record how it was built
    (ale_py's env does not expose them).
    """

    def __init__(
        self, env: gymnasium.vector.VectorEnv, *, env_id: str, repeat_action_probability: float
    ):
        super().__init__(env)
        if env.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
            raise ValueError("AtariChannelsLastVectorEnv needs a SAME_STEP AtariVectorEnv")
        self.env_id = env_id
        self.repeat_action_probability = repeat_action_probability
        stack, height, width = env.single_observation_space.shape
        self.single_observation_space = gymnasium.spaces.Box(
            low=0, high=255, shape=(height, width, stack), dtype=np.uint8
        )
        self.observation_space = gymnasium.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.metadata = dict(env.metadata)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets all sub-envs, or those in `options["reset_mask"]` (ale_py supports it)."""
        observations, infos = self.env.reset(seed=seed, options=options)
        return _channels_last(observations), infos

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        observations, rewards, terminated, truncated, infos = self.env.step(
            np.asarray(actions, np.int64)
        )
        if "final_obs" in infos:
            infos = dict(infos, final_obs=_channels_last(infos["final_obs"]))
        return (
            _channels_last(observations),
            np.asarray(rewards, np.float64),
            np.asarray(terminated, bool),
            np.asarray(truncated, bool),
            infos,
        )


def _channels_last(observations: np.ndarray) -> np.ndarray:
    """`[N, stack, H, W]` -> a new C-contiguous `[N, H, W, stack]` array."""
    return np.ascontiguousarray(np.moveaxis(observations, 1, -1))
