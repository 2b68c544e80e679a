"""Python code run in a fresh interpreter: for what a process imports (e.g. that the driver's
modules load no TensorFlow), which this test process, having imported everything, cannot show."""

import subprocess
import sys


def run_fresh_python(code: str, timeout: float = 120.0) -> str:
    """Runs `python -c code` in a new process; asserts it succeeded and returns its stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout
