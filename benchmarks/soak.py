"""Soak: training for a set time while actors are SIGKILLed at random; learner steps, actor
restarts and the memory (RSS) of every process of the run, peak and final.

    .venv/bin/python benchmarks/soak.py [--minutes 10] [--kill-every 60] \\
        [--out runs/benchmarks/soak.json]

Runs `impala-rep train` (CartPole, 2 actors, embedded Ray) as a subprocess,
samples the RSS of it and all its descendants (Ray's own processes, the
learner, the actors) every few seconds, kills a random actor process at
exponentially distributed intervals (mean `--kill-every` s), and at the end
sends SIGINT (a clean stop: checkpoint, exit 130). Memory must stay flat after
warm-up: the report compares the mean total RSS of the second quarter of the
run with that of the last quarter, and draws RSS vs time to soak_rss.png.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import signal
import subprocess
import sys
import tempfile
import time

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
from _common import table, write_json
from _procs import process_tree, role, rss_mib

_SAMPLE_EVERY_S = 5.0


def sample(root: int) -> dict[str, float]:
    by_role: dict[str, float] = {"driver": 0.0, "learner": 0.0, "actor": 0.0, "ray": 0.0}
    for pid in process_tree(root):
        name = role(pid)
        if name in by_role:
            by_role[name] += rss_mib(pid)
    by_role["total"] = sum(by_role.values())
    return by_role


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.9 * (len(ordered) - 1))] if ordered else float("nan")


def memory_growth(samples: list[dict], seconds: float) -> dict[str, float]:
    """Steady-state RSS after warm-up (second quarter of the run) against the end (last quarter).

    The 90th percentile of each quarter, not the mean: right after a kill the total dips by
    one actor's memory until its replacement has loaded TensorFlow, and a mean would then
    depend on when the kills fell rather than on whether memory grows.
    """

    def quarter(key, low, high):
        return _p90([s[key] for s in samples if low <= s["t"] / seconds < high])

    out = {}
    for key in ("total", "learner", "driver", "ray"):
        warm, late = quarter(key, 0.25, 0.5), quarter(key, 0.75, 1.01)
        out[f"{key}_rss_p90_mib_q2_vs_q4"] = f"{warm:,.0f} -> {late:,.0f} ({late / warm - 1:+.1%})"
    return out


def plot(samples: list[dict], kills: list[float], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    t = [s["t"] / 60 for s in samples]
    for key in ("total", "learner", "actor", "ray", "driver"):
        ax.plot(t, [s[key] for s in samples], label=key)
    for k in kills:
        ax.axvline(k / 60, color="grey", alpha=0.3, lw=0.8)
    ax.set_xlabel("minutes (grey: an actor was SIGKILLed)")
    ax.set_ylabel("RSS, MiB")
    ax.set_title("soak: RSS of the run's processes")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--kill-every", type=float, default=60.0, help="mean seconds between kills")
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/benchmarks/soak.json")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    logdir = pathlib.Path(tempfile.mkdtemp(prefix="soak-")) / "run"
    command = [
        sys.executable,
        "-m",
        "impala_rep",
        "train",
        "--env",
        "CartPole-v1",
        "--num-actors",
        str(args.num_actors),
        "--total-frames",
        str(10**12),
        "--checkpoint-every",
        "60",
        "--max-actor-failures",
        "1000",
        "--logdir",
        str(logdir),
    ]
    print(" ".join(command[1:]))
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    end = start + 60 * args.minutes
    next_kill = start + 30 + rng.expovariate(1 / args.kill_every)  # after start-up
    samples, kills = [], []
    try:
        while time.monotonic() < end and process.poll() is None:
            now = time.monotonic()
            if now >= next_kill:
                actors = [p for p in process_tree(process.pid) if role(p) == "actor"]
                if actors:
                    victim = rng.choice(actors)
                    subprocess.run(["kill", "-9", str(victim)], check=False)
                    kills.append(now - start)
                next_kill = now + rng.expovariate(1 / args.kill_every)
            samples.append({"t": now - start, **sample(process.pid)})
            print(
                f"\r[{(now - start) / 60:5.1f}/{args.minutes:g} min] RSS total "
                f"{samples[-1]['total']:7.0f} MiB, kills {len(kills)}",
                end="",
                flush=True,
            )
            time.sleep(min(_SAMPLE_EVERY_S, max(0.0, end - time.monotonic())))
        print()
        process.send_signal(signal.SIGINT)
        exit_code = process.wait(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    result = {
        "minutes": args.minutes,
        "kills": len(kills),
        "exit_code": exit_code,
        "learner_steps": last["learner_steps"],
        "frames": last["frames"],
        "actor_restarts": last["actor_restarts"],
        "final_return": last["episode_return_mean"],
        "peak_rss_mib": round(max(s["total"] for s in samples), 1),
        "final_rss_mib": round(samples[-1]["total"], 1),
        **memory_growth(samples, 60 * args.minutes),
        "peak_rss_mib_by_role": {
            k: round(max(s[k] for s in samples), 1) for k in ("driver", "learner", "actor", "ray")
        },
        "final_rss_mib_by_role": {
            k: round(samples[-1][k], 1) for k in ("driver", "learner", "actor", "ray")
        },
        "accounting_ok": last["frames_produced"] == last["frames"] + last["frames_queued"],
    }
    rows = [(key, value) for key, value in result.items() if not isinstance(value, dict)]
    rows += [
        (
            f"peak / final RSS, {k} (MiB)",
            f"{result['peak_rss_mib_by_role'][k]:,.0f} / {result['final_rss_mib_by_role'][k]:,.0f}",
        )
        for k in ("driver", "learner", "actor", "ray")
    ]
    print(table(["measure", "value"], rows))
    out = pathlib.Path(args.out)
    write_json(str(out), {"benchmark": "soak", **result, "samples": samples, "kill_times_s": kills})
    plot(samples, kills, out.with_name("soak_rss.png"))
    print(f"wrote {out.with_name('soak_rss.png')}; run directory {logdir}")
    return 0 if exit_code == 130 and result["accounting_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
