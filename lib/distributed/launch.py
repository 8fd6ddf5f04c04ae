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

rill-launch stops the whole job on SIGTERM, SIGINT (Ctrl-C) and SIGHUP — mpiexec, the ranks
and the processes they started — removes its shared memory, says for each rank who stopped
it, and exits with 128 + the signal (job_stop.py); it refuses a script that cannot run
before any rank starts; and when a job fails it prints a line per rank (job_report.py).

    rill-launch -n 8 --hosts node1:4,node2:4 --iface eth1 train.py

runs the job over hosts with MPICH's Hydra mpiexec (-hosts, or -f for --hostfile; -iface),
which reaches the other hosts over ssh (README, "On a cluster").

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
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

from rich.console import Console

from .job_report import board_rows, outcome, rank_table, role_of, settle
from .job_stop import JobStop
from .process_tree import become_subreaper, end_descendants, parent_death_signal
from .world import DEFAULT_TIMEOUT_S


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


# Set where a host file or a resource manager lets mpiexec spread the job over hosts.
CLUSTER_ENV = ("HYDRA_HOST_FILE", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "PE_HOSTFILE")
# Under Hydra each rank's watcher lives apart from the process mpiexec starts (bootstrap.py's
# stand_in): Hydra's proxies SIGKILL that process when another host fails.
HYDRA_ENV = {"RILL_WATCH_APART": "1"}
# On one host the ranks' MPI network layers (UCX or libfabric) bind to loopback only.
LOOPBACK_ENV = {"UCX_NET_DEVICES": "lo", "FI_TCP_IFACE": "lo", "FI_SOCKETS_IFACE": "lo"}


def slurm_launcher() -> list[str] | None:
    """srun and its options (module docstring) inside a Slurm allocation, else None."""
    srun = shutil.which("srun")
    if "SLURM_JOB_ID" not in os.environ or srun is None:
        return None
    mpi = [] if os.environ.get("SLURM_MPI_TYPE") else ["--mpi=pmi2"]
    return [srun, *mpi, "--export=ALL", "--kill-on-bad-exit=1", "--quit-on-interrupt"]


def network_env(iface: str | None) -> dict:
    """The ranks' MPI network layers (UCX, libfabric) bound to one interface."""
    return {k: iface for k in LOOPBACK_ENV} if iface else {}


def process_manager(given: str | None, hosts: str | None = None, hostfile: str | None = None,
                    iface: str | None = None) -> tuple[list[str], dict]:
    """(the command that starts the ranks, given -n N after it; environment it adds). With
    hosts (--hosts, --hostfile): Hydra's mpiexec over them (gforker runs one host only). An
    mpiexec given is used as is; in a Slurm allocation, srun; on one host with the mpiexec
    found here, MPICH's mpiexec.gforker beside it when there is one, and the ranks on
    loopback only. `iface` binds the ranks' network layers (and Hydra) to that interface."""
    if hosts or hostfile:
        mpiexec = find_mpiexec(given)
        if os.path.basename(mpiexec).startswith("mpiexec.gforker"):
            raise SystemExit("rill-launch: --hosts and --hostfile need Hydra's mpiexec (MPICH's "
                             f"gforker runs every rank on this host), not {mpiexec}")
        where = ["-hosts", hosts] if hosts else ["-f", hostfile]
        return [mpiexec, *where, *(["-iface", iface] if iface else [])], \
            dict(network_env(iface), **HYDRA_ENV)
    srun = None if given else slurm_launcher()
    if srun is not None:
        return srun, network_env(iface)
    if srun is not None:
        return srun, {}
    mpiexec = find_mpiexec(given)
    if given or not sys.platform.startswith("linux") or any(k in os.environ
                                                            for k in CLUSTER_ENV):
        hydra = {} if given or os.path.basename(mpiexec).startswith("mpiexec.gforker") \
            else HYDRA_ENV
        return [mpiexec, *(["-iface", iface] if iface and not given else [])], \
            dict(network_env(iface), **hydra)
    forker = os.path.join(os.path.dirname(mpiexec), "mpiexec.gforker")
    return [forker if os.path.exists(forker) else mpiexec], dict(LOOPBACK_ENV)


