"""The `impala-rep` command line (also `python -m impala_rep`).

Arguments are parsed and validated here, once; everything below receives plain
values and config objects. The `train` flags are the config's fields
(`impala_rep.run.flags`). Misuse exits with code 2 and a one-line error.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

# TensorFlow-, gymnasium- and Ray-free: `--help` and misuse stay fast.
from impala_rep.config import TrainConfig, field_for
from impala_rep.config.presets import PRESETS, preset_keys
from impala_rep.devices import parse_devices
from impala_rep.run.errors import EXIT_BAD_INPUT, EXIT_DONE, EXIT_FAILED
from impala_rep.run.evaluation import FRAME_BUDGET, POLICIES
from impala_rep.run.flags import add_config_flags, config_values, positive_int, seed_int

# Tolerance for the demo's replicated-vs-single-device check: float32 sums in a
# different order across replicas differ by rounding only.
_DEMO_TOLERANCE = 1e-4


def _device_spec(text: str) -> str:
    try:
        parse_devices(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _add_train_arguments(
    train: argparse.ArgumentParser,
    preset: str | None,
    env: str | None,
    *,
    explicit_only: bool = False,
    config_file: TrainConfig | None = None,
    resume_help: str | None = None,
) -> None:
    """`train`'s flags on `train` (a subparser); `resume_help` words `--resume` for another
    command that takes them (tune's resumes an experiment, not a run)."""
    from impala_rep.run.resume import LOCKED_KEYS, RESUME_RULES

    # SUPPRESS as a default is argparse's documented way to leave an absent flag out.
    absent = argparse.SUPPRESS if explicit_only else None
    start = train.add_argument_group("presets and resume")
    start.add_argument(
        "--config",
        metavar="FILE",
        default=absent,
        help="take the settings of this config file (a run's config.json, or the "
        "best-config.json of impala-rep tune) as the defaults; flags given explicitly "
        "still win; not with --preset or --resume",
    )
    start.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=absent,
        help="named settings: 'cartpole' is the defaults, which are CartPole's (it "
        "changes nothing); 'atari-paper' is the IMPALA paper's Atari "
        "hyperparameters and learner; 'atari' is the same with batch 8 and "
        "RMSProp eps 1e-4; flags given explicitly still win",
    )
    locked = ", ".join(field_for(key).flag for key in LOCKED_KEYS)
    start.add_argument(
        "--resume",
        metavar="DIR" if resume_help else "LOGDIR",
        default=absent,
        help=resume_help
        or "continue the run in LOGDIR from its newest checkpoint, with its saved "
        f"settings; flags given as well change them, except {locked} "
        f"(--rnd-cost: {RESUME_RULES['rnd_cost']})",
    )
    # One flag per config field; the env family's defaults and the preset are data on top
    # of the dataclasses' defaults.
    defaults = config_file or TrainConfig.from_keys(preset_keys(preset, env))
    add_config_flags(train, defaults, explicit_only=explicit_only)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config the parsed flags (with their preset-overlaid defaults) give."""
    return TrainConfig.from_keys(config_values(args))


def resume_config_from_args(args: argparse.Namespace, explicit: argparse.Namespace) -> TrainConfig:
    """The saved config of the run in `args.resume`, with the flags given explicitly applied."""
    from impala_rep.run.resume import load_run_config, resumed_config

    if getattr(explicit, "preset", None):
        raise ValueError(
            "--preset cannot be combined with --resume: the run keeps its settings; "
            "give the flags to change explicitly"
        )
    if getattr(explicit, "logdir", None) not in (None, args.resume):
        raise ValueError(
            f"--logdir {explicit.logdir!r} differs from --resume {args.resume!r}: a "
            "resumed run continues in its own directory"
        )
    saved = load_run_config(args.resume)
    return resumed_config(saved, config_values(explicit) | {"logdir": args.resume})


def build_parser(
    preset: str | None = None,
    env: str | None = None,
    *,
    explicit_only: bool = False,
    config_file: TrainConfig | None = None,
) -> argparse.ArgumentParser:
    """The `impala-rep` parser; `explicit_only` leaves out train's defaults, so the
    namespace holds just the flags that were given. `preset` and `env` choose train's
    defaults (`impala_rep.config.presets.preset_keys`), or `config_file` gives them."""
    parser = argparse.ArgumentParser(prog="impala-rep", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="train a small supervised model with the Replicator and check it against one device",
    )
    demo.add_argument(
        "--devices",
        type=_device_spec,
        default="cpu:2",
        help='Replicator device spec: "auto", "cpu", "cpu:N", "gpu", "gpu:N", "tpu", '
        '"tpu:NAME" (default: cpu:2)',
    )
    demo.add_argument("--steps", type=positive_int, default=30, help="training steps (default: 30)")
    demo.add_argument(
        "--batch-size", type=positive_int, default=64, help="global batch size (default: 64)"
    )
    train = commands.add_parser(
        "train", help="train an IMPALA agent (on Ray, or in this process with --launcher local)"
    )
    _add_train_arguments(train, preset, env, explicit_only=explicit_only, config_file=config_file)
    tune = commands.add_parser(
        "tune",
        help="train a population (population-based training) or a sweep of runs on Ray Tune",
    )
    _add_tune_arguments(tune)
    _add_train_arguments(
        tune,
        preset,
        env,
        explicit_only=explicit_only,
        config_file=config_file,
        resume_help="continue the interrupted experiment in DIR (its --out) from each trial's "
        "newest checkpoint, with the experiment's own settings; give no other flag",
    )
    plot = commands.add_parser(
        "plot", help="write PNG plots of a run's metrics, or one figure comparing several runs"
    )
    plot.add_argument(
        "logdir",  # a list: one or more (the reference's row and the usage name it alike)
        nargs="+",
        metavar="LOGDIR",
        help="run directories written by `impala-rep train --logdir`; one: its return.png and "
        "throughput.png in it; several: one figure, runs that differ only in their seed drawn "
        "as their mean and range",
    )
    plot.add_argument(
        "--out",
        metavar="PNG",
        help="the figure comparing the runs (default: comparison.png beside the first run)",
    )
    _add_evaluate_arguments(
        commands.add_parser(
            "evaluate",
            help="play a run's newest checkpoint for a number of episodes and print its "
            "mean return (as published scores are measured)",
        )
    )
    return parser


def _add_tune_arguments(tune: argparse.ArgumentParser) -> None:
    from impala_rep.run.tuning import KINDS, METRICS, SCHEDULERS

    group = tune.add_argument_group(
        "tune", "the experiment; the flags below it are each trial's train flags"
    )
    group.add_argument(
        "--out",
        metavar="DIR",
        help="a new directory for the experiment: Ray Tune's trials (each a run directory), "
        "results.md, population.png, best-config.json; with --resume DIR, the experiment "
        "in DIR goes on",
    )
    group.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="KEY=KIND:VALUES",
        help=f"a setting to search (a train flag's key), KIND one of {', '.join(KINDS)}: "
        "learning_rate=loguniform:1e-4,1e-2, entropy_cost=choice:0,0.01, "
        "batch_size=grid:16,32; repeat for each setting",
    )
    group.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        default="pbt",
        help="pbt: population-based training (copy the better members' checkpoints, perturb "
        "their settings); asha: a sweep whose worst trials stop early; none: a plain sweep "
        "(default: pbt)",
    )
    group.add_argument(
        "--population",
        type=positive_int,
        default=4,
        metavar="N",
        help="members (pbt), or trials per point of the grid (default: 4)",
    )
    group.add_argument(
        "--metric",
        choices=METRICS,
        default=METRICS[0],
        help="what is maximised: the actors' last-100-episode mean, or the greedy evaluation "
        "(needs --eval-every) (default: episode_return_mean)",
    )
    group.add_argument(
        "--perturb-every",
        type=positive_int,
        metavar="FRAMES",
        help="pbt: trained frames between exploits; asha: the first rung (default: a tenth of "
        "--total-frames)",
    )
    group.add_argument(
        "--burn-in",
        type=int,
        default=0,
        metavar="FRAMES",
        help="pbt: frames before the first exploit (default: 0)",
    )


def _add_evaluate_arguments(evaluate: argparse.ArgumentParser) -> None:
    evaluate.add_argument("logdir", help="a run directory written by `impala-rep train --logdir`")
    evaluate.add_argument(
        "--episodes", type=positive_int, default=100, help="episodes to play (default: 100)"
    )
    evaluate.add_argument(
        "--envs",
        type=positive_int,
        help="envs playing them, at most --episodes; env i plays "
        "(episodes + i) // envs of them (default: 10, or --episodes "
        "if fewer)",
    )
    evaluate.add_argument(
        "--policy",
        choices=POLICIES,
        default="greedy",
        help="'greedy': the most probable action, as rl-baselines3-zoo's "
        "scores; 'sample': as the actors act in training (default: greedy)",
    )
    evaluate.add_argument(
        "--seed",
        type=seed_int,
        default=0,
        help="seeds the envs as training seeds an actor's (env i with seed + i; "
        "CartPole-v1's from one generator) and 'sample' (default: 0)",
    )
    evaluate.add_argument(
        "--frame-budget",
        type=positive_int,
        default=FRAME_BUDGET,
        help="env frames after which an evaluation that has not ended all its "
        f"episodes fails (default: {FRAME_BUDGET})",
    )
    evaluate.add_argument(
        "--max-episode-steps",
        type=positive_int,
        metavar="STEPS",
        help="gymnasium ids: end the evaluation's episodes after this many "
        "steps, replacing the run's time limit (default: the run's)",
    )
    evaluate.add_argument(
        "--json",
        metavar="FILE",
        help="also write the episodes' returns and lengths to FILE as JSON",
    )
    evaluate.add_argument(
        "--video",
        metavar="GIF",
        help="also write the first episode, as the env draws it, to this .gif (its return "
        "in the file's comment); the episodes are then played on one env",
    )


def _preset_and_env(argv: list[str] | None) -> tuple[str | None, str | None]:
    """The `--preset` and `--env` given, read before the full parse so that their
    defaults are the defaults there (and in `train --preset P --env ID --help`)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset")
    pre.add_argument("--env")
    known = pre.parse_known_args(argv)[0]
    # The full parse reports a bad preset.
    return (known.preset if known.preset in PRESETS else None), known.env


