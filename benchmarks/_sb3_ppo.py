"""Stable-Baselines3's PPO with rl-baselines3-zoo's tuned hyperparameters: the peer run of
sb3_peer.py.

Runs in a venv of its own (stable-baselines3 and a CPU build of torch; this project's venv has
neither), started by `sb3_peer.py`, which passes the wall-clock time of its launch so that
every record's seconds count from the launch, imports included, as our own runs' do. One JSON
line per rollout on stdout once an episode has ended: `{"s": seconds from launch, "frames":
env steps, "window": episodes in the mean (at most 100), "return": their mean}`, the returns
being the training policy's (sampled, as ours are reported). It stops once a full window of
100 episodes averages `--target`, or at the zoo's budget.

ZOO holds the zoo's `hyperparams/ppo.yml` entries for each env id sb3_peer.py runs. Where the
zoo tunes an older version of the env (LunarLanderContinuous-v2, the MuJoCo v3 tasks), its
entry is used on the version this project runs, as the zoo's own benchmark of v4 tasks does.
"""

from __future__ import annotations

import argparse
import json
import time

# rl-baselines3-zoo hyperparams/ppo.yml. "lin_" schedules are written ("lin", initial);
# `policy_kwargs` as the zoo gives them, the activation by name (torch is imported only in
# main) and net_arch in SB3 2's dict form.
_MUJOCO_NET = {
    "log_std_init": -2,
    "ortho_init": False,
    "activation_fn": "relu",
    "net_arch": {"pi": [256, 256], "vf": [256, 256]},
}
ZOO = {
    "CartPole-v1": {
        "n_envs": 8,
        "n_timesteps": 100_000,
        "n_steps": 32,
        "batch_size": 256,
        "gae_lambda": 0.8,
        "gamma": 0.98,
        "n_epochs": 20,
        "ent_coef": 0.0,
        "learning_rate": ("lin", 1e-3),
        "clip_range": ("lin", 0.2),
    },
    "Pendulum-v1": {
        "n_envs": 4,
        "n_timesteps": 100_000,
        "n_steps": 1024,
        "gae_lambda": 0.95,
        "gamma": 0.9,
        "n_epochs": 10,
        "ent_coef": 0.0,
        "learning_rate": 1e-3,
        "clip_range": 0.2,
        "use_sde": True,
        "sde_sample_freq": 4,
    },
    "LunarLanderContinuous-v3": {
        "n_envs": 16,
        "n_timesteps": 1_000_000,
        "n_steps": 1024,
        "batch_size": 64,
        "gae_lambda": 0.98,
        "gamma": 0.999,
        "n_epochs": 4,
        "ent_coef": 0.01,
    },
    "HalfCheetah-v5": {
        "normalize": True,
        "n_envs": 1,
        "n_timesteps": 1_000_000,
        "batch_size": 64,
        "n_steps": 512,
        "gamma": 0.98,
        "learning_rate": 2.0633e-05,
        "ent_coef": 0.000401762,
        "clip_range": 0.1,
        "n_epochs": 20,
        "gae_lambda": 0.92,
        "max_grad_norm": 0.8,
        "vf_coef": 0.58096,
        "policy_kwargs": _MUJOCO_NET,
    },
    "Hopper-v5": {
        "normalize": True,
        "n_envs": 1,
        "n_timesteps": 1_000_000,
        "batch_size": 32,
        "n_steps": 512,
        "gamma": 0.999,
        "learning_rate": 9.80828e-05,
        "ent_coef": 0.00229519,
        "clip_range": 0.2,
        "n_epochs": 5,
        "gae_lambda": 0.99,
        "max_grad_norm": 0.7,
        "vf_coef": 0.835671,
        "policy_kwargs": _MUJOCO_NET,
    },
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", required=True, choices=sorted(ZOO))
    parser.add_argument("--launch", type=float, required=True, help="time.time() at launch")
    parser.add_argument("--target", type=float, help="stop once reached (default: never)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    hyper = dict(ZOO[args.env])
    n_envs, steps = hyper.pop("n_envs"), hyper.pop("n_timesteps")
    normalize = hyper.pop("normalize", False)
    for key in ("learning_rate", "clip_range"):
        if isinstance(hyper.get(key), tuple):  # the zoo's `lin_`: decays to 0 over the budget
            initial = hyper[key][1]
            hyper[key] = lambda progress_remaining, initial=initial: progress_remaining * initial
    if "policy_kwargs" in hyper:
        net = dict(hyper["policy_kwargs"])
        net["activation_fn"] = {"relu": torch.nn.ReLU}[net["activation_fn"]]
        hyper["policy_kwargs"] = net

    class ReportAndStop(BaseCallback):
        """A record after each rollout; stops at the first step after the target is reached."""

        reached = False

        def _on_step(self) -> bool:
            return not self.reached

        def _on_rollout_end(self) -> None:
            # The last 100 episodes' returns, from the Monitor under any VecNormalize: raw.
            returns = [info["r"] for info in self.model.ep_info_buffer]
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
            self.reached = args.target is not None and len(returns) == 100 and mean >= args.target

    env = make_vec_env(args.env, n_envs=n_envs, seed=args.seed)
    if normalize:
        # The zoo's `normalize: true`: observations and rewards, discounted with the run's gamma.
        env = VecNormalize(env, gamma=hyper["gamma"])
    model = PPO("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **hyper)
    model.learn(total_timesteps=steps, callback=ReportAndStop())


if __name__ == "__main__":
    main()