def seconds(text: str) -> float:
    """--timeout's type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the timeout must be a positive, finite "
                                         "number of seconds (e.g. 60)")
    return value


def check_script(path: str) -> str | None:
    """Why the script cannot run (None if it can): checked before any rank starts, so that a
    typo costs one line, not N tracebacks. A directory or zip file with a __main__.py runs as
    `python path` would run it."""
    import zipfile
    if not os.path.exists(path):
        return f"no such file: {path}"
    if os.path.isdir(path):
        main_file = os.path.join(path, "__main__.py")
        if not os.path.isfile(main_file):
            return f"{path} is a directory without a __main__.py"
        path = main_file
    if not os.access(path, os.R_OK):
        return f"{path} is not readable (permissions: {stat.filemode(os.stat(path).st_mode)})"
    if zipfile.is_zipfile(path):
        return None
    try:
        with open(path, "rb") as f:
            compile(f.read(), path, "exec", dont_inherit=True)
    except OSError as e:
        return f"cannot read {path}: {e.strerror}"
    except SyntaxError as e:  # the caret lines Python itself would print
        import traceback
        return "".join(traceback.format_exception_only(type(e), e)).rstrip()
    except ValueError as e:  # e.g. a NUL byte in the source
        return f"{path} is not Python source: {e}"
    return None


def parse(argv):
    p = argparse.ArgumentParser(prog="rill-launch", description=__doc__.splitlines()[0])
    p.add_argument("-n", "--np", dest="n", type=int, required=True, help="number of processes")
    p.add_argument("--ps", type=int, default=0, help="how many of them are parameter servers")
    p.add_argument("--max-restarts", type=int, default=0,
                   help="start a failed job again at most this many times")
    p.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT_S,
                   help="seconds any blocking exchange may wait before it fails, naming the "
                        "ranks that did not arrive (default %(default)g; raise it for jobs "
                        "where a rank works alone for longer between exchanges)")
    p.add_argument("--mpiexec", default=None,
                   help="the mpiexec to run (default: srun inside a Slurm allocation, else "
                        "the one found)")
    p.add_argument("--hosts", default=None, metavar="HOST[:N],...",
                   help="spread the ranks over these hosts with Hydra's mpiexec (its -hosts; "
                        "N ranks on a host before the next)")
    p.add_argument("--hostfile", default=None, metavar="FILE",
                   help="the same, from a file of 'host[:N]' lines (Hydra's -f)")
    p.add_argument("--iface", default=None, metavar="NAME",
                   help="the network interface the ranks talk over (e.g. eth1): Hydra's "
                        "-iface, and UCX_NET_DEVICES / FI_TCP_IFACE for the ranks")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    a = p.parse_args(argv)
    if a.n < 1:
        p.error(f"-n must be at least 1, got {a.n}")
    if not 0 <= a.ps < a.n:
        p.error(f"--ps {a.ps} leaves no worker among {a.n} processes")
    if a.max_restarts < 0:
        p.error(f"--max-restarts must be >= 0, got {a.max_restarts}")
    if a.hosts and a.hostfile:
        p.error("give --hosts or --hostfile, not both")
    if a.hostfile and not os.path.isfile(a.hostfile):
        p.error(f"--hostfile {a.hostfile}: no such file")
    problem = check_script(a.script)
    if problem is not None:
        p.error(f"the script cannot run, so no rank was started:\n{problem}")
    return a


def run_once(a, launcher: list[str], extra_env: dict, status: str, attempt: int,
             console: Console, stop: JobStop) -> int:
    """Run the job once; returns its exit code, and prints the rank table and, if it failed
    or was stopped, a line per rank saying how it ended."""
    env = dict(os.environ, RILL_LAUNCHED="1", RILL_NUM_PS=str(a.ps), RILL_TIMEOUT=str(a.timeout),
               RILL_STATUS_FILE=status, RILL_ATTEMPT=str(attempt), PYTHONUNBUFFERED="1",
               **extra_env)
    # Each rank starts in bootstrap.py, which labels its output lines and runs the script.
    cmd = [*launcher, "-n", str(a.n), sys.executable, "-u", "-m", "rill.distributed.bootstrap",
           a.script, *a.args]
    segments = _shared_segments()
    try:
        return _run(a, cmd, env, status, console, stop, manager_name(launcher))
    finally:
        _remove_orphans(_shared_segments() - segments)


def manager_name(launcher: list[str]) -> str:
    """"mpiexec" (MPICH's gforker or Hydra), "srun", or the program given."""
    name = os.path.basename(launcher[0])
    return "mpiexec" if name.startswith("mpiexec") else name


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


# How long the processes still there after mpiexec ended get to end on their own (a watcher
# ends its rank's processes within 1 s), then to end on SIGTERM.
LEFTOVER_PATIENCE_S, LEFTOVER_GRACE_S = 1.5, 2.0


def _run(a, cmd, env, status: str, console: Console, stop: JobStop, manager: str) -> int:
    terminal = console.is_terminal
    # A session of its own: a terminal's Ctrl-C reaches rill-launch only, which stops the
    # job itself (job_stop.py); and the job gets SIGTERM if rill-launch dies, even by SIGKILL.
    proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                            preexec_fn=parent_death_signal(signal.SIGTERM),
                            **(dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, bufsize=1) if terminal else {}))
    stop.attach(proc)
    watch = Watchdog(a, status, proc)
    watch.start()
    live = pump = None
    causes: list = []
    try:
        if terminal:  # the ranks' lines scroll above a live table of the ranks
            from rich.live import Live

            class Running:  # re-read at every refresh, so a silent job's table still moves
                def __rich__(self):
                    return rank_table(a, status, "running")

            live = Live(Running(), console=console, refresh_per_second=4)
            live.start()
            pump = threading.Thread(target=_pump, args=(proc.stdout, live.console),
                                    daemon=True, name="rill-launch output")
            pump.start()
        rc = proc.wait()
        watch.finish()
        settle(a, status)
        # What is still running belongs to no rank that will end it: the ranks' own
        # processes whose watcher was killed (reparented here), a rank whose watcher is gone.
        left = end_descendants(LEFTOVER_GRACE_S, patience=LEFTOVER_PATIENCE_S)
        if pump is not None:
            pump.join(2.0)  # the ranks' last lines (the processes holding the pipe are gone)
        rc, causes = outcome(a, status, rc, watch, stop, manager)
        by = "rill-launch" if stop.received is not None else \
            manager if rc else None
        table = rank_table(a, status, "stopped" if stop.received else f"exited with {rc}",
                           by)
        if live is not None:
            live.update(table)
        else:
            console.print(table)
        if left:
            causes.append(f"ended {len(left)} process(es) the job left running: " +
                          ", ".join(f"pid {p} ({cmd})" for p, cmd in left[:8]) +
                          (", ..." if len(left) > 8 else ""))
    finally:
        stop.detach()
        watch.finish()
        if live is not None:
            live.stop()
        if proc.poll() is None:  # an error in rill-launch itself: leave nothing behind
            proc.kill()
            end_descendants(0.5)
    for cause in causes:
        console.print(f"rill-launch: {cause}", markup=False, highlight=False, soft_wrap=True)
    return rc


