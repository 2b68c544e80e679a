"""The impala-rep command: misuse exits 2 with a one-line error; the demo runs."""

import subprocess
import sys

import pytest


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "impala_rep", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args, message",
    [
        (["demo", "--devices", "cpu:0"], "bad device spec 'cpu:0'"),
        (["demo", "--devices", "banana"], "expected \"auto\", \"cpu\", \"cpu:N\""),
        (["demo", "--steps", "0"], "expected a positive integer, got 0"),
        (["demo", "--batch-size", "x"], "expected a positive integer, got 'x'"),
        (["demo", "--devices", "cpu:4", "--batch-size", "6"], "6 does not split evenly over 4 replicas"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "required: COMMAND"),
    ],
)
def test_misuse_exits_2_with_one_line_error(args, message):
    proc = _cli(*args, timeout=60)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("impala-rep") and message in last, proc.stderr


def test_demo_trains_replicated_and_matches_one_device():
    proc = _cli("demo", "--devices", "cpu:2", "--steps", "12", "--batch-size", "32")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "num_replicas=2" in proc.stdout
    last_line = proc.stdout.strip().splitlines()[-1]
    assert last_line.startswith("  max |weight difference| after 12 steps:")
    assert float(last_line.rsplit(" ", 1)[-1]) < 1e-4
