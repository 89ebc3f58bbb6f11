"""Several workers, one network: synchronous data-parallel training on torch.distributed.

`torchrun --nproc-per-node N algos/a2c.py ...` starts N copies of a script; each worker steps
its own envs and holds its own copy of the network. torchrun sets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT; without them (plain `python algos/a2c.py`) `world_size()` is 1,
no process group is created and every helper here returns at once, so a single process behaves
exactly as before.

`NetworkWrapper` uses this module: it joins the process group, starts every worker from rank
0's weights and replaces each worker's gradient by the workers' average, with one all_reduce of
the flat gradient, before the norm, the clipping and the optimizer step (Coach's synchronous
"scale down gradients by the number of workers" mode). Every copy then takes the same step
from the same weights with the same optimizer state, so the copies stay identical without
weights ever being sent again. With equal per-worker batches and a per-batch mean loss, the
average is exactly the gradient of the concatenated batch.

Bad set-ups end the job instead of hanging: the process group has a timeout (a worker that
never arrives or stops answering raises after `timeout` seconds, default 300, or
$RL_DIST_TIMEOUT; torchrun also stops the others when one exits with an error), and
`check_same` compares a hash of the run's config so mismatched arguments are named before any
training starts.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import os
import sys
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from harness.errors import InputError, WorkerError  # noqa: F401 (WorkerError: harness.distributed.WorkerError)


# seconds; must exceed the longest stretch one rank works alone (rank 0's evaluation)
DEFAULT_TIMEOUT = 300.0
# where collectives put their tensors: cpu for gloo, the local GPU for nccl
_device = torch.device("cpu")
_broken = False  # a collective failed: skip the goodbye barrier
_all_gather_single = (
    getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
)  # renamed in recent torch


def launched() -> bool:
    """True in a process started as one of several workers (torchrun with WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def world_size() -> int:
    """Number of workers (1 without torchrun)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This worker's index in [0, world_size) (0 without torchrun)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """Rank 0: the one worker that logs, evaluates and writes the run folder."""
    return rank() == 0


def init(device: torch.device | str = "cpu", timeout: float | None = None) -> int:
    """Join the process group when launched as one of several workers; returns the world size.

    Idempotent. gloo for CPU networks, nccl for CUDA ones (then each worker uses the GPU numbered
    by its LOCAL_RANK, so `torch.device("cuda")` means that GPU). Raises WorkerError naming the
    address when the group cannot be formed within `timeout` seconds.
    """
    global _device
    if not launched():
        return 1
    if dist.is_initialized():
        return dist.get_world_size()
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise WorkerError(
            f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {', '.join(missing)} unset: "
            "launch the workers with torchrun"
        )
    if timeout is None:
        timeout = float(os.environ.get("RL_DIST_TIMEOUT", DEFAULT_TIMEOUT))
    device = torch.device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        _device = torch.device("cuda", torch.cuda.current_device())
    else:
        _device = torch.device("cpu")
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    try:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    except Exception as e:  # the store or the barrier timed out, or the address is unreachable
        raise WorkerError(
            f"rank {os.environ['RANK']}: could not form a group of {os.environ['WORLD_SIZE']} "
            f"workers at {where} within {timeout:.0f}s "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from None
    atexit.register(shutdown, wait=False)  # a crashed script must not wait for its peers
    return dist.get_world_size()


def shutdown(wait: bool | None = None) -> None:
    """Leave the process group (if any); safe to call twice.

    `wait`: first wait for the other workers (a worker that finished early waits for rank 0's
    evaluation), so that none tears its connections down under a peer still using them. The
    default waits only on a clean exit: not while an exception propagates (call it from a
    `finally`) and not after a collective failed, where a peer may never arrive.
    """
    global _broken
    if not (dist.is_available() and dist.is_initialized()):
        return
    if wait is None:
        wait = sys.exc_info()[0] is None and not _broken
    if wait:
        try:
            work = dist.barrier(async_op=True)
            # gloo's barrier keeps weak references to the collectives before it, and whoever frees
            # the barrier last frees their tensors. If that is gloo's worker thread while Python is
            # already finalizing, freeing a tensor needs the GIL, the thread is told to exit inside
            # a noexcept destructor and the process aborts ("terminate called without an active
            # exception", ~1 exit in 10 with a busy CPU). destroy_process_group does not stop those
            # threads once torch._dynamo, imported when the first optimizer is built (NetworkWrapper
            # builds it after init), holds the process group. So this process keeps the barrier for
            # good, from before it completes or fails: nothing of it is freed before the OS does.
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(work))
            work.wait()
        except Exception:  # a peer is gone; leaving is all that is left to do
            pass
    dist.destroy_process_group()
    _broken = False


def check_same(config: dict, what: str = "arguments") -> None:
    """Raise InputError on every worker unless all workers hold the same
    `config` (a JSON-able dict).

    One all_gather of an 8-byte hash; only on a mismatch are the configs themselves gathered,
    to name the fields that differ.
    """
    if world_size() <= 1:
        return
    text = json.dumps(config, sort_keys=True, default=str)
    digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little", signed=True)
    hashes = [int(h) for h in gather(torch.tensor([digest], dtype=torch.int64, device=_device))]
    if len(set(hashes)) == 1:
        return
    configs: list = [None] * world_size()
    _collective("gather the configs", dist.all_gather_object, configs, json.loads(text))
    differ = []
    for key in sorted(set().union(*(c.keys() for c in configs))):
        values = [c.get(key, "<missing>") for c in configs]
        if any(v != values[0] for v in values):
            differ.append(
                f"{key}: " + ", ".join(f"rank {r} has {v!r}" for r, v in enumerate(values))
            )
    raise InputError(
        f"{what} differ across the {len(configs)} workers ({'; '.join(differ)}); "
        "give every worker the same command"
    )


@torch.no_grad()
def broadcast_(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Overwrite `tensor` in place with rank `src`'s values (no-op in one process)."""
    if world_size() > 1:
        _collective("broadcast", dist.broadcast, tensor, src)
    return tensor


@torch.no_grad()
def start_from_rank_0(flat: torch.Tensor, buffers: list[torch.Tensor]) -> None:
    """Copy rank 0's flat parameter and buffers to every worker (common.network.NetworkWrapper)."""
    sizes = gather(torch.tensor([flat.numel()], device=flat.device)).tolist()
    if len(set(sizes)) > 1:
        raise ValueError(
            "the network differs across workers: "
            f"{', '.join(f'rank {r} has {n} parameters' for r, n in enumerate(sizes))}"
        )
    broadcast_(flat)
    for b in buffers:
        broadcast_(b)


@torch.no_grad()
def average_(tensor: torch.Tensor) -> torch.Tensor:
    """Replace `tensor` in place by its mean over the workers:
    one all_reduce (no-op in one process).

    SUM then divide: ReduceOp.AVG exists only for nccl.
    """
    n = world_size()
    if n > 1:
        _collective("all_reduce the gradient", dist.all_reduce, tensor)
        tensor.div_(n)
    return tensor


@torch.no_grad()
def gather(tensor: torch.Tensor) -> torch.Tensor:
    """Every worker's `tensor` (same shape on all) concatenated along dim 0, in rank order.

    For statistics that must stay identical on all workers (e.g. running observation
    normalisation fed by every worker's rollout). Returns `tensor` itself in one process.
    """
    n = world_size()
    if n <= 1:
        return tensor
    local = tensor.to(_device).contiguous()
    out = torch.empty((n * local.shape[0], *local.shape[1:]), dtype=local.dtype, device=_device)
    _collective("all_gather", _all_gather_single, out, local)
    return out.to(tensor.device)


def _collective(what: str, fn: Callable[..., Any], *args: Any) -> None:
    global _broken
    try:
        fn(*args)
    except Exception as e:  # a peer closed its connection (died) or the timeout passed
        _broken = True
        raise WorkerError(
            f"rank {rank()} of {world_size()}: {what} failed, "
            "another worker died or stopped answering "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from None
