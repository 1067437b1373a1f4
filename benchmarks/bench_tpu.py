"""The tpu backend's launch against calling the jitted ``pallas_call`` directly.

Runs on a TPU when there is one; anywhere else in Pallas interpret mode on the JAX CPU backend
(``KERNELBAY_TPU_INTERPRET=1``, set here before kernelbay probes, unless already set).

A Pallas vector add ``o = x + y`` is launched through ``k.launch(grid, None, (x, y, o))`` and,
interleaved, ``jax.jit(pl.pallas_call(...))`` of the same kernel, built here as a Pallas author
writes it, is called with the same JAX arrays. Four groups:

* host dispatch: batches of calls, the device waited for after each batch (untimed), so the
  host's cost per launch is what is measured and JAX's queue never fills;
* launch + wait: each launch followed by ``dev.synchronize()``, against each direct call
  followed by ``block_until_ready`` (the figure a user sees on a small kernel);
* idle wait: ``dev.synchronize()`` with nothing in flight, against ``block_until_ready`` of a
  finished array;
* inside jax.jit: a jitted step calling ``k.jax`` against the same step calling
  ``pallas_call``, each call waited for;
* eager ``k.jax``: ``k.jax`` called outside any jit, against the jitted ``pallas_call`` called
  directly (host dispatch, as above);
* first launch: a kernel launched for the first time (traced, lowered, compiled, run, waited
  for) against a first call of ``jax.jit(pl.pallas_call(...))`` of the same kernel; and a launch
  whose static argument takes a new value, against ``jax.jit(pl.pallas_call(partial(...)))`` with
  that value. Each sample is a kernel function neither side has seen (one XLA compilation each).

Each goal's ratio is (direct + paired difference) / direct, the paired difference being the
median over batches of kernelbay's batch minus the direct batch run next to it: on a loaded
machine the plain ratio of medians swings by tens of percent, the paired difference far less.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERNELBAY_TPU_INTERPRET", "1")

from ._timing import find, goal, interleaved_samples, paired_diff, record, skipped, stats

SUITE = "cpu"

DISPATCH = "tpu launch, Pallas vector add: host dispatch"
WAIT = "tpu launch, Pallas vector add: launch + wait"
IDLE = "tpu synchronize with nothing in flight"
JIT = "tpu jitted step: k.jax inside jax.jit, call + wait"
DIRECT = "jitted pallas_call, called directly"
IDLE_DIRECT = "block_until_ready of a finished array"
JIT_DIRECT = "the same step calling pl.pallas_call"
PAIRED = "kernelbay − direct"
EAGER = "tpu k.jax called eagerly (outside jit): host dispatch"
FIRST = "tpu first launch of a new kernel, + wait"
FIRST_DIRECT = "first call of jax.jit(pl.pallas_call(...)), + wait"
STATIC = "tpu launch with a new static value, + wait"
STATIC_DIRECT = "first call of jax.jit(pl.pallas_call(partial(kernel, static=value))), + wait"


def added(group: str) -> str:
    """The group of a paired difference: what kernelbay adds per call over the direct peer."""
    return f"{group}: what kernelbay adds (paired difference)"


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def scaled_kernel(x_ref, y_ref, o_ref, *, scale):
    o_ref[...] = x_ref[...] * scale + y_ref[...]


def _fresh_kernel(c: float):
    """A kernel function no one has traced: ``o = x * c + y``."""

    def fresh(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * c + y_ref[...]

    return fresh


def _device():
    try:
        import jax  # noqa: F401
        from jax.experimental import pallas  # noqa: F401
    except Exception as exc:  # jax missing or broken
        return (
            None,
            f"jax with Pallas is not importable here ({type(exc).__name__}: {exc}); pip install 'kernelbay[tpu]'",
        )
    import kernelbay as kb

    rec = {b.name: b for b in kb.backends()}.get("tpu")
    if rec is None:
        return None, "kernelbay-tpu is not installed (pip install 'kernelbay[tpu]')"
    if rec.status != "available":
        return None, f"the tpu backend is {rec.status}: {(rec.reason or '').splitlines()[0]}"
    return kb.device("tpu"), ""


def _own_call(dev, n):
    """The equivalent jax.jit(pl.pallas_call(...)), built here."""
    import jax
    from jax.experimental import pallas as pl

    interp = bool(dev.properties.get("interpret", True))
    from kernelbay_tpu._driver import state

    call = pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct((n,), "float32"),
        grid=(1,),
        interpret=state.interpret_arg if interp else False,
    )
    return call


def run(quick: bool) -> list[dict]:
    dev, why = _device()
    if dev is None:
        return [skipped(DISPATCH, "kernelbay", why)]
    import jax
    import kernelbay as kb
    import numpy as np

    n = 1024
    src = kb.Source(add_kernel, lang="pallas", name="add", meta={"outputs": ("o_ref",)})
    k = kb.compile(src, device=dev)
    x = kb.asarray(np.arange(n, dtype=np.float32), device=dev)
    y = kb.asarray(np.ones(n, np.float32), device=dev)
    o = kb.zeros(n, "float32", device=dev)
    args = (x, y, o)
    k.launch(1, None, args)
    dev.synchronize()
    assert float(o.numpy()[3]) == 4.0, "the Pallas add gave a wrong result"

    call = _own_call(dev, n)
    fn = jax.jit(call)
    operands = [x.handle, y.handle]
    jax.block_until_ready(fn(*operands))
    last: list = [None]
    launch = k.launch
    sync = dev.synchronize

    def through_kernelbay() -> None:
        launch(1, None, args)

    def direct() -> None:
        last[0] = fn(*operands)

    def wait() -> None:
        sync()
        jax.block_until_ready(last[0])

    mode = "interpret mode on the JAX CPU backend" if dev.properties.get("interpret") else dev.name
    extra = {"note": mode}
    num, rep, warm = (5, 3, 1) if quick else (50, 30, 3)
    s = interleaved_samples(
        {"kernelbay": through_kernelbay, DIRECT: direct}, number=num, repeat=rep, warmup=warm, after_batch=wait
    )
    out = [record(DISPATCH, name, stats(v), **extra) for name, v in s.items()]
    out.append(record(added(DISPATCH), PAIRED, paired_diff(s["kernelbay"], s[DIRECT]), **extra))

    def kb_wait() -> None:
        launch(1, None, args)
        sync()

    def direct_wait() -> None:
        fn(*operands).block_until_ready()

    s = interleaved_samples(
        {"kernelbay": kb_wait, DIRECT: direct_wait}, number=3 if quick else 20, repeat=rep, warmup=warm
    )
    out += [record(WAIT, name, stats(v), **extra) for name, v in s.items()]
    out.append(record(added(WAIT), PAIRED, paired_diff(s["kernelbay"], s[DIRECT]), **extra))

    done = fn(*operands)
    done.block_until_ready()
    sync()
    s = interleaved_samples(
        {"kernelbay": sync, IDLE_DIRECT: done.block_until_ready}, number=100 if quick else 2000, repeat=rep, warmup=warm
    )
    out += [record(IDLE, name, stats(v), **extra) for name, v in s.items()]

    shape = jax.ShapeDtypeStruct((n,), np.float32)
    step_kb = jax.jit(lambda a, b: k.jax(a, b, shape, grid=1) * 2.0 + a)
    step_direct = jax.jit(lambda a, b: call(a, b) * 2.0 + a)
    xa, ya = x.handle, y.handle
    np.testing.assert_array_equal(np.asarray(step_kb(xa, ya)), np.asarray(step_direct(xa, ya)))
    same = step_kb.lower(xa, ya).as_text() == step_direct.lower(xa, ya).as_text()
    s = interleaved_samples(
        {
            "kernelbay": lambda: step_kb(xa, ya).block_until_ready(),
            JIT_DIRECT: lambda: step_direct(xa, ya).block_until_ready(),
        },
        number=3 if quick else 20,
        repeat=rep,
        warmup=warm,
    )
    jit_note = f"{mode}; the two steps lower to {'the same' if same else 'DIFFERENT'} StableHLO"
    out += [record(JIT, name, stats(v), note=jit_note) for name, v in s.items()]
    out.append(record(added(JIT), PAIRED, paired_diff(s["kernelbay"], s[JIT_DIRECT]), note=jit_note))

    kjax = k.jax
    np.testing.assert_array_equal(np.asarray(kjax(xa, ya, shape, grid=1)), np.asarray(fn(xa, ya)))

    def eager() -> None:
        last[0] = kjax(xa, ya, shape, grid=1)

    s = interleaved_samples({"kernelbay": eager, DIRECT: direct}, number=num, repeat=rep, warmup=warm, after_batch=wait)
    out += [record(EAGER, name, stats(v), **extra) for name, v in s.items()]
    out.append(record(added(EAGER), PAIRED, paired_diff(s["kernelbay"], s[DIRECT]), **extra))
    out += _first_calls(dev, kb, jax, np, x, y, o, 2 if quick else 9, extra)
    return out


def _first_calls(dev, kb, jax, np, x, y, o, repeat: int, extra: dict) -> list[dict]:
    """First launches (new kernel; new static value) against first jitted pallas_call calls."""
    import functools

    from jax.experimental import pallas as pl
    from kernelbay_tpu._driver import state

    out_shape = jax.ShapeDtypeStruct(x.shape, np.float32)
    xa, ya = x.handle, y.handle
    counter = iter(range(1, 1 << 30))
    static_k = kb.compile(
        kb.Source(scaled_kernel, lang="pallas", name="scaled", meta={"outputs": ("o_ref",)}), device=dev
    )

    def kb_first() -> None:
        src = kb.Source(_fresh_kernel(1000.0 + next(counter)), lang="pallas", meta={"outputs": ("o_ref",)})
        kb.compile(src, device=dev).launch(1, None, (x, y, o))
        dev.synchronize()

    def direct_first() -> None:
        call = pl.pallas_call(
            _fresh_kernel(-1000.0 - next(counter)), out_shape=out_shape, grid=(1,), interpret=state.interpret_arg
        )
        jax.jit(call)(xa, ya).block_until_ready()

    def kb_static() -> None:
        static_k.launch(1, None, {"x_ref": x, "y_ref": y, "o_ref": o, "scale": 1000.0 + next(counter)})
        dev.synchronize()

    def direct_static() -> None:
        kernel = functools.partial(scaled_kernel, scale=-1000.0 - next(counter))
        call = pl.pallas_call(kernel, out_shape=out_shape, grid=(1,), interpret=state.interpret_arg)
        jax.jit(call)(xa, ya).block_until_ready()

    import warnings

    from kernelbay_tpu._call import RecompileWarning

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecompileWarning)  # a new static each call is the point here
        for group, peer, cases in (
            (FIRST, FIRST_DIRECT, {"kernelbay": kb_first, FIRST_DIRECT: direct_first}),
            (STATIC, STATIC_DIRECT, {"kernelbay": kb_static, STATIC_DIRECT: direct_static}),
        ):
            s = interleaved_samples(cases, number=1, repeat=repeat, warmup=1)
            s = {name: [v / 1000 for v in vals] for name, vals in s.items()}  # in ms
            out += [record(group, name, stats(v), unit="ms", **extra) for name, v in s.items()]
            out.append(record(added(group), PAIRED, paired_diff(s["kernelbay"], s[peer]), unit="ms", **extra))
    return out


GOALS = (
    (DISPATCH, DIRECT, "cached launch ≤ 1.05× calling the jitted pallas_call directly", 1.05),
    (WAIT, DIRECT, "launch + dev.synchronize() ≤ 1.2× direct call + block_until_ready", 1.2),
    (JIT, JIT_DIRECT, "a jitted step calling k.jax ≤ 1.02× the same step calling pallas_call", 1.02),
    (EAGER, DIRECT, "eager k.jax (outside jit) ≤ 1.5× calling the jitted pallas_call directly", 1.5),
    (FIRST, FIRST_DIRECT, "first launch of a new kernel ≤ 1.1× a first jit(pallas_call) call", 1.1),
    (STATIC, STATIC_DIRECT, "a launch with a new static value ≤ 1.1× a first jit(pallas_call(partial)) call", 1.1),
)


def goals(records: list[dict]) -> list[dict]:
    out = []
    for group, peer, text, limit in GOALS:
        kbr, d, diff = (
            find(records, group, "kernelbay"),
            find(records, group, peer),
            find(records, added(group), PAIRED),
        )
        if not (kbr and d and "median" in kbr and "median" in d and d["median"]):
            continue
        mode = " (interpret mode)" if "interpret" in (kbr.get("note") or "") else ""
        # The ratio from the paired per-batch difference: what kernelbay adds over the batch run
        # just before or after it, which machine load drifting between batches does not move.
        more = diff["median"] if diff and "median" in diff else kbr["median"] - d["median"]
        out.append(goal(f"tpu{mode}: {text} (paired)", (d["median"] + more) / d["median"], limit) | {"unit": "×"})
    return out
