"""The device kit: decide the device once, pass it down, and let modules read theirs from their tensors.

A folder that imports only torch and the standard library and nothing outside itself: copy it
whole into any project (`from devkit import resolve_device, ...`). Each common pattern has a
stricter twin here:

    pattern in the wild                                  what the kit ships
    device = torch.device("cuda" if ... else "cpu")      resolve_device(spec): never downgrades,
                                                         knows mps / xpu / torchrun, checks cuda:N
    a loop over nvidia-smi to find an idle GPU           resolve_device("auto:free:8GiB")
    "which card is cuda:1?"                              gpu_info(1): name, memory, UUID, PCI bus id
    next(model.parameters()).device                      module_device(module)
    a dummy nn.Parameter(torch.empty(0)) for .device     DeviceAwareMixin: .device and .dtype
    assert a.device == b.device                          same_device(images=x, labels=y)
    an auto_device decorator for flat tensor args        move_to(batch, device), on_device(device)
    a context manager around torch.cuda.set_device       use_device(device): no-op off CUDA / XPU
    nn.DataParallel(model) (gathers on cuda:0)           data_parallel(model, device): the resolved device first
    try/except around main() for bad --device values     edge.run_main(main): one line, exit 2
    "Expected all tensors to be on the same device"      DeviceGuard(model); device_report(model)
    torch.save(model) / torch.load(path)                 checkpoint.py: CPU tensors only, atomic,
                                                         weights_only-loadable files
    autocast + GradScaler by hand                        precision.py: make_policy(name, device)

Modules: backends.py (what the machine has), spelling.py (a spec's spelling, DeviceError and PrecisionError,
without torch), resolve.py (specs), gpus.py (GPU identity and free memory), placement.py (module_device,
move_to, same_device, data_parallel), guard.py (DeviceGuard, device_report), checkpoint.py and atomic.py
(CheckpointError), precision.py, edge.py (main()'s exit codes). README.md: adopting it in an existing project.
`python -m <package>.devkit [SPEC]` prints the device table and what SPEC resolves to.
"""

import importlib

# Each name and the module that defines it. They load when first used (PEP 562's module __getattr__), so
# `from devkit.spelling import ...` or `devkit.edge` stays free of torch: a script checks its flags first.
_HOME = {
    "DeviceError": "spelling", "available_devices": "backends", "resolve_device": "resolve",
    "describe_device": "resolve",
    "GpuInfo": "gpus", "gpu_info": "gpus", "device_identity": "gpus", "index_order_warning": "gpus",
    "module_device": "placement", "DeviceAwareMixin": "placement", "move_to": "placement", "on_device": "placement",
    "use_device": "placement", "same_device": "placement", "data_parallel": "placement",
    "distributed_data_parallel": "placement", "device_report": "guard", "DeviceGuard": "guard",
}

__all__ = [
    "DeviceError", "available_devices", "resolve_device", "describe_device", "GpuInfo", "gpu_info",
    "device_identity", "index_order_warning", "module_device", "DeviceAwareMixin", "move_to", "on_device",
    "use_device", "same_device", "device_report", "DeviceGuard", "data_parallel", "distributed_data_parallel",
]


def __getattr__(name: str):
    """`devkit.resolve_device` and the other names of __all__, imported from their module when first read."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value  # the next read is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
