"""The enum values and record offsets _cupti.c declares (it is built without CUPTI's headers)
against CUPTI's real headers, where they are on this machine: the CUDA 13.0 toolkit's and the
CUDA 12.9 nvidia-cuda-cupti wheel's (unzipped here). Every offset must be the same in every
record version listed, since the records a given libcupti writes are one of them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "../../plugins/cuda/src/kernelbay_cuda/_cupti.c")
TOOLKIT = "/usr/local/cuda-13.0/include"
WHEEL = "/tmp/cupti/nvidia_cuda_cupti_cu12-12.9.79-py3-none-manylinux_2_25_x86_64.whl"

KERNELS = ["CUpti_ActivityKernel4", "CUpti_ActivityKernel9"]  # + Kernel10 where declared (13.0)
COPIES = ["CUpti_ActivityMemcpy5", "CUpti_ActivityMemcpy6", "CUpti_ActivityMemset3", "CUpti_ActivityMemset4"]


def checks(kernels: list[str]) -> dict[str, list[str]]:
    """_cupti.c's name -> the C expressions it must equal in every header checked."""
    return {
        "CU_KIND_MEMCPY": ["CUPTI_ACTIVITY_KIND_MEMCPY"],
        "CU_KIND_MEMSET": ["CUPTI_ACTIVITY_KIND_MEMSET"],
        "CU_KIND_KERNEL": ["CUPTI_ACTIVITY_KIND_KERNEL"],
        "CU_KIND_DRIVER": ["CUPTI_ACTIVITY_KIND_DRIVER"],
        "CU_KIND_CONCURRENT_KERNEL": ["CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"],
        "CU_KIND_EXTERNAL_CORRELATION": ["CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION"],
        "CU_EXT_CUSTOM0": ["CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0"],
        "CU_FLUSH_FORCED": ["CUPTI_ACTIVITY_FLAG_FLUSH_FORCED"],
        "CU_OFF_START": [f"offsetof({t}, start)" for t in kernels + COPIES],
        "CU_OFF_END": [f"offsetof({t}, end)" for t in kernels + COPIES],
        "CU_OFF_KERNEL_CORR": [f"offsetof({t}, correlationId)" for t in kernels],
        "CU_OFF_COPY_CORR": [f"offsetof({t}, correlationId)" for t in COPIES],
        "CU_OFF_EXT_ID": ["offsetof(CUpti_ActivityExternalCorrelation, externalId)"],
        "CU_OFF_EXT_CORR": ["offsetof(CUpti_ActivityExternalCorrelation, correlationId)"],
        "kind": [f"offsetof({t}, kind)" for t in kernels + COPIES + ["CUpti_ActivityExternalCorrelation"]],
    }


def declared() -> dict[str, int]:
    with open(SOURCE, encoding="utf-8") as f:
        src = f.read()
    return {m[1]: int(m[2]) for m in re.finditer(r"^#define (CU_\w+) (\d+)", src, re.M)}


def headers(tmp: str) -> list[tuple[str, list[str]]]:
    """(name, include dirs) of each header set found here; cuda.h comes from the toolkit."""
    out = []
    if os.path.exists(os.path.join(TOOLKIT, "cupti_activity.h")):
        out.append(("CUDA 13.0 toolkit", [TOOLKIT]))
    if os.path.exists(WHEEL) and os.path.isdir(TOOLKIT):
        with zipfile.ZipFile(WHEEL) as z:
            z.extractall(tmp, [n for n in z.namelist() if n.startswith("nvidia/cuda_cupti/include/")])
        out.append(("CUDA 12.9 wheel", [os.path.join(tmp, "nvidia/cuda_cupti/include"), TOOLKIT]))
    return out


def test_cupti_c_declares_what_the_headers_say(tmp_path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    found = headers(str(tmp_path))
    if cc is None or not found:
        pytest.skip(f"no C compiler or no CUPTI headers here (looked in {TOOLKIT} and {WHEEL})")
    ours = declared()
    ours["kind"] = 0
    for name, incs in found:
        with open(os.path.join(incs[0], "cupti_activity.h"), encoding="utf-8") as f:
            kernel10 = "CUpti_ActivityKernel10;" in f.read()
        exprs = checks(KERNELS + ["CUpti_ActivityKernel10"] * kernel10)
        assert set(exprs) <= set(ours), f"_cupti.c lacks {set(exprs) - set(ours)}"
        lines = [f'    printf("{k} %lld\\n", (long long)({e}));' for k, es in exprs.items() for e in es]
        prog = tmp_path / f"probe{len(incs)}.c"
        prog.write_text(
            "#include <stdio.h>\n#include <stddef.h>\n#include <cupti_activity.h>\n"
            "#include <cupti_activity_deprecated.h>\nint main(void) {\n" + "\n".join(lines) + "\n    return 0;\n}\n"
        )
        exe = tmp_path / f"probe{len(incs)}"
        subprocess.run([cc, *(f"-I{i}" for i in incs), str(prog), "-o", str(exe)], check=True, capture_output=True)
        got: dict[str, set[int]] = {}
        for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
            k, v = line.split()
            got.setdefault(k, set()).add(int(v))
        assert got == {k: {ours[k]} for k in exprs}, name
