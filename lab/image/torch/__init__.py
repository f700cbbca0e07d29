"""spark-lab only: the image's `torch`, as much of it as spark-bot asks (torch.__version__,
torch.version.cuda, torch.cuda's build and device); the answers are the emulator's
(emulator/torch_build.py)."""

from emulator import torch_build as _build

if not _build.present():
    raise ModuleNotFoundError("No module named 'torch'", name="torch")

from . import cuda, version

__version__ = _build.VERSION
__all__ = ["cuda", "version"]
