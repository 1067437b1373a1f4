"""The tpu backend's launch against calling the jitted ``pallas_call`` directly.

Runs on a TPU when there is one; anywhere else in Pallas interpret mode on the JAX CPU backend
(``KERNELBAY_TPU_INTERPRET=1``, set here before kernelbay probes, unless already set).

A Pallas vector add ``o = x + y`` is launched through ``k.launch(grid, None, (x, y, o))`` and,
interleaved, the very jitted ``pallas_call`` the backend cached for that launch signature is
called with the same JAX arrays. Two groups:

* host dispatch: batches of calls, the device waited for after each batch (untimed), so the
  host's cost per launch is what is measured and JAX's queue never fills;
* launch + wait: each call followed by waiting for its result (the figure a user sees on a
  small kernel).
"""

from __future__ import annotations

import os

os.environ.setdefault("KERNELBAY_TPU_INTERPRET", "1")

from ._timing import find, goal, interleaved_samples, record, skipped, stats  # noqa: E402

SUITE = "cpu"

DISPATCH = "tpu launch, Pallas vector add: host dispatch"
WAIT = "tpu launch, Pallas vector add: launch + wait"
DIRECT = "jitted pallas_call, called directly"


def add_kernel(x_ref, y_ref, o_ref):  # noqa: ANN001 -- a Pallas kernel
    o_ref[...] = x_ref[...] + y_ref[...]


def _device():
    try:
        import jax  # noqa: F401
        from jax.experimental import pallas  # noqa: F401
    except Exception as exc:  # jax missing or broken
        return None, f"jax with Pallas is not importable here ({type(exc).__name__}: {exc}); pip install 'kernelbay[tpu]'"
    import kernelbay as kb

    rec = {b.name: b for b in kb.backends()}.get("tpu")
    if rec is None:
        return None, "kernelbay-tpu is not installed (pip install 'kernelbay[tpu]')"
    if rec.status != "available":
        return None, f"the tpu backend is {rec.status}: {(rec.reason or '').splitlines()[0]}"
    return kb.device("tpu"), ""


def _direct_entry(k, grid, args):  # noqa: ANN001
    """The backend's cached jitted call for this signature (kernelbay_tpu.compiler.Entry), or
    ``None`` when its internals are not as this benchmark expects."""
    cache = getattr(k.handle, "cache", None)
    if not isinstance(cache, dict) or len(cache) != 1:
        return None
    e = next(iter(cache.values()))
    if not all(hasattr(e, a) for a in ("fn", "ins", "outs")):
        return None
    return e


def _own_call(dev, n):  # noqa: ANN001
    """The equivalent jax.jit(pl.pallas_call(...)), built here."""
    import jax
    from jax.experimental import pallas as pl

    interp = bool(dev.properties.get("interpret", True))
    call = pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct((n,), "float32"), grid=(1,), interpret=interp)
    return jax.jit(call)


def run(quick: bool) -> list[dict]:
    dev, why = _device()
    if dev is None:
        return [skipped(DISPATCH, "kernelbay", why)]
    import jax
    import numpy as np

    import kernelbay as kb

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

    e = _direct_entry(k, 1, args)
    note = "the backend's cached jitted pallas_call"
    if e is not None:
        fn = e.fn
        operands = [args[i].handle for i in e.ins]
    else:
        fn = _own_call(dev, n)
        operands = [x.handle, y.handle]
        note = "jax.jit(pl.pallas_call(...)) built by the benchmark (backend internals not reachable)"
    fn(*operands)
    last: list = [None]
    launch = k.launch

    def through_kernelbay() -> None:
        launch(1, None, args)

    def direct() -> None:
        last[0] = fn(*operands)

    def wait() -> None:
        dev.synchronize()
        jax.block_until_ready(last[0])

    mode = "interpret mode on the JAX CPU backend" if dev.properties.get("interpret") else dev.name
    extra = {"note": mode}
    s = interleaved_samples({"kernelbay": through_kernelbay, DIRECT: direct}, number=5 if quick else 50,
                            repeat=3 if quick else 30, warmup=1 if quick else 3, after_batch=wait)
    out = [record(DISPATCH, name, stats(v), **extra) for name, v in s.items()]

    def kb_wait() -> None:
        launch(1, None, args)
        dev.synchronize()

    def direct_wait() -> None:
        jax.block_until_ready(fn(*operands))

    s = interleaved_samples({"kernelbay": kb_wait, DIRECT: direct_wait}, number=3 if quick else 20,
                            repeat=3 if quick else 30, warmup=1 if quick else 3)
    out += [record(WAIT, name, stats(v), **extra) for name, v in s.items()]
    for r in out:
        if r["name"] == DIRECT:
            r["note"] = f"{mode}; {note}"
    return out


def goals(records: list[dict]) -> list[dict]:
    kbr, d = find(records, DISPATCH, "kernelbay"), find(records, DISPATCH, DIRECT)
    if not (kbr and d and "median" in kbr and "median" in d):
        return []
    mode = " (interpret mode)" if "interpret" in (kbr.get("note") or "") else ""
    g = goal(f"tpu{mode}: cached launch ≤ 1.2× calling the cached jitted pallas_call directly",
             kbr["median"] / d["median"], 1.2)
    return [g | {"unit": "×"}]
