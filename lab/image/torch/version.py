from emulator.torch_build import CUDA as cuda

__all__ = ["cuda"]
