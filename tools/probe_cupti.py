"""What CUPTI's activity kinds cost per launch (the figures in docs/profiling.md).

Run from the repository root on a machine with an NVIDIA GPU and libcupti:
``PYTHONPATH=. python tools/probe_cupti.py``. Times kernelbay launches (one saxpy block,
batches of 2,000, each batch waited for) with no activity kind enabled, then with each set of
kinds the CUPTI timer could use, interleaved round by round, and with the timer's push/pop of
an external correlation id around each launch. Prints the median added cost per launch.
"""

import ctypes
import statistics
import time

import kernelbay as kb
import numpy as np
from kernelbay_cuda import cupti

from benchmarks import _kernels

DRIVER, RUNTIME, KERNEL, MEMCPY, MEMSET, EXTERNAL = 4, 5, 10, 1, 2, 39  # cupti_activity.h
CUSTOM0 = 3
lib, where = cupti.load_library()
print("libcupti:", where)
held: dict[int, ctypes.Array] = {}
records = [0]
REQ = ctypes.CFUNCTYPE(
    None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)
)
DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)


@REQ
def requested(buf, size, maxrec):
    b = ctypes.create_string_buffer(8 << 20)
    held[ctypes.addressof(b)] = b
    buf[0] = ctypes.addressof(b)
    size[0] = 8 << 20
    maxrec[0] = 0


@DONE
def completed(ctx, stream, buf, size, valid):
    rec = ctypes.c_void_p()
    while lib.cuptiActivityGetNextRecord(ctypes.c_void_p(buf), ctypes.c_size_t(valid), ctypes.byref(rec)) == 0:
        records[0] += 1
    held.pop(buf, None)


assert lib.cuptiActivityRegisterCallbacks(requested, completed) == 0
dev = kb.device("cuda")
k = _kernels.saxpy_kernel("cuda", dev)
x = kb.asarray(np.ones(32, np.float32), device=dev)
y = kb.zeros(32, "float32", device=dev)
args = (x, y, np.float32(0.5), np.int32(32))
launch = k._binding.launch
push, pop = lib.cuptiActivityPushExternalCorrelationId, lib.cuptiActivityPopExternalCorrelationId
push.argtypes = [ctypes.c_int, ctypes.c_uint64]
pop.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
out = ctypes.c_uint64()
N = 2000


def plain() -> None:
    for _ in range(N):
        launch(k, 1, 32, args, 0, None)


def pushed() -> None:
    for i in range(N):
        push(CUSTOM0, i + 1)
        launch(k, 1, 32, args, 0, None)
        pop(CUSTOM0, ctypes.byref(out))


CASES = {
    "nothing enabled": ((), plain),
    "KERNEL": ((KERNEL,), plain),
    "KERNEL+DRIVER": ((KERNEL, DRIVER), plain),
    "KERNEL+DRIVER+EXTERNAL": ((KERNEL, DRIVER, EXTERNAL), plain),
    "KERNEL+DRIVER+EXTERNAL, push/pop": ((KERNEL, DRIVER, EXTERNAL), pushed),
    "the timer's set (+MEMCPY, MEMSET), push/pop": ((KERNEL, DRIVER, EXTERNAL, MEMCPY, MEMSET), pushed),
}
samples: dict[str, list[float]] = {c: [] for c in CASES}
plain()
dev.synchronize()
for _round in range(12):
    for name, (kinds, fn) in CASES.items():
        for kd in kinds:
            assert lib.cuptiActivityEnable(kd) == 0, (name, kd)
        fn()  # warm
        dev.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        dev.synchronize()
        samples[name].append((time.perf_counter_ns() - t0) / N / 1000)
        for kd in kinds:
            lib.cuptiActivityDisable(kd)
        lib.cuptiActivityFlushAll(1)
base = statistics.median(samples["nothing enabled"])
for name, v in samples.items():
    m = statistics.median(v)
    print(f"{name:48s} {m:6.2f} us per launch  (+{m - base:5.2f} us)")
print("records seen:", records[0])
