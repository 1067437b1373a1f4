"""The Triton side of ``python -m benchmarks.bench_tune --cuda``: a tiled matmul tuned by
``kb.tune`` and by ``triton.autotune`` on the same configs. In a file of its own (Triton reads
a kernel's source from its file, and the tuner's workers import these functions by name), and
imported only with ``--cuda``: Triton is optional."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton
import triton.language as tl

M = N = K = 2048
SIG = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"}
# The configs of Triton's matmul tutorial (fp16, CUDA); kb.tune's space is their index, "CFG".
CONFIGS = [
    {"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3},
    {"BM": 64, "BN": 256, "BK": 32, "num_warps": 4, "num_stages": 4},
    {"BM": 128, "BN": 128, "BK": 32, "num_warps": 4, "num_stages": 4},
    {"BM": 128, "BN": 64, "BK": 32, "num_warps": 4, "num_stages": 4},
    {"BM": 64, "BN": 128, "BK": 32, "num_warps": 4, "num_stages": 4},
    {"BM": 128, "BN": 32, "BK": 32, "num_warps": 4, "num_stages": 4},
    {"BM": 64, "BN": 32, "BK": 32, "num_warps": 2, "num_stages": 5},
    {"BM": 32, "BN": 64, "BK": 32, "num_warps": 2, "num_stages": 5},
]


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ B for row-major float16 A (M x K), B (K x N); float32 C."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(
            a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0
        )
        b = tl.load(
            b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def source(config: dict[str, Any]) -> Any:
    """kb.tune's source builder: one config's Triton Source."""
    import kernelbay as kb

    config = CONFIGS[config["CFG"]]
    meta = {
        "signature": SIG,
        "constexprs": {"BM": config["BM"], "BN": config["BN"], "BK": config["BK"]},
        "num_warps": config["num_warps"],
        "num_stages": config["num_stages"],
    }
    return kb.Source(matmul, "triton", meta=meta)


def launch(kernel: Any, config: dict[str, Any], args: list[Any]) -> None:
    m, kk = args[0].shape
    n = args[1].shape[1]
    config = CONFIGS[config["CFG"]]
    kernel.launch((-(-m // config["BM"]), -(-n // config["BN"])), args=(*args, m, n, kk))


def host_args() -> list[Any]:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    return [a, b, np.zeros((M, N), np.float32)]


def reference(a: Any, b: Any, c: Any) -> list[Any]:
    return [None, None, a.astype(np.float32) @ b.astype(np.float32)]


def triton_autotune(repeats: int) -> tuple[dict[str, Any], float]:
    """The same configs under ``triton.autotune`` (torch tensors, Triton's launch and timing):
    the winner and the wall time of the first call (the one that tunes)."""
    import time

    import torch

    configs = [
        triton.Config(
            {"BM": c["BM"], "BN": c["BN"], "BK": c["BK"]}, num_warps=c["num_warps"], num_stages=c["num_stages"]
        )
        for c in CONFIGS
    ]
    tuned = triton.autotune(configs=configs, key=["M", "N", "K"])(matmul)
    a, b, _ = host_args()
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc = torch.empty((M, N), device="cuda", dtype=torch.float32)

    def grid(meta: dict[str, Any]) -> tuple[int, int]:
        return (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    tuned[grid](ta, tb, tc, M, N, K)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    best = tuned.best_config
    win = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
    return win, wall
