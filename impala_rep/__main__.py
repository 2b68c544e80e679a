"""`python -m impala_rep`: the `impala-rep` command."""

import sys

from impala_rep.run.cli import main

if __name__ == "__main__":  # importing the module (documentation tools do) runs nothing
    sys.exit(main())
