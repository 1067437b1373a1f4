"""pyref whose compile goes through kernelbay's disk cache: the kernel's bytecode (``marshal``)."""
