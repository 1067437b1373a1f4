"""`kernelbay info` names the one command that installs what is missing: in a checkout or installed."""

from __future__ import annotations

from pathlib import Path

from kernelbay import _envinfo

NO_GPU = {"release": None, "cuda": None, "error": "no NVIDIA driver library"}
GPU = {"release": "580.65", "cuda": "13.0", "error": None}
CPU = {"name": "cpu", "status": "available"}
NO_BINDINGS = {
    "name": "cuda",
    "status": "unavailable",
    "reason": "cuda-bindings is not installed (kernelbay-cuda's base install carries no CUDA libraries); ...",
}


def test_installed() -> None:
    fix = _envinfo.fix_command
    assert fix([], NO_GPU, None) == "pip install 'kernelbay[cpu,tpu]'"
    assert fix([CPU], NO_GPU, None) == "pip install 'kernelbay[tpu]'"
    assert fix([CPU, {"name": "tpu", "status": "unavailable"}], NO_GPU, None) is None  # no GPU: cuda is not missing
    assert fix([CPU, {"name": "tpu", "status": "available"}], GPU, None) == "pip install 'kernelbay[cuda]'"
    # kernelbay-cuda without its CUDA libraries: [cuda] brings them (the CUDA 12 ones, which 12 and 13 drivers run)
    assert fix([CPU, NO_BINDINGS, {"name": "tpu", "status": "available"}], GPU, None) == "pip install 'kernelbay[cuda]'"


def test_in_a_checkout_it_is_make_test(tmp_path) -> None:
    fix = _envinfo.fix_command
    assert fix([CPU], GPU, "/src/kb").startswith("make test (in /src/kb")
    assert "uv sync --locked" in fix([], NO_GPU, "/src/kb")
    assert (
        fix([CPU, {"name": "tpu", "status": "available"}, {"name": "cuda", "status": "available"}], GPU, "/x") is None
    )


def test_this_checkout_is_recognised() -> None:
    root = Path(__file__).resolve().parents[2]
    assert _envinfo.checkout_root() == str(root)  # the tests run from the checkout (editable or PYTHONPATH)


def test_info_prints_it(monkeypatch, capsys) -> None:
    from kernelbay import cli

    monkeypatch.setattr(_envinfo, "fix_command", lambda *a: "pip install 'kernelbay[tpu]'")
    assert cli.main(["info"]) == 0
    assert "to install what is missing: pip install 'kernelbay[tpu]'" in capsys.readouterr().out
