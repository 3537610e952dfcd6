"""Data parallel under torchrun: `torchrun --nproc-per-node N -m dflash_eval run ...`.

Each rank evaluates one shard of the prompts (`--shard rank/N`, balanced by length) on its own device
(cuda:LOCAL_RANK on GPU, the CPU otherwise) into `OUT.shards/rank-R`, the ranks meet at a barrier
(torch.distributed: nccl on GPU, gloo on CPU), and rank 0 merges the shard folders into OUT exactly as
`dflash-eval merge` does, so OUT equals what one process would have written (metrics and rows). The
shard folders stay: rerunning the same command resumes each rank where it stopped. This module composes
`api.evaluate` and `merging.merge`, which is why it sits with the interface, above the compositions.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any


def launched_ranks() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; (0, 1) when not launched that way."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def shard_folder(out: Path, rank: int) -> Path:
    return Path(f"{out}.shards") / f"rank-{rank}"


def evaluate_launched(options, reporter=None) -> dict[str, Any]:
    """`api.evaluate`, or under torchrun: this rank's shard, then (rank 0) the exact merge."""
    from .evaluate import evaluate
    from ..core.errors import InputError

    rank, world = launched_ranks()
    if world <= 1:
        return evaluate(options, reporter)
    if options.shard is not None:
        raise InputError(None, "--shard and torchrun both split the prompts: use one of them")
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", rank))
    use_cuda = torch.cuda.is_available() and options.device in ("auto", "cuda")
    device = f"cuda:{local}" if use_cuda else ("cpu" if options.device == "auto" else options.device)
    if use_cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    try:
        mine = dataclasses.replace(options, shard=f"{rank}/{world}", out=shard_folder(options.out, rank), device=device)
        result = evaluate(mine, reporter)
        dist.barrier()
        if rank == 0:
            from .merge import merge

            result = merge([shard_folder(options.out, r) for r in range(world)], options.out,
                           overwrite=options.overwrite, argv=options.argv)
        dist.barrier()
        return result
    finally:
        dist.destroy_process_group()
