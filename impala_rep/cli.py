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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="impala-rep", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="train a small supervised model with the Replicator and check it against one device",
    )
    demo.add_argument("--devices", type=_device_spec, default="cpu:2",
                      help='Replicator device spec: "auto", "cpu", "cpu:N", "gpu", "gpu:N", "tpu" (default: cpu:2)')
    demo.add_argument("--steps", type=_positive_int, default=30, help="training steps (default: 30)")
    demo.add_argument("--batch-size", type=_positive_int, default=64, help="global batch size (default: 64)")
    return parser


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's C++ start-up chatter (oneDNN, CUDA probing) buries the progress
    # lines; quiet it here at the entry point, never at package import.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
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
    parser.error(f"unknown command {args.command!r}")  # unreachable: argparse checks choices
    return 2


if __name__ == "__main__":
    sys.exit(main())
