"""Progress: a progress display for training loops.

In a terminal or a notebook it is a live `rich` bar: step/total, the metrics last passed
(loss, ...), throughput, elapsed time and ETA. Anywhere else (a log file, CI, a pipe) a live
bar would be noise, so it prints plain lines instead, every `every_steps` steps or
`every_seconds` seconds, whichever comes first, and once at the end:

    train  step 50/200  loss 0.4312  123.4 it/s  elapsed 0:00:04  eta 0:00:12

With `writer=` (a rill.train.SummaryWriter) every metric passed is also logged to
TensorBoard as the scalar `<description>/<name>` at the current step.
"""
from __future__ import annotations

import sys
import time

from ..errors import ArgumentError, check_number
from ..tensor import Tensor


class Progress:
    """Progress of a loop of `total` steps; `update(n, **metrics)` after each step.

    >>> import io
    >>> out = io.StringIO()
    >>> with rill.train.Progress(total=4, description="train", file=out) as bar:
    ...     for step in range(4):
    ...         bar.update(loss=1.0 / (step + 1))
    >>> print(out.getvalue().splitlines()[-1])
    train  step 4/4  loss 0.25  ... it/s  elapsed 0:00:00
    """

    def __init__(self, total: int | None = None, description: str = "train", *,
                 unit: str = "it", plain: bool | None = None, file=None,
                 every_steps: int | None = None, every_seconds: float = 10.0,
                 clock=time.monotonic, iterable=None, writer=None):
        if total is not None:
            check_number(total, "total", "Progress", integer=True, low=0)
        if every_steps is not None:
            check_number(every_steps, "every_steps", "Progress", integer=True, low=1)
        if every_seconds is not None:
            check_number(every_seconds, "every_seconds", "Progress", low=0)
        self.total = total
        self.description = description
        self.unit = unit
        self.steps = 0
        self.metrics: dict = {}
        self.every_steps = every_steps if every_steps is not None else (
            max(1, total // 10) if total else None)
        self.every_seconds = every_seconds
        self._file = file  # None: whatever sys.stdout is when a line is written
        self._clock = clock
        self._iterable = iterable
        if writer is not None and not callable(getattr(writer, "add_scalar", None)):
            raise ArgumentError(f"writer must be a SummaryWriter (something with add_scalar), "
                                f"got {type(writer).__name__}", op="Progress")
        self.writer = writer
        self._start = clock()
        self._last_line = (0, self._start)  # (steps, time) of the last plain line
        self._closed = False
        self._rich = None
        if plain is None:
            plain = not _is_live(file)
        self.plain = plain
        if not plain:
            self._rich, self._task = _rich_bar(self, file)
            self._rich.start()

    # ---- updates -----------------------------------------------------------------------------

    def update(self, n: int = 1, **metrics) -> None:
        """Count `n` more steps done, and show `metrics` (numbers, or one-element tensors)."""
        self.steps += n
        self.metrics.update({k: _number(v) for k, v in metrics.items()})
        if self.writer is not None:
            self._log(metrics)
        if self._rich is not None:
            self._rich.update(self._task, advance=n, metrics=format_metrics(self.metrics))
            return
        steps_then, time_then = self._last_line
        now = self._clock()
        if (self.every_steps is not None and self.steps - steps_then >= self.every_steps) or \
                (self.every_seconds is not None and now - time_then >= self.every_seconds):
            self._write_line(now)

    def set(self, **metrics) -> None:
        """Show new metrics without counting a step."""
        self.update(0, **metrics)

    def print(self, *objects) -> None:
        """Print above the bar (a plain print when the output is not live)."""
        if self._rich is not None:
            self._rich.console.print(*objects)
        else:
            print(*objects, file=self._out(), flush=True)

    def close(self) -> None:
        """Stop the bar; in plain mode, write the final line unless it is already written."""
        if self._closed:
            return
        self._closed = True
        if self.writer is not None:
            self.writer.flush()
        if self._rich is not None:
            self._rich.stop()
        elif self._last_line[0] != self.steps or self.steps == 0:
            self._write_line(self._clock(), final=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        if self._iterable is None:
            raise ArgumentError("this Progress wraps no iterable; use rill.train.progress("
                                "iterable) to iterate", op="Progress")
        with self:
            for item in self._iterable:
                yield item
                self.update(1)  # counted when the loop body is done with the item

    # ---- the plain line ----------------------------------------------------------------------

    @property
    def elapsed(self) -> float:
        return self._clock() - self._start

    def line(self, now: float | None = None, final: bool = False) -> str:
        """The plain-text status: description, step, metrics, throughput, elapsed, ETA."""
        now = self._clock() if now is None else now
        elapsed = now - self._start
        rate = self.steps / elapsed if elapsed > 0 else None
        step = f"step {self.steps}/{self.total}" if self.total else f"step {self.steps}"
        parts = [self.description, step, format_metrics(self.metrics), format_rate(rate, self.unit),
                 f"elapsed {format_seconds(elapsed)}"]
        if self.total and not final and self.steps < self.total:
            left = self.total - self.steps
            parts.append(f"eta {format_seconds(left / rate) if rate else '?'}")
        return "  ".join(p for p in parts if p)

    def _write_line(self, now, final=False):
        print(self.line(now, final), file=self._out(), flush=True)
        self._last_line = (self.steps, now)

    def _out(self):
        return self._file if self._file is not None else sys.stdout

    def _log(self, metrics: dict) -> None:
        """Each one-number metric as a scalar at the current step; others (a whole tensor,
        text) are shown but not logged."""
        for name in metrics:
            value = self.metrics[name]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(f"{self.description}/{name}", value, self.steps)


def progress(iterable, total: int | None = None, description: str = "train", **options):
    """Iterate over `iterable` with a Progress display; `set(**metrics)` on it shows metrics.

    `total` defaults to `len(iterable)` when it has one.

    >>> import io
    >>> out = io.StringIO()
    >>> bar = rill.train.progress(range(3), description="eval", file=out)
    >>> for x in bar:
    ...     bar.set(acc=0.5 + x / 10)
    >>> print(out.getvalue().splitlines()[-1])
    eval  step 3/3  acc 0.7  ... it/s  elapsed 0:00:00
    """
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    return Progress(total=total, description=description, iterable=iterable, **options)


# ---- formatting ---------------------------------------------------------------------------------


def format_metrics(metrics: dict) -> str:
    return "  ".join(f"{k} {_format_value(v)}" for k, v in metrics.items())


def format_rate(rate: float | None, unit: str) -> str:
    if not rate:
        return f"? {unit}/s"
    if rate < 1:
        return f"{1 / rate:.1f} s/{unit}"  # slow steps read better as seconds each
    return f"{rate:.1f} {unit}/s"


def format_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _format_value(v) -> str:
    if isinstance(v, int):  # bools too
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _number(v):
    if isinstance(v, Tensor):
        return v.item() if v.size == 1 else v
    return v


# ---- the live bar -------------------------------------------------------------------------------


def _is_live(file) -> bool:
    """Whether `file` (None: stdout) shows a live display: a notebook, or a real terminal.

    The stream itself must be a tty: FORCE_COLOR and friends (set in many CI systems to get
    colored logs) make rich treat any stream as a terminal, and a redrawn bar in a log file
    is noise."""
    from rich.console import Console
    console = Console(file=file)
    if console.is_jupyter:
        return True
    isatty = getattr(file if file is not None else sys.stdout, "isatty", None)
    return bool(isatty is not None and isatty() and console.is_interactive)


def _rich_bar(owner: Progress, file):
    from rich import progress as rp
    from rich.console import Console
    from rich.text import Text

    class RateColumn(rp.ProgressColumn):
        def render(self, task):
            return Text(format_rate(task.speed, owner.unit), style="progress.data.speed")

    count = rp.MofNCompleteColumn() if owner.total else rp.TextColumn("{task.completed}")
    columns = [rp.TextColumn("[bold]{task.description}"), rp.BarColumn(), count,
               rp.TextColumn("{task.fields[metrics]}"), RateColumn(), rp.TimeElapsedColumn()]
    if owner.total:
        columns += [rp.TextColumn("eta"), rp.TimeRemainingColumn()]
    bar = rp.Progress(*columns, console=Console(file=file), get_time=owner._clock)
    task = bar.add_task(owner.description, total=owner.total, metrics="")
    return bar, task
