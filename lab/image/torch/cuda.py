"""torch.cuda as a GB10 node's container sees it."""

from emulator import torch_build as _build


def get_arch_list():
    return _build.arch_list()


def is_available():
    return _build.device_count() > 0


def device_count():
    return _build.device_count()


def _device(index):
    if not 0 <= index < _build.device_count():
        raise RuntimeError("CUDA error: invalid device ordinal")


def get_device_capability(device=0):
    _device(device)
    return _build.device_capability()


def get_device_name(device=0):
    _device(device)
    return "NVIDIA GB10"
