"""Scaling evidence: CartPole throughput over actors x learner layouts, and the learner's weak
scaling.

    .venv/bin/python benchmarks/scaling.py                      # the full grid (long)
    .venv/bin/python benchmarks/scaling.py --actors 1 --learners cpu,1 --frames 60000 \\
        --weak-steps 20

1. The grid: one `train()` run per (actors, learner layout) cell, actors in
   1, 2, 4, 8 and layouts `cpu,1`, `cpu:2,1`, `cpu:4,1` (1, 2, 4 logical CPU
   devices on one host) and `cpu,2` (two learner hosts, one CPU each, in one
   MultiWorkerMirroredStrategy group). Steady-state means over the reports after
   the first third: env frames/s, learner frames/s, learner busy fraction,
   queue fill (unroll blocks queued, summed over hosts, over the capacity
   per host) and policy lag. Printed as a table, drawn as a plot.
2. Weak scaling of the learner: the per-replica batch fixed, 1 replica in one
   process against 2 replicas in two processes (a MultiWorkerMirroredStrategy
   group over loopback), one TensorFlow thread per process, so each replica
   is one core's worth of work. Efficiency = (samples/s with 2) / (2 x samples/s
   with 1); 100% is perfect scaling.

Logical CPU devices share the host's cores: they prove the replicated code
correct, not faster. Only separate processes (hosts) add compute, and only on
a machine with idle cores to give them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
import numpy as np
from _common import machine, table, write_json

from impala_rep.config import TrainConfig
from impala_rep.learner.cluster_spec import free_port
from impala_rep.run.training import train

HERE = pathlib.Path(__file__).parent
DEFAULT_LAYOUTS = ["cpu,1", "cpu:2,1", "cpu:4,1", "cpu,2"]


def layout(text: str) -> tuple[str, int]:
    """ "DEVICES,HOSTS" -> (learner_devices, learner_hosts)."""
    devices, _, hosts = text.partition(",")
    try:
        return devices, int(hosts or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected DEVICES,HOSTS such as cpu:2,1, got {text!r}"
        ) from None


def steady(records, key) -> float:
    tail = records[len(records) // 3 :] or records
    values = [r[key] for r in tail if r[key] is not None]
    return float(np.mean(values)) if values else float("nan")


def run_cell(*, actors: int, devices: str, hosts: int, frames: int, settings: dict) -> dict:
    with tempfile.TemporaryDirectory() as logdir:
        config = TrainConfig.from_keys(
            {
                **settings,
                "num_actors": max(actors, hosts),
                "learner_devices": devices,
                "learner_hosts": hosts,
                "total_frames": frames,
                "logdir": logdir + "/run",
            }
        )
        result = train(config)
    replicas = hosts * (int(devices.partition(":")[2] or 1))
    return {
        "actors": config.actors.num_actors,
        "learner_devices": devices,
        "learner_hosts": hosts,
        "replicas": replicas,
        "env_fps": round(steady(result.records, "env_fps")),
        "learner_fps": round(steady(result.records, "learner_fps")),
        "learner_busy_fraction": round(steady(result.records, "learner_busy_fraction"), 3),
        "queue_fill": round(
            steady(result.records, "queue_size") / (hosts * config.learner.queue_capacity), 2
        ),
        "policy_lag_mean": round(steady(result.records, "policy_lag_mean"), 2),
        "final_return": result.episode_return_mean,
    }


def weak_scaling(*, per_replica_batch: int, steps: int, warmup: int, hidden: str) -> dict:
    """Seconds for `steps` learner steps: 1 replica (1 process) and 2 (2 processes)."""
    worker = str(HERE / "_weak_scaling_worker.py")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

    def launch(addresses):
        count = max(1, len(addresses))
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    worker,
                    str(i),
                    str(per_replica_batch),
                    str(steps),
                    str(warmup),
                    hidden,
                    *addresses,
                ],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for i in range(count)
        ]
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=1800)
            lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise RuntimeError(f"weak-scaling worker failed:\n{err[-2000:]}")
            results.append(json.loads(lines[-1][len("RESULT ") :]))
        return max(r["seconds"] for r in results)  # the group is as fast as its slowest host

    one = launch([])
    two = launch([f"127.0.0.1:{free_port('127.0.0.1')}" for _ in range(2)])
    samples = per_replica_batch * 20 * steps  # T = 20
    rate_one, rate_two = samples / one, 2 * samples / two
    return {
        "per_replica_batch": per_replica_batch,
        "steps": steps,
        "hidden": hidden,
        "samples_per_s_1_replica": round(rate_one),
        "samples_per_s_2_replicas": round(rate_two),
        "efficiency": round(rate_two / (2 * rate_one), 3),
    }


def plot(results: list[dict], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    layouts = sorted({(r["learner_devices"], r["learner_hosts"]) for r in results})
    for devices, hosts in layouts:
        cells = sorted(
            (r for r in results if (r["learner_devices"], r["learner_hosts"]) == (devices, hosts)),
            key=lambda r: r["actors"],
        )
        label = f"{hosts} host{'s' if hosts > 1 else ''} x {devices}"
        xs = [r["actors"] for r in cells]
        axes[0].plot(xs, [r["learner_fps"] for r in cells], marker="o", label=label)
        axes[1].plot(xs, [r["learner_busy_fraction"] for r in cells], marker="o", label=label)
    axes[0].set(xlabel="actors", ylabel="learner env frames/s", title="learner throughput")
    axes[1].set(
        xlabel="actors", ylabel="fraction of wall time", title="learner busy", ylim=(0, 1.05)
    )
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument(
        "--learners",
        type=layout,
        nargs="+",
        default=[layout(t) for t in DEFAULT_LAYOUTS],
        metavar="DEVICES,HOSTS",
        help="learner layouts (default: %(default)s)",
    )
    parser.add_argument("--frames", type=int, default=400_000, help="env frames per grid cell")
    parser.add_argument("--no-grid", action="store_true", help="only the weak-scaling measurement")
    parser.add_argument("--weak-steps", type=int, default=200, help="timed learner steps (0: skip)")
    parser.add_argument("--weak-batch", type=int, default=32, help="unrolls per replica (T = 20)")
    parser.add_argument(
        "--weak-hidden", default="64,64", help="MLP layer sizes of the timed learner"
    )
    parser.add_argument("--out", default="runs/benchmarks/scaling.json")
    args = parser.parse_args()

    info = machine()
    print(f"machine: {info}")
    results = []
    if not args.no_grid:
        for devices, hosts in args.learners:
            for actors in args.actors:
                print(f"\n--- {actors} actors, learner {hosts} host(s) x {devices}", flush=True)
                results.append(
                    run_cell(
                        actors=actors,
                        devices=devices,
                        hosts=hosts,
                        frames=args.frames,
                        settings={"report_every": 2.0},
                    )
                )
    weak = None
    if args.weak_steps > 0:
        weak = weak_scaling(
            per_replica_batch=args.weak_batch,
            steps=args.weak_steps,
            warmup=10,
            hidden=args.weak_hidden,
        )

    print()
    if results:
        print(
            table(
                [
                    "actors",
                    "learner",
                    "replicas",
                    "env frames/s",
                    "learner frames/s",
                    "learner busy",
                    "queue fill",
                    "policy lag",
                ],
                [
                    (
                        r["actors"],
                        f"{r['learner_hosts']} x {r['learner_devices']}",
                        r["replicas"],
                        f"{r['env_fps']:,}",
                        f"{r['learner_fps']:,}",
                        f"{r['learner_busy_fraction']:.0%}",
                        f"{r['queue_fill']:.0%}",
                        r["policy_lag_mean"],
                    )
                    for r in results
                ],
            )
        )
        plot(results, pathlib.Path(args.out).with_suffix(".png"))
    if weak is not None:
        print(
            f"\nlearner weak scaling (per-replica batch {weak['per_replica_batch']} x T=20, "
            f"MLP {weak['hidden']}, one thread per replica, {weak['steps']} steps):"
        )
        print(
            table(
                ["replicas", "processes", "samples/s", "efficiency"],
                [
                    (1, 1, f"{weak['samples_per_s_1_replica']:,}", "100%"),
                    (2, 2, f"{weak['samples_per_s_2_replicas']:,}", f"{weak['efficiency']:.0%}"),
                ],
            )
        )
    write_json(
        args.out,
        {
            "benchmark": "scaling",
            "machine": info,
            "frames_per_cell": args.frames,
            "grid": results,
            "weak_scaling": weak,
        },
    )


if __name__ == "__main__":
    main()
