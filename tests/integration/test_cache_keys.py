"""The cuda backend keys its disk cache by the files NVRTC may read (issue #17); no GPU needed."""

from __future__ import annotations

import kernelbay as kb
import pytest

nvrtc = pytest.importorskip("kernelbay_cuda.nvrtc", reason="kernelbay-cuda is not installed")


def test_included_files_on_disk_are_part_of_the_key(tmp_path):
    inc = tmp_path / "inc"
    (inc / "sub").mkdir(parents=True)
    (inc / "a.h").write_text('#include "sub/b.h"\n')
    (inc / "sub" / "b.h").write_text("#define B 1\n")
    absolute = tmp_path / "abs.h"
    absolute.write_text("#define A 1\n")
    src = kb.Source(
        f'#include <a.h>\n#include "{absolute}"\n#include "given.h"\n', "cuda", headers={"given.h": "int given;"}
    )
    first = nvrtc.include_digests(src, [f"-I{inc}"])
    assert set(first) == {str(inc / "a.h"), str(inc / "sub" / "b.h"), str(absolute)}
    (inc / "sub" / "b.h").write_text("#define B 2\n")  # two levels down, through a relative include
    second = nvrtc.include_digests(src, ["--include-path", str(inc)])
    assert second[str(inc / "sub" / "b.h")] != first[str(inc / "sub" / "b.h")]
    assert second[str(absolute)] == first[str(absolute)]
