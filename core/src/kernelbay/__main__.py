"""``python -m kernelbay``: the same as the ``kernelbay`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
