"""Scaling projection from measured costs: N actor cores × K learner devices -> env frames/s.

    .venv/bin/python benchmarks/projection.py runs/benchmarks/cpu_profile.json
        [--learner-fps F] [--efficiency E] [--actors 1 2 4 ...] [--devices 1 2 4 ...]

A projection, not a measurement. It reads what `cpu_profile.py` measured in one run (the
CPU each role spent per frame once training had started, overhead included) and
assumes that each actor process keeps one core busy and that each learner device
trains on its share of the batch at the rate one device reached, times the
weak-scaling efficiency E of the all-reduce between devices:

    actors:  N × (1e6 / actor CPU µs per frame)           frames/s
    learner: K × E × (1e6 / learner CPU µs per frame)      frames/s (or --learner-fps per device)
    expected = the smaller; the table names which one saturates.

On 2 cores nothing scales (docs/notebook.md, "Scaling"): the projection is what a
machine with N idle cores for the actors and K devices for the learner should give, to
be checked there with `benchmarks/scaling.py` (e.g. `--learners gpu,1 gpu:2,1 gpu:4,1`
on a GPU node; `--learner-fps` then takes one GPU's measured rate).
"""

from __future__ import annotations

import argparse
import json

from _common import table


def rates(profile: dict) -> tuple[float, float]:
    """(frames/s one actor core gives, frames/s one learner device gives), from the run's
    CPU per frame after the first trained frame."""
    run = profile["run"]
    per_frame = {
        role: (run["cpu_s"][role] - run["cpu_s_startup"][role]) / run["frames"]
        for role in ("actor", "learner")
    }
    if min(per_frame.values()) <= 0:  # e.g. a profile from before the actors' CPU was kept
        raise SystemExit(f"this profile has no training CPU for every role: {per_frame}")
    return 1 / per_frame["actor"], 1 / per_frame["learner"]


def project(
    actor_fps: float, learner_fps: float, efficiency: float, actors: list[int], devices: list[int]
) -> list[list[str]]:
    rows = []
    for n in actors:
        for k in devices:
            produce, consume = n * actor_fps, k * (efficiency if k > 1 else 1.0) * learner_fps
            rows.append(
                [
                    n,
                    k,
                    f"{produce:,.0f}",
                    f"{consume:,.0f}",
                    f"{min(produce, consume):,.0f}",
                    "actors" if produce < consume else "learner",
                ]
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a cpu_profile.py JSON")
    parser.add_argument(
        "--learner-fps",
        type=float,
        help="one learner device's env frames/s (default: the profiled run's CPU learner)",
    )
    parser.add_argument(
        "--efficiency",
        type=float,
        default=1.0,
        help="weak-scaling efficiency of K > 1 devices (1: ideal)",
    )
    parser.add_argument("--actors", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    with open(args.profile) as f:
        profile = json.load(f)
    actor_fps, learner_fps = rates(profile)
    learner_fps = args.learner_fps or learner_fps
    print(
        f"from {args.profile} ({' '.join(profile['argv'])}): one actor core {actor_fps:,.0f} "
        f"env frames/s, one learner device {learner_fps:,.0f}, efficiency {args.efficiency:g}"
    )
    print(
        table(
            [
                "actor cores N",
                "learner devices K",
                "actors produce",
                "learner consumes",
                "expected env frames/s",
                "saturates first",
            ],
            project(actor_fps, learner_fps, args.efficiency, args.actors, args.devices),
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
