"""rill.optim.lr_scheduler: every learning-rate scheduler, under torch's module name, so that
`from torch.optim.lr_scheduler import StepLR` ports by changing `torch` to `rill`.

The classes live in the files named for what they do (schedulers.py, cyclic_schedulers.py,
plateau_scheduler.py, combined_schedulers.py); rill.optim exports them too.
"""
from .schedulers import (LRScheduler, LambdaLR, MultiplicativeLR, StepLR, MultiStepLR,
                         ConstantLR, LinearLR, ExponentialLR, PolynomialLR, CosineAnnealingLR,
                         LinearWarmup, OneCycleLR)
from .cyclic_schedulers import CyclicLR, CosineAnnealingWarmRestarts
from .plateau_scheduler import ReduceLROnPlateau
from .combined_schedulers import SequentialLR, ChainedScheduler

__all__ = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR",
           "LinearLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingLR",
           "CosineAnnealingWarmRestarts", "CyclicLR", "OneCycleLR", "ReduceLROnPlateau",
           "SequentialLR", "ChainedScheduler", "LinearWarmup"]
