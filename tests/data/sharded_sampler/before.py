"""A DataParallel trainer that draws its training samples with a SubsetRandomSampler (the last 8 are held out)."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    generator = torch.Generator().manual_seed(7)  # fixed data; the global random state stays the script's
    dataset = TensorDataset(torch.randn(48, 6, generator=generator), torch.randint(0, 3, (48,), generator=generator))
    train_idx = list(range(40))
    sampler = SubsetRandomSampler(train_idx)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = nn.DataParallel(nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