def _config_file(argv: list[str] | None) -> TrainConfig | None:
    """The settings of the `--config FILE` given, read before the full parse (they are its
    defaults); ValueError naming the file if it cannot be read as a config."""
    import json

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    pre.add_argument("--preset")
    pre.add_argument("--resume")
    known = pre.parse_known_args(argv)[0]
    if known.config is None:
        return None
    if known.preset is not None or known.resume is not None:
        raise ValueError(
            f"--config cannot be combined with --{'preset' if known.preset else 'resume'}: "
            "the file gives the settings"
        )
    try:
        data = json.loads(pathlib.Path(known.config).read_text())
        config = TrainConfig.from_json(data)
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise ValueError(f"bad --config {known.config!r}: {err}") from None
    return config.replace({"logdir": None})  # a new run names its own directory


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parses the command line; the env family's and a `--preset`'s values (or a `--config`
    file's) are the defaults, so flags given explicitly still override them."""
    try:
        config_file = _config_file(argv)
    except ValueError as err:
        build_parser().error(str(err))
    return build_parser(*_preset_and_env(argv), config_file=config_file).parse_args(argv)


def explicit_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Only the flags given on the command line (no defaults): what `--resume` changes."""
    return build_parser(explicit_only=True).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from impala_rep.run.console import quiet_native_logs
    from impala_rep.run.shutdown import exit_code, exit_on_signals

    exit_on_signals()  # from the first moment: train() takes over once it starts
    parser = build_parser()
    args = parse_args(argv)
    if args.command == "demo":
        count = parse_devices(args.devices).count
        if count and args.batch_size % count:
            parser.error(
                f"argument --batch-size: {args.batch_size} does not split evenly over "
                f"{count} replicas; use a multiple of {count}"
            )
        quiet_native_logs(verbose=False)  # see run/console.py: at the entry point, not on import
        from impala_rep.run.replication_demo import run_demo

        result = run_demo(devices=args.devices, steps=args.steps, batch_size=args.batch_size)
        if result.max_weight_difference > _DEMO_TOLERANCE:
            print(
                f"impala-rep: error: replicated and single-device weights differ by "
                f"{result.max_weight_difference:.2e} (> {_DEMO_TOLERANCE})",
                file=sys.stderr,
            )
            return EXIT_FAILED
        return EXIT_DONE
    if args.command == "train":
        try:
            if args.resume is not None:
                config = resume_config_from_args(args, explicit_args(argv))
            else:
                config = config_from_args(args)
        except ValueError as err:
            parser.error(str(err))
        # The driver itself runs TensorFlow only as the local launcher or to check a user's
        # agent or loss: otherwise it need not pay for importing it.
        quiet_native_logs(
            config.run.verbose,
            import_tensorflow=(
                config.run.launcher == "local"
                or config.agent.factory is not None
                or config.loss.function is not None
            ),
        )
        from impala_rep.run.training import SetupError, TrainingFailed, TrainingInterrupted, train

        try:
            train(config, resume=args.resume is not None)
        except SetupError as err:  # raised before anything started or was written
            parser.error(str(err))
        except TrainingFailed as err:
            print(f"impala-rep: error: {err}", file=sys.stderr)
            return EXIT_FAILED
        except TrainingInterrupted as stop:
            return exit_code(stop.signum)
        return EXIT_DONE
    if args.command == "tune":
        return _tune(parser, args, argv)
    if args.command == "plot":
        from impala_rep.run.plotting import plot_run, plot_runs

        try:
            if len(args.logdir) == 1 and args.out is None:
                paths = plot_run(args.logdir[0])
            else:
                first = pathlib.Path(args.logdir[0]).resolve()
                paths = [plot_runs(args.logdir, out=args.out or first.parent / "comparison.png")]
        except ValueError as err:
            parser.error(str(err))
        for path in paths:
            print(path)
        return EXIT_DONE
    if args.command == "evaluate":
        return _evaluate(parser, args)
    parser.error(f"unknown command {args.command!r}")  # unreachable: argparse checks choices
    return EXIT_BAD_INPUT


def _tune(parser: argparse.ArgumentParser, args: argparse.Namespace, argv) -> int:
    import json

    from impala_rep.run.console import quiet_native_logs
    from impala_rep.run.errors import SetupError
    from impala_rep.run.tuning import SPEC_FILE, TuneSpec, check_spec, parse_dimension, run_tune

    try:
        if args.resume is not None:  # the experiment in that directory, as it was started
            given = [a.split("=")[0] for a in (argv or sys.argv[1:]) if a.startswith("--")]
            others = [flag for flag in given if flag != "--resume"]
            if others:
                raise ValueError(
                    "tune --resume DIR continues the experiment as it was started; give no "
                    f"other flags (got {others[0]})"
                )
            saved = json.loads((pathlib.Path(args.resume) / SPEC_FILE).read_text())
            spec = TuneSpec.from_json(saved["spec"])
            base = TrainConfig.from_json(saved["base"])
        else:
            if args.out is None:
                raise ValueError("tune needs --out DIR, a new directory for the experiment")
            if args.logdir is not None:
                raise ValueError("bad --logdir: each trial runs in a directory of --out's")
            spec = TuneSpec(
                space=tuple(parse_dimension(text) for text in args.space),
                out=args.out,
                scheduler=args.scheduler,
                population=args.population,
                metric=args.metric,
                perturb_every=args.perturb_every,
                burn_in=args.burn_in,
            )
            base = config_from_args(args)
            check_spec(spec, base)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    try:
        import ray.tune  # noqa: F401 - its own dependencies come with the extra
    except ImportError:
        parser.error("tune needs Ray Tune, which is not installed: pip install -e '.[tune]'")
    quiet_native_logs(base.run.verbose)
    try:
        results = run_tune(spec, base, out=sys.stdout, resume=args.resume is not None)
    except SetupError as err:
        parser.error(str(err))
    unfinished = [r for r in results if not (r.metrics or {}).get("done")]
    if unfinished:
        print(
            f"impala-rep: {len(unfinished)} of {len(results)} trials did not finish; continue "
            f"the experiment with: impala-rep tune --resume {spec.out}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_DONE


def _evaluate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import json
    import os
    import pathlib

    from impala_rep.run.console import quiet_native_logs
    from impala_rep.run.evaluation import (
        EvaluationIncomplete,
        EvaluationSetupError,
        evaluate_run,
        progress_printer,
    )

    if args.envs is not None and args.envs > args.episodes:
        parser.error(
            f"argument --envs: {args.envs} is more than --episodes {args.episodes}; "
            "every env must play at least one episode"
        )
    if args.json is not None:
        target = pathlib.Path(args.json).absolute()
        if target.is_dir() or not target.parent.is_dir() or not os.access(target.parent, os.W_OK):
            parser.error(
                f"argument --json: {args.json!r} cannot be written: give a file path in "
                "an existing, writable directory"
            )
    quiet_native_logs(verbose=False)
    try:
        result = evaluate_run(
            args.logdir,
            episodes=args.episodes,
            num_envs=args.envs,
            policy=args.policy,
            seed=args.seed,
            frame_budget=args.frame_budget,
            max_episode_steps=args.max_episode_steps,
            on_progress=progress_printer(sys.stderr),
            video=args.video,
        )
    except EvaluationSetupError as err:  # before any episode: not a run, another agent, ...
        parser.error(str(err))
    except (FileNotFoundError, EvaluationIncomplete) as err:
        print(f"impala-rep: error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(result.summary())
    if result.video is not None:
        print(f"video of episode 1 (return {result.returns[0]:.2f}): {result.video}")
    if args.json is not None:
        pathlib.Path(args.json).write_text(json.dumps(result.to_json(), indent=2) + "\n")
    return EXIT_DONE


if __name__ == "__main__":
    sys.exit(main())
