"""`impala-rep` refusing bad input, called in the test process: seconds cheaper per case than
a new process. The command changes process-wide state on its way to the refusal (signal
handlers, TensorFlow's and Ray's environment variables, sys.path for user code, cloudpickle's
by-value registry), which a later test in the same pytest worker must not inherit: it is all
put back."""

import os
import signal
import sys

import pytest

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def refused_in_process(argv, capsys) -> str:
    """Runs the command's `main(argv)`, checks that it exits 2, and returns its last stderr line."""
    import ray.cloudpickle

    from impala_rep.run.cli import main

    environ, path = dict(os.environ), list(sys.path)
    handlers = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    by_value = set(ray.cloudpickle.list_registry_pickle_by_value())
    try:
        with pytest.raises(SystemExit) as stop:
            main(argv)
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
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2, err
    return err[-1]
