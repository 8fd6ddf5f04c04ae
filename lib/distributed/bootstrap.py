"""How rill-launch starts a rank: label its output, then run the user's script as __main__.

Each line the rank prints, traceback included, becomes "worker1 | ..." written whole in
one call, so that lines of different ranks interleave but never mix.
"""
from __future__ import annotations

import io
import os
import runpy
import sys

from .launch import role_of


class LabelledLines(io.TextIOBase):
    """A text stream that writes complete lines, each prefixed with a label."""

    def __init__(self, stream, label: str):
        self.stream, self.label, self.pending = stream, label, ""

    def write(self, text: str) -> int:
        self.pending += text
        if "\n" in self.pending:
            *lines, self.pending = self.pending.split("\n")
            self.stream.write("".join(f"{self.label} | {line}\n" for line in lines))
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def close_line(self) -> None:
        if self.pending:
            self.write("\n")


def main() -> None:
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    size = int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    num_ps = int(os.environ.get("RILL_NUM_PS", "0"))
    width = max(len(role_of(r, num_ps)) for r in range(size))
    label = role_of(rank, num_ps).ljust(width)
    streams = [LabelledLines(sys.stdout, label), LabelledLines(sys.stderr, label)]
    sys.stdout, sys.stderr = streams
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported here, then the whole job is stopped
        sys.excepthook(*sys.exc_info())  # rill hides its own frames there
        code = 1
    for s in streams:
        s.close_line()
    if code:
        # One failed rank fails the job: the others may be waiting for it in an exchange,
        # so MPI stops them all now (rill-launch may then start the job again).
        from .world import joined
        if joined() is not None and joined().board is not None:
            joined().board.note("failed", collective=False)
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            mpi.COMM_WORLD.Abort(code)
        sys.exit(code)


if __name__ == "__main__":
    main()
