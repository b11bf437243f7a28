"""torch.distributed for the zoo: the process group from torchrun's environment, rank-0 I/O, DDP/FSDP2 wrapping.

Launch with ``torchrun --nproc-per-node N -m zoo run NAME`` (or ``zoo run NAME --nproc N``). One process per
device: nccl on GPUs, gloo on CPU. Every helper here is a no-op in a single process, so recipes and the loop
call them unconditionally.
"""
from __future__ import annotations

import contextlib
import datetime
import math
import os
import random

import numpy as np
import torch
import torch.distributed as dist
from torch import nn


def launched() -> bool:
    """True inside a torchrun worker of a job with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def init(device: str = "auto", timeout_s: float = 600.0) -> None:
    """Join the process group torchrun described (RANK, WORLD_SIZE, MASTER_ADDR/PORT or the rendezvous).

    nccl when this process drives a GPU, gloo otherwise; each GPU process pins cuda:LOCAL_RANK. The
    timeout bounds how long a collective waits for a rank that has gone silent.
    """
    if not launched() or dist.is_initialized():
        return
    use_cuda = torch.cuda.is_available() and not device.startswith(("cpu", "mps"))
    if use_cuda:
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend="nccl" if use_cuda else "gloo",
                            timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=torch.device("cuda", local_rank()) if use_cuda else None)


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def device_for_rank(device: torch.device) -> torch.device:
    """``cuda`` without an index means this rank's own GPU."""
    if device.type == "cuda" and device.index is None and active():
        return torch.device("cuda", local_rank())
    return device


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def all_reduce_sum(values: list[float]) -> list[float]:
    """Element-wise sum of a few floats over all ranks (the values themselves in one process)."""
    if not active():
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=_comm_device())
    dist.all_reduce(t)
    return t.tolist()


def broadcast_object(obj, src: int = 0):
    """Rank ``src``'s picklable object on every rank."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, device=_comm_device())
    return box[0]


def gather_states(state: dict) -> list[dict]:
    """Every rank's state dict (tensors and plain values), in rank order, on every rank.

    Sent as torch.save bytes and read back with weights_only: tensors do not survive the pickle that
    all_gather_object uses on its own."""
    if not active():
        return [state]
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    out = [None] * world_size()
    dist.all_gather_object(out, buf.getvalue())
    return [torch.load(io.BytesIO(b), weights_only=True) for b in out]


def barrier() -> None:
    if active():
        dist.barrier()


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module under torch.compile and DDP wrappers."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    """DistributedDataParallel over the parameters that train now (rebuild it when that set changes).

    Rank 0's weights and buffers are broadcast at construction, so every rank starts from the same model
    even if initialisation drew different numbers.
    """
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=True)


def is_dtensor(t) -> bool:
    """A DTensor: an FSDP2 shard (or a value computed from one)."""
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def fsdp_sharded(model: nn.Module) -> bool:
    return any(is_dtensor(p) for p in model.parameters())


def fully_shard_blocks(model: nn.Module, blocks: str = "blocks", reshard_after_forward: bool = True) -> nn.Module:
    """FSDP2: shard each block, then the rest (embeddings, head) as the root unit. In place."""
    from torch.distributed.fsdp import fully_shard

    for block in getattr(model, blocks):
        fully_shard(block, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    return model


def gathered_state(model: nn.Module, optimizer: torch.optim.Optimizer | None = None):
    """An FSDP2 model's full state dict (and its optimizer's) on rank 0's CPU; collective, empty on other ranks."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)

    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(model, options=full)
    return model_state if optimizer is None else (model_state, get_optimizer_state_dict(model, optimizer, options=full))


def local_value(t):
    """A plain tensor from a DTensor (gathering it), or the tensor itself."""
    return t.full_tensor() if is_dtensor(t) else t


def convert_sync_batchnorm(model: nn.Module, device: torch.device) -> nn.Module:
    """Batch statistics over the global batch, where torch supports it (GPUs; gloo on CPU does not)."""
    if active() and device.type == "cuda" and any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                                                  for m in model.modules()):
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def broadcast_buffers(module: nn.Module) -> None:
    """Rank 0's buffers (batch-norm running statistics) on every rank."""
    if active():
        for b in module.buffers():
            dist.broadcast(b.data, src=0)


def broadcast_state(module: nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank, in place."""
    if active():
        for t in module.state_dict().values():
            dist.broadcast(t, src=0)


@contextlib.contextmanager
def gradient_sync(model: nn.Module, sync: bool):
    """Skip the gradient all-reduce on micro-batches before the last one of an accumulated step."""
    if sync or not active():
        yield
        return
    inner = unwrap(model)
    if isinstance(getattr(model, "_orig_mod", model), nn.parallel.DistributedDataParallel):
        with getattr(model, "_orig_mod", model).no_sync():
            yield
    elif hasattr(inner, "set_requires_gradient_sync"):  # FSDP2
        inner.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            inner.set_requires_gradient_sync(True)
    else:
        yield


# ---------------------------------------------------------------------------------------------
# Joining a training loop's processes (core.loop.fit)
# ---------------------------------------------------------------------------------------------

def join_processes(model: nn.Module, optimizer: torch.optim.Optimizer, batches, device: torch.device, fsdp: bool,
                   sync_batchnorm: bool, lr_scaling: str, log) -> None:
    """Under N processes: each rank's share of the batches, one starting point, batch-norm statistics over the
    global batch, per-rank seeds, and the LR rule for the N-times larger batch."""
    world, this = world_size(), rank()
    if not hasattr(batches, "shard"):
        raise TypeError(f"{type(batches).__name__} cannot be split over processes: it needs shard(rank, world)")
    batches.shard(this, world)
    if not fsdp:  # one starting point before the EMA and lookahead copies are made (DDP would sync only later)
        broadcast_state(model)
    if sync_batchnorm and not fsdp:
        convert_sync_batchnorm(model, device)
    seed_per_rank(this)  # dropout, noise and mixing differ per rank; the weights were made alike
    if lr_scaling != "none":
        scale_lrs(optimizer, world, lr_scaling, log)


def seed_per_rank(index: int) -> None:
    """Reseed the global generators from a draw every rank shares, offset by the rank's index."""
    base = int(torch.randint(2**62, (1,)))
    random.seed(base + index)
    np.random.seed((base + index) % 2**32)
    torch.manual_seed(base + index)


def scale_lrs(optimizer: torch.optim.Optimizer, world: int, rule: str, log) -> None:
    """The batch grows N times with N processes: LR x sqrt(N) (the core's rule) or x N (linear)."""
    if rule not in ("sqrt", "linear"):
        raise ValueError(f"lr_scaling={rule!r}: choose none, sqrt or linear")
    factor = math.sqrt(world) if rule == "sqrt" else float(world)
    for g in optimizer.param_groups:
        g["lr"] *= factor
        if "base_lr" in g:
            g["base_lr"] *= factor
    log(f"learning rates x{factor:.3f} ({rule} rule, {world} processes)")
