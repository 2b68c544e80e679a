"""`impala-rep` called in the test process: what a new process costs (a Python start and
TensorFlow's import, 5-8 CPU-s each on 2 cores) is not paid where the process itself is not
what a test is about. Used for refusals of bad input, and for runs of the local launcher (no
Ray: learner and actors are this process's threads) whose subject is what the commands do
with a run (its checkpoint, its records). The console's file descriptors, signals and the
installed entry point are tested through real processes (test_console.py, test_shutdown.py,
test_cli.py).

A command changes process-wide state on its way (signal handlers, TensorFlow's and Ray's
environment variables, sys.path for user code, cloudpickle's by-value registry), which a later
test in the same pytest worker must not inherit: it is all put back, and a run that left a
thread of its own running fails. One state cannot be put back: TensorFlow's logical CPU
devices, set once per process. The learner of a local run here must have one CPU device, as
every test process's TensorFlow has (`--learner-devices cpu:N` needs a process of its own)."""

import contextlib
import faulthandler
import io
import os
import signal
import subprocess
import sys
import threading

import pytest

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
TIMEOUT_S = 300  # what the subprocess calls these replaced waited for


@contextlib.contextmanager
def _process_state_restored():
    import ray.cloudpickle

    environ, path = dict(os.environ), list(sys.path)
    handlers = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    by_value = set(ray.cloudpickle.list_registry_pickle_by_value())
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        for name in set(ray.cloudpickle.list_registry_pickle_by_value()) - by_value:
            module = sys.modules.pop(name, None)  # the user's code the command imported
            if module is not None:
                ray.cloudpickle.unregister_pickle_by_value(module)


def refused_in_process(argv, capsys) -> str:
    """Runs the command's `main(argv)`, checks that it exits 2, and returns its last stderr line."""
    from impala_rep.run.cli import main

    with _process_state_restored(), pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2, err
    return err[-1]


def command_in_process(*argv: str) -> subprocess.CompletedProcess:
    """`impala-rep *argv` run to its end in this process: its exit code and what it printed,
    as `subprocess.run(..., capture_output=True, text=True)` returns them."""
    from impala_rep.run.cli import main

    out, err = io.StringIO(), io.StringIO()
    threads = set(threading.enumerate())
    # The subprocess's timeout, kept: a command still running after it dumps every thread's
    # stack and ends this pytest worker (xdist reports the test it was running), rather than
    # leaving the suite to hang.
    faulthandler.dump_traceback_later(TIMEOUT_S, exit=True)
    try:
        with _process_state_restored():
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(list(argv))
                except SystemExit as exit_:  # argparse's errors, and exits on a signal
                    code = 0 if exit_.code is None else exit_.code
    finally:
        faulthandler.cancel_dump_traceback_later()
    left = [t.name for t in set(threading.enumerate()) - threads if t.is_alive()]
    assert not left, f"the command left threads running: {left}"
    return subprocess.CompletedProcess(["impala-rep", *argv], code, out.getvalue(), err.getvalue())
