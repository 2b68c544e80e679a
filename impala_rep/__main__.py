import sys

from impala_rep.cli import main

sys.exit(main())
