"""A numpy-vectorised CartPole-v1 that autoresets in the same step.

Why it exists
-------------
The actor's `Unroll` layout needs `AutoresetMode.SAME_STEP` vector envs: when
an episode ends, the step that ends it already returns the new episode's first
observation (see `impala_rep.envs.factory`). gymnasium 1.4's numpy
`CartPoleVectorEnv` steps all its envs in a few array operations, many times faster
than a `SyncVectorEnv` of `CartPole-v1` envs that steps each in Python, but it only
autoresets on the NEXT step and its `reset`
ignores `options["reset_mask"]`, so the actor cannot use it. This class is that
speed with SAME_STEP autoreset.

What it mirrors
---------------
gymnasium's `CartPole-v1` as `gymnasium.make` builds it: `CartPoleEnv`'s
physics constants, Euler integration (in float64, the same operations in the
same order, so results are bit-identical on one machine), reward 1 for every
step including the terminating one, termination once |x| > 2.4 or
|theta| > 12 degrees, the `TimeLimit` truncation after `max_episode_steps`
(500) steps, initial states uniform in [-0.05, 0.05) on all four components,
float32 observations and Discrete(2) actions. The step's info dict has the keys
`SyncVectorEnv(autoreset_mode=SAME_STEP)` gives for CartPole-v1: for finished
envs "final_obs" (an object array holding each finished env's terminal
observation, None elsewhere), "final_info" (empty, as CartPole's info is) and
their "_final_obs"/"_final_info" masks.

Only the seeded random stream differs from gymnasium's: one generator draws
all envs' initial states here, where `SyncVectorEnv` seeds sub-env i with
`seed + i`.

`tests/test_cartpole.py` compares it step by step with gymnasium's CartPole-v1
(single steps from many states, and whole episodes through terminations and
truncations); keep that test passing when touching the dynamics.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

__all__ = ["CartPoleSameStepVectorEnv"]


class CartPoleSameStepVectorEnv(gymnasium.vector.VectorEnv):
    """`num_envs` CartPole-v1 environments stepped together in numpy, SAME_STEP autoreset.

    Observations are `[num_envs, 4]` float32 (x, x_dot, theta, theta_dot),
    actions `[num_envs]` integers in {0, 1} (0 pushes the cart left, 1 right),
    rewards `[num_envs]` float64, terminated/truncated `[num_envs]` bool.
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}

    # CartPoleEnv's constants, copied from gymnasium 1.4.
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # actually half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02  # seconds between state updates
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    # CartPoleEnv.reset's default bounds for every state component.
    reset_low = -0.05
    reset_high = 0.05

    def __init__(self, num_envs: int = 1, max_episode_steps: int = 500):
        """`max_episode_steps`: steps after which an episode is truncated (CartPole-v1: 500)."""
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.num_envs = int(num_envs)
        self.max_episode_steps = int(max_episode_steps)

        # CartPoleEnv's observation bounds: twice the termination thresholds, so a
        # terminal observation still lies inside the space.
        high = np.array(
            [self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf],
            dtype=np.float32,
        )
        self.single_observation_space = gymnasium.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gymnasium.spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

        # Indexed by action: 0 pushes left, 1 right (CartPoleEnv's force).
        self._forces = np.array([-self.force_mag, self.force_mag])
        # [4, num_envs] float64 like CartPoleEnv.state: one contiguous row per
        # component keeps the vectorised arithmetic on contiguous arrays.
        self._state: np.ndarray | None = None
        self._elapsed_steps = np.zeros(self.num_envs, np.int64)

    @property
    def state(self) -> np.ndarray | None:
        """A copy of the physical state `[num_envs, 4]` float64 (None before `reset`).

        Observations are this state cast to float32. Setting it (e.g. to start
        from chosen states in tests) keeps the episodes' elapsed step counts.
        """
        return None if self._state is None else self._state.T.copy()

    @state.setter
    def state(self, value: np.ndarray) -> None:
        value = np.asarray(value, np.float64)
        if value.shape != (self.num_envs, 4):
            raise ValueError(f"state must have shape ({self.num_envs}, 4), got {value.shape}")
        self._state = value.T.copy()  # [4, num_envs], C order, never aliasing `value`

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts new episodes in all envs, or only where `options["reset_mask"]` is True.

        `seed` (an int) reseeds `np_random`, from which all envs' initial states
        are drawn. The mask option mirrors `SyncVectorEnv`; other options (e.g.
        CartPoleEnv's "low"/"high" bounds) are not supported and raise.
        """
        if seed is not None and not isinstance(seed, (int, np.integer)):
            # SyncVectorEnv also takes one seed per env; one generator serves all here.
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        super().reset(seed=seed)  # seeds self.np_random via gymnasium.utils.seeding.np_random
        options = dict(options or {})
        reset_mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(
                f"unsupported reset options {sorted(options)}; only 'reset_mask' is supported"
            )
        if reset_mask is None:
            self._state = self._initial_states(self.num_envs)
            self._elapsed_steps[:] = 0
        else:
            if self._state is None:
                raise RuntimeError("call reset() without reset_mask before the first masked reset")
            reset_mask = self._check_reset_mask(reset_mask)
            self._state[:, reset_mask] = self._initial_states(int(reset_mask.sum()))
            self._elapsed_steps[reset_mask] = 0
        return self._observations(), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps every env; envs whose episode ended are reset within this step.

        Returns (observations, rewards, terminated, truncated, infos). For an
        env that finished, its observation is the new episode's first one and
        `infos["final_obs"][i]` is the terminal observation.
        """
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        force = self._forces.take(self._check_actions(actions))

        # CartPoleEnv.step's Euler update, term for term: reordering the
        # floating-point operations would break the bit-for-bit match. The rows
        # of self._state are updated in place (x before x_dot, theta before
        # theta_dot), which is Euler's "new = old + tau * old rate" without a copy.
        x, x_dot, theta, theta_dot = self._state
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        # https://coneural.org/florian/papers/05_cart_pole.pdf
        temp = (force + self.polemass_length * np.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x += self.tau * x_dot
        x_dot += self.tau * xacc
        theta += self.tau * theta_dot
        theta_dot += self.tau * thetaacc

        # CartPoleEnv's `x < -t or x > t or theta < -t' or theta > t'`, with abs:
        # the same outcome for every float, NaN included, in fewer numpy calls.
        terminated = (np.abs(x) > self.x_threshold) | (np.abs(theta) > self.theta_threshold_radians)
        self._elapsed_steps += 1
        # TimeLimit's rule: an episode can be terminated and truncated at once.
        truncated = self._elapsed_steps >= self.max_episode_steps
        # CartPole-v1 pays 1 for every step, the terminating one included.
        rewards = np.ones(self.num_envs, np.float64)

        observations = self._observations()
        done = terminated | truncated
        infos: dict[str, Any] = {}
        if done.any():
            ended = np.flatnonzero(done)
            infos = self._final_infos(observations, done, ended)
            fresh = self._initial_states(len(ended))
            self._state[:, ended] = fresh
            self._elapsed_steps[ended] = 0
            observations[ended] = fresh.T
        return observations, rewards, terminated, truncated, infos

    def _initial_states(self, count: int) -> np.ndarray:
        """`[4, count]` float64 initial states, as CartPoleEnv.reset draws them."""
        return self.np_random.uniform(low=self.reset_low, high=self.reset_high, size=(4, count))

    def _observations(self) -> np.ndarray:
        """A new `[num_envs, 4]` float32 array of the current states."""
        return self._state.T.astype(np.float32, order="C")

    def _final_infos(
        self, observations: np.ndarray, done: np.ndarray, ended: np.ndarray
    ) -> dict[str, Any]:
        """The info keys SyncVectorEnv(SAME_STEP) reports when the envs `done` `[n]` end.

        `ended` holds the indices where `done` is True.
        """
        final_obs = np.full(self.num_envs, None, dtype=object)
        for i in ended:
            final_obs[i] = observations[i].copy()
        return {
            "final_obs": final_obs,
            "_final_obs": done.copy(),
            "final_info": {},
            "_final_info": done.copy(),
        }

    def _check_actions(self, actions: Any) -> np.ndarray:
        """`actions` as an array; ValueError unless it is `[num_envs]` integers in {0, 1}."""
        array = np.asarray(actions)
        # `array >> 1` is nonzero exactly for values other than 0 and 1 (negative
        # values shift to -1); one cheap pass, as this runs every step.
        if (
            array.shape != (self.num_envs,)
            or array.dtype.kind not in "iu"
            or np.count_nonzero(array >> 1)
        ):
            raise ValueError(
                f"actions must be {self.num_envs} integers in {{0, 1}} "
                f"(shape ({self.num_envs},)), got {actions!r}"
            )
        return array

    def _check_reset_mask(self, reset_mask: Any) -> np.ndarray:
        """Validates `options["reset_mask"]` as SyncVectorEnv does (bool `[num_envs]`, any True)."""
        if (
            not isinstance(reset_mask, np.ndarray)
            or reset_mask.dtype != np.bool_
            or reset_mask.shape != (self.num_envs,)
            or not reset_mask.any()
        ):
            raise ValueError(
                "options['reset_mask'] must be a bool numpy array of shape "
                f"({self.num_envs},) with at least one True, got {reset_mask!r}"
            )
        return reset_mask
