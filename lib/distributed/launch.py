"""rill-launch: start a training script on N processes through mpiexec.

    rill-launch -n 4 [--ps 1] [--max-restarts 2] [--timeout 60] train.py args...
    python -m rill.distributed.launch -n 4 train.py args...

It wraps the mpiexec of the installed MPI (the MPICH wheel's by default), tells every rank
the job's layout through the environment (RILL_NUM_PS, RILL_TIMEOUT, RILL_STATUS_FILE,
RILL_ATTEMPT), prefixes each line a rank prints with its role ("worker1 | ..."), and shows
a table of the ranks (role, the exchange each last entered): live on a terminal, and when the
job ends. A job that fails (a rank exits non-zero or is killed) is started again up to
--max-restarts times; the script resumes from its latest checkpoint (RILL_ATTEMPT tells it
which attempt this is).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from rich.console import Console
from rich.table import Table

def find_mpiexec(given: str | None = None) -> str:
    """The mpiexec to use: the given one, the one installed beside this Python (the MPICH
    wheel puts it there), or the first on PATH."""
    if given:
        return given
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside if os.path.exists(beside) else shutil.which("mpiexec")
    if found is None:
        raise SystemExit("rill-launch: no mpiexec found; install one with "
                         "pip install 'rill[distributed]' (mpi4py and the MPICH wheel)")
    return found


def role_of(rank: int, num_ps: int) -> str:
    return f"ps{rank}" if rank < num_ps else f"worker{rank - num_ps}"


def parse(argv):
    p = argparse.ArgumentParser(prog="rill-launch", description=__doc__.splitlines()[0])
    p.add_argument("-n", "--np", dest="n", type=int, required=True, help="number of processes")
    p.add_argument("--ps", type=int, default=0, help="how many of them are parameter servers")
    p.add_argument("--max-restarts", type=int, default=0,
                   help="start a failed job again at most this many times")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds any blocking exchange may wait before it fails, naming the "
                        "ranks that did not arrive")
    p.add_argument("--mpiexec", default=None, help="the mpiexec to run (default: found)")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    a = p.parse_args(argv)
    if a.n < 1:
        p.error(f"-n must be at least 1, got {a.n}")
    if not 0 <= a.ps < a.n:
        p.error(f"--ps {a.ps} leaves no worker among {a.n} processes")
    if a.max_restarts < 0 or a.timeout <= 0:
        p.error("--max-restarts must be >= 0 and --timeout > 0")
    return a


def run_once(a, mpiexec: str, status: str, attempt: int, console: Console) -> int:
    env = dict(os.environ, RILL_LAUNCHED="1", RILL_NUM_PS=str(a.ps), RILL_TIMEOUT=str(a.timeout),
               RILL_STATUS_FILE=status, RILL_ATTEMPT=str(attempt), PYTHONUNBUFFERED="1")
    # Each rank starts in bootstrap.py, which labels its output lines and runs the script.
    cmd = [mpiexec, "-n", str(a.n), sys.executable, "-u", "-m", "rill.distributed.bootstrap",
           a.script, *a.args]
    if not console.is_terminal:
        return subprocess.call(cmd, env=env)
    # On a terminal: the ranks' lines scroll above a live table of the ranks.
    from rich.live import Live
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    class Running:  # re-read at every refresh, so a silent job's table still moves
        def __rich__(self):
            return rank_table(a, status, "running")

    with Live(Running(), console=console, refresh_per_second=4) as live:
        for line in proc.stdout:
            live.console.print(line.rstrip("\n"), markup=False, highlight=False)
        rc = proc.wait()
        live.update(rank_table(a, status, f"exited with {rc}"))
    return rc


def rank_table(a, status: str, state: str) -> Table:
    """Each rank's role, the exchange it last entered and how many collectives it made."""
    from .status import StatusBoard
    table = Table(title=f"rill-launch: {os.path.basename(a.script)} {state}",
                  title_justify="left")
    for col in ("rank", "role", "last operation", "collectives"):
        table.add_column(col)
    rows = StatusBoard(status, a.n).read() if os.path.getsize(status) else \
        [(0, "not started", None)] * a.n
    for rank, (count, operation, _) in enumerate(rows):
        table.add_row(str(rank), role_of(rank, a.ps), operation, str(count))
    return table


def main(argv=None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    mpiexec = find_mpiexec(a.mpiexec)
    console = Console(stderr=True)
    rc = 1
    with tempfile.TemporaryDirectory(prefix="rill-launch-") as tmp:
        for attempt in range(a.max_restarts + 1):
            status = os.path.join(tmp, f"status-{attempt}")
            open(status, "wb").close()
            rc = run_once(a, mpiexec, status, attempt, console)
            if not console.is_terminal:  # a terminal has seen the live table
                console.print(rank_table(a, status, f"exited with {rc}"))
            if rc == 0:
                break
            if attempt < a.max_restarts:
                console.print(f"rill-launch: the job failed (exit {rc}); starting it again "
                              f"({attempt + 1} of {a.max_restarts} restarts)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
