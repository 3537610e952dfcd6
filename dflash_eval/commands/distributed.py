"""Data parallel under torchrun: `torchrun --nproc-per-node N -m dflash_eval run ...`.

Each rank evaluates one shard of the prompts (`--shard rank/N`, balanced by length) on its own device
(cuda:LOCAL_RANK on GPU, the CPU otherwise) into `OUT.shards/rank-R`; the continuations are generated once
over all ranks, each rank taking whole batches of the run's generation plan and handing their texts to the
ranks that evaluate them (`pipeline.continuations.generation_shared_by_ranks`), the ranks meet at a barrier
(torch.distributed: nccl bound to the rank's device on GPU, gloo on CPU), and rank 0 merges the shard
folders into OUT exactly as `dflash-eval merge` does, so OUT equals what one process would have written
(metrics and rows). The shard folders stay: rerunning the same command resumes each rank where it stopped.

Waiting and failing: the barrier waits `--dist-timeout` seconds (default 6 h, not torch's 10 minutes: a
resumed or longer shard finishes long after the others reach the barrier). A rank that fails does not
meet the others at the barrier: it tears its process group down without waiting and exits with its error,
and torchrun then stops the remaining ranks, so the job ends at once with that error.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from pathlib import Path


def launched_ranks() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; (0, 1) when not launched that way."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def shard_folder(out: Path, rank: int) -> Path:
    return Path(f"{out}.shards") / f"rank-{rank}"


def rank_device(device: str, local_rank: int) -> str:
    """The device of one torchrun rank: cuda:LOCAL_RANK for auto (with CUDA) and cuda; the CPU for cpu and
    auto without CUDA. A fixed cuda:N would put every rank on one GPU: refused by name."""
    import torch

    from ..core.errors import InputError

    if device.startswith("cuda:"):
        raise InputError(None, f"--device {device} under torchrun would put every rank on one GPU; give --device cuda "
                               "(rank R runs on cuda:LOCAL_RANK) or limit the GPUs with CUDA_VISIBLE_DEVICES")
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        if local_rank >= torch.cuda.device_count():
            raise InputError(None, f"torchrun local rank {local_rank} but torch sees {torch.cuda.device_count()} CUDA "
                                   "device(s): start at most one process per GPU")
        return f"cuda:{local_rank}"
    return "cpu" if device == "auto" else device


def evaluate_launched(settings, reporter=None):
    """`commands.evaluate.evaluate`, or under torchrun: this rank's shard, then (rank 0) the exact merge (its
    report.html with --html); the document and rows (commands/evaluate.Evaluation) either way."""
    from ..core.errors import InputError
    from ..pipeline.continuations import generation_shared_by_ranks
    from .evaluate import evaluate

    rank, world = launched_ranks()
    if world <= 1:
        return evaluate(settings, reporter)
    placement = settings.placement
    if placement.shard is not None:
        raise InputError(None, "--shard and torchrun both split the prompts: use one of them")
    if settings.second_target.serving_target is not None:
        raise InputError(None, "--serving-target splits the drop over all the run's prompts in one process: run it "
                               "without torchrun")
    if placement.device_map is not None:
        raise InputError(None, "--device-map and torchrun: one target split over GPUs per rank is not supported; "
                               "use one of them")
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", rank))
    device = rank_device(placement.device, local)
    timeout = timedelta(seconds=float(placement.dist_timeout))
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=torch.device(device), timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    failed = True
    try:
        mine = settings.with_sections(dataclasses.replace(placement, shard=f"{rank}/{world}", device=device),
                                      dataclasses.replace(settings.output, out=shard_folder(settings.out, rank),
                                                          html=False))  # the merged folder has the page
        with generation_shared_by_ranks():  # each planned batch generated once, by one rank (continuations.py)
            result = evaluate(mine, reporter)
        dist.barrier()
        if rank == 0:
            from .merge import merge

            result = merge([shard_folder(settings.out, r) for r in range(world)], settings.out,
                           overwrite=settings.output.overwrite, argv=list(settings.output.argv),
                           html=settings.output.html)
        dist.barrier()
        failed = False
        return result
    finally:
        _leave(dist, failed)


def _leave(dist, failed: bool) -> None:
    """Tear the process group down; after a failure without waiting for the other ranks (nccl's abort)."""
    if failed and dist.get_backend() == "nccl":
        abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
        if abort is not None:
            abort()
            return
    dist.destroy_process_group()
