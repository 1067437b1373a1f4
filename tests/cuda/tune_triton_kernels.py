"""The Triton tuner test's builder, launcher and reference (module level: the tuner's worker
processes import them, and the Triton function, by name)."""

from __future__ import annotations

from typing import Any

import kernelbay as kb
import numpy as np

from .triton_kernels import add

N = 1 << 20
SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


def source(config: dict[str, Any]) -> Any:
    meta = {"signature": SIG, "constexprs": {"BLOCK": config["BLOCK"]}, "num_warps": config["WARPS"]}
    return kb.Source(add, "triton", meta=meta)


def launch(kernel: Any, config: dict[str, Any], args: list[Any]) -> None:
    kernel.launch(-(-N // config["BLOCK"]), args=(*args, N))


def host_args() -> list[Any]:
    rng = np.random.default_rng(5)
    return [
        rng.standard_normal(N).astype(np.float32),
        rng.standard_normal(N).astype(np.float32),
        np.zeros(N, np.float32),
    ]


def reference(x: Any, y: Any, out: Any) -> list[Any]:
    return [None, None, x + y]
