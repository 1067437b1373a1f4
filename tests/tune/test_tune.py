"""kb.tune on the cpu backend, with real compiles, real launches and real faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import kernelbay as kb
import numpy as np
import pytest
from kernelbay.tune import runner

from tests.tune import kernels as K

OPTS = dict(check=K.reference, rtol=1e-4, atol=1e-3, repeats=3, warmup=1, progress=False)


def test_faults_are_results_and_a_wrong_config_is_never_chosen(cpu):
    space = {"BLOCK": [64], "UNROLL": [4], "MODE": [0, 1, 2, 3, 4, 5]}
    r = kb.tune(K.source(), space, K.launch, args=K.host_args(), devices="cpu", timeout=3, **OPTS)
    status = {c["MODE"]: rec["status"] for c, rec in r.records}
    assert status == {0: "ok", 1: "wrong", 2: "launch_error", 3: "timeout", 4: "compile_error", 5: "crashed"}
    assert r.config == {"BLOCK": 64, "UNROLL": 4, "MODE": 0}
    by_mode = {c["MODE"]: rec for c, rec in r.records}
    assert "SIGSEGV" in by_mode[2]["detail"] and "null pointer" in by_mode[2]["detail"]
    assert "SIGABRT" in by_mode[5]["detail"]
    assert "killed" in by_mode[3]["detail"]
    assert "line" in by_mode[4]["detail"]  # the compiler's log, pointing at the line
    # the kernel handed back is the winner's, ready: it computes the right sums
    x, y = K.host_args()
    ax, ay = kb.asarray(x, device=cpu), kb.asarray(y, device=cpu)
    r.launch([ax, ay])
    np.testing.assert_allclose(ay.numpy(), K.reference(x, y)[1], rtol=1e-4, atol=1e-3)


def test_results_persist_and_a_rerun_neither_compiles_nor_times(cpu, monkeypatch):
    space = {"BLOCK": [32, 128], "UNROLL": [1, 4]}
    first = kb.tune(K.source(), space, K.launch, args=K.host_args(), devices="cpu", **OPTS)
    assert (first.reused, first.timed) == (0, 4)
    assert all(rec["status"] == "ok" and rec["samples"] == 3 and rec["spread"] >= 0 for _, rec in first.records)
    assert all(rec["worker_properties"]["threads"] >= 1 for _, rec in first.records)

    def refuse(*a, **k):
        raise AssertionError("a rerun started a compile pool or a timing worker")

    with monkeypatch.context() as m:
        m.setattr("kernelbay._precompile.run_pool", refuse)
        m.setattr(runner.WorkerHandle, "start", refuse)
        again = kb.tune(K.source(), space, K.launch, args=K.host_args(), devices="cpu", **OPTS)
    assert (again.reused, again.timed) == (4, 0)
    assert again.config == first.config
    # another problem key is another results file: tuned afresh
    other = kb.tune(K.source(), space, K.launch, args=K.host_args(), devices="cpu", key="rows=512,other", **OPTS)
    assert other.timed == 4


def test_default_config_is_the_reference_when_no_check_is_given(cpu):
    space = {"BLOCK": [64], "UNROLL": [1], "MODE": [0, 1]}
    r = kb.tune(K.source(), space, K.launch, args=K.host_args(), devices="cpu", repeats=2, progress=False)
    assert [rec["status"] for _, rec in r.records] == ["ok", "wrong"]


def test_two_workers_on_one_device_take_turns_and_neither_times_out(cpu):
    space = {"BLOCK": [32, 128], "UNROLL": [1, 4]}
    r = kb.tune(K.source(), space, K.launch, args=K.host_args(), devices=["cpu", "cpu"], timeout=20, **OPTS)
    assert [rec["status"] for _, rec in r.records] == ["ok"] * 4


@pytest.mark.parametrize(("mode", "status"), [(5, "crashed"), (2, "launch_error")])
def test_a_default_config_that_crashes_is_not_charged_to_another(cpu, mode, status):
    space = {"BLOCK": [64], "UNROLL": [1], "MODE": [mode, 0]}
    with pytest.raises(kb.TuneError, match=rf"default config .*'MODE': {mode}.*{status}.*check="):
        kb.tune(K.source(), space, K.launch, args=K.host_args(), devices="cpu", repeats=2, progress=False)


def test_a_builder_function_and_a_restricted_random_space(cpu):
    space = kb.tune.Space({"BLOCK": [32, 64, 128], "UNROLL": [1, 2, 4, 8]}, restrict=lambda c: c["UNROLL"] <= 4)
    r = kb.tune(
        K.source_for, space, K.launch, args=K.make_args, devices="cpu", strategy="random", max_configs=3, **OPTS
    )
    tried = [c for c, _ in r.records]
    assert len(tried) == 3 and tried[0] == {"BLOCK": 32, "UNROLL": 1}  # the default is always tried
    assert all(c["UNROLL"] <= 4 for c in tried)
    assert all(rec["status"] == "ok" for _, rec in r.records)


def test_export_and_import_move_results_to_another_cache(cpu, tmp_path, monkeypatch):
    space = {"BLOCK": [32, 128], "UNROLL": [4]}
    kb.tune(K.source(), space, K.launch, args=K.host_args(), devices="cpu", **OPTS)
    out = tmp_path / "results.json"
    assert kb.tune.export_results(str(out)) == 1
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert kb.tune.import_results(str(out)) == 2
    r = kb.tune(K.source(), space, K.launch, args=K.host_args(), devices="cpu", **OPTS)
    assert (r.reused, r.timed) == (2, 0)
    (tmp_path / "bad.json").write_text(json.dumps({"something": "else"}))
    with pytest.raises(kb.InvalidArgumentError, match="not a kernelbay tuning results export"):
        kb.tune.import_results(str(tmp_path / "bad.json"))


def test_the_decorator_tunes_on_first_call_and_launches_the_winner(cpu):
    x, y = K.host_args()
    ax, ay = kb.asarray(x, device=cpu), kb.asarray(y, device=cpu)
    K.rowsum(ax, ay)
    np.testing.assert_allclose(ay.numpy(), K.reference(x, y)[1], rtol=1e-4, atol=1e-3)
    assert len(K.rowsum.best) == 1
    K.rowsum(ax, ay)  # same shapes: no second sweep
    assert len(K.rowsum.best) == 1


def test_functions_that_cannot_reach_a_worker_are_refused(cpu):
    with pytest.raises(kb.InvalidArgumentError, match="module level"):
        kb.tune(K.source(), {"BLOCK": [64], "UNROLL": [1]}, lambda k, c, a: None, args=K.host_args(), progress=False)


def test_bad_spaces_and_strategies_are_refused():
    with pytest.raises(kb.InvalidArgumentError, match="no values"):
        kb.tune.Space({"BLOCK": []})
    with pytest.raises(kb.InvalidArgumentError, match="passes its restrictions"):
        kb.tune.Space({"BLOCK": [1]}, restrict=lambda c: False).configs()
    with pytest.raises(kb.InvalidArgumentError, match="unknown tuning strategy"):
        kb.tune(K.source(), {"BLOCK": [64]}, K.launch, args=K.host_args(), strategy="genetic")


def test_import_kernelbay_does_not_load_the_tuner():
    code = "import sys, kernelbay as kb; assert 'kernelbay.tune' not in sys.modules; kb.tune; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_cli_runs_a_declared_sweep_and_exports(cpu, tmp_path):
    from kernelbay.cli import main

    assert main(["tune", "run", "tests.tune.kernels:rowsum", "--device", "cpu", "--no-progress"]) == 0
    out = tmp_path / "r.json"
    assert main(["tune", "export", str(out)]) == 0
    assert json.loads(out.read_text())["files"]
    assert main(["tune", "run", "tests.tune.kernels:not_a_tuning"]) == 1


def test_optuna_proposes_configs_batch_by_batch(cpu):
    pytest.importorskip("optuna", reason="optuna is not installed (the kernelbay[optuna] extra)")
    space = {"BLOCK": [32, 64, 128], "UNROLL": [1, 2, 4]}
    r = kb.tune(
        K.source(), space, K.launch, args=K.host_args(), devices="cpu", strategy="optuna", max_configs=4, **OPTS
    )
    tried = [c for c, _ in r.records]
    assert 2 <= len(tried) <= 4 and tried[0] == {"BLOCK": 32, "UNROLL": 1}
    assert len({json.dumps(c, sort_keys=True) for c in tried}) == len(tried)
    assert all(rec["status"] == "ok" for _, rec in r.records)
    assert r.config in tried


def test_optuna_missing_is_said_plainly(cpu, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    with pytest.raises(kb.UnsupportedError, match=r"kernelbay\[optuna\]"):
        kb.tune(K.source(), {"BLOCK": [32], "UNROLL": [1]}, K.launch, args=K.host_args(), strategy="optuna", **OPTS)


def test_when_every_config_fails_the_error_says_why(cpu):
    with pytest.raises(kb.TuneError, match=r"1 compile_error\); the first failure \(compile_error\): .*line"):
        kb.tune(
            K.source(), {"BLOCK": [64], "UNROLL": [1], "MODE": [4]}, K.launch, args=K.host_args(), devices="cpu", **OPTS
        )


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("exit", "it exited with status 3 at start; its stderr ends: starts_badly: giving up now"),
        ("kill", "it was killed by SIGKILL at start"),
        ("import", "importing the functions given to kb.tune failed: ModuleNotFoundError: .*kernelbay_no_such_module"),
        ("hang", "it did not answer within"),
    ],
)
def test_a_worker_that_dies_or_hangs_while_starting_stops_the_sweep_with_a_clear_error(cpu, monkeypatch, how, says):
    # The job is large (a 200 kB source): sent as the process's argument, it filled the spawn pipe,
    # and a worker that died while starting left the tuner waiting forever.
    from tests.tune import starts_badly

    monkeypatch.setattr(runner, "START_TIMEOUT", 3.0)
    monkeypatch.setenv("KB_TUNE_TEST_WORKER", how)  # read by the worker's import of starts_badly
    src = kb.Source("// " + "x" * 200_000 + '\nextern "C" __global__ void k(float* y) { y[threadIdx.x] = V; }', "cuda")
    with pytest.raises(kb.TuneError, match=f"tuning worker for cpu:0 could not start: {says}"):
        kb.tune(
            src,
            {"V": [1, 2]},
            starts_badly.launch,
            args=[np.zeros(32, np.float32)],
            devices="cpu",
            check=False,
            progress=False,
        )


def test_a_worker_that_dies_between_requests_is_a_crash_result_and_the_next_request_restarts_it(cpu):
    # A write to a dead worker's pipe fails (EPIPE) at once: reported as the config's crash, never
    # raised from the tuner nor waited on; the next request starts a fresh worker.
    import os
    import signal

    from kernelbay.tune.worker import Job

    cfg = {"BLOCK": 32, "UNROLL": 1}
    job = Job(
        sources={0: K.source_for(cfg)},
        configs={0: cfg},
        launch=K.launch,
        args=K.host_args(),
        check=K.reference,
        default=0,
        rtol=1e-4,
        atol=1e-3,
        flush_l2=False,
    )
    h = runner.WorkerHandle("cpu:0", job)
    try:
        h.start()
        os.kill(h.proc.pid, signal.SIGKILL)
        h.proc.join(10)
        status, detail = h.check(0, 30.0)
        assert status == "crashed" and "SIGKILL" in detail
        assert h.check(0, 60.0) == ("ok", "")
        assert h.restarts == 1
    finally:
        h.stop()


def test_a_source_whose_function_does_not_pickle_travels_to_the_worker_by_name():
    import pickle

    from kernelbay.tune.worker import Job

    with pytest.raises(TypeError):
        pickle.dumps(K.UNPICKLABLE)
    src = kb.Source(K.UNPICKLABLE, "triton", meta={"num_warps": 2})
    job = Job({0: src, 1: K.source()}, {0: {}, 1: {}}, K.launch, [], False, 0, 0.0, 0.0, False)
    back = pickle.loads(pickle.dumps(job))
    assert back.sources[0].code is K.UNPICKLABLE
    assert back.sources[0].meta == src.meta and back.sources[0].lang == "triton"
    assert back.sources[1] == job.sources[1]


def test_function_sources_go_to_the_compile_pool_only_where_the_backend_keeps_them_on_disk(cpu, monkeypatch):
    """A function source (here the pyref backend's Python kernels) is compiled in precompile's
    pool, passed by module and name, only when its backend implements kernelbay_compile_to_cache
    itself; with the fallback (a compile that may live only in its process) the timing worker
    compiles it. Text sources always go to the pool."""
    from kernelbay import _api, _precompile
    from kernelbay.tune import phases

    try:
        dev = kb.device("pyref")
    except kb.KernelbayError as exc:
        pytest.skip(f"the pyref example backend is not installed: {exc}")
    fn_src = K.PYREF_SOURCE
    text_src = K.source_for({"UNROLL": 2})
    sent: list = []

    def pool(fn, calls, jobs, desc, show, timeout=None):
        sent.extend(calls)
        return [fn(*c) for c in calls]

    monkeypatch.setattr(_precompile, "run_pool", pool)
    records: dict = {}
    phases.compile_all([fn_src, text_src], [0, 1], [dev, cpu], records, None, False)
    assert sent and all(isinstance(item, kb.Source) and item.code is text_src.code for item, _ in sent), sent
    assert records == {}

    _, b = _api._resolve(dev)
    compiled: list = []
    monkeypatch.setattr(b, "compile_to_cache", lambda d, s: compiled.append(s))  # "lands on disk"
    sent.clear()
    phases.compile_all([fn_src, text_src], [0, 1], [dev], records, None, False)
    by_name = [item for item, _ in sent if isinstance(item, tuple)]
    assert len(by_name) == 1 and by_name[0][:3] == ("ref", K.__name__, "pyref_double")
    assert [s.code for s in compiled] == [K.pyref_double], "the worker imported the function by name"
    assert records == {}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe (POSIX)")
def test_a_compile_that_hangs_is_a_timeout_result_and_the_sweep_goes_on(cpu, tmp_path, monkeypatch):
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)
    monkeypatch.setattr(K, "HANG_PATH", str(fifo))
    # The config that compiles is in the cache already: its compile in the pool is a hit, well
    # inside the deadline even on a loaded machine (a cold compile there can take longer).
    kb.compile(K.hang_source({"BLOCK": 32, "HANG": 0}), cpu)
    res = kb.tune(
        K.hang_source,
        {"BLOCK": [32], "HANG": [0, 1]},
        K.launch,
        args=K.host_args(),
        check=K.reference,
        rtol=1e-4,
        atol=1e-3,
        repeats=2,
        devices=cpu,
        compile_timeout=10,
        progress=False,
    )
    by = {c["HANG"]: r for c, r in res.records}
    assert by[1]["status"] == "timeout" and "longer than 10 s" in by[1]["detail"], by[1]
    assert by[0]["status"] == "ok" and res.config["HANG"] == 0
