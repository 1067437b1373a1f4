"""kernelbay's CPU backend.

Compiles ``cuda`` and ``c++`` kernel sources with the system C++ compiler and runs the grid on
the host's cores. The hooks live in :mod:`kernelbay_cpu.plugin`; this package imports nothing
heavy so that listing backends stays cheap.
"""

__version__ = "0.2.0"
