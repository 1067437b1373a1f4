"""The JAX side of the backend: the probe, the device table and the mode flag.

jax is imported here, inside functions, and only once a hook that needs it runs: listing or
selecting backends never pays for it.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
from typing import Any

from kernelbay.errors import BackendUnavailableError, LaunchError
from kernelbay.types import Device

log = logging.getLogger("kernelbay.tpu")

ENV_INTERPRET = "KERNELBAY_TPU_INTERPRET"
UNAVAILABLE = (
    "no TPU found; set KERNELBAY_TPU_INTERPRET=1 to run Pallas kernels in interpret mode on the CPU "
    "(KERNELBAY_TPU_INTERPRET=tpu: JAX's TPU interpreter, which poisons uninitialised memory and "
    "detects out-of-bounds reads)"
)

#: Fallback VMEM budget when the chip cannot tell (interpret mode, older jax).
DEFAULT_VMEM_BYTES = 16 * 1024 * 1024


class _State:
    """What the probe found. Filled once by :func:`probe`; read on every hot path."""

    interpret: bool = False
    #: what ``pallas_call(interpret=...)`` receives: False, True or ``pltpu.InterpretParams()``
    interpret_arg: Any = False
    jax_devices: list[Any] = []
    #: the budget the VMEM check uses when a kernel sets no ``vmem_limit_bytes``
    vmem_bytes: int = DEFAULT_VMEM_BYTES
    vmem_known: bool = False
    #: what ``vmem_limit_bytes`` may be at most (the chip's capacity; in interpret mode the
    #: capacity of the chip registered for interpret mode), or 0 when unknown
    vmem_capacity: int = 0


state = _State()


def interpret_requested() -> str:
    """``""`` (off), ``"tpu"`` (JAX's TPU interpreter) or ``"1"`` (``interpret=True``)."""
    v = os.environ.get(ENV_INTERPRET, "").strip().lower()
    if v in ("", "0", "false", "no", "off"):
        return ""
    return "tpu" if v == "tpu" else "1"


def probe() -> list[Device]:
    """Find TPUs through jax; fall back to the JAX CPU backend in interpret mode.

    :raises BackendUnavailableError: no TPU and interpret mode not requested.
    """
    tpus = _tpu_devices()
    if tpus:
        state.interpret, state.interpret_arg = False, False
        state.jax_devices = tpus
        state.vmem_bytes, state.vmem_known = _vmem_capacity()
        state.vmem_capacity = state.vmem_bytes if state.vmem_known else 0
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
    mode = interpret_requested()
    if not mode:
        raise BackendUnavailableError(UNAVAILABLE)
    import jax

    cpu = jax.devices("cpu")[0]
    state.interpret = True
    state.jax_devices = [cpu]
    state.vmem_bytes, state.vmem_known = DEFAULT_VMEM_BYTES, False
    state.vmem_capacity = register_interpret_tpu_info()
    if mode == "tpu":
        from jax.experimental.pallas import tpu as pltpu

        state.interpret_arg = pltpu.InterpretParams()
        what = "JAX's TPU interpreter (KERNELBAY_TPU_INTERPRET=tpu)"
    else:
        state.interpret_arg = True
        what = "Pallas interpret mode (KERNELBAY_TPU_INTERPRET=1)"
    return [
        Device(
            "tpu",
            0,
            name=f"{what} on the JAX CPU backend",
            properties={
                "interpret": True,
                "interpreter": "tpu" if mode == "tpu" else "hlo",
                "platform": "cpu",
                "vmem_bytes": DEFAULT_VMEM_BYTES,
            },
        )
    ]


#: The chip whose description interpret mode registers (as Helion does): TPU7x, one core.
INTERPRET_CHIP = "TPU_7X"


def register_interpret_tpu_info() -> int:
    """Give JAX a TPU description for the CPU platform, so code that asks for one in interpret
    mode (``emit_pipeline``, ``pltpu.get_tpu_info()``) gets an answer; return its VMEM capacity
    (0 when this jax has no registry)."""
    try:
        from jax._src.pallas.mosaic import tpu_info
    except ImportError:  # a jax without the registry: emit_pipeline needs a TPU there
        return 0
    try:
        chip = getattr(tpu_info.ChipVersion, INTERPRET_CHIP)
        info = tpu_info.get_tpu_info_for_chip(chip, 1)
    except Exception as exc:
        log.info("kernelbay-tpu: no %s description in this jax (%s); emit_pipeline needs a TPU", INTERPRET_CHIP, exc)
        return 0
    tpu_info.registry.setdefault("cpu", lambda: info)
    return int(tpu_info.registry["cpu"]().vmem_capacity_bytes)


def _tpu_possible() -> bool:
    """Whether jax could see a TPU at all, decided without importing jax (about 2 s).

    jax reaches TPUs only through libtpu (the ``libtpu`` package, or ``TPU_LIBRARY_PATH``), and
    TPU VMs expose the chips as ``/dev/accel*`` or VFIO devices.
    """
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


FORKED = (
    "the tpu backend (JAX) was initialised in this process's parent before fork(): JAX runs threads, and a "
    "forked child that uses it waits forever. Start worker processes with the 'spawn' or 'forkserver' method "
    "(multiprocessing.get_context('spawn')), or first use the tpu backend in the child"
)


class _ForkedDevices(list):
    """``state.jax_devices`` in a forked child of a process that used JAX: every use raises."""

    def __getitem__(self, i: Any) -> Any:
        raise LaunchError(FORKED)

    def __bool__(self) -> bool:
        return True


def _after_fork_in_child() -> None:
    # As PyTorch does for CUDA: refuse clearly instead of hanging in JAX's runtime.
    if state.jax_devices and not isinstance(state.jax_devices, _ForkedDevices):
        state.jax_devices = _ForkedDevices()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def jax_device(device: Device) -> Any:
    """The jax device behind a kernelbay device of this backend."""
    return state.jax_devices[device.index]
