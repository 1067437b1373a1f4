"""A plugin that raises on import, as one would whose native library is missing."""

raise ImportError("libkernelbay_broken.so: cannot open shared object file (deliberately broken example plugin)")
