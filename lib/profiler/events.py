"""What a profile records: one `Event` per op run, eager or a node of a compiled graph."""
from __future__ import annotations


class Event:
    """One op as it ran.

    `name` is the primitive (or graph op: input, read, send, ...); `kind` is "eager" (through
    `bind`) or "graph" (a node of a captured function's compiled program, `node` being the
    graph Node). `start`/`end` are `time.perf_counter()` seconds; `thread` the thread's ident;
    `source` the user's "file:line" that made the op (for a graph node: the line that traced
    it); `module` the nn.Module path it ran under ("Net.fc1"), eager ops only; `shapes` the
    input shapes (with record_shapes); `stack` the user's innermost frames (with with_stack);
    `allocated` the bytes of new output buffers (a view of an input allocates none).
    `self_time` is `total_time` less the ops that ran inside it (the body of a graph's loop).
    """

    __slots__ = ("name", "kind", "device", "thread", "start", "end", "shapes", "source",
                 "module", "stack", "allocated", "node", "child_time")

    def __init__(self, name, kind, device, thread, start, end, shapes=None, source=None,
                 module=None, stack=None, allocated=0, node=None):
        self.name, self.kind, self.device, self.thread = name, kind, device, thread
        self.start, self.end = start, end
        self.shapes, self.source, self.module, self.stack = shapes, source, module, stack
        self.allocated, self.node = allocated, node
        self.child_time = 0.0

    @property
    def total_time(self) -> float:
        """Seconds from start to end."""
        return self.end - self.start

    @property
    def self_time(self) -> float:
        """Seconds spent in the op itself, not in the ops that ran inside it."""
        return self.end - self.start - self.child_time

    def __repr__(self) -> str:
        where = f" at {self.source}" if self.source else ""
        return (f"<Event {self.name} ({self.kind}, {self.device}) "
                f"{self.total_time * 1e6:.1f} us{where}>")


def assign_children(events) -> None:
    """Set each event's `child_time`: the time of the events that ran inside it on its
    thread (ops nest only by running inside another on the same thread)."""
    by_thread: dict = {}
    for e in events:
        e.child_time = 0.0
        by_thread.setdefault(e.thread, []).append(e)
    for mine in by_thread.values():
        mine.sort(key=lambda e: (e.start, -e.end))
        open_: list = []
        for e in mine:
            while open_ and open_[-1].end <= e.start:
                open_.pop()
            if open_:
                open_[-1].child_time += e.end - e.start
            open_.append(e)
