"""SummaryWriter: TensorBoard logs from rill, with the API of torch.utils.tensorboard."""
from __future__ import annotations

import datetime
import os
import socket
import time

import numpy as np

from ..errors import ArgumentError, Error, check_number
from ..ops.arguments import as_float, as_int
from . import hparams as hp
from . import messages
from .convert import as_array, as_image, as_scalar
from .event_file import EventFileWriter
from .graph import graph_def
from .histogram import buckets
from .png import encode_png
from ..capture.function import CapturedFunction, capture
from ..capture.ir import Graph
from ..tensor import Tensor


class SummaryWriter:
    """Writes TensorBoard event files under `log_dir` (default
    `runs/<month><day>_<time>_<host><comment>`); view them with `tensorboard --logdir runs`.

    Summaries are queued and written every `max_queue` summaries, every `flush_secs`
    seconds, on `flush()` and on `close()` (also when used as a context manager). Writing
    needs neither TensorFlow nor the tensorboard package.

    >>> import tempfile
    >>> with rill.train.SummaryWriter(tempfile.mkdtemp()) as writer:
    ...     for step in range(3):
    ...         writer.add_scalar("loss", 1.0 / (step + 1), step)
    """

    def __init__(self, log_dir=None, comment: str = "", purge_step=None, max_queue: int = 10,
                 flush_secs: float = 120, filename_suffix: str = ""):
        op = "SummaryWriter"
        if log_dir is None:
            stamp = datetime.datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        if not isinstance(log_dir, (str, os.PathLike)):
            raise ArgumentError(f"log_dir must be a path, got {type(log_dir).__name__}", op=op)
        check_number(max_queue, "max_queue", op, integer=True, low=1)
        check_number(flush_secs, "flush_secs", op, low=0, low_open=True)
        if not isinstance(filename_suffix, str):
            raise ArgumentError("filename_suffix must be a string", op=op)
        self.log_dir = os.fspath(log_dir)
        self.purge_step = None if purge_step is None else as_int(purge_step, "purge_step", op,
                                                                 low=0)
        self.max_queue, self.flush_secs, self.filename_suffix = \
            max_queue, flush_secs, filename_suffix
        self._writers: dict = {}  # run directory -> EventFileWriter (add_scalars makes more)
        self._file_writer(self.log_dir)

    def get_logdir(self) -> str:
        """The directory this writer's event files go to."""
        return self.log_dir

    # ---- summaries ---------------------------------------------------------------------------

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None,
                   new_style: bool = False, double_precision: bool = False) -> None:
        """One number (a Python or NumPy number, or a one-element tensor) at a step.

        `new_style` writes it as a tensor summary of the scalars plugin (float64 with
        `double_precision`) instead of the classic float32 `simple_value`."""
        op = "SummaryWriter.add_scalar"
        number = as_scalar(scalar_value, "scalar_value", op)
        if new_style:
            dtype = np.float64 if double_precision else np.float32
            meta = messages.summary_metadata("scalars", data_class=1)  # DATA_CLASS_SCALAR
            value = messages.value(_tag(tag, op), metadata=meta,
                                   tensor=messages.tensor_proto(np.array(number, dtype)))
        else:
            value = messages.value(_tag(tag, op), simple_value=number)
        self._write(self.log_dir, value, global_step, walltime, op)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None) -> None:
        """Several numbers on one chart: each key of `tag_scalar_dict` is a run of its own
        (directory `<log_dir>/<main_tag>_<key>`) holding the value under `main_tag`."""
        op = "SummaryWriter.add_scalars"
        main_tag = _tag(main_tag, op, "main_tag")
        if not isinstance(tag_scalar_dict, dict):
            raise ArgumentError(f"tag_scalar_dict must be a dict of tag: number, got "
                                f"{type(tag_scalar_dict).__name__}", op=op)
        walltime = time.time() if walltime is None else walltime
        for key, number in tag_scalar_dict.items():
            run = os.path.join(self.log_dir, f"{main_tag.replace('/', '_')}_{_tag(key, op, 'key')}")
            value = messages.value(main_tag, simple_value=as_scalar(number, f"{key!r}", op))
            self._write(run, value, global_step, walltime, op)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None,
                      max_bins=None) -> None:
        """The distribution of `values` (a tensor or array, any shape). `bins`: "tensorflow"
        (fixed exponential buckets, comparable across steps), a bin count, or a NumPy bin
        rule ("auto", "fd", ...); `max_bins` merges neighbouring buckets above that many."""
        op = "SummaryWriter.add_histogram"
        tag = _tag(tag, op)
        array = as_array(values, "values", op)
        if array.dtype.kind == "c":
            raise ArgumentError("values must be real; log the real and imaginary parts (or "
                                "the magnitude) separately", op=op)
        array = array.astype(np.float64).reshape(-1)
        if array.size == 0:
            raise ArgumentError("values is empty: a histogram needs at least one value", op=op)
        if not np.isfinite(array).all():
            raise ArgumentError(f"values holds {int((~np.isfinite(array)).sum())} NaN or "
                                "infinite values; a histogram needs finite values", op=op)
        if max_bins is not None:
            max_bins = as_int(max_bins, "max_bins", op, low=1)
        limits, counts = buckets(array, bins, max_bins, op)
        histo = messages.histogram(array.min(), array.max(), array.size, array.sum(),
                                   np.dot(array, array), limits, counts)
        self._write(self.log_dir, messages.value(tag, histo=histo), global_step, walltime, op)

    def add_image(self, tag, img_tensor, global_step=None, walltime=None,
                  dataformats: str = "CHW") -> None:
        """An image: float values in [0, 1] or uint8 in [0, 255], with 1, 3 or 4 channels,
        laid out as `dataformats` says ("CHW", "HWC", "HW", ...). Stored as PNG."""
        op = "SummaryWriter.add_image"
        tag = _tag(tag, op)
        pixels = as_image(img_tensor, dataformats, op)
        height, width, channels = pixels.shape
        image = messages.image(height, width, channels, encode_png(pixels))
        self._write(self.log_dir, messages.value(tag, image=image), global_step, walltime, op)

    def add_text(self, tag, text_string, global_step=None, walltime=None) -> None:
        """Text (rendered as Markdown by TensorBoard)."""
        op = "SummaryWriter.add_text"
        if not isinstance(text_string, str):
            raise ArgumentError(f"text_string must be a str, got {type(text_string).__name__}",
                                op=op)
        meta = messages.summary_metadata("text")
        value = messages.value(_tag(tag, op), metadata=meta,
                               tensor=messages.tensor_proto(np.array(text_string, object)))
        self._write(self.log_dir, value, global_step, walltime, op)

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None,
                    run_name=None, global_step=None) -> None:
        """One trial for TensorBoard's HPARAMS tab: its hyper-parameters (numbers, strings,
        bools, one-element tensors) and final metrics, written as a run of its own,
        `<log_dir>/<run_name>` (default: the current time). `hparam_domain_discrete`
        lists the values each hyper-parameter may take, for the tab's filters."""
        op = "SummaryWriter.add_hparams"
        if not isinstance(hparam_dict, dict) or not isinstance(metric_dict, dict):
            raise ArgumentError("hparam_dict and metric_dict must be dicts", op=op)
        values = {_tag(k, op, "a hyper-parameter name"): _hparam(v, k, op)
                  for k, v in hparam_dict.items()}
        domains = {}
        for name, domain in (hparam_domain_discrete or {}).items():
            if name not in values:
                raise ArgumentError(f"hparam_domain_discrete names {name!r}, which is not in "
                                    "hparam_dict", op=op)
            domain = [_hparam(v, name, op) for v in domain]
            if any(hp.kind(v) != hp.kind(values[name]) for v in domain):
                raise ArgumentError(f"the domain of {name!r} must hold values of the type of "
                                    f"its value {values[name]!r}", op=op)
            domains[name] = domain
        run = os.path.join(self.log_dir, str(time.time()) if run_name is None else
                           _tag(run_name, op, "run_name"))
        now = time.time()
        for value in (hp.experiment(values, list(metric_dict), domains),
                      hp.session_start(values, "", now), hp.session_end(now)):
            self._write(run, value, global_step, now, op)
        for tag, number in metric_dict.items():
            value = messages.value(_tag(tag, op, "a metric name"),
                                   simple_value=as_scalar(number, f"metric {tag!r}", op))
            self._write(run, value, global_step, now, op)

    def add_graph(self, model, input_to_model=None, verbose: bool = False,
                  use_strict_trace: bool = True) -> None:
        """The graph of a captured function for TensorBoard's GRAPHS tab: `model` is a
        `rill.capture`d function, a Module or a plain function (captured here), called with
        `input_to_model` (a tensor or a tuple of arguments); or a capture Graph itself.
        Nodes keep their op, inputs, device, output shapes and dtypes, attrs and source line.
        `verbose` prints the graph; `use_strict_trace` is accepted for PyTorch's signature
        (rill's traces are always strict)."""
        graph = _graph_of(model, input_to_model, "SummaryWriter.add_graph")
        if verbose:
            print(graph)
        event = messages.event(time.time(), graph_def=graph_def(graph))
        self._file_writer(self.log_dir).add_event(event)

    # ---- files -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write everything queued to disk."""
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        """Flush and close the event files; a later summary opens new ones."""
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"SummaryWriter({self.log_dir!r})"

    def _file_writer(self, run: str) -> EventFileWriter:
        writer = self._writers.get(run)
        if writer is None:
            writer = self._writers[run] = EventFileWriter(run, self.max_queue, self.flush_secs,
                                                          self.filename_suffix)
            if self.purge_step is not None and run == self.log_dir:
                # SessionLog START at purge_step: TensorBoard drops what older files hold
                # at or after that step (a restart from a checkpoint).
                writer.add_event(messages.event(time.time(), self.purge_step,
                                                session_log=messages.session_log_start()))
        return writer

    def _write(self, run, value, global_step, walltime, op) -> None:
        step = 0 if global_step is None else as_int(global_step, "global_step", op)
        walltime = time.time() if walltime is None else as_float(walltime, "walltime", op)
        event = messages.event(walltime, step, summary=messages.summary(value))
        self._file_writer(run).add_event(event)


def _tag(tag, op: str, what: str = "tag") -> str:
    if not isinstance(tag, str) or not tag:
        raise ArgumentError(f"{what} must be a non-empty str, got {tag!r}", op=op)
    return tag


def _hparam(value, name, op):
    """A hyper-parameter value the plugin can hold: bool, str or a number."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str):
        return value
    try:
        return as_scalar(value, f"hyper-parameter {name!r}", op)
    except Error:  # a list, a tensor of many elements, ...
        raise ArgumentError(f"hyper-parameter {name!r} must be a number, str, bool or "
                            f"one-element tensor, got {type(value).__name__}", op=op) from None


def _graph_of(model, args, op):
    """The capture Graph that `model` runs on `args`."""
    if isinstance(model, Graph):
        return model
    if args is None:
        args = ()
    elif isinstance(args, Tensor) or not isinstance(args, (tuple, list)):
        args = (args,)
    if not isinstance(model, CapturedFunction):
        if not callable(model):
            raise ArgumentError(f"model must be a captured function, a Module, a function or a "
                                f"Graph, got {type(model).__name__}", op=op)
        model = capture(model)
    return model.graph_for(*args)
