"""spark-lab only: let vLLM's CPU platform run its ranks under Ray.

vLLM's CPU platform has no Ray device key, so `--distributed-executor-backend ray` fails with
"current platform cpu does not support ray." (vllm/v1/executor/ray_utils.py). The lab's nodes
declare one accelerator slot each to Ray (RAY_OVERRIDE_RESOURCES='{"GPU": 1}' in the image),
and this hook gives the CPU platform the matching key, "GPU", when vLLM imports it, so the
placement group asks for one slot per rank, `ray status` shows N GPUs as on the Sparks, and
Ray's accelerator ids map each worker to its node. Nothing else changes; the mp backend needs
none of this. Loaded by every Python in the image (it is on PYTHONPATH), acting only on import
of vllm.platforms.cpu, so Ray's own processes pay nothing.
"""

import importlib.abc
import sys

_TARGET = "vllm.platforms.cpu"


class _GiveCpuARayDeviceKey(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            module.CpuPlatform.ray_device_key = "GPU"

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _GiveCpuARayDeviceKey())
