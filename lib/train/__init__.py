"""rill.train: checkpoints, checkpoint schedules and the progress display of training loops."""
from .checkpoint import Checkpoint, RestoreReport
from .manager import CheckpointManager
from .progress import Progress, progress
from ..summary import SummaryWriter
