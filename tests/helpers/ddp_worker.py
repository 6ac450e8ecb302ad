"""One rank of the DistributedSampler test (run in a spawned process)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler

import fastdecode as fd


def run(rank: int, world: int, root: str, port: int, out: str) -> None:
    from torchvision import transforms as T

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        chain = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.PILToTensor()])
        ds = fd.FastImageFolder(root, chain)
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(1)
        runs = []
        for _ in range(2):  # the same seed twice gives the same tensors
            torch.manual_seed(1000 + rank)
            loader = fd.FastLoader(ds, batch_size=3, sampler=sampler, num_workers=0)
            runs.append(torch.cat([images for images, _ in loader]))
        shards = [None] * world
        dist.all_gather_object(shards, list(sampler))
        torch.save({"indices": list(sampler), "shards": shards, "runs": runs}, out)
    finally:
        dist.destroy_process_group()
