"""One line saying why a Ray actor call failed, for the messages users see."""

from __future__ import annotations

from impala_rep.run.errors import one_line

__all__ = ["describe_ray_error", "failed_to_start"]


def failed_to_start(error: Exception) -> bool:
    """Whether `error` is an actor whose constructor raised (Ray's `actor_init_failed`)."""
    return bool(getattr(error, "actor_init_failed", False))


def describe_ray_error(error: Exception) -> str:
    """The innermost cause of `error` as `Type: message`, one line.

    A task that raised (`RayTaskError`) carries the original exception in
    `.cause`. An actor whose constructor raised is a `RayActorError` whose
    message holds the constructor's traceback; its last line is the exception.
    Any other `RayActorError` is a process that died without an exception.
    """
    import ray

    if isinstance(error, ray.exceptions.RayTaskError) and error.cause is not None:
        return one_line(error.cause)
    if isinstance(error, ray.exceptions.RayActorError):
        if failed_to_start(error):
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            return lines[-1] if lines else "unknown error"
        return "actor process died (killed or out of memory)"
    return one_line(error)
