import sys

from impala_rep.run.cli import main

sys.exit(main())
