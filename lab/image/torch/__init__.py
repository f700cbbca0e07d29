"""spark-lab only: the image's `torch`, as much of it as spark-bot asks (torch.__version__,
torch.version.cuda, torch.cuda's build and device); the answers are the emulator's
(emulator/torch_build.py)."""

from emulator import torch_build as _build

if not _build.present():
    raise ModuleNotFoundError("No module named 'torch'", name="torch")

import ctypes as _ctypes

from emulator import nccl_lib as _nccl

from . import cuda, version

# torch's CUDA build links libnccl.so.2, its pip wheel's: loaded with torch, so that vLLM's
# dlopen of that name returns it
try:
    _ctypes.CDLL(_nccl.BUNDLED)
except OSError:
    pass

__version__ = _build.VERSION
__all__ = ["cuda", "version"]
