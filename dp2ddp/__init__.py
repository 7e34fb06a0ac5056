"""dp2ddp: migrate PyTorch training scripts from nn.DataParallel to DistributedDataParallel."""

__version__ = "0.1.0"
