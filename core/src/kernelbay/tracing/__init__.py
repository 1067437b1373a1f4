"""Tracing and profiling: an extension of kernelbay, not part of its core.

Nothing here is imported by ``import kernelbay`` or by a launch: :func:`kernelbay.trace`,
``KERNELBAY_TRACE`` / ``KERNELBAY_NVTX`` and ``kernelbay profile`` load it when they are used.
It plugs into the core the way a third party would: ``wrapper=True`` hook implementations
registered with :func:`kernelbay.register`, whose hot-path ones also offer the positional form
the core chains as direct calls. It imports the core; the core never imports it.

Modules, each importing only those after it in this list (and the core):

* :mod:`.tracer`: :class:`~.tracer.Tracer`, the plugin, and :func:`~.tracer.trace`.
* :mod:`.nvtx`: NVTX ranges for Nsight Systems (``KERNELBAY_NVTX=1``), a sibling plugin.
* :mod:`.profile`: the ``kernelbay profile`` command (runs a program under the tracer).
* :mod:`.chrome`: the trace file: Chrome trace-event JSON, written atomically.
* :mod:`.tracefile`: folding records into a bounded timeline and whole-run totals.
* :mod:`.hot`: the per-call wrappers (``hot.c``, with a Python twin) and the wrapper protocol.
* :mod:`.records`: what a record is: its named fields, defined once.
"""
