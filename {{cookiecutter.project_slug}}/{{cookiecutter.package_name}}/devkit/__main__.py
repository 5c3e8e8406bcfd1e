# devicelint: device-module -- naming devices is this file's job
"""`python -m <package>.devkit [SPEC]`: this machine's devices, which physical GPU each cuda:N is, and what SPEC
(default: auto) resolves to; exit 2 with one line when SPEC is bad."""

from __future__ import annotations

import contextlib
import os
import platform
import sys

import torch

from .backends import DeviceError, available_devices, backend_count, backend_module, format_bytes, format_table
from .edge import ArgumentParser
from .gpus import gpu_info, index_order_warning
from .precision import cpu_bf16_native
from .resolve import describe_device, resolve_device


def _cpu_row() -> tuple[str, ...]:
    """The cpu's name, total memory where the OS tells it, and whether bf16 runs natively or emulated (slowly)."""
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:  # Linux names the model here
        models = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
        name = models[0] if models else name
    try:
        memory = format_bytes(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # no sysconf on Windows
        memory = "-"
    native = cpu_bf16_native()  # None: the OS does not list CPU flags
    bf16 = "native" if native else "emulated" if native is False else "yes"
    return ("cpu", f"{name} ({os.cpu_count()} cores)", memory, "-", bf16)

def _device_row(name: str) -> tuple[str, ...]:
    """One row of the device table: device, name, memory, compute capability, bf16 support."""
    device = torch.device(name)
    if device.type == "cpu":
        return _cpu_row()
    if device.type == "mps":
        recommended = getattr(torch.mps, "recommended_max_memory", None)
        return (name, "Apple GPU", format_bytes(recommended()) if recommended else "-", "-", "native")
    props = backend_module(device.type).get_device_properties(device)
    if device.type == "cuda":  # bf16 runs natively from compute capability 8.0 (Ampere) on
        capability, bf16 = f"{props.major}.{props.minor}", props.major >= 8
    else:
        capability, bf16 = "-", torch.xpu.is_bf16_supported()
    return (name, props.name, format_bytes(props.total_memory), capability, "native" if bf16 else "no")

def _gpu_lines() -> list[str]:
    """Which physical card each cuda:N is: free memory, UUID, PCI bus id, CUDA_VISIBLE_DEVICES entry."""
    count = backend_count("cuda")
    if not count:
        return []
    rows = [("gpu", "free", "uuid", "pci bus id", "CUDA_VISIBLE_DEVICES entry")]
    for info in (gpu_info(index) for index in range(count)):
        rows.append((str(info.device), format_bytes(info.free_memory), info.uuid, info.pci_bus_id,
                     info.visible_as if info.visible_as is not None else "-"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    mapping = (f"CUDA_VISIBLE_DEVICES={visible}: cuda:N is its N-th entry" if visible is not None
               else "CUDA_VISIBLE_DEVICES is unset: every GPU is visible")
    warning = index_order_warning()
    return [format_table(rows, right=(1,)), mapping, *([warning] if warning else [])]

def main(argv: list[str] | None = None) -> int:
    """Print the devices this machine has, which physical GPU each cuda:N is, and what SPEC resolves to."""
    parser = ArgumentParser(description="Show this machine's devices and resolve a spec.")
    parser.add_argument("spec", nargs="?", default="auto",
                        help="e.g. cuda:1, auto:free, auto:free:8GiB, GPU-<uuid> (default: auto)")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}")
    rows = [("device", "name", "memory", "capability", "bf16")]
    print(format_table(rows + [_device_row(name) for name in available_devices()], right=(2,)))
    for line in _gpu_lines():
        print(line)
    try:
        device = resolve_device(args.spec)
    except DeviceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{args.spec} -> {describe_device(device)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
