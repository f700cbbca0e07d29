"""The torch an image was built with, as `torch.cuda` tells it (the image's `torch` stand-in,
lab/image/torch, answers from here).

SPARK_EMU_TORCH_ARCHS: the CUDA architectures the image's torch was built for, comma-separated
as torch.cuda.get_arch_list() lists them (default: a GB10 image's); SPARK_EMU_TORCH=absent: an
image without torch (`import torch` fails). The GPU is the node's GB10 (gpu_tools), none when
SPARK_EMU_GPUS=0.
"""

from .common import env_int, env_str
from .gpu_tools import COMPUTE_CAPABILITY

VERSION = "2.9.0+cu130"
CUDA = "13.0"
# a CUDA 13 build for Ampere to Blackwell, GB10's 12.1 among them, and PTX for what comes next
GB10_IMAGE_ARCHS = "sm_80,sm_90,sm_100,sm_110,sm_120,sm_121,compute_121"


def present():
    return env_str("SPARK_EMU_TORCH", "present") != "absent"


def arch_list():
    return [
        a.strip()
        for a in env_str("SPARK_EMU_TORCH_ARCHS", GB10_IMAGE_ARCHS).split(",")
        if a.strip()
    ]


def device_count():
    return max(0, env_int("SPARK_EMU_GPUS", 1))


def device_capability():
    return COMPUTE_CAPABILITY
