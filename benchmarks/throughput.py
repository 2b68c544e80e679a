"""End-to-end env frames/s while learning CartPole with 1, 2 and 4 actors.

    .venv/bin/python benchmarks/throughput.py [--actors 1 2 4] [--frames 600000] [--passes N]
        [--learner-process driver ray] [--repeats 1] [--record]

For each actor count, one training run; the steady-state rates are averaged
over the reports after the first third of the run (start-up and tracing
excluded). Beside them, in the same run of this script, the raw env-stepping
rate: one process stepping the same vector env with random actions and no
policy. Target: >= 50,000 env frames/s with 2 actors, learner frames/s equal
to actor frames/s. `--passes` sets the learner updates per batch (default: the config's,
8); `--passes 1` measures the IMPALA paper's one update per batch. With several
`--learner-process` values (where the learner runs: `run/driver_learner.py`) each actor count
runs once per value, alternating, `--repeats` times; `--record` writes one ledger record per
run (`benchmarks/results/throughput/TASK/`, `ledger.py`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
import ledger
import numpy as np
from _common import machine, table, write_json

from impala_rep.config import TrainConfig
from impala_rep.envs.factory import describe_env, make_vector_env
from impala_rep.run.training import train


def raw_env_fps(env_id: str, num_envs: int, seconds: float = 3.0) -> float:
    """Env frames/s of one process stepping `num_envs` envs with random actions (agent
    steps x the env's frame skip, the unit of every other frames/s here)."""
    env = make_vector_env(env_id, num_envs=num_envs, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    num_actions = int(env.single_action_space.n)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(rng.integers(0, num_actions, size=num_envs))
        steps += 1
    elapsed = time.perf_counter() - start
    env.close()
    return steps * num_envs * describe_env(env_id).frame_skip / elapsed


def steady(records, key):
    tail = records[len(records) // 3 :] or records
    return float(np.mean([r[key] for r in tail if r[key] is not None]))


def measure(
    *,
    name: str,
    settings: dict,
    actor_counts,
    frames: int,
    out: str,
    learner_processes=(None,),
    repeats: int = 1,
    record: bool = False,
) -> None:
    """One training run per actor count, learner process and repeat with `settings`; prints
    the table, writes JSON (and ledger records, `record`)."""
    defaults = TrainConfig.from_keys(settings)
    envs = defaults.actors.envs_per_actor
    raw = raw_env_fps(defaults.env.id, envs)
    print(f"raw env stepping ({envs} envs, random actions, one process): {raw:,.0f} frames/s")
    results = []
    runs = [
        (repeat, actors, where)
        for repeat in range(1, repeats + 1)
        for actors in actor_counts
        for where in learner_processes
    ]
    for repeat, actors, where in runs:
        changes = {"num_actors": actors, "total_frames": frames}
        if where is not None:
            changes["learner_process"] = where
        with tempfile.TemporaryDirectory() as logdir:
            config = TrainConfig.from_keys({**settings, **changes, "logdir": logdir + "/run"})
            result = train(config)
        busy = steady(result.records, "learner_busy_fraction")
        results.append(
            {
                "actors": actors,
                "learner_process": where or "auto",
                "env_fps": round(steady(result.records, "env_fps")),
                "learner_fps": round(steady(result.records, "learner_fps")),
                "learner_busy_fraction": round(busy, 3),
                "learner_wait_fraction": round(1 - busy, 3),
                "queue_size_mean": round(steady(result.records, "queue_size"), 2),
                "policy_lag_mean": round(steady(result.records, "policy_lag_mean"), 2),
                "final_return": result.episode_return_mean,
            }
        )
        if record:
            figures = {key: value for key, value in results[-1].items() if key != "actors"}
            ledger.write_record(
                benchmark=name,
                task=defaults.env.id.lower().split("-")[0],
                label=f"{actors}-actors-{where or 'auto'}",
                seed=repeat,
                command=["benchmarks/throughput.py", *sys.argv[1:]],
                settings={"config": {**settings, **changes}},
                figures={"raw_env_fps": round(raw), **figures},
            )
    print()
    print(f"raw env stepping, same run: {raw:,.0f} frames/s per process")
    print(
        table(
            [
                "actors",
                "learner process",
                "env frames/s",
                "learner frames/s",
                "learner busy",
                "learner waits",
                "queue (mean)",
                "policy lag",
            ],
            [
                (
                    r["actors"],
                    r["learner_process"],
                    f"{r['env_fps']:,}",
                    f"{r['learner_fps']:,}",
                    f"{r['learner_busy_fraction']:.0%}",
                    f"{r['learner_wait_fraction']:.0%}",
                    r["queue_size_mean"],
                    r["policy_lag_mean"],
                )
                for r in results
            ],
        )
    )
    write_json(
        out,
        {
            "benchmark": name,
            "machine": machine(),
            "raw_env_fps": round(raw),
            "settings": defaults.to_json(),
            "frames_per_run": frames,
            "results": results,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--frames", type=int, default=600_000)
    parser.add_argument("--passes", type=int, default=None, help="learner updates per batch")
    parser.add_argument("--out", default="runs/benchmarks/throughput.json")
    parser.add_argument("--learner-process", nargs="+", choices=("driver", "ray"), default=[None])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--record", action="store_true", help="write ledger records")
    args = parser.parse_args()
    settings = {} if args.passes is None else {"passes": args.passes}
    measure(
        name="throughput",
        settings=settings,
        actor_counts=args.actors,
        frames=args.frames,
        out=args.out,
        learner_processes=args.learner_process,
        repeats=args.repeats,
        record=args.record,
    )


if __name__ == "__main__":
    main()
