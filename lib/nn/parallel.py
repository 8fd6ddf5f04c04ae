"""rill.nn.parallel: the wrappers a PyTorch port writes around its model.

- `DistributedDataParallel(model)` is rill.distributed.AllReduce(model) as a Module: the
  parameters start from the chief's values, and every backward() averages the gradients over
  the workers of a `rill-launch` job (a script run alone is a world of one, where it changes
  nothing). `.module` is the wrapped model, and state_dict keys carry "module." as torch's.
- `DataParallel(model)` runs the model itself. torch's DataParallel splits each batch over
  the GPUs of one process; rill does not (run one process per device with rill-launch and
  DistributedDataParallel instead), so the whole batch runs where the model's parameters
  are. It is kept so that a port's `model = nn.DataParallel(model)` and `model.module` work.
"""
from __future__ import annotations

from ..errors import ArgumentError, DistributedError
from .module import Module
from ..eager.context import no_grad
from ..ops.methods import assign


class DataParallel(Module):
    """The model, run on its own device (see the module text).

    >>> import rill
    >>> model = rill.nn.parallel.DataParallel(rill.nn.Linear(3, 2))
    >>> model(rill.ones(4, 3)).shape, type(model.module).__name__
    ((4, 2), 'Linear')
    """

    def __init__(self, module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        if dim != 0:
            raise ArgumentError(f"dim={dim!r}: rill's DataParallel does not split the batch "
                                "(see rill.nn.parallel), so only dim=0 is accepted",
                                op="DataParallel")
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class DistributedDataParallel(Module):
    """Average gradients over the workers of the job (rill.distributed.AllReduce).

    device_ids / output_device: the device is where the model's parameters are (move it
    with .to() first); accepted, and only checked to be a list of one. bucket_cap_mb: the
    size of the buckets averaged while backward runs (25 MB, as torch's). broadcast_buffers:
    buffers (batch norm's running statistics) are set to the chief's before each forward.
    find_unused_parameters: always so (a parameter backward did not reach takes part with
    zeros), accepted. A process_group other than the whole job, and `no_sync()`, are
    refused.

    >>> import rill
    >>> ddp = rill.nn.parallel.DistributedDataParallel(rill.nn.Linear(3, 1))
    >>> ddp(rill.ones(2, 3)).sum().backward()
    >>> ddp.module.weight.grad.shape
    (1, 3)
    """

    def __init__(self, module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None,
                 bucket_cap_mb: float | None = None, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False,
                 static_graph: bool = False):
        super().__init__()
        op = "DistributedDataParallel"
        if process_group is not None:
            raise DistributedError("process_group: rill averages over every worker of the "
                                   "job; subgroups are not supported, leave it None", op=op)
        if device_ids is not None and (not isinstance(device_ids, (list, tuple)) or
                                       len(device_ids) != 1):
            raise ArgumentError(f"device_ids must be None or a list of one device, got "
                                f"{device_ids!r} (one process per device, as torch)", op=op)
        if dim != 0:
            raise ArgumentError(f"dim={dim!r}: only the batch's first axis is supported", op=op)
        from ..distributed.allreduce import AllReduce  # the layer above nn, reached at use
        self.module = module
        self.broadcast_buffers = bool(broadcast_buffers)
        object.__setattr__(self, "_reducer",
                           AllReduce(module, bucket_mb=25.0 if bucket_cap_mb is None
                                     else float(bucket_cap_mb)))

    def forward(self, *args, **kwargs):
        if self.broadcast_buffers:
            self._sync_buffers()
        return self.module(*args, **kwargs)

    def _sync_buffers(self) -> None:
        world = self._reducer.world
        if world.size - world.num_ps <= 1:
            return
        from ..distributed.collectives import broadcast
        with no_grad():
            for _, b in self.module.named_buffers():
                assign(b, broadcast(b, root=world.worker_ranks[0]))

    def no_sync(self):
        raise DistributedError("no_sync() is not supported: rill averages at every backward "
                               "(accumulate the loss over micro-batches and call backward "
                               "once instead)", op="DistributedDataParallel.no_sync")

    def remove(self) -> None:
        """Stop averaging: backward leaves the model's gradients local again."""
        self._reducer.remove()
