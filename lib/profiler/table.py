"""Grouped statistics of a profile (`key_averages`) and their table, as text and under rich."""
from __future__ import annotations

from ..errors import ArgumentError

GROUPS = ("op", "source", "module")
# sort key -> what it orders by (largest first); PyTorch's names are accepted for its users.
SORTS = {
    "self_time": "self_time", "total_time": "total_time", "calls": "count",
    "count": "count", "allocated": "allocated", "average": "average",
    "self_cpu_time_total": "self_time", "cpu_time_total": "total_time",
    "self_cuda_time_total": "self_time", "cuda_time_total": "total_time",
    "cpu_memory_usage": "allocated", "self_cpu_memory_usage": "allocated",
}


class Average:
    """One group of events: `key` (op name, "file:line" or module path), `count`, summed
    `self_time` and `total_time` (seconds), bytes `allocated`, the `devices` it ran on, and
    its `input_shapes` when grouped by them."""

    __slots__ = ("key", "count", "self_time", "total_time", "allocated", "devices",
                 "kinds", "input_shapes")

    def __init__(self, key, input_shapes=None):
        self.key, self.input_shapes = key, input_shapes
        self.count, self.self_time, self.total_time, self.allocated = 0, 0.0, 0.0, 0
        self.devices: dict = {}
        self.kinds: dict = {}

    @property
    def average(self) -> float:
        """Mean seconds per call (total time over calls)."""
        return self.total_time / self.count if self.count else 0.0

    def __repr__(self) -> str:
        return (f"<Average {self.key}: {self.count} calls, self {_time(self.self_time)}, "
                f"total {_time(self.total_time)}>")


class KeyAverages(list):
    """A list of `Average` rows, one per group; `table()` renders it."""

    def __init__(self, rows, group_by: str, total_self: float):
        super().__init__(rows)
        self.group_by = group_by
        self.total_self = total_self

    def table(self, sort_by: str = "self_time", row_limit: int | None = 20) -> "ProfileTable":
        if sort_by not in SORTS:
            raise ArgumentError(f"cannot sort by {sort_by!r}; use one of "
                                f"{', '.join(repr(s) for s in list(SORTS)[:5])}",
                                op="profile.table")
        if row_limit is not None and (type(row_limit) is not int or row_limit < 1):
            raise ArgumentError(f"limit must be a positive int or None, got {row_limit!r}",
                                op="profile.table")
        field = SORTS[sort_by]
        rows = sorted(self, key=lambda r: getattr(r, field), reverse=True)
        return ProfileTable(rows[:row_limit] if row_limit else rows, len(rows), self.group_by,
                            self.total_self, sort_by)

    def __str__(self) -> str:
        return str(self.table())


def key_averages(events, group_by: str, by_shape: bool) -> KeyAverages:
    if group_by not in GROUPS:
        raise ArgumentError(f"cannot group by {group_by!r}; use one of "
                            f"{', '.join(map(repr, GROUPS))}", op="key_averages")
    groups: dict = {}
    for e in events:
        key = e.name if group_by == "op" else \
            (e.source or "(no user line)") if group_by == "source" else \
            (e.module or ("(captured graph)" if e.kind == "graph" else "(outside modules)"))
        shapes = e.shapes if by_shape else None
        row = groups.get((key, shapes))
        if row is None:
            row = groups[(key, shapes)] = Average(key, shapes)
        row.count += 1
        row.self_time += e.self_time
        row.total_time += e.total_time
        row.allocated += e.allocated
        row.devices[str(e.device)] = None
        row.kinds[e.kind] = None
    return KeyAverages(list(groups.values()), group_by, sum(e.self_time for e in events))


class ProfileTable:
    """Rows of a profile: `str()` is plain text; rich renders `__rich__` (notebooks too)."""

    def __init__(self, rows, total_rows, group_by, total_self, sort_by):
        self.rows, self.total_rows = rows, total_rows
        self.group_by, self.total_self, self.sort_by = group_by, total_self, sort_by

    def _header(self) -> list:
        names = [self.group_by, "calls", "self time", "self %", "total time", "avg",
                 "allocated", "device", "ran as"]
        if any(r.input_shapes is not None for r in self.rows):
            names.append("input shapes")
        return names

    def _cells(self, r) -> list:
        share = 100.0 * r.self_time / self.total_self if self.total_self else 0.0
        cells = [str(r.key), str(r.count), _time(r.self_time), f"{share:.1f}%",
                 _time(r.total_time), _time(r.average), _bytes(r.allocated),
                 ", ".join(r.devices), "/".join(r.kinds)]
        if r.input_shapes is not None:
            cells.append(", ".join(str(list(s)) for s in r.input_shapes))
        return cells

    def _title(self) -> str:
        shown = f"top {len(self.rows)} of {self.total_rows}" \
            if len(self.rows) < self.total_rows else f"{self.total_rows}"
        return (f"profile by {self.group_by} ({shown} groups, sorted by {self.sort_by}; "
                f"self time in all: {_time(self.total_self)})")

    def __str__(self) -> str:
        header = self._header()
        body = [self._cells(r) for r in self.rows]
        widths = [max([len(h)] + [len(row[i]) for row in body]) for i, h in enumerate(header)]
        widths[0] = min(widths[0], 48)
        left = {0, 7, 8, 9}

        def line(cells):
            return "  ".join((c[:widths[i]].ljust(widths[i]) if i in left
                              else c.rjust(widths[i])) for i, c in enumerate(cells)).rstrip()
        rule = "-" * len(line(header))
        return "\n".join([self._title(), rule, line(header), rule] +
                         [line(row) for row in body] + [rule])

    __repr__ = __str__

    def __rich__(self):
        from rich.table import Table
        table = Table(title=self._title())
        for i, name in enumerate(self._header()):
            table.add_column(name, justify="left" if i in (0, 7, 8, 9) else "right")
        for r in self.rows:
            table.add_row(*self._cells(r))
        return table

    def _repr_html_(self) -> str:
        import html
        return f"<pre>{html.escape(str(self))}</pre>"


def _time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
