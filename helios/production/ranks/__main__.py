"""`python -m helios.production.ranks ARGS` (torchrun's `-m`): `helios rank ARGS`, one peer rank."""

import sys

from helios.cli import main

if __name__ == "__main__":
    sys.exit(main(["rank", *sys.argv[1:]]))
