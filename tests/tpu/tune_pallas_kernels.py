"""A Pallas matmul whose block shape kb.tune sweeps (module level: the tuner's worker processes
import the kernel, its index maps, the builder, launch and reference by name)."""

from __future__ import annotations

from typing import Any

import kernelbay as kb
import numpy as np

M, K, N = 256, 128, 256


def matmul_kernel(x_ref, y_ref, z_ref):
    z_ref[...] = x_ref[...] @ y_ref[...]


def x_map(i, j):
    return i, 0


def y_map(i, j):
    return 0, j


def z_map(i, j):
    return i, j


def source(config: dict[str, Any]) -> kb.Source:
    """One config's Source: its block shape in the BlockSpecs (index maps by name: they pickle)."""
    from jax.experimental import pallas as pl

    bm, bn = config["BM"], config["BN"]
    specs = {
        "x_ref": pl.BlockSpec((bm, K), x_map),
        "y_ref": pl.BlockSpec((K, bn), y_map),
        "z_ref": pl.BlockSpec((bm, bn), z_map),
    }
    return kb.Source(matmul_kernel, "pallas", meta={"outputs": ("z_ref",), "block_specs": specs})


def launch(kernel: Any, config: dict[str, Any], args: list[Any]) -> None:
    kernel.launch(grid=(M // config["BM"], N // config["BN"]), args=args)


def host_args() -> list[Any]:
    rng = np.random.default_rng(1)
    return [
        rng.standard_normal((M, K)).astype(np.float32),
        rng.standard_normal((K, N)).astype(np.float32),
        np.zeros((M, N), np.float32),
    ]


def reference(x: Any, y: Any, z: Any) -> list[Any]:
    return [None, None, x @ y]
