"""The corpus cases: real public CUDA kernels with numpy references (data only, no pytest).

Each :class:`Case` names a file under ``tests/corpus/``, the kernel's entry name (with template
arguments where upstream instantiates a template), and a ``make`` function that builds the
inputs at CI-small sizes, the launch configuration exactly as the upstream host code computes
it, and the expected outputs. :func:`run_case` compiles and launches one case on one device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CORPUS_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Launch:
    """One launch: arguments (numpy arrays are copied to the device), config, expected outputs.

    :ivar expected: argument index -> expected host array after the launch.
    :ivar rtol, atol: tolerance for ``np.testing.assert_allclose``.
    """

    args: list[Any]
    grid: tuple[int, ...]
    block: tuple[int, ...]
    expected: dict[int, np.ndarray]
    shared_mem: int = 0
    rtol: float = 1e-5
    atol: float = 1e-5
    check: Callable[[dict[int, np.ndarray]], None] | None = None


@dataclass(frozen=True)
class Case:
    """One kernel of the corpus.

    :ivar id: ``project/file:kernel``-style identifier used by pytest and the report.
    :ivar path: the .cu file, relative to ``tests/corpus``.
    :ivar kernel: the entry name (``name<T>`` for a template instantiation).
    :ivar make: builds a :class:`Launch` from a seeded generator.
    :ivar globals_: module globals the upstream host code fills (``__constant__``), name -> array.
    """

    id: str
    path: str
    kernel: str
    make: Callable[[np.random.Generator], Launch]
    globals_: dict[str, np.ndarray] = field(default_factory=dict)
    headers: tuple[str, ...] = ()
    #: compiler options, as the upstream build or tuner passes them (Kernel Tuner's ``-Dblock_size_x=...``)
    options: tuple[str, ...] = ()
    #: elements of each output that depend on thread order (atomicExch, atomicCAS...): the
    #: cuda-equals-cpu comparison leaves them out (each backend's run still checks their properties)
    order_dependent: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def source_text(self) -> str:
        return (CORPUS_DIR / self.path).read_text()

    def header_texts(self) -> dict[str, str]:
        """Project headers the file includes (``#include "name"``), by include name."""
        return {Path(h).name: (CORPUS_DIR / h).read_text() for h in self.headers}


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def fill_module_globals(kernel: Any, globals_: dict[str, np.ndarray]) -> None:
    """Fill ``__constant__``/``__device__`` globals the way the upstream host code does
    (``cudaMemcpyToSymbol``): ``Kernel.set_global``. A backend without module globals raises
    ``UnsupportedError``, turned into ``NotImplementedError`` (an expected failure where listed in
    known_failures.py)."""
    import kernelbay as kb

    for name, value in globals_.items():
        try:
            kernel.set_global(name, value)
        except kb.UnsupportedError as exc:
            raise NotImplementedError(f"module globals on {kernel.device}: {exc}") from exc


def run_case(case: Case, device: str, seed: int = 0) -> dict[int, np.ndarray]:
    """Compile and launch ``case`` on ``device``; return every array argument after the launch.

    Raises ``AssertionError`` on a mismatch, a ``kernelbay.errors`` exception on a compile or
    launch error.
    """
    import kernelbay as kb

    launch = case.make(np.random.default_rng(seed))
    dev = kb.device(device)
    template = "<" in case.kernel
    src = kb.Source(
        case.source_text(),
        lang="cuda",
        name=case.kernel,
        name_expressions=(case.kernel,) if template else (),
        headers=case.header_texts(),
        options=case.options,
    )
    kernel = kb.compile(src, device=dev)
    fill_module_globals(kernel, case.globals_)
    dev_args = [kb.asarray(a, device=dev) if isinstance(a, np.ndarray) else a for a in launch.args]
    kernel.launch(grid=launch.grid, block=launch.block, args=tuple(dev_args), shared_mem=launch.shared_mem)
    dev.synchronize()
    outs = {i: a.numpy() for i, a in enumerate(dev_args) if isinstance(launch.args[i], np.ndarray)}
    for i, want in launch.expected.items():
        np.testing.assert_allclose(
            outs[i].astype(np.float64) if outs[i].dtype.kind in "fV" or outs[i].dtype.name == "bfloat16" else outs[i],
            want,
            rtol=launch.rtol,
            atol=launch.atol,
            err_msg=f"{case.id}: argument {i}",
        )
    if launch.check is not None:
        launch.check(outs)
    return outs


# ---------------------------------------------------------------------------------------------
# siboehm/SGEMM_CUDA: C = alpha * A @ B + beta * C, row-major, launches as in src/runner.cu.


def _sgemm(
    grid_of: Callable[[int, int], tuple[int, ...]], block: tuple[int, ...], m: int = 128, n: int = 128, k: int = 64
) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = rng.standard_normal((m, n), dtype=np.float32)
        alpha, beta = np.float32(0.5), np.float32(3.0)
        want = alpha * (a.astype(np.float64) @ b) + beta * c.astype(np.float64)
        args = [np.int32(m), np.int32(n), np.int32(k), alpha, a.ravel(), b.ravel(), beta, c.ravel()]
        return Launch(args, grid_of(m, n), block, {7: want.ravel()}, rtol=1e-4, atol=1e-4)

    return make


def _sgemm_cases() -> list[Case]:
    d = "sgemm_cuda/"
    by_m = lambda m, n: (ceil_div(m, 32), ceil_div(n, 32))
    return [
        Case("sgemm_cuda/1_naive:sgemm_naive", d + "1_naive.cu", "sgemm_naive", _sgemm(by_m, (32, 32))),
        Case(
            "sgemm_cuda/2_coalesce:sgemm_global_mem_coalesce<32>",
            d + "2_kernel_global_mem_coalesce.cu",
            "sgemm_global_mem_coalesce<32>",
            _sgemm(by_m, (32 * 32,)),
        ),
        Case(
            "sgemm_cuda/3_smem:sgemm_shared_mem_block<32>",
            d + "3_kernel_shared_mem_blocking.cu",
            "sgemm_shared_mem_block<32>",
            _sgemm(by_m, (32 * 32,)),
        ),
        Case(
            "sgemm_cuda/4_1d_blocktiling:sgemm1DBlocktiling<64,64,8,8>",
            d + "4_kernel_1D_blocktiling.cu",
            "sgemm1DBlocktiling<64, 64, 8, 8>",
            _sgemm(lambda m, n: (ceil_div(n, 64), ceil_div(m, 64)), (64 * 64 // 8,)),
        ),
        Case(
            "sgemm_cuda/5_2d_blocktiling:sgemm2DBlocktiling<128,128,8,8,8>",
            d + "5_kernel_2D_blocktiling.cu",
            "sgemm2DBlocktiling<128, 128, 8, 8, 8>",
            _sgemm(lambda m, n: (ceil_div(n, 128), ceil_div(m, 128)), (128 * 128 // 64,)),
        ),
        Case(
            "sgemm_cuda/6_vectorize:sgemmVectorize<128,128,8,8,8>",
            d + "6_kernel_vectorize.cu",
            "sgemmVectorize<128, 128, 8, 8, 8>",
            _sgemm(lambda m, n: (ceil_div(n, 128), ceil_div(m, 128)), (128 * 128 // 64,)),
        ),
    ]


# ---------------------------------------------------------------------------------------------
# NVIDIA/cuda-samples


def _vector_add(rng: np.random.Generator) -> Launch:
    n = 50000  # upstream's numElements
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    threads = 256
    return Launch(
        [a, b, np.zeros(n, np.float32), np.int32(n)], (ceil_div(n, threads),), (threads,), {2: a.astype(np.float64) + b}
    )


def _atomics(rng: np.random.Generator) -> Launch:
    threads, blocks = 256, 64  # upstream numThreads, numBlocks
    nt = threads * blocks
    data = np.zeros(11, np.int32)
    data[8] = data[10] = 0xFF
    tids = np.arange(nt, dtype=np.int64)
    want = data.astype(np.int64).copy()
    want[0] = 10 * nt
    want[1] = -10 * nt
    want[3] = nt - 1
    want[4] = 0
    want[8] = np.bitwise_and.reduce(2 * tids + 7) & 0xFF
    want[9] = -1  # OR of 1 << tid over tid 0..31 sets every bit (larger shifts are UB in C)
    x = 0xFF
    for t in range(nt):
        x ^= t
    want[10] = x
    det = [0, 1, 3, 4, 8, 9, 10]

    def check(outs: dict[int, np.ndarray]) -> None:
        got = outs[0].astype(np.int64)
        np.testing.assert_array_equal(got[det], want[det], err_msg="deterministic atomics")
        # [2] exch, [5] inc, [6] dec, [7] cas depend on thread order (upstream's computeGold
        # checks properties, as here): [2] is some tid, [5] in 0..17, [6] in 0..137, [7] a tid.
        assert 0 <= got[2] < nt and 0 <= got[5] <= 17 and 0 <= got[6] <= 137 and -1 <= got[7] < nt, got

    return Launch([data], (blocks,), (threads,), {}, check=check)


def _vote_pattern() -> np.ndarray:
    size = 4 * 32  # VOTE_DATA_GROUP * warp_size; genVoteTestPattern
    i = np.arange(size, dtype=np.uint32)
    pat = np.zeros(size, np.uint32)
    q1 = slice(size // 4, size // 2)
    pat[q1] = np.where(i[q1] & 1, i[q1], 0)
    q2 = slice(size // 2, 3 * size // 4)
    pat[q2] = np.where(i[q2] & 1, 0, i[q2])
    pat[3 * size // 4 :] = 0xFFFFFFFF
    return pat


def _vote(all_: bool) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        pat = _vote_pattern()
        warps = pat.reshape(4, 32) != 0
        per_warp = warps.all(axis=1) if all_ else warps.any(axis=1)
        want = np.repeat(per_warp.astype(np.uint32), 32)
        return Launch([pat, np.full(pat.size, 7, np.uint32), np.int32(pat.size)], (1, 1), (pat.size, 1), {1: want})

    return make


def _vote3(rng: np.random.Generator) -> Launch:
    ws = 32
    tx = np.arange(3 * ws)
    upper = tx >= (ws * 3) // 2
    warp_any = np.repeat(upper.reshape(3, ws).any(axis=1), ws)
    warp_all = np.repeat(upper.reshape(3, ws).all(axis=1), ws)
    want = np.stack([warp_any, upper, warp_all], axis=1).ravel()
    return Launch([np.zeros(3 * 3 * ws, np.bool_), np.int32(ws)], (1,), (3 * ws,), {0: want})


def _transpose(transposes: bool) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        sx, sy, tile, rows = 128, 128, 32, 16  # upstream: dim3 grid(size_x / TILE_DIM, size_y / TILE_DIM)
        x = rng.standard_normal((sy, sx), dtype=np.float32)
        want = x.T.copy() if transposes else x
        args = [np.zeros(sx * sy, np.float32), x.ravel(), np.int32(sx), np.int32(sy)]
        return Launch(args, (sx // tile, sy // tile), (tile, rows), {0: want.ravel()}, rtol=0, atol=0)

    return make


_CONV_R = 8  # KERNEL_RADIUS in convolutionSeparable_common.h


def _conv_taps() -> np.ndarray:
    return np.random.default_rng(1).random(2 * _CONV_R + 1, dtype=np.float32)  # c_Kernel, as main.cpp fills it


def _convolution(axis: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        w, h = 128, 128
        src = rng.random((h, w), dtype=np.float32)
        taps = _conv_taps().astype(np.float64)
        pad = [(0, 0), (0, 0)]
        pad[axis] = (_CONV_R, _CONV_R)
        padded = np.pad(src.astype(np.float64), pad)
        want = np.zeros((h, w))
        for k in range(-_CONV_R, _CONV_R + 1):  # convolutionRowCPU / convolutionColumnCPU
            shifted = padded[:, _CONV_R + k : _CONV_R + k + w] if axis == 1 else padded[_CONV_R + k : _CONV_R + k + h]
            want += shifted * taps[_CONV_R - k]
        args = [np.zeros(w * h, np.float32), src.ravel(), np.int32(w), np.int32(h), np.int32(w)]
        if axis == 1:  # convolutionRowsGPU
            grid, block = (w // (8 * 16), h // 4), (16, 4)
        else:  # convolutionColumnsGPU
            grid, block = (w // 16, h // (8 * 8)), (16, 8)
        return Launch(args, grid, block, {0: want.ravel()}, rtol=1e-5, atol=1e-5)

    return make


def _reduction(which: int) -> Callable[[np.random.Generator], Launch]:
    """reduction.cpp's getNumBlocksAndThreads (maxThreads 256, maxBlocks 64) and reduce<int>'s smem."""

    def make(rng: np.random.Generator) -> Launch:
        n, max_threads, max_blocks = 1 << 16, 256, 64
        x = rng.integers(0, 256, size=n, dtype=np.int32)  # upstream: rand() & 0xFF
        if which < 3:
            threads = max_threads
            blocks = ceil_div(n, threads)
        else:
            threads = max_threads
            blocks = ceil_div(n, threads * 2)
            if which >= 6:
                blocks = min(max_blocks, blocks)
        smem = 2 * threads * 4 if threads <= 32 else threads * 4
        if which == 9:
            smem = 2 * 4  # numOfMultiWarpGroups * sizeof(T)
        total = int(x.astype(np.int64).sum())

        def check(outs: dict[int, np.ndarray]) -> None:
            got = int(outs[1][:blocks].astype(np.int64).sum())
            assert got == total, f"sum of the {blocks} block partials is {got}, want {total}"
            if which < 6:  # one block per contiguous chunk: compare each partial
                chunk = threads if which < 3 else 2 * threads
                want = x.astype(np.int64).reshape(blocks, chunk).sum(axis=1)
                np.testing.assert_array_equal(outs[1][:blocks], want)

        return Launch(
            [x, np.zeros(blocks, np.int32), np.uint32(n)], (blocks,), (threads,), {}, shared_mem=smem, check=check
        )

    return make


def _cuda_samples_cases() -> list[Case]:
    d = "cuda_samples/"
    conv = d + "convolutionSeparable.cu"
    conv_h = (d + "convolutionSeparable_common.h",)
    conv_g = {"c_Kernel": _conv_taps()}
    red = d + "reduction_kernel.cu"
    red_kernels = [
        (0, "reduce0<int>"),
        (1, "reduce1<int>"),
        (2, "reduce2<int>"),
        (3, "reduce3<int>"),
        (4, "reduce4<int, 256>"),
        (5, "reduce5<int, 256>"),
        (6, "reduce6<int, 256, true>"),
        (7, "reduce7<int, 256, true>"),
        (8, "cg_reduce<int>"),
        (9, "multi_warp_cg_reduce<int, 256, 128>"),
    ]
    return [
        *(Case(f"cuda_samples/reduction:{k.replace(' ', '')}", red, k, _reduction(w)) for w, k in red_kernels),
        Case(
            "cuda_samples/convolutionSeparable:convolutionRowsKernel",
            conv,
            "convolutionRowsKernel",
            _convolution(1),
            globals_=conv_g,
            headers=conv_h,
        ),
        Case(
            "cuda_samples/convolutionSeparable:convolutionColumnsKernel",
            conv,
            "convolutionColumnsKernel",
            _convolution(0),
            globals_=conv_g,
            headers=conv_h,
        ),
        Case("cuda_samples/vectorAdd:vectorAdd", d + "vectorAdd.cu", "vectorAdd", _vector_add),
        Case(
            "cuda_samples/simpleAtomicIntrinsics:testKernel",
            d + "simpleAtomicIntrinsics_kernel.cu",
            "testKernel",
            _atomics,
            order_dependent={0: (2, 5, 6, 7)},
        ),
        Case("cuda_samples/simpleVote:VoteAnyKernel1", d + "simpleVote_kernel.cu", "VoteAnyKernel1", _vote(False)),
        Case("cuda_samples/simpleVote:VoteAllKernel2", d + "simpleVote_kernel.cu", "VoteAllKernel2", _vote(True)),
        Case("cuda_samples/simpleVote:VoteAnyKernel3", d + "simpleVote_kernel.cu", "VoteAnyKernel3", _vote3),
        *(
            Case(f"cuda_samples/transpose:{k}", d + "transpose.cu", k, _transpose(k != "copy" and k != "copySharedMem"))
            for k in (
                "copy",
                "copySharedMem",
                "transposeNaive",
                "transposeCoalesced",
                "transposeNoBankConflicts",
                "transposeDiagonal",
            )
        ),
    ]


# ---------------------------------------------------------------------------------------------
# karpathy/llm.c dev/cuda: fp32 kernels, launches as in each file's host launchers.

_LLMC_H = ("llm_c/common.h",)


def _softmax(
    grid_of: Callable[[int, int], int], block: int, smem_of: Callable[[int], int] = lambda bs: 0
) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        n, c = 64, 256
        x = (rng.standard_normal((n, c)) * 3).astype(np.float32)
        e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
        return Launch(
            [np.zeros(n * c, np.float32), x.ravel(), np.int32(n), np.int32(c)],
            (grid_of(n, block),),
            (block,),
            {0: want.ravel()},
            shared_mem=smem_of(block),
            rtol=1e-4,
            atol=1e-6,
        )

    return make


def _softmax_cases() -> list[Case]:
    f = "llm_c/softmax_forward.cu"
    rows = lambda n, bs: n
    per_thread = lambda n, bs: ceil_div(n, bs)
    per_warp = lambda n, bs: ceil_div(n * 32, bs)
    specs = [
        ("softmax_forward_kernel1", per_thread, 128, lambda bs: 0),
        ("softmax_forward_kernel2", rows, 128, lambda bs: bs * 4),
        ("softmax_forward_kernel3", rows, 32, lambda bs: bs * 4),
        ("softmax_forward_kernel4", rows, 128, lambda bs: bs // 32 * 4),
        ("softmax_forward_online_kernel1", per_thread, 128, lambda bs: 0),
        ("softmax_forward_online_kernel2", per_warp, 128, lambda bs: 0),
        ("softmax_forward_kernel7", rows, 128, lambda bs: 2 * bs // 32 * 4),
        ("softmax_forward_online_kernel8", per_warp, 128, lambda bs: 0),
    ]
    return [Case(f"llm_c/softmax_forward:{k}", f, k, _softmax(g, b, sm), headers=_LLMC_H) for k, g, b, sm in specs]


def _ln_inputs(rng: np.random.Generator) -> tuple[int, int, int, int, np.ndarray, np.ndarray, np.ndarray]:
    b, t, c = 8, 16, 256
    x = rng.standard_normal((b * t, c), dtype=np.float32)
    w = rng.standard_normal(c, dtype=np.float32)
    bias = rng.standard_normal(c, dtype=np.float32)
    return b, t, b * t, c, x, w, bias


def _ln_ref(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1)
    rstd = 1.0 / np.sqrt(((x64 - mean[:, None]) ** 2).mean(axis=1) + 1e-5)
    out = (x64 - mean[:, None]) * rstd[:, None] * w + bias
    return out, mean, rstd


def _layernorm(
    grid_of: Callable[[int, int], int], block: tuple[int, ...], smem_of: Callable[[int, int], int] = lambda bs, c: 0
) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        _, _, n, c, x, w, bias = _ln_inputs(rng)
        out, mean, rstd = _ln_ref(x, w, bias)
        threads = int(np.prod(block))
        args = [
            np.zeros(n * c, np.float32),
            np.zeros(n, np.float32),
            np.zeros(n, np.float32),
            x.ravel(),
            w,
            bias,
            np.int32(n),
            np.int32(c),
        ]
        return Launch(
            args,
            (grid_of(n, threads),),
            block,
            {0: out.ravel(), 1: mean, 2: rstd},
            shared_mem=smem_of(threads, c),
            rtol=1e-4,
            atol=1e-4,
        )

    return make


def _ln_mean(rng: np.random.Generator) -> Launch:
    _, _, n, c, x, w, bias = _ln_inputs(rng)
    bs = 128
    _, mean, _ = _ln_ref(x, w, bias)
    return Launch(
        [np.zeros(n, np.float32), x.ravel(), np.int32(n), np.int32(c), np.int32(bs)],
        (n,),
        (bs,),
        {0: mean},
        shared_mem=bs * 4,
        rtol=1e-4,
        atol=1e-5,
    )


def _ln_rstd(rng: np.random.Generator) -> Launch:
    _, _, n, c, x, w, bias = _ln_inputs(rng)
    bs = 128
    _, mean, rstd = _ln_ref(x, w, bias)
    return Launch(
        [np.zeros(n, np.float32), x.ravel(), mean.astype(np.float32), np.int32(n), np.int32(c), np.int32(bs)],
        (n,),
        (bs,),
        {0: rstd},
        shared_mem=bs * 4,
        rtol=1e-4,
        atol=1e-5,
    )


def _ln_norm(rng: np.random.Generator) -> Launch:
    b, t, n, c, x, w, bias = _ln_inputs(rng)
    out, mean, rstd = _ln_ref(x, w, bias)
    args = [
        np.zeros(n * c, np.float32),
        x.ravel(),
        mean.astype(np.float32),
        rstd.astype(np.float32),
        w,
        bias,
        np.int32(b),
        np.int32(t),
        np.int32(c),
    ]
    return Launch(args, (ceil_div(n * c, 256),), (256,), {0: out.ravel()}, rtol=1e-4, atol=1e-4)


def _layernorm_cases() -> list[Case]:
    f = "llm_c/layernorm_forward.cu"
    per_warp = lambda n, bs: ceil_div(n * 32, bs)
    specs: list[tuple[str, Callable[[np.random.Generator], Launch]]] = [
        ("layernorm_forward_kernel1", _layernorm(lambda n, bs: ceil_div(n, bs), (128,))),
        ("mean_kernel", _ln_mean),
        ("rstd_kernel", _ln_rstd),
        ("normalization_kernel", _ln_norm),
        ("layernorm_forward_kernel3", _layernorm(per_warp, (128,))),
        ("layernorm_forward_kernel4", _layernorm(per_warp, (128,))),
        ("layernorm_forward_kernel5", _layernorm(lambda n, bs: n, (128,))),
        (
            "layernorm_forward_kernel6",
            _layernorm(lambda n, bs: ceil_div(n, bs // 32), (32, 4), lambda bs, c: (2 + bs // 32) * c * 4),
        ),
    ]
    return [Case(f"llm_c/layernorm_forward:{k}", f, k, m, headers=_LLMC_H) for k, m in specs]


def _adamw(rng: np.random.Generator) -> Launch:
    n = 5000
    p, g, m, v = (rng.standard_normal(n, dtype=np.float32) for _ in range(4))
    v = np.abs(v)
    lr, b1, b2, eps, wd, step = 1e-3, 0.9, 0.999, 1e-8, 0.01, 3
    c1, c2 = 1.0 - b1**step, 1.0 - b2**step
    m2 = b1 * m.astype(np.float64) + (1 - b1) * g
    v2 = b2 * v.astype(np.float64) + (1 - b2) * g.astype(np.float64) ** 2
    p2 = p - lr * ((m2 / c1) / (np.sqrt(v2 / c2) + eps) + wd * p)
    f32 = np.float32
    args = [p, g, m, v, np.int64(n), f32(lr), f32(b1), f32(b2), f32(c1), f32(c2), f32(eps), f32(wd)]
    return Launch(args, (ceil_div(n, 512),), (512,), {0: p2, 2: m2, 3: v2}, rtol=1e-4, atol=1e-5)


def _crossentropy(rng: np.random.Generator) -> Launch:
    b, t, v = 4, 32, 100
    logits = rng.standard_normal((b, t, v))
    probs = (np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)).astype(np.float32)
    targets = rng.integers(0, v, size=(b, t), dtype=np.int32)
    want = -np.log(np.take_along_axis(probs.astype(np.float64), targets[..., None], axis=-1))[..., 0]
    args = [np.zeros(b * t, np.float32), probs.ravel(), targets.ravel(), np.int32(b), np.int32(t), np.int32(v)]
    return Launch(args, (ceil_div(b * t, 128),), (128,), {0: want.ravel()}, rtol=1e-5, atol=1e-6)


def _ce_softmax_backward(rng: np.random.Generator) -> Launch:
    b, t, v = 4, 16, 64
    logits = rng.standard_normal((b, t, v))
    probs = (np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)).astype(np.float32)
    targets = rng.integers(0, v, size=(b, t), dtype=np.int32)
    dlosses = rng.random((b, t), dtype=np.float32)
    dlogits = rng.standard_normal((b, t, v), dtype=np.float32)
    onehot = np.eye(v)[targets]
    want = dlogits + (probs.astype(np.float64) - onehot) * dlosses[..., None]
    args = [dlogits.ravel(), dlosses.ravel(), probs.ravel(), targets.ravel(), np.int32(b), np.int32(t), np.int32(v)]
    return Launch(args, (ceil_div(b * t * v, 256),), (256,), {0: want.ravel()}, rtol=1e-5, atol=1e-6)


def _encoder_backward(kernel: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        b, t, c, v = 4, 16, 64, 50
        dout = rng.standard_normal((b, t, c), dtype=np.float32)
        inp = rng.integers(0, v, size=(b, t), dtype=np.int32)
        dwte = np.zeros((v, c), np.float64)
        np.add.at(dwte, inp.ravel(), dout.reshape(b * t, c))
        dwpe = dout.astype(np.float64).sum(axis=0)
        args = [
            np.zeros(v * c, np.float32),
            np.zeros(t * c, np.float32),
            dout.ravel(),
            inp.ravel(),
            np.int32(b),
            np.int32(t),
            np.int32(c),
        ]
        grid = ceil_div(b * t * c, 256) if kernel == 1 else ceil_div(c, 256)
        return Launch(args, (grid,), (256,), {0: dwte.ravel(), 1: dwpe.ravel()}, rtol=1e-4, atol=1e-5)

    return make


def _residual_bf16(kernel: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        import ml_dtypes

        n = 8192
        bf16 = ml_dtypes.bfloat16
        a = rng.standard_normal(n).astype(bf16)
        b = rng.standard_normal(n).astype(bf16)
        want = (a.astype(np.float32) + b.astype(np.float32)).astype(bf16).astype(np.float64)
        grid = ceil_div(n, 256) if kernel == 1 else ceil_div(n, 256 * 8)  # x128::size is 8 for bf16
        return Launch([np.zeros(n, bf16), a, b, np.int32(n)], (grid,), (256,), {0: want}, rtol=0, atol=0)

    return make


_GELU_S = np.float32(np.sqrt(2.0 / np.pi))


def _gelu_bf16(backward: bool, packed: bool) -> Callable[[np.random.Generator], Launch]:
    """llm.c gelu_forward/gelu_backward in bf16: float math on bf16 inputs, rounded to bf16."""

    def make(rng: np.random.Generator) -> Launch:
        import ml_dtypes

        bf16, n = ml_dtypes.bfloat16, 8192
        x = rng.standard_normal(n).astype(bf16)
        xf = x.astype(np.float32)
        arg = _GELU_S * (xf + np.float32(0.044715) * xf**3)
        grid = ceil_div(n, 256 * 8) if packed else ceil_div(n, 256)  # x128::size is 8 for bf16
        if not backward:
            want = (np.float32(0.5) * xf * (np.float32(1.0) + np.tanh(arg))).astype(bf16)
            return Launch(
                [np.zeros(n, bf16), x, np.int32(n)], (grid,), (256,), {0: want.astype(np.float64)}, rtol=1e-2, atol=1e-2
            )
        dout = rng.standard_normal(n).astype(bf16)
        sech = np.float32(1.0) / np.cosh(arg) ** 2
        grad = np.float32(0.5) * (np.float32(1.0) + np.tanh(arg)) + xf * np.float32(0.5) * sech * _GELU_S * (
            np.float32(1.0) + np.float32(3.0 * 0.044715) * xf * xf
        )
        want = (grad * dout.astype(np.float32)).astype(bf16)
        return Launch(
            [np.zeros(n, bf16), x, dout, np.int32(n)],
            (grid,),
            (256,),
            {0: want.astype(np.float64)},
            rtol=1e-2,
            atol=1e-2,
        )

    return make


def _encoder_forward_bf16(kernel: int) -> Callable[[np.random.Generator], Launch]:
    def make(rng: np.random.Generator) -> Launch:
        import ml_dtypes

        bf16 = ml_dtypes.bfloat16
        b, t, c, v = 4, 16, 64, 50
        inp = rng.integers(0, v, size=(b, t), dtype=np.int32)
        wte = rng.standard_normal((v, c)).astype(bf16)
        wpe = rng.standard_normal((t, c)).astype(bf16)
        want = (wte.astype(np.float32)[inp] + wpe.astype(np.float32)[None]).astype(bf16).astype(np.float64)
        n = {1: b * t, 2: b * t * c, 3: b * t * c}[kernel]
        grid = ceil_div(n, 256 * 8) if kernel == 3 else ceil_div(n, 256)
        args = [np.zeros(b * t * c, bf16), inp.ravel(), wte.ravel(), wpe.ravel(), np.int32(b), np.int32(t), np.int32(c)]
        return Launch(args, (grid,), (256,), {0: want.ravel()}, rtol=0, atol=0)

    return make


def _llm_c_cases() -> list[Case]:
    bf16_cases = [
        Case(
            "llm_c/gelu_forward:gelu_forward_kernel1",
            "llm_c/gelu_forward.cu",
            "gelu_forward_kernel1",
            _gelu_bf16(False, False),
            headers=_LLMC_H,
        ),
        Case(
            "llm_c/gelu_forward:gelu_forward_kernel2",
            "llm_c/gelu_forward.cu",
            "gelu_forward_kernel2",
            _gelu_bf16(False, True),
            headers=_LLMC_H,
        ),
        Case(
            "llm_c/gelu_backward:gelu_backward1",
            "llm_c/gelu_backward.cu",
            "gelu_backward1",
            _gelu_bf16(True, False),
            headers=_LLMC_H,
        ),
        Case(
            "llm_c/gelu_backward:gelu_backward2",
            "llm_c/gelu_backward.cu",
            "gelu_backward2",
            _gelu_bf16(True, True),
            headers=_LLMC_H,
        ),
        *(
            Case(
                f"llm_c/encoder_forward:encoder_forward_kernel{i}",
                "llm_c/encoder_forward.cu",
                f"encoder_forward_kernel{i}",
                _encoder_forward_bf16(i),
                headers=_LLMC_H,
            )
            for i in (1, 2, 3)
        ),
    ]
    return [
        *bf16_cases,
        Case(
            "llm_c/crossentropy_softmax_backward:crossentropy_softmax_backward_kernel1",
            "llm_c/crossentropy_softmax_backward.cu",
            "crossentropy_softmax_backward_kernel1",
            _ce_softmax_backward,
            headers=_LLMC_H,
        ),
        Case(
            "llm_c/encoder_backward:encoder_backward_kernel1",
            "llm_c/encoder_backward.cu",
            "encoder_backward_kernel1",
            _encoder_backward(1),
            headers=_LLMC_H,
        ),
        Case(
            "llm_c/encoder_backward:encoder_backward_kernel2",
            "llm_c/encoder_backward.cu",
            "encoder_backward_kernel2",
            _encoder_backward(2),
            headers=_LLMC_H,
        ),
        Case(
            "llm_c/residual_forward:residual_forward_kernel1",
            "llm_c/residual_forward.cu",
            "residual_forward_kernel1",
            _residual_bf16(1),
            headers=_LLMC_H,
        ),
        Case(
            "llm_c/residual_forward:residual_forward_kernel2",
            "llm_c/residual_forward.cu",
            "residual_forward_kernel2",
            _residual_bf16(2),
            headers=_LLMC_H,
        ),
        *_softmax_cases(),
        *_layernorm_cases(),
        Case("llm_c/adamw:adamw_kernel1", "llm_c/adamw.cu", "adamw_kernel1", _adamw, headers=_LLMC_H),
        Case("llm_c/adamw:adamw_kernel2", "llm_c/adamw.cu", "adamw_kernel2", _adamw, headers=_LLMC_H),
        Case(
            "llm_c/crossentropy_forward:crossentropy_forward_kernel1",
            "llm_c/crossentropy_forward.cu",
            "crossentropy_forward_kernel1",
            _crossentropy,
            headers=_LLMC_H,
        ),
    ]


CASES: list[Case] = [*_sgemm_cases(), *_cuda_samples_cases(), *_llm_c_cases()]
