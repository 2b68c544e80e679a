"""How a run ends badly: the exceptions `train` raises, and the one-line causes they carry."""

from __future__ import annotations

__all__ = [
    "SetupError",
    "TrainingFailed",
    "TrainingInterrupted",
    "LearnerLost",
    "one_line",
    "EXIT_CODES",
    "EXIT_DONE",
    "EXIT_FAILED",
    "EXIT_BAD_INPUT",
]

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2  # argparse's own code for misuse, which every bad value shares

# Every exit code of the `impala-rep` commands and what it means (the reference's table).
EXIT_CODES = {
    EXIT_DONE: "done: the run trained its frames (or the command finished)",
    EXIT_FAILED: "failed: training stopped on a failure (a dead learner, a non-finite loss, too "
    "many actor failures, a failed write of the logs) or an evaluation did not "
    "finish its episodes; the message says why and, for a run, the command that "
    "resumes it",
    EXIT_BAD_INPUT: "bad input: one line names the value and what is allowed; nothing was "
    "started or written",
    130: "stopped by SIGINT (Ctrl-C) after a clean shutdown: checkpoint written, no process left",
    143: "stopped by SIGTERM after a clean shutdown: checkpoint written, no process left",
}


class SetupError(ValueError):
    """A bad run setting, found before anything was started or written (the CLI exits 2)."""


class TrainingFailed(RuntimeError):
    """The run stopped on a failure; the message says which and how to resume (the CLI exits 1)."""


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped the run after a clean shutdown (the CLI exits 128 + signal)."""

    def __init__(self, signum: int, result):
        super().__init__(f"stopped by signal {signum}")
        self.signum, self.result = signum, result


class LearnerLost(RuntimeError):
    """A launcher lost its learner (the process died, or a host did not stop); the message
    says which."""


def one_line(error: BaseException) -> str:
    """`Type: first line of the message`, for the messages users see."""
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}".rstrip(": ")
