"""kernelbay-broken: a backend whose plugin module fails to import (see plugin.py)."""

__version__ = "0.2.0"
