"""The JAX side of the backend: the probe, the device table and the mode flag.

jax is imported here, inside functions, and only once a hook that needs it runs: listing or
selecting backends never pays for it.
"""

from __future__ import annotations

import os
from typing import Any

from kernelbay.errors import BackendUnavailableError
from kernelbay.types import Device

ENV_INTERPRET = "KERNELBAY_TPU_INTERPRET"
UNAVAILABLE = "no TPU found; set KERNELBAY_TPU_INTERPRET=1 to run Pallas kernels in interpret mode on the CPU"

#: Fallback VMEM capacity when the chip cannot tell (interpret mode, older jax).
DEFAULT_VMEM_BYTES = 16 * 1024 * 1024


class _State:
    """What the probe found. Filled once by :func:`probe`; read on every hot path."""

    interpret: bool = False
    jax_devices: list[Any] = []
    vmem_bytes: int = DEFAULT_VMEM_BYTES
    vmem_known: bool = False


state = _State()


def interpret_requested() -> bool:
    return os.environ.get(ENV_INTERPRET, "").strip().lower() not in ("", "0", "false", "no", "off")


def probe() -> list[Device]:
    """Find TPUs through jax; fall back to the JAX CPU backend in interpret mode.

    :raises BackendUnavailableError: no TPU and interpret mode not requested.
    """
    tpus = _tpu_devices()
    if tpus:
        state.interpret = False
        state.jax_devices = tpus
        state.vmem_bytes, state.vmem_known = _vmem_capacity()
        return [
            Device(
                "tpu",
                i,
                name=f"{getattr(d, 'device_kind', 'TPU')} (jax {d})",
                properties={
                    "interpret": False,
                    "platform": "tpu",
                    "device_kind": getattr(d, "device_kind", ""),
                    "vmem_bytes": state.vmem_bytes,
                },
            )
            for i, d in enumerate(tpus)
        ]
    if not interpret_requested():
        raise BackendUnavailableError(UNAVAILABLE)
    import jax

    cpu = jax.devices("cpu")[0]
    state.interpret = True
    state.jax_devices = [cpu]
    state.vmem_bytes, state.vmem_known = DEFAULT_VMEM_BYTES, False
    return [
        Device(
            "tpu",
            0,
            name="Pallas interpret mode on the JAX CPU backend (KERNELBAY_TPU_INTERPRET=1)",
            properties={"interpret": True, "platform": "cpu", "vmem_bytes": DEFAULT_VMEM_BYTES},
        )
    ]


def _tpu_possible() -> bool:
    """Whether jax could see a TPU at all, decided without importing jax (about 2 s).

    jax reaches TPUs only through libtpu (the ``libtpu`` package, or ``TPU_LIBRARY_PATH``), and
    TPU VMs expose the chips as ``/dev/accel*`` or VFIO devices.
    """
    import glob
    import importlib.util

    if os.environ.get("TPU_LIBRARY_PATH"):
        return True
    for mod in ("libtpu", "libtpu_nightly"):
        try:
            if importlib.util.find_spec(mod) is not None:
                return True
        except (ImportError, ValueError):
            pass
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def _tpu_devices() -> list[Any]:
    if not _tpu_possible():
        return []
    import jax

    try:
        return list(jax.devices("tpu"))
    except RuntimeError:  # jax raises RuntimeError when the platform is absent
        return []


def _vmem_capacity() -> tuple[int, bool]:
    try:
        from jax.experimental.pallas import tpu as pltpu

        cap = int(pltpu.get_tpu_info().vmem_capacity_bytes)
        if cap > 0:
            return cap, True
    except Exception:  # older jax or an unknown chip: the documented fallback
        pass
    return DEFAULT_VMEM_BYTES, False


def jax_device(device: Device) -> Any:
    """The jax device behind a kernelbay device of this backend."""
    return state.jax_devices[device.index]
