"""rill.summary: TensorBoard event files (scalars, histograms, images, text,
hyper-parameters, and the graphs of captured functions) with torch.utils.tensorboard's
`SummaryWriter` API.

The files are written by rill itself (record framing and protobuf encoding in a few small
modules), so logging needs neither TensorFlow nor the tensorboard package; only viewing
does (`pip install tensorboard`, then `tensorboard --logdir runs`).
"""
from .writer import SummaryWriter

__all__ = ["SummaryWriter"]
