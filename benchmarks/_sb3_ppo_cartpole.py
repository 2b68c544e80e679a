"""Stable-Baselines3's PPO on CartPole-v1 with rl-baselines3-zoo's tuned hyperparameters: the
peer run of sb3_peer.py.

Runs in a venv of its own (stable-baselines3 and a CPU build of torch; this project's venv has
neither), started by `sb3_peer.py`, which passes the wall-clock time of its launch so that
every record's seconds count from the launch, imports included, as our own runs' do. One JSON
line per rollout on stdout once an episode has ended: `{"s": seconds from launch, "frames":
env steps, "window": episodes in the mean (at most 100), "return": their mean}`. It stops
once a full window of 100 episodes averages the target, or at the zoo's budget.

The settings are rl-baselines3-zoo's `hyperparams/ppo.yml` entry for CartPole-v1: 8 envs
(DummyVecEnv, as the zoo makes them), n_steps 32, batch 256, 20 epochs, gamma 0.98, GAE lambda
0.8, no entropy bonus, learning rate and clip range decayed linearly from 1e-3 and 0.2 over the
zoo's 100k steps.
"""

from __future__ import annotations

import argparse
import json
import time

ZOO_TIMESTEPS = 100_000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launch", type=float, required=True, help="time.time() at launch")
    parser.add_argument("--target", type=float, default=475.0, help="stop once reached")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    def linear(initial: float):
        return lambda progress_remaining: progress_remaining * initial  # the zoo's `lin_`

    class ReportAndStop(BaseCallback):
        """A record after each rollout; stops at the first step after the target is reached."""

        reached = False

        def _on_step(self) -> bool:
            return not self.reached

        def _on_rollout_end(self) -> None:
            returns = [info["r"] for info in self.model.ep_info_buffer]  # the last 100 episodes
            if not returns:
                return
            mean = sum(returns) / len(returns)
            record = {
                "s": round(time.time() - args.launch, 2),
                "frames": int(self.num_timesteps),
                "window": len(returns),
                "return": mean,
            }
            print(json.dumps(record), flush=True)
            self.reached = len(returns) == 100 and mean >= args.target

    env = make_vec_env("CartPole-v1", n_envs=8, seed=args.seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    model.learn(total_timesteps=ZOO_TIMESTEPS, callback=ReportAndStop())


if __name__ == "__main__":
    main()
