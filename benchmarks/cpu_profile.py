"""CPU profile: what the work costs alone, and where a training run's CPU goes.

    .venv/bin/python benchmarks/cpu_profile.py [--frames 2000000] [--env CartPole-v1]
        [--out runs/benchmarks/cpu_profile.json] [--work-only] [-- TRAIN FLAGS ...]

Part 1, the work alone, in this process, TensorFlow on one thread, with the run's own
settings (default flags plus any after `--`): stepping the env (`envs_per_actor` envs,
random actions), one policy call for those envs (the actor's own), one whole
`Actor.unroll` (env, policy and the actor's bookkeeping), and one `Learner.step` on a
`T x B` batch from that actor with the run's `passes` (one graph call), per update (and, apart,
its first call: tracing and XLA's compile, a stage of every run's start-up). CPU
microseconds per env frame each; env + policy + learner is **the work per frame**, and the
**ceiling** is the frames/s the machine's cores would give if they did only that.
`--work-only` stops here (what a flag such as `--rnd-cost` adds to the work, with no training
run).

Part 2, a real run: `impala-rep train --env ENV --total-frames FRAMES` (embedded Ray), as a
user runs it but with the learner in a Ray process of its own (`--learner-process ray`, unless
the flags after `--` say otherwise), so that its CPU is told apart from the driver's. Every
process of its tree is read from /proc twice a second: CPU seconds by role (driver, learner,
actors, Ray's own processes), for the whole run and split at the
first trained frame (start-up / training), and peak RSS by role. The **overhead factor**
is CPU per frame over the work per frame, with and without start-up; the median env
frames/s comes from the run's metrics.jsonl, over its reports from launch. Before the run, two
new processes time what start-up cannot avoid: importing TensorFlow, and starting the
embedded Ray as the driver does; the first trained frame is compared with their sum.

Measure on an idle machine, one benchmark at a time: a second run halves the first's numbers.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
from _common import MetricsTail, machine, table, write_json
from _procs import ROLES, cpu_seconds, process_tree, role, rss_mib

from impala_rep.extensions import actor_return_discount, extensions_for
from impala_rep.run.run_log import read_metrics

_SAMPLE_EVERY_S = 0.5


def _cpu_us_per_frame(fn, frames_per_call: int, seconds: float, repeats: int = 5) -> float:
    """CPU microseconds (this process, all threads) per frame of repeated `fn()` calls: the
    least of `repeats` windows of `seconds / repeats` each, as timeit does (a window that
    another process or a page fault disturbed only ever reads slower)."""
    fn()  # warm-up: tracing, caches
    best = float("inf")
    for _ in range(repeats):
        calls, wall0, cpu0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - wall0 < seconds / repeats:
            fn()
            calls += 1
        best = min(best, (time.process_time() - cpu0) / (calls * frames_per_call) * 1e6)
    return best


def work_costs(config, seconds: float, run: dict | None = None) -> dict[str, float]:
    """CPU µs per env frame of each part of the work, measured alone on one thread. The
    learner's is a whole batch's `passes` updates ÷ `passes`, times the updates per batch: with
    `--target-kl` these vary, and `run`'s mean counts, not `passes`."""
    tf = _common.import_tensorflow()

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from impala_rep.actors.actor import Actor
    from impala_rep.agent_factory import acting_agent
    from impala_rep.envs.factory import make_vector_env
    from impala_rep.learner.learner import Learner
    from impala_rep.learner.replicator import Replicator
    from impala_rep.observation_nest import rows
    from impala_rep.run.prepare import prepare
    from impala_rep.unroll import slice_columns

    plan = prepare(config)
    num_envs, skip = config.actors.envs_per_actor, plan.frame_skip
    t, b, passes = config.actors.unroll_length, config.learner.batch_size, config.learner.passes
    if run is not None and config.learner.target_kl is not None:
        passes = run["learner_steps"] * t * b * skip / run["frames"]
    keys = config.env.observation_keys
    env = make_vector_env(config.env.id, num_envs=num_envs, seed=0, observation_keys=keys)
    # Random actions from the envs' own (batched) space: any kind, discrete or continuous.
    env.action_space.seed(0)
    env.reset()
    env_us = _cpu_us_per_frame(
        lambda: env.step(env.action_space.sample()), num_envs * skip, seconds
    )

    # What an actor process acts with: the agent's numpy twin where it has one (given the
    # agent's weights, as the learner would publish them), else the agent.
    twin, agent = acting_agent(plan.agent_factory), plan.agent_factory()
    actor = Actor(
        env=make_vector_env(config.env.id, num_envs=num_envs, seed=1, observation_keys=keys),
        agent=agent if twin is None else twin,
        unroll_length=t,
        seed=0,
        return_discount=actor_return_discount(extensions_for(config.loss)),
    )
    if twin is not None:
        agent.build(plan.observation_shape)
        actor.set_weights(agent.get_weights(), version=0)
    unroll, _ = actor.unroll()
    # The actor's own policy call, compiled or its agent's `host_step` (a private method:
    # this measures the actor's internals, so it must be the actor's, not a copy of it).
    args = (
        rows(unroll.observations, 0),
        unroll.prev_actions[0],
        unroll.prev_rewards[0],
        unroll.first[0],
    )
    policy_us = _cpu_us_per_frame(lambda: actor._act(*args), num_envs * skip, seconds)
    unroll_us = _cpu_us_per_frame(actor.unroll, num_envs * t * skip, seconds)

    learner = Learner(
        agent=plan.agent_factory(),
        replicator=Replicator(config.learner.devices, jit_compile=bool(plan.config.learner.xla)),
        observation_shape=plan.observation_shape,
        # the run's loss settings as train resolves them (auto ones made concrete)
        total_steps=config.total_learner_steps(skip),
        loss=plan.config.loss,
        optimizer=config.optimizer,
        loss_fn=plan.loss_fn,  # the run's loss (--loss, --rnd-cost)
        autograph=plan.config.learner.autograph is not False,
    )
    batch = slice_columns(unroll, 0, b) if num_envs >= b else unroll
    # A batch's passes run in one graph call (`Replicator.repeat`), so one update costs less
    # inside them than alone: time the run's whole batch, and count one update as its share.
    planned = config.learner.passes
    # The first call traces the step and (with XLA) compiles it: a stage of the run's start-up.
    wall0, cpu0 = time.perf_counter(), time.process_time()
    learner.step(batch, passes=planned)
    first_update = {
        "first_update_s": time.perf_counter() - wall0,
        "first_update_cpu_s": time.process_time() - cpu0,
    }
    step_us = (
        _cpu_us_per_frame(
            lambda: learner.step(batch, passes=planned), batch.actions.shape[1] * t * skip, seconds
        )
        / planned
    )
    return {
        "env_us": env_us,
        "policy_us": policy_us,
        "learner_us": step_us * passes,
        "passes": passes,
        "learner_step_us": step_us,
        "actor_unroll_us": unroll_us,
        "work_us": env_us + policy_us + step_us * passes,
        **first_update,
    }


