"""Which cpu runner each kernel of the corpus (and of tests/cpu's CUDA dialect kernels) gets, and
why it keeps fibers where it does: the cpu backend's plan (kernelbay_cpu.build.cuda_plan), read
without compiling anything (issue #25: fibers only where the control flow demands them).

tools/runner_report.py prints the table; tests/corpus/test_runner_plan.py holds kernels to
the runner they have earned."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

#: tests/cpu modules whose module-level strings are CUDA sources in the dialect of public files
DIALECT_MODULES = ("tests.cpu.test_cuda_dialect", "tests.cpu.test_cuda_dialect_corpus")


@dataclass(frozen=True)
class Row:
    """One kernel: where it comes from, its runner ("run_fibers", "run_blocks", "run_threads", or
    "refused" where the cpu backend refuses the source) and why (the plan's words)."""

    id: str
    kernel: str
    runner: str
    why: str

    @property
    def giveup(self) -> str:
        """Why the loop path did not take a kernel on fibers: the words after "not as loops: "."""
        return self.why.split("not as loops: ", 1)[1] if "not as loops: " in self.why else self.why


def plan_rows(
    text: str, headers: dict[str, str], names: list[str], where: str, options: tuple[str, ...] = ()
) -> list[Row]:
    """The rows of the entries ``names`` of one cuda source, built with ``options``."""
    import kernelbay as kb
    from kernelbay.errors import CompileError
    from kernelbay_cpu.build import cuda_plan

    src = kb.Source(
        text,
        lang="cuda",
        name=names[0],
        name_expressions=tuple(n for n in names if "<" in n),
        headers=headers,
        options=options,
    )
    try:
        _, plan = cuda_plan(src, names)
    except CompileError as e:
        return [Row(f"{where}:{n}", n, "refused", str(e).splitlines()[0]) for n in names]
    return [Row(f"{where}:{n}", n, plan.runners[n], plan.why[n]) for n in names]


def corpus_rows() -> list[Row]:
    """One row per case of tests/corpus (each case's entry, its file and headers as the case runs it)."""
    from tests.corpus.all_cases import CASES

    out = []
    for c in CASES:
        (row,) = plan_rows(c.source_text(), c.header_texts(), [c.kernel], c.path, tuple(c.options))
        out.append(Row(c.id, row.kernel, row.runner, row.why))
    return out


def dialect_rows() -> list[Row]:
    """One row per ``__global__`` function of the module-level CUDA sources of :data:`DIALECT_MODULES`."""
    from kernelbay.csource import find_kernels

    out = []
    for mod_name in DIALECT_MODULES:
        mod = importlib.import_module(mod_name)
        for var, text in vars(mod).items():
            if not isinstance(text, str) or not re.search(r"\b__global__\b", text):
                continue
            names = list(dict.fromkeys(k.name for k in find_kernels(text) if k.body is not None))
            if names:
                out += plan_rows(text, {}, names, f"{mod_name.rsplit('.', 1)[-1]}.{var}")
    return out


def all_rows() -> list[Row]:
    return corpus_rows() + dialect_rows()
