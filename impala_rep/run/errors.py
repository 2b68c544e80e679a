"""How a run ends badly: the exceptions `train` raises, and the one-line causes they carry."""

from __future__ import annotations

__all__ = ["SetupError", "TrainingFailed", "TrainingInterrupted", "LearnerLost", "one_line"]


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
