"""RLlib's IMPALA on CartPole-v1, its tuned example's settings: the peer run of rllib_peer.py.

Runs in a venv of its own (ray[rllib] and a CPU build of torch; this project's venv has
neither), started by `rllib_peer.py`, which passes the wall-clock time of its launch so
that every record's seconds count from the launch, imports and Ray's start included, as
our own runs' do. One JSON line per training iteration on stdout:
`{"s": seconds from launch, "frames": env steps sampled, "return": mean of the last
episodes}`. The settings are RLlib's `tuned_examples/impala/cartpole_impala.py`
(new API stack, torch) with 2 env runners of 8 envs each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launch", type=float, required=True, help="time.time() at launch")
    parser.add_argument("--seconds", type=float, required=True, help="stop after this long")
    parser.add_argument("--target", type=float, default=475.0, help="stop once reached")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--env-runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=8)
    parser.add_argument("--cpu-slots", type=int, default=8)
    args = parser.parse_args()

    import ray
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    # Logical CPU slots for every process RLlib starts (env runners, the aggregator actor
    # its IMPALA learner feeds from), as our embedded Ray has for actors and learner: with
    # Ray's default of one slot per core, 2 env runners take both and the run waits forever.
    ray.init(address="local", num_cpus=args.cpu_slots, include_dashboard=False, log_to_driver=False)
    config = (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=args.env_runners, num_envs_per_env_runner=args.envs_per_runner)
        .training(
            train_batch_size_per_learner=500,
            grad_clip=40.0,
            grad_clip_by="global_norm",
            lr=0.0005,
            vf_loss_coeff=0.05,
            entropy_coeff=0.0,
        )
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    while True:
        result = algo.train()
        runners = result.get("env_runners", {})
        record = {
            "s": time.time() - args.launch,
            "frames": int(runners.get("num_env_steps_sampled_lifetime", 0)),
            "return": runners.get("episode_return_mean"),
        }
        print(json.dumps(record), flush=True)
        reached = record["return"] is not None and record["return"] >= args.target
        if reached or record["s"] >= args.seconds:
            break
    algo.stop()
    ray.shutdown()
    sys.exit(0)


if __name__ == "__main__":
    main()
