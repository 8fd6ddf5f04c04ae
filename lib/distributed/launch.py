"""rill-launch: start a training script on N processes through mpiexec (srun under Slurm).

    rill-launch -n 4 [--ps 1] [--max-restarts 2] [--timeout 60] train.py args...
    python -m rill.distributed.launch -n 4 train.py args...

It wraps the mpiexec of the installed MPI (the MPICH wheel's by default), tells every rank
the job's layout through the environment (RILL_NUM_PS, RILL_TIMEOUT, RILL_STATUS_FILE,
RILL_ATTEMPT), prefixes each line a rank prints with its role ("worker1 | ..."), and shows
a table of the ranks (role, the exchange each last entered, how its process ended): live on
a terminal, and when the job ends. A job that fails (a rank exits non-zero or is killed) is
named by its cause ("rank 2 (worker2) was killed by SIGKILL ...") and started again up to
--max-restarts times; the script resumes from its latest checkpoint (RILL_ATTEMPT tells it
which attempt this is).

On one host (no --mpiexec given, and no host file or resource manager in the environment)
nothing of the job listens beyond the loopback interface: rill-launch runs MPICH's
single-host process manager, mpiexec.gforker, which talks to the ranks over inherited
socket pairs (Hydra's mpiexec listens on every interface whatever -iface says), and confines
the ranks' network layers to `lo` (UCX_NET_DEVICES, FI_TCP_IFACE, FI_SOCKETS_IFACE).

Inside a Slurm allocation (SLURM_JOB_ID set: in an salloc shell or an sbatch script, with
srun on PATH, and no --mpiexec given) rill-launch starts the ranks with Slurm's own launcher,

    srun --mpi=pmi2 --export=ALL --kill-on-bad-exit=1 --quit-on-interrupt -n N python -m ...

rather than with mpiexec. srun places the ranks on the allocation's nodes and cores and
slurmstepd tracks and cleans them up within the job's limits, as the site configured;
Hydra's mpiexec would start its own proxies through srun anyway (its Slurm bootstrap), and
add a control port listening on every interface. --mpi=pmi2 is the interface the MPICH
wheel speaks (it has no PMIx; SLURM_MPI_TYPE, when set, chooses instead); --export=ALL
carries the RILL_* settings to the ranks whatever the site's default; --kill-on-bad-exit
stops the other ranks when one fails, as mpiexec does, so that the job can be started
again; --quit-on-interrupt makes one Ctrl-C stop the job, as it does under mpiexec. Each
rank starts in bootstrap.py as under mpiexec (PMI_RANK and PMI_SIZE come from srun's PMI-2
plugin), so the output labels, the status board and the restarts work unchanged. On more
than one node, point the status board at a shared filesystem (status.py).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

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


# Set where a host file or a resource manager lets mpiexec spread the job over hosts.
CLUSTER_ENV = ("HYDRA_HOST_FILE", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "PE_HOSTFILE")
# On one host the ranks' MPI network layers (UCX or libfabric) bind to loopback only.
LOOPBACK_ENV = {"UCX_NET_DEVICES": "lo", "FI_TCP_IFACE": "lo", "FI_SOCKETS_IFACE": "lo"}


def slurm_launcher() -> list[str] | None:
    """srun and its options (module docstring) inside a Slurm allocation, else None."""
    srun = shutil.which("srun")
    if "SLURM_JOB_ID" not in os.environ or srun is None:
        return None
    mpi = [] if os.environ.get("SLURM_MPI_TYPE") else ["--mpi=pmi2"]
    return [srun, *mpi, "--export=ALL", "--kill-on-bad-exit=1", "--quit-on-interrupt"]


def process_manager(given: str | None) -> tuple[list[str], dict]:
    """(the command that starts the ranks, given -n N after it; environment it adds). An
    mpiexec given is used as is; in a Slurm allocation, srun; on one host with the mpiexec
    found here, MPICH's mpiexec.gforker beside it when there is one, and the ranks on
    loopback only."""
    srun = None if given else slurm_launcher()
    if srun is not None:
        return srun, {}
    mpiexec = find_mpiexec(given)
    if given or not sys.platform.startswith("linux") or any(k in os.environ
                                                            for k in CLUSTER_ENV):
        return [mpiexec], {}
    forker = os.path.join(os.path.dirname(mpiexec), "mpiexec.gforker")
    return [forker if os.path.exists(forker) else mpiexec], dict(LOOPBACK_ENV)


def parse(argv):
    p = argparse.ArgumentParser(prog="rill-launch", description=__doc__.splitlines()[0])
    p.add_argument("-n", "--np", dest="n", type=int, required=True, help="number of processes")
    p.add_argument("--ps", type=int, default=0, help="how many of them are parameter servers")
    p.add_argument("--max-restarts", type=int, default=0,
                   help="start a failed job again at most this many times")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds any blocking exchange may wait before it fails, naming the "
                        "ranks that did not arrive")
    p.add_argument("--mpiexec", default=None,
                   help="the mpiexec to run (default: srun inside a Slurm allocation, else "
                        "the one found)")
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


def run_once(a, launcher: list[str], extra_env: dict, status: str, attempt: int,
             console: Console) -> int:
    """Run the job once; returns its exit code, and prints the rank table and, if it failed,
    which ranks caused it."""
    env = dict(os.environ, RILL_LAUNCHED="1", RILL_NUM_PS=str(a.ps), RILL_TIMEOUT=str(a.timeout),
               RILL_STATUS_FILE=status, RILL_ATTEMPT=str(attempt), PYTHONUNBUFFERED="1",
               **extra_env)
    # Each rank starts in bootstrap.py, which labels its output lines and runs the script.
    cmd = [*launcher, "-n", str(a.n), sys.executable, "-u", "-m", "rill.distributed.bootstrap",
           a.script, *a.args]
    segments = _shared_segments()
    try:
        return _run(a, cmd, env, status, console)
    finally:
        _remove_orphans(_shared_segments() - segments)


# MPICH's shared-memory segments, named after the job (its process manager's key-value space
# name, from a pid): a job whose ranks are killed leaves its segment behind, and a later job
# whose pid-derived name is the same joins the dead job's memory and hangs in MPI_Init (seen
# on a test machine with pid_max 32768 and hundreds of such leftovers). So rill-launch
# removes the segments its job made that no process still maps.
SHM = "/dev/shm"


def _shared_segments() -> set:
    try:
        return {name for name in os.listdir(SHM) if name.startswith("mpich_shm_")}
    except OSError:
        return set()


def _remove_orphans(names) -> None:
    if not names:
        return
    mapped = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/maps") as f:
                    mapped.update(line.rsplit("/", 1)[-1].strip() for line in f
                                  if "/mpich_shm_" in line)
            except OSError:
                continue
    for name in set(names) - mapped:
        try:
            os.unlink(os.path.join(SHM, name))
        except OSError:
            pass


def _run(a, cmd, env, status: str, console: Console) -> int:
    terminal = console.is_terminal
    proc = subprocess.Popen(cmd, env=env, **(dict(stdout=subprocess.PIPE,
                                                  stderr=subprocess.STDOUT, text=True,
                                                  bufsize=1) if terminal else {}))
    watch = Watchdog(a, status, proc)
    watch.start()
    try:
        if not terminal:
            rc, causes = outcome(a, status, proc.wait(), watch.finish())
            console.print(rank_table(a, status, f"exited with {rc}"))
        else:  # the ranks' lines scroll above a live table of the ranks
            from rich.live import Live

            class Running:  # re-read at every refresh, so a silent job's table still moves
                def __rich__(self):
                    return rank_table(a, status, "running")

            with Live(Running(), console=console, refresh_per_second=4) as live:
                for line in proc.stdout:
                    live.console.print(line.rstrip("\n"), markup=False, highlight=False)
                rc, causes = outcome(a, status, proc.wait(), watch.finish())
                live.update(rank_table(a, status, f"exited with {rc}"))
    finally:
        watch.finish()
        if proc.poll() is None:  # the launcher itself was interrupted
            proc.kill()
    for cause in causes:
        console.print(f"rill-launch: {cause}", markup=False, highlight=False, soft_wrap=True)
    return rc


# How long past the job's timeout a rank may stay in MPI shutdown once every rank has met at
# the barrier before it (world.py) before the watchdog ends the job.
SHUTDOWN_GRACE_S = 5.0


def _entered(row) -> float:
    """When (wall time) the rank entered its last operation."""
    return time.time() - row.ago if row.ago is not None else 0.0


class Watchdog(threading.Thread):
    """Looks at the ranks' processes while the job runs: which are stopped (state T in
    /proc/<pid>/stat: SIGSTOP answers no message and ends nothing, so only the process
    state tells a stopped rank from a slow one), and whether the job hangs in MPI shutdown,
    which has no deadline of its own: then it ends the job (mpiexec first; the ranks'
    watchers stop their ranks when it is gone) and says why."""

    def __init__(self, a, status: str, proc):
        super().__init__(daemon=True, name="rill-launch watchdog")
        self.a, self.status, self.proc = a, status, proc
        self.stopped: dict = {}   # rank -> (when first seen stopped, its row then)
        self.hung: str | None = None
        self.ended = threading.Event()

    def run(self) -> None:
        while not self.ended.wait(0.2):
            self.look()

    def look(self) -> None:
        from .status import process_state
        rows = board_rows(self.a, self.status)
        now = time.monotonic()
        for rank, row in enumerate(rows):
            if process_state(row) == "stopped":
                self.stopped.setdefault(rank, (now, row))
            elif rank in self.stopped and _entered(row) > _entered(self.stopped[rank][1]) + 0.01:
                # continued (SIGCONT), and it has done something since. (Continued only to
                # take the job's stop request, as when mpiexec ends the job, it has not.)
                del self.stopped[rank]
        late = [r for r, row in enumerate(rows) if row.operation == "finished" and
                row.ending == "running" and (row.ago or 0) > self.a.timeout + SHUTDOWN_GRACE_S]
        if late and self.hung is None and self.proc.poll() is None:
            ranks = ", ".join(f"rank {r} ({role_of(r, self.a.ps)})" for r in late)
            self.hung = (f"the job did not finish MPI shutdown: {ranks} waited in it for more "
                         f"than {self.a.timeout + SHUTDOWN_GRACE_S:g} s (the job's timeout and "
                         f"{SHUTDOWN_GRACE_S:g} s), after every rank had met at the barrier "
                         "before it; rill-launch ended the job")
            self.proc.kill()

    def finish(self) -> "Watchdog":
        """Stop looking (one last look first); returns self."""
        if not self.ended.is_set():
            self.ended.set()
            self.join()
            if os.path.getsize(self.status):
                self.look()
        return self


def board_rows(a, status: str) -> list:
    from .status import Row, StatusBoard
    if os.path.getsize(status):
        return StatusBoard(status, a.n).read()
    return [Row(0, "not started", None, 0, "running", 0, None)] * a.n


def outcome(a, status: str, rc: int, watch: Watchdog | None = None) -> tuple[int, list]:
    """(the job's exit code, what made it fail). The status board, not mpiexec's exit code,
    says which ranks failed and how: mpiexec.gforker exits 0 when a rank is killed, and
    Hydra's mpiexec reports a pid. A rank stopped (SIGSTOP) while the job ran comes first:
    the others time out waiting for it. Then a rank killed by a signal, or that failed or
    exited non-zero on its own, is a cause; ranks stopped because of it are not (they are
    named only when there is no cause)."""
    from .status import signal_name
    # mpiexec may end before the ranks' watchers do (when it is killed): let them finish
    # (a stopped rank's watcher ends it with SIGKILL after 5 s).
    deadline = time.monotonic() + 7
    while time.monotonic() < deadline and any(
            row.ending == "running" and row.pid and _alive(row.pid)
            for row in board_rows(a, status)):
        time.sleep(0.05)
    rows = board_rows(a, status)
    failed = rc != 0 or any(row.ending in ("killed", "stopped") or row.code or
                            row.ending == "running" and row.pid and not _alive(row.pid)
                            for row in rows)
    stopped = watch.stopped if watch is not None and failed else {}
    causes, consequences = [], []
    if watch is not None and watch.hung:
        causes.append((0.0, 1, watch.hung))
    end = time.monotonic()
    for rank, (since, then) in stopped.items():
        causes.append((-float("inf"), 128 + signal.SIGSTOP,
                       f"rank {rank} ({role_of(rank, a.ps)}) was stopped (process state T, as "
                       f"after SIGSTOP) for the last {end - since:.1f} s of the job, last seen "
                       f"entering {then.operation} (its collective #{then.collectives}); the "
                       "other ranks could not go on without it"))
    for rank, row in enumerate(rows):
        if rank in stopped:
            continue
        who = f"rank {rank} ({role_of(rank, a.ps)})"
        seen = f"last seen entering {row.operation} (its collective #{row.collectives})"
        if row.ending == "killed":
            causes.append((-(row.ended_ago or 0), 128 + row.code,
                           f"{who} was killed by {signal_name(row.code)} (pid {row.pid}), "
                           f"{seen}"))
        elif row.ending == "exited" and row.code:
            failed = row.operation == "failed"
            causes.append((-(row.ended_ago or 0), row.code,
                           f"{who} failed with exit code {row.code}" +
                           (" (see its output above)" if failed else f", {seen}")))
        elif failed and row.ending == "exited" and row.operation not in ("finished",
                                                                          "failed"):
            # exit 0 without passing the barrier before MPI shutdown (os._exit, or a
            # process that left MPI some other way): the others cannot finish without it
            causes.append((-(row.ended_ago or 0), 1,
                           f"{who} exited (code 0) without reaching the job's end, {seen}"))
        elif row.ending == "stopped":
            consequences.append((0, 1, f"{who} was stopped ({signal_name(row.code)}), {seen}"))
        elif row.ending == "running" and row.pid and not _alive(row.pid):
            consequences.append((0, 1, f"{who}: its process (pid {row.pid}) is gone and left "
                                       f"no exit status, {seen}"))
    if causes:  # the earliest first; its exit code is the job's (128 + n for signal n)
        causes.sort(key=lambda c: c[0])
        return causes[0][1], [text for _, _, text in causes]
    if rc == 0 and consequences:
        rc = 1
    return rc, [text for _, _, text in consequences] if rc else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rank_table(a, status: str, state: str) -> Table:
    """Each rank's role, the exchange it last entered, how many collectives it made, and
    how its process ended."""
    table = Table(title=f"rill-launch: {os.path.basename(a.script)} {state}",
                  title_justify="left")
    for col in ("rank", "role", "last operation", "collectives", "process"):
        table.add_column(col)
    from .status import process_state
    for rank, row in enumerate(board_rows(a, status)):
        state = process_state(row)
        table.add_row(str(rank), role_of(rank, a.ps), row.operation, str(row.collectives),
                      {"gone": "gone (no exit status)", "stopped": "stopped (state T)"}.get(
                          state, row.outcome()))
    return table


def main(argv=None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    launcher, extra_env = process_manager(a.mpiexec)
    console = Console(stderr=True)
    rc = 1
    with tempfile.TemporaryDirectory(prefix="rill-launch-") as tmp:
        for attempt in range(a.max_restarts + 1):
            status = os.path.join(tmp, f"status-{attempt}")
            open(status, "wb").close()
            rc = run_once(a, launcher, extra_env, status, attempt, console)
            if rc == 0:
                break
            if attempt < a.max_restarts:
                console.print(f"rill-launch: the job failed (exit {rc}); starting it again "
                              f"({attempt + 1} of {a.max_restarts} restarts)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
