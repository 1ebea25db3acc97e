import sys

from piexp.cli import main

sys.exit(main())
