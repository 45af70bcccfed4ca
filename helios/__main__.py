import sys

from helios.cli import main

sys.exit(main())
