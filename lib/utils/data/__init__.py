"""rill.utils.data: Dataset, DataLoader and samplers spelled as torch.utils.data.

A PyTorch program's `from torch.utils.data import DataLoader, TensorDataset` becomes
`from rill.utils.data import ...` and means the same, with one difference said up front:
DataLoader workers are threads, not processes (see DataLoader). Loading runs on a
`rill.data` pipeline, so its queues, threads, read-ahead and deadlines are rill.data's.

>>> import rill
>>> from rill.utils.data import DataLoader, TensorDataset
>>> x, y = rill.arange(12.0).reshape(6, 2), rill.arange(6)
>>> _ = rill.manual_seed(0)
>>> loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
>>> [tuple(xb.shape) for xb, yb in loader]
[(4, 2), (2, 2)]
"""
from .collate import default_collate, default_convert
from .dataloader import DataLoader, get_worker_info
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset,
                      TensorDataset, random_split)
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler, WeightedRandomSampler)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset",
           "Subset", "random_split", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "DataLoader",
           "default_collate", "default_convert", "get_worker_info"]
