"""Weft as a torch.distributed backend.

    import weft_torch                       # registers backend "weft"
    torch.distributed.init_process_group("weft")

Works with env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; weftrun sets them) or an explicit
store; every process group (dist.new_group too) bootstraps its own Weft communicator through the
c10d store it is given. CPU tensors, and CUDA tensors where weft_torch was built against a torch
with CUDA (cuda_tensors says which); errors are RuntimeErrors carrying Weft's message.

Once a group of two or more ranks exists, CPU tensors of shared_min_bytes or more are allocated in
Weft's shared host memory, so that all-reduces among ranks on one host read them in place
(WEFT_TORCH_SHARED_MEMORY=0: not); shared_memory_stats() says what that allocator holds, and
empty_shared_memory_cache() gives back the blocks it keeps for reuse.
"""

import inspect

import torch.distributed as dist

from ._weft_torch import (create_process_group, cuda_tensors, empty_shared_memory_cache, shared_memory_stats,
                          shared_min_bytes, weft_version)

__version__ = weft_version  # the libweft loaded, which the package is built with

BACKEND_NAME = "weft"

if not hasattr(dist.Backend, BACKEND_NAME.upper()):
    # torch 2.x maps devices to backends; torch 1.13's register_backend takes no devices.
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        dist.Backend.register_backend(BACKEND_NAME, create_process_group,
                                      devices=["cpu", "cuda"] if cuda_tensors else ["cpu"])
    else:
        dist.Backend.register_backend(BACKEND_NAME, create_process_group)

__all__ = ["BACKEND_NAME", "create_process_group", "cuda_tensors", "empty_shared_memory_cache", "shared_memory_stats",
           "shared_min_bytes", "weft_version"]
