"""What a policy costs per frame: the actors' policy call and the learner's update, for each
kind of action distribution on the same network, and for the ways an actor can act, in one
sitting.

    .venv/bin/python benchmarks/policy_cost.py [--cases cartpole pendulum ...]
        [--seconds 10] [--label NAME] [--no-record]

Each case's work is measured alone, in this process, on one thread, by `cpu_profile.py`'s
`work_costs` (CPU µs per env frame; see that script): the actor's policy call for its envs,
and one learner update on a batch from that actor. The first case is the reference the others
are given as ratios to: the built-in MLP's categorical policy on CartPole, acting through its
numpy twin.

- **Distributions** (issue "Any gymnasium task": a Gaussian at most 1.5x the categorical): the
  same network, the built-in MLP of the default sizes with the settings the auto rules switch
  on for continuous actions turned off (`--no-separate-value-network
  --no-normalize-observations`, and no novelty bonus), so that what differs is the policy head
  and its distribution's sampling, log-probs, entropy and KL, and the observation's width (the
  first layer's inputs: CartPole's 4, HalfCheetah's 17).
- **Acting paths**: a user's feed-forward agent without a `host_step` (the custom-agent
  example's) acts through one compiled TensorFlow call per step: against the reference, what
  the TensorFlow call costs. The MLP with an LSTM core (`--use-lstm`) acts through its numpy
  twin, carrying its state: what the LSTM adds.

Prints a table and writes one ledger record per case (`benchmarks/results/policy_cost/CASE/`);
`make docs` renders the newest batch on the results page. Measure on an idle machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
import ledger
from _common import table
from cpu_profile import work_costs

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAME_NETWORK = ("--no-separate-value-network", "--no-normalize-observations", "--rnd-cost", "0")


@dataclasses.dataclass(frozen=True)
class Case:
    env: str
    what: str  # the policy, as the results page names it
    flags: tuple[str, ...] = SAME_NETWORK


CASES = {
    "cartpole": Case("CartPole-v1", "categorical, 2 actions; numpy twin"),
    "pendulum": Case("Pendulum-v1", "Gaussian, 1 dimension; numpy twin"),
    "lunarlander-continuous": Case(
        "LunarLanderContinuous-v3", "Gaussian, 2 dimensions; numpy twin"
    ),
    "halfcheetah": Case("HalfCheetah-v5", "Gaussian, 6 dimensions; numpy twin"),
    "cartpole-custom-agent": Case(
        "CartPole-v1",
        "categorical; a user's agent (examples/custom_agent.py), compiled call",
        ("--agent", "examples/custom_agent.py:make_agent", *SAME_NETWORK),
    ),
    "cartpole-lstm": Case(
        "CartPole-v1",
        "categorical; the MLP with an LSTM, numpy twin",
        ("--use-lstm", *SAME_NETWORK),
    ),
}
FIGURES = ("policy_us", "learner_us")


def measure(case: Case, seconds: float) -> dict[str, float]:
    from impala_rep.run.cli import config_from_args, parse_args  # `impala-rep train`'s flags

    config = config_from_args(parse_args(["train", "--env", case.env, *case.flags]))
    return work_costs(config, seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        nargs="+",
        default=list(CASES),
        choices=list(CASES),
        help="the first is the reference the others are compared with",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--label", default="defaults")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    os.chdir(ROOT)  # the cases' flags name files of the checkout
    costs = {}
    for name in args.cases:
        print(f"{name}: measuring ...", file=sys.stderr, flush=True)
        costs[name] = measure(CASES[name], args.seconds)
    reference = costs[args.cases[0]]
    rows = []
    for name in args.cases:
        case, work = CASES[name], costs[name]
        ratios = {f"{k}_ratio": work[k] / reference[k] for k in FIGURES}
        rows.append(
            [
                name,
                case.what,
                f"{work['policy_us']:.2f}",
                f"{ratios['policy_us_ratio']:.2f}",
                f"{work['learner_us']:.2f}",
                f"{ratios['learner_us_ratio']:.2f}",
            ]
        )
        if not args.no_record:
            ledger.write_record(
                benchmark="policy_cost",
                task=name,
                label=args.label,
                seed=0,
                command=[sys.executable, *sys.argv],
                figures={**{k: work[k] for k in (*FIGURES, "env_us", "passes")}, **ratios},
                settings={
                    "env": case.env,
                    "policy": case.what,
                    "reference": args.cases[0],
                    "train_flags": list(case.flags),
                    "seconds": args.seconds,
                },
            )
    print(
        table(
            ["case", "policy", "policy call µs/frame", "÷ ref", "learner µs/frame", "÷ ref"],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
