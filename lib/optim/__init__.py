"""rill.optim: optimizers, learning-rate schedulers and gradient clipping.

Optimizers update the model's parameters in place (the Parameter objects stay, their values
change) with the update rules and defaults of PyTorch's namesakes.

>>> import rill
>>> w = rill.nn.Parameter(rill.tensor([1.0, -1.0]))
>>> opt = rill.optim.SGD([w], lr=0.25)
>>> sched = rill.optim.StepLR(opt, step_size=1, gamma=0.5)
>>> for _ in range(2):
...     opt.zero_grad()
...     (w * w).sum().backward()
...     opt.step()
...     sched.step()
>>> w
Parameter containing:
tensor([ 0.375, -0.375], requires_grad=True)
"""
from .optimizer import Optimizer
from .sgd import SGD
from .adam import Adam, AdamW
from .sparse_adam import SparseAdam
from .adagrad import Adagrad, AdaGrad
from .rmsprop import RMSprop, RMSProp
from .adadelta import Adadelta, AdaDelta
from .lbfgs import LBFGS
from . import lr_scheduler  # torch's module name: from rill.optim.lr_scheduler import StepLR
from .lr_scheduler import (LRScheduler, LambdaLR, MultiplicativeLR, StepLR, MultiStepLR,
                           ConstantLR, LinearLR, ExponentialLR, PolynomialLR, CosineAnnealingLR,
                           CosineAnnealingWarmRestarts, CyclicLR, OneCycleLR, ReduceLROnPlateau,
                           SequentialLR, ChainedScheduler, LinearWarmup)
from .clip import clip_grad_norm_, clip_grad_value_

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "SparseAdam", "Adagrad", "AdaGrad", "RMSprop",
           "RMSProp", "Adadelta", "AdaDelta", "LBFGS", *lr_scheduler.__all__,
           "clip_grad_norm_", "clip_grad_value_", "lr_scheduler"]
