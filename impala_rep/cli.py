"""The `impala-rep` command line (also `python -m impala_rep`).

Arguments are parsed and validated here, once; everything below receives plain
values and config objects. Misuse exits with code 2 and a one-line error.
"""

from __future__ import annotations

import argparse
import os
import sys

# Tolerance for the demo's replicated-vs-single-device check: float32 sums in a
# different order across replicas differ by rounding only.
_DEMO_TOLERANCE = 1e-4


def _device_spec(text: str) -> str:
    from impala_rep.learner.device_spec import parse_devices

    try:
        parse_devices(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _number(convert, what: str, is_allowed):
    """An argparse type: `convert`, then check; errors say what is allowed and what came."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not is_allowed(value) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


_positive_int = _number(int, "a positive integer", lambda v: v >= 1)
_positive_float = _number(float, "a positive number", lambda v: v > 0)
_non_negative_float = _number(float, "a number >= 0", lambda v: v >= 0)
_probability = _number(float, "a probability in [0, 1)", lambda v: 0 <= v < 1)


def _add_train_arguments(train: argparse.ArgumentParser, preset: str | None) -> None:
    from impala_rep.config import NETWORKS, PRESETS, TrainConfig

    # The defaults live in one place, the config dataclass, overlaid by the preset.
    d = TrainConfig(**PRESETS[preset]) if preset else TrainConfig()
    train.add_argument("--preset", choices=sorted(PRESETS), default=None,
                       help="named settings: 'atari-paper' is the IMPALA paper's Atari hyperparameters; "
                            "'atari' is the same with batch 8 and RMSProp eps 1e-4, which learn Pong "
                            "within 20M frames on 2 cores; flags given explicitly still win")
    train.add_argument("--network", choices=NETWORKS, default=d.network,
                       help="agent network: auto (MLP for vectors, shallow IMPALA CNN for images, "
                            "minatar for images under 20x20), mlp, shallow, deep, minatar "
                            f"(default: {d.network})")
    train.add_argument("--use-lstm", action="store_true", default=d.use_lstm,
                       help="add an LSTM core (state carried across unrolls, reset at episode ends)")
    train.add_argument("--env", default=d.env, help=f"gymnasium environment id (default: {d.env})")
    train.add_argument("--num-actors", type=_positive_int, default=d.num_actors,
                       help=f"actor processes (default: {d.num_actors})")
    train.add_argument("--envs-per-actor", type=_positive_int, default=d.envs_per_actor,
                       help=f"environments each actor steps together (default: {d.envs_per_actor})")
    train.add_argument("--unroll-length", type=_positive_int, default=d.unroll_length,
                       help=f"T, steps per unroll (default: {d.unroll_length})")
    train.add_argument("--batch-size", type=_positive_int, default=d.batch_size,
                       help=f"B, unrolls per learner step (default: {d.batch_size})")
    train.add_argument("--learner-devices", type=_device_spec, default=d.learner_devices,
                       help="Replicator device spec per learner host, e.g. cpu:2, gpu or tpu:NAME "
                            f"(default: {d.learner_devices})")
    train.add_argument("--learner-hosts", type=_positive_int, default=d.learner_hosts,
                       help="learner Ray actors forming one MultiWorkerMirroredStrategy group, each "
                            "fed by its round-robin share of the actors (see docs/cluster.md; "
                            f"default: {d.learner_hosts})")
    train.add_argument("--total-frames", type=_positive_int, default=d.total_frames,
                       help=f"env frames to train on (default: {d.total_frames:,})")
    train.add_argument("--seed", type=int, default=d.seed, help=f"random seed (default: {d.seed})")
    train.add_argument("--logdir", default=None,
                       help="new directory for config.json, metrics.jsonl, TensorBoard events and "
                            "checkpoints")
    train.add_argument("--resume", default=None, metavar="LOGDIR",
                       help="continue the run in LOGDIR from its newest checkpoint, with its saved "
                            "settings; flags given as well change them (not --env or the agent's network)")
    train.add_argument("--checkpoint-every", dest="checkpoint_every_s", type=_positive_float,
                       default=d.checkpoint_every_s, metavar="SECONDS",
                       help="seconds between checkpoints in LOGDIR/checkpoints; one is also written "
                            f"at the end and on Ctrl-C/SIGTERM (default: {d.checkpoint_every_s:g})")
    train.add_argument("--max-actor-failures", type=_positive_int, default=d.max_actor_failures,
                       help="actor failures (each replaced) tolerated within 10 minutes before the run "
                            f"stops (default: {d.max_actor_failures})")
    train.add_argument("--ray-address", default=None,
                       help="join this Ray cluster (e.g. auto or HOST:PORT); default: embedded local Ray")
    train.add_argument("--queue-capacity", type=_positive_int, default=d.queue_capacity,
                       help="unroll blocks the learner queues before actors wait; bounds policy lag "
                            f"(default: {d.queue_capacity})")
    train.add_argument("--learning-rate", type=_positive_float, default=d.learning_rate,
                       help=f"RMSProp learning rate, decayed linearly to 0 (default: {d.learning_rate})")
    train.add_argument("--entropy-cost", type=_non_negative_float, default=d.entropy_cost,
                       help=f"default: {d.entropy_cost}")
    train.add_argument("--baseline-cost", type=_non_negative_float, default=d.baseline_cost,
                       help=f"default: {d.baseline_cost}")
    train.add_argument("--discount", type=_non_negative_float, default=d.discount, help=f"default: {d.discount}")
    train.add_argument("--clip-rho-threshold", type=_positive_float, default=d.clip_rho_threshold,
                       help=f"V-trace rho-bar (default: {d.clip_rho_threshold})")
    train.add_argument("--clip-pg-rho-threshold", type=_positive_float, default=d.clip_pg_rho_threshold,
                       help=f"V-trace policy-gradient rho clip (default: {d.clip_pg_rho_threshold})")
    train.add_argument("--rmsprop-epsilon", type=_positive_float, default=d.rmsprop_epsilon,
                       help=f"default: {d.rmsprop_epsilon}")
    train.add_argument("--rmsprop-decay", type=_non_negative_float, default=d.rmsprop_decay,
                       help=f"default: {d.rmsprop_decay}")
    train.add_argument("--max-grad-norm", type=_positive_float, default=d.max_grad_norm,
                       help=f"global gradient-norm clip (default: {d.max_grad_norm})")
    train.add_argument("--reward-clipping", choices=["abs_one", "none"], default=d.reward_clipping,
                       help=f"clip rewards to [-1, 1] in the learner or not (default: {d.reward_clipping})")
    train.add_argument("--sticky-actions", type=_probability, default=d.sticky_actions, metavar="PROB",
                       help="Atari and MinAtar: probability of repeating the previous action instead of "
                            "the chosen one; default: the env's own (ALE/...-v5 0.25, ...NoFrameskip-v4 0 "
                            "as in the IMPALA paper, MinAtar 0.1)")
    train.add_argument("--episodic-life", action="store_true", default=d.episodic_life,
                       help="Atari: a lost life ends the episode for training (ale-py then restarts the "
                            "game, so returns are one life's score)")
    train.add_argument("--agent", default=None, metavar="MODULE:FACTORY",
                       help="your own agent: FACTORY(observation_shape=..., num_actions=...) returns a new "
                            "Agent; MODULE is a module name (the current directory is searched) or a "
                            "path/to/file.py. Replaces --network/--use-lstm (see docs/custom_agent.md)")
    train.add_argument("--loss", default=None, metavar="MODULE:FUNCTION",
                       help="your own learner loss (keyword arguments as impala_rep.loss_fn documents); "
                            "default: the IMPALA V-trace loss")


def _config_fields(args: argparse.Namespace) -> dict:
    """The parsed values that are `TrainConfig` fields (every train flag's dest is one,
    except --preset and --resume)."""
    import dataclasses

    from impala_rep.config import TrainConfig

    names = {field.name for field in dataclasses.fields(TrainConfig)}
    return {name: value for name, value in vars(args).items() if name in names}


def config_from_args(args: argparse.Namespace):
    from impala_rep.config import TrainConfig

    return TrainConfig(**_config_fields(args))


def resume_config_from_args(args: argparse.Namespace, explicit: argparse.Namespace):
    """The saved config of the run in `args.resume`, with the flags given explicitly applied."""
    from impala_rep.resume import load_run_config, resumed_config

    if getattr(explicit, "preset", None):
        raise ValueError("--preset cannot be combined with --resume: the run keeps its settings; "
                         "give the flags to change explicitly")
    if getattr(explicit, "logdir", None) not in (None, args.resume):
        raise ValueError(f"--logdir {explicit.logdir!r} differs from --resume {args.resume!r}: a "
                         "resumed run continues in its own directory")
    saved = load_run_config(args.resume)
    return resumed_config(saved, _config_fields(explicit) | {"logdir": args.resume})


def build_parser(preset: str | None = None, *, explicit_only: bool = False) -> argparse.ArgumentParser:
    """The `impala-rep` parser; `explicit_only` leaves out train's defaults, so the
    namespace holds just the flags that were given."""
    parser = argparse.ArgumentParser(prog="impala-rep", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="train a small supervised model with the Replicator and check it against one device",
    )
    demo.add_argument("--devices", type=_device_spec, default="cpu:2",
                      help='Replicator device spec: "auto", "cpu", "cpu:N", "gpu", "gpu:N", "tpu", '
                           '"tpu:NAME" (default: cpu:2)')
    demo.add_argument("--steps", type=_positive_int, default=30, help="training steps (default: 30)")
    demo.add_argument("--batch-size", type=_positive_int, default=64, help="global batch size (default: 64)")
    train = commands.add_parser("train", help="train an IMPALA agent on Ray")
    _add_train_arguments(train, preset)
    if explicit_only:
        # argparse has no public switch for this; SUPPRESS as a default is its
        # documented way to leave an attribute out when the flag is absent.
        for action in train._actions:
            action.default = argparse.SUPPRESS
    plot = commands.add_parser("plot", help="write PNG plots of a run's metrics")
    plot.add_argument("logdir", help="a run directory written by `impala-rep train --logdir`")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parses the command line; with `--preset` a second pass makes the preset's values the
    defaults, so flags given explicitly still override them."""
    args = build_parser().parse_args(argv)
    if getattr(args, "preset", None):
        args = build_parser(args.preset).parse_args(argv)
    return args


def explicit_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Only the flags given on the command line (no defaults): what `--resume` changes."""
    return build_parser(explicit_only=True).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's C++ start-up chatter (oneDNN, CUDA probing) buries the progress
    # lines; quiet it here at the entry point, never at package import.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parse_args(argv)
    if args.command == "demo":
        from impala_rep.learner.device_spec import parse_devices

        count = parse_devices(args.devices).count
        if count and args.batch_size % count:
            parser.error(f"argument --batch-size: {args.batch_size} does not split evenly over "
                         f"{count} replicas; use a multiple of {count}")
        from impala_rep.replication_demo import run_demo

        result = run_demo(devices=args.devices, steps=args.steps, batch_size=args.batch_size)
        if result.max_weight_difference > _DEMO_TOLERANCE:
            print(f"impala-rep: error: replicated and single-device weights differ by "
                  f"{result.max_weight_difference:.2e} (> {_DEMO_TOLERANCE})", file=sys.stderr)
            return 1
        return 0
    if args.command == "train":
        try:
            if args.resume is not None:
                config = resume_config_from_args(args, explicit_args(argv))
            else:
                config = config_from_args(args)
        except ValueError as err:
            parser.error(str(err))
        from impala_rep.shutdown import exit_code
        from impala_rep.training import SetupError, TrainingFailed, TrainingInterrupted, train

        try:
            train(config, resume=args.resume is not None)
        except SetupError as err:  # raised before anything started or was written
            parser.error(str(err))
        except TrainingFailed as err:
            print(f"impala-rep: error: {err}", file=sys.stderr)
            return 1
        except TrainingInterrupted as stop:
            return exit_code(stop.signum)
        return 0
    if args.command == "plot":
        from impala_rep.plotting import plot_run

        try:
            paths = plot_run(args.logdir)
        except ValueError as err:
            parser.error(str(err))
        for path in paths:
            print(path)
        return 0
    parser.error(f"unknown command {args.command!r}")  # unreachable: argparse checks choices
    return 2


if __name__ == "__main__":
    sys.exit(main())