def _pump(stream, console) -> None:
    """Print the ranks' output lines (above the live table) until the pipe closes."""
    for line in stream:
        console.print(line.rstrip("\n"), markup=False, highlight=False)


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


def main(argv=None) -> int:
    console = Console(stderr=True)
    stop = JobStop(console).install()  # before anything slow: no KeyboardInterrupt traceback
    try:
        a = parse(sys.argv[1:] if argv is None else argv)
        if stop.received is not None:
            return 128 + stop.received
        launcher, extra_env = process_manager(a.mpiexec, a.hosts, a.hostfile, a.iface)
        # The job's orphans (a rank's processes whose watcher died) come here, not to PID 1,
        # and are ended with the job.
        become_subreaper()
        rc = 1
        with tempfile.TemporaryDirectory(prefix="rill-launch-") as tmp:
            for attempt in range(a.max_restarts + 1):
                status = os.path.join(tmp, f"status-{attempt}")
                open(status, "wb").close()
                rc = run_once(a, launcher, extra_env, status, attempt, console, stop)
                if rc == 0 or stop.received is not None:
                    break
                if attempt < a.max_restarts:
                    console.print(f"rill-launch: the job failed (exit {rc}); starting it again "
                                  f"({attempt + 1} of {a.max_restarts} restarts)")
        return 128 + stop.received if stop.received is not None else rc
    finally:
        stop.restore()


if __name__ == "__main__":
    sys.exit(main())
