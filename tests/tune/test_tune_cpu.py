"""kb.tune refuses what its spawned workers could not import."""


def test_functions_in_a_program_without_a_file_are_refused_before_any_worker_starts(tmp_path) -> None:
    # python -c: spawned workers cannot import __main__'s functions; a clear error, never a hang.
    import subprocess
    import sys

    code = (
        "import numpy as np, kernelbay as kb\n"
        "def launch(k, c, a): k.launch(1, 1, a)\n"
        "try:\n"
        "    kb.tune(kb.Source('__global__ void k(float* y){ y[0] = VAL; }', 'cuda', name='k'), {'VAL': [1, 2]},"
        " launch, args=[np.zeros(1, np.float32)], devices='cpu')\n"
        "except kb.InvalidArgumentError as e:\n"
        "    print('refused:', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "python -c" in r.stdout
