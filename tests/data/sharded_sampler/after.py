"""The trainer of before.py converted by hand to DDP, its sampler sharded by ShardedSampler (2 processes or more)."""
import argparse
import os
import random
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Sampler, SubsetRandomSampler, TensorDataset


class ShardedSampler(Sampler):
    """This process's share of ``sampler``: items rank, rank + W, ... of one sequence every process draws alike.

    Each pass seeds torch's CPU generator, Python's and NumPy's global generators and the sampler's own
    ``generator`` with ``seed + epoch`` while the sampler draws, so every process draws the same sequence and a
    new one each epoch; the sequence is padded from its start to a multiple of the world size. With
    split_batches=True the items are batches and each process takes its share of every batch.
    """

    def __init__(self, sampler, seed=0, split_batches=False):
        self.sampler = sampler
        self.seed = seed
        self.split_batches = split_batches
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __len__(self):
        if self.split_batches:
            return len(self.sampler)
        return -(-len(self.sampler) // dist.get_world_size())

    def __iter__(self):
        rank, world_size = dist.get_rank(), dist.get_world_size()
        items = self._draw()
        self.epoch += 1  # the next pass draws a new sequence even where nothing calls set_epoch
        if self.split_batches:
            for batch in items:
                batch = list(batch)
                yield batch[rank::world_size] or [batch[rank % len(batch)]]
        else:
            items += (items * world_size)[: -len(items) % world_size]
            yield from items[rank::world_size]

    def _draw(self):
        seed = self.seed + self.epoch
        numpy = sys.modules.get("numpy")
        generator = getattr(self.sampler, "generator", None)
        own = generator.get_state() if isinstance(generator, torch.Generator) else None
        python_state = random.getstate()
        numpy_state = numpy.random.get_state() if numpy is not None else None
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            random.seed(seed)
            if numpy is not None:
                numpy.random.seed(seed % 2**32)
            if own is not None:
                generator.manual_seed(seed)
            try:
                return list(self.sampler)
            finally:
                random.setstate(python_state)
                if numpy is not None:
                    numpy.random.set_state(numpy_state)
                if own is not None:
                    generator.set_state(own)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    dist.init_process_group("gloo")

    generator = torch.Generator().manual_seed(7)  # fixed data; the global random state stays the script's
    dataset = TensorDataset(torch.randn(48, 6, generator=generator), torch.randint(0, 3, (48,), generator=generator))
    train_idx = list(range(40))
    sampler = ShardedSampler(SubsetRandomSampler(train_idx))
    loader = DataLoader(dataset, batch_size=args.batch_size // dist.get_world_size(), sampler=sampler)

    model = DistributedDataParallel(nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        # The mean over processes of their last step's losses: the original's last global batch's loss.
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        if dist.get_rank() == 0:
            print(f"epoch {epoch} loss {reported.item() / dist.get_world_size():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
