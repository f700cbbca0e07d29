"""spark-emu: stand-in for the GPU software of the vLLM container image.

Standard library only.  Tools: ``vllm``, ``ray``, ``nvidia-smi``, ``ibdev2netdev``;
run as ``python3 -m emulator <tool> [args...]`` (or ``python -m lab.emulator ...``).
"""

from .faults import FAULTS  # noqa: F401
from .profiles import PROFILES, get_profile, truth  # noqa: F401