_RAY_START = """
import time
from impala_rep.run.console import ray_console_options
from impala_rep.run.ray_setup import prepare_ray_import
prepare_ray_import(embedded=True)
import ray
start = time.perf_counter()
ray.init(**ray_console_options(False))
print(time.perf_counter() - start)
ray.shutdown()
"""


def startup_costs() -> dict[str, float]:
    """Seconds, each in a new process as the run has them: importing TensorFlow (from the
    interpreter's launch), and starting the embedded Ray as the driver does."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    launch = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import tensorflow"], check=True, env=env, capture_output=True
    )
    tf_import_s = time.perf_counter() - launch
    out = subprocess.run(
        [sys.executable, "-c", _RAY_START], check=True, env=env, capture_output=True, text=True
    ).stdout
    return {"tf_import_s": tf_import_s, "ray_start_s": float(out.split()[-1])}


def profile_run(argv: list[str], logdir: pathlib.Path) -> dict:
    """Runs `impala-rep train ARGV`; CPU seconds and peak RSS by role, start-up split off."""
    command = [sys.executable, "-m", "impala_rep", "train", *argv, "--logdir", str(logdir)]
    print(" ".join(["impala-rep", *command[3:]]), flush=True)
    launch = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    cpu, roles, peak_rss, first_seen = {}, {}, dict.fromkeys(ROLES, 0.0), {}
    tail = MetricsTail(logdir)
    at_first_frame, first_frame_s = None, None

    def by_role() -> dict[str, float]:
        totals = dict.fromkeys(ROLES, 0.0)
        for pid, seconds in cpu.items():
            totals[roles[pid]] += seconds
        return totals

    while process.poll() is None:
        rss = dict.fromkeys(ROLES, 0.0)
        for pid in process_tree(process.pid):
            seconds, kind = cpu_seconds(pid), role(pid)
            if seconds is None or kind == "gone":
                continue
            # Ray starts workers idle ("ray::IDLE") and makes them actors later: a process
            # is counted under the last role it had; an exited one keeps its last reading.
            cpu[pid], roles[pid] = seconds, kind
            rss[kind] += rss_mib(pid)
            first_seen.setdefault(kind, time.monotonic() - launch)  # stages of the start-up
        peak_rss = {k: max(peak_rss[k], rss[k]) for k in ROLES}
        if at_first_frame is None and any(r["frames"] > 0 for r in tail.new_records()):
            at_first_frame, first_frame_s = by_role(), time.monotonic() - launch
        time.sleep(_SAMPLE_EVERY_S)
    wall_s = time.monotonic() - launch
    if process.returncode != 0:
        raise SystemExit(
            f"the run failed (exit {process.returncode}):\n{process.stderr.read()[-2000:]}"
        )
    records = read_metrics(logdir)
    total = by_role()
    return {
        "wall_s": wall_s,
        "first_trained_frame_s": first_frame_s,
        "frames": records[-1]["frames"],
        "learner_steps": records[-1]["learner_steps"],
        "cpu_s": total,
        "cpu_s_startup": at_first_frame or total,
        "peak_rss_mib": peak_rss,
        "first_seen_s": first_seen,
        "median_env_fps": statistics.median(r["env_fps"] for r in records),
        "learner_busy_median": statistics.median(
            r["learner_busy_fraction"]
            for r in records
            if r.get("learner_busy_fraction") is not None
        ),
    }


def report(work: dict, run: dict, cores: int, startup: dict) -> list[tuple[str, str]]:
    per_m = 1e6 / run["frames"]
    training = {k: run["cpu_s"][k] - run["cpu_s_startup"][k] for k in ROLES}
    rows = [
        (
            f"CPU s per 1M frames, {k} (whole run / after the first trained frame)",
            f"{run['cpu_s'][k] * per_m:.1f} / {training[k] * per_m:.1f}",
        )
        for k in ROLES
    ]
    total, total_training = sum(run["cpu_s"].values()), sum(training.values())
    rows.append(
        ("CPU s per 1M frames, total", f"{total * per_m:.1f} / {total_training * per_m:.1f}")
    )
    ceiling = cores / work["work_us"] * 1e6
    overhead = total * per_m / work["work_us"]
    overhead_training = total_training * per_m / work["work_us"]
    startup_s = startup["ray_start_s"] + startup["tf_import_s"]
    rows += [
        (
            "work alone, CPU µs per frame: env / policy / learner (passes x step)",
            f"{work['env_us']:.2f} / {work['policy_us']:.2f} / {work['learner_us']:.2f} "
            f"({work['passes']:.2f} x {work['learner_step_us']:.2f})",
        ),
        ("work per frame (µs)", f"{work['work_us']:.2f}"),
        (
            "a whole Actor.unroll per frame (µs); of it, neither env nor policy",
            f"{work['actor_unroll_us']:.2f}; "
            f"{work['actor_unroll_us'] - work['env_us'] - work['policy_us']:.2f}",
        ),
        (f"ceiling: {cores} cores doing only the work (frames/s)", f"{ceiling:,.0f}"),
        (
            "overhead factor (CPU per frame / work), whole run / after start-up",
            f"{overhead:.2f} / {overhead_training:.2f}",
        ),
        (
            "median env frames/s over the run's reports; % of the ceiling",
            f"{run['median_env_fps']:,.0f}; {run['median_env_fps'] / ceiling:.0%}",
        ),
        ("frames / s from launch", f"{run['frames'] / run['wall_s']:,.0f}"),
        (
            "s from launch until Ray's first process / the learner's / an actor's / the first "
            "trained frame",
            " / ".join(
                f"{run['first_seen_s'].get(k, float('nan')):.1f}"
                for k in ("ray", "learner", "actor")
            )
            + f" / {run['first_trained_frame_s']:.1f}",
        ),
        (
            "Ray start + one TensorFlow import (s); first trained frame / their sum",
            f"{startup['ray_start_s']:.1f} + {startup['tf_import_s']:.1f}; "
            f"{run['first_trained_frame_s'] / startup_s:.2f}",
        ),
        (
            "the learner's first update alone, TensorFlow on one thread (tracing, XLA's "
            "compile): s / CPU s",
            f"{work['first_update_s']:.1f} / {work['first_update_cpu_s']:.1f}",
        ),
        ("learner busy fraction (median report)", f"{run['learner_busy_median']:.2f}"),
        # The learner process's CPU beyond what its updates cost alone: the host's part of
        # each step, receiving unrolls, publishing weights, Ray's threads.
        (
            "learner process CPU outside its compiled step, after start-up",
            f"{1 - work['learner_us'] / (training['learner'] * per_m):.0%}",
        ),
        (
            "peak RSS, MiB: " + " / ".join(ROLES),
            " / ".join(f"{run['peak_rss_mib'][k]:,.0f}" for k in ROLES),
        ),
    ]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2_000_000)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seconds", type=float, default=10.0, help="per work measurement")
    parser.add_argument(
        "--out",
        default=None,
        help="default: runs/benchmarks/cpu_profile.json, "
        "or cpu_profile_work.json with --work-only (projection.py reads only "
        "the former)",
    )
    parser.add_argument(
        "--work-only",
        action="store_true",
        help="measure the work alone, no training run (e.g. what a flag adds to "
        "the learner's step)",
    )
    parser.add_argument("train_flags", nargs="*", metavar="-- TRAIN FLAGS")
    args = parser.parse_args()
    out = args.out or (
        "runs/benchmarks/cpu_profile_work.json"
        if args.work_only
        else "runs/benchmarks/cpu_profile.json"
    )
    from impala_rep.run.cli import config_from_args, parse_args  # `impala-rep train`'s flags

    argv = ["--env", args.env, "--total-frames", str(args.frames), *args.train_flags]
    if "--learner-process" not in argv:  # the learner's CPU in a process of its own, by role
        argv += ["--learner-process", "ray"]
    config = config_from_args(parse_args(["train", *argv]))
    if args.work_only:
        work = work_costs(config, args.seconds)
        print(
            table(
                ["work alone: CPU µs per env frame (first_update: s, CPU s)", "value"],
                [(k, f"{v:.2f}") for k, v in work.items()],
            )
        )
        write_json(
            out, {"benchmark": "cpu_profile", "argv": argv, "machine": machine(), "work": work}
        )
        return 0
    # The run first, while this process has imported nothing heavy; the work after.
    logdir = pathlib.Path(tempfile.mkdtemp(prefix="cpu-profile-")) / "run"
    startup = startup_costs()
    run = profile_run(argv, logdir)
    work = work_costs(config, args.seconds, run)
    cores = len(os.sched_getaffinity(0))
    rows = report(work, run, cores, startup)
    print(table(["measure", "value"], rows))
    write_json(
        out,
        {
            "benchmark": "cpu_profile",
            "argv": argv,
            "machine": machine(),
            "work": work,
            "run": run,
            "startup": startup,
            "cores": cores,
            "rows": dict(rows),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
