"""spark-lab only: what vLLM 0.32's CPU build needs to run its ranks under Ray across the lab's
nodes. Loaded by every Python in the image (it is on PYTHONPATH); each fix acts only when vLLM
imports its module, so Ray's own processes pay nothing. The mp backend needs none of this.

- `vllm.platforms.cpu`: the CPU platform has no Ray device key, so
  `--distributed-executor-backend ray` fails with "current platform cpu does not support ray."
  (vllm/v1/executor/ray_utils.py). The lab's nodes declare one accelerator slot each to Ray
  (RAY_OVERRIDE_RESOURCES='{"GPU": 1}' in the image); the platform gets the matching key,
  "GPU", so the placement group asks for one slot per rank, `ray status` shows N GPUs as on the
  Sparks, and Ray's accelerator ids map each worker to its node.
- `vllm.distributed.device_communicators.cpu_communicator`: a tensor-parallel group takes the
  shared-memory path when every rank agrees on one group name, made from VLLM_DIST_IDENT, which
  the CPU worker sets to the port of the distributed init method (v1/worker/cpu_worker.py).
  Under Ray that is the driver's one `tcp://ip:port` on every rank, so ranks on two nodes agree,
  and each then opens the other's segment in its own /dev/shm: `RuntimeError: open shm in
  SHMManager failed. errno: 2` (ENOENT). The name gets the node's hostname, so only ranks on one
  node agree and a group spanning nodes falls back to torch.distributed (gloo), as vLLM does by
  itself on CPUs whose kernels have no SHM ops (the AVX2 build, `vllm._C_AVX2`). Under mp the
  init method is a per-node file store, whose name already differs per node.
"""

import importlib.abc
import socket
import sys


def _give_cpu_a_ray_device_key(module):
    module.CpuPlatform.ray_device_key = "GPU"


def _keep_shm_groups_within_a_node(module):
    shm = module._CPUSHMDistributed
    group_name = shm.make_group_name

    def make_group_name(communicator):
        return f"{socket.gethostname()}-{group_name(communicator)}"

    shm.make_group_name = staticmethod(make_group_name)


FIXES = {
    "vllm.platforms.cpu": _give_cpu_a_ray_device_key,
    "vllm.distributed.device_communicators.cpu_communicator": _keep_shm_groups_within_a_node,
}


class _FixOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        fix = FIXES.get(name)
        if fix is None:
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
            fix(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _FixOnImport())
