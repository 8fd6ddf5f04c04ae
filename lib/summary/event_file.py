"""One event file: records queued in memory, written every `max_queue` events and every
`flush_secs` seconds by a background thread, and on flush/close (or at exit)."""
from __future__ import annotations

import itertools
import os
import socket
import threading
import time
import weakref

from . import messages
from .records import frame

_uid = itertools.count()  # two writers in one process and second get different names


class _Sink:
    """The open file and the queue; shared with the flushing thread, never with the
    writer object itself, so a writer that is dropped unclosed can still be finalized."""

    def __init__(self, path: str):
        self.file = open(path, "wb")
        self.queue: list = []
        self.lock = threading.Lock()

    def flush(self) -> None:
        with self.lock:
            if self.file.closed:
                return
            if self.queue:
                self.file.write(b"".join(self.queue))
                self.queue.clear()
            self.file.flush()

    def close(self) -> None:
        self.flush()
        with self.lock:
            self.file.close()


def _flush_every(sink: _Sink, stop: threading.Event, seconds: float) -> None:
    while not stop.wait(seconds):
        sink.flush()


def _shut(sink: _Sink, stop: threading.Event) -> None:
    stop.set()
    sink.close()


class EventFileWriter:
    """Writes serialized Events to `log_dir/events.out.tfevents.<time>.<host>.<pid>.<n>`."""

    def __init__(self, log_dir: str, max_queue: int = 10, flush_secs: float = 120,
                 filename_suffix: str = ""):
        os.makedirs(log_dir, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                f"{os.getpid()}.{next(_uid)}{filename_suffix}")
        self.path = os.path.join(log_dir, name)
        self.max_queue = max_queue
        self._sink = _Sink(self.path)
        self._stop = threading.Event()
        self._close = weakref.finalize(self, _shut, self._sink, self._stop)
        self.add_event(messages.event(time.time(), file_version="brain.Event:2"))
        self.flush()  # the file is a valid, empty event file from the start
        threading.Thread(target=_flush_every, args=(self._sink, self._stop, flush_secs),
                         daemon=True, name="rill-summary-flush").start()

    def add_event(self, event: bytes) -> None:
        sink = self._sink
        with sink.lock:
            sink.queue.append(frame(event))
            full = len(sink.queue) >= self.max_queue
        if full:
            sink.flush()

    def flush(self) -> None:
        self._sink.flush()

    def close(self) -> None:
        self._close()

    @property
    def closed(self) -> bool:
        return not self._close.alive
