"""rill.distributed under a real single-node Slurm: init() in tasks that srun starts, and
rill-launch inside an allocation (salloc, sbatch). The fixture starts munged, slurmctld and
slurmd from a configuration in a temporary directory (its own ports and munge socket, so it
never meets a Slurm already on the machine) and stops them afterwards, also on failure.
Skipped where Slurm is not installed (.ci/run installs it on Debian and Ubuntu)."""
from __future__ import annotations

import getpass
import os
import pathlib
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPTS = pathlib.Path(__file__).parent
DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "salloc", "sbatch", "sinfo")
INSTALL = ("apt-get install -y --no-install-recommends slurmctld slurmd munge slurm-client "
           "(Debian/Ubuntu, as root; .ci/run does this)")
# Left out of every command: they would tie it to another job, launcher or cluster.
FOREIGN = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "PMI_", "PMIX_", "RILL_", "OMPI_",
           "HYDRA_")


def _which(name: str) -> str | None:
    """The program's path; the daemons live in sbin, which a user's PATH may leave out."""
    return shutil.which(name, path=os.pathsep.join(
        [os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/sbin"]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(root: pathlib.Path, munge_socket: pathlib.Path) -> str:
    user = getpass.getuser()
    # Job ids start anew with each cluster's state; MPICH names its shared memory after the
    # job step ("<job>.<step>") and attaches to a segment of that name if one exists, and a
    # rank killed on purpose below leaves its segment behind: a later run reusing job 1
    # would join that dead job's memory. A random first id keeps every run's steps apart.
    first_job = random.randrange(10**6, 6 * 10**7)
    # One node on loopback with more CPUs than a CI runner may have (config_overrides: slurmd
    # takes them as given rather than draining the node); no cgroups (a container has none
    # to delegate): processes are tracked by parentage, tasks are not confined.
    return f"""\
ClusterName=rilltest
FirstJobId={first_job}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    """A running single-node Slurm: `run(cmd)` runs a client command against it."""

    def __init__(self, root: pathlib.Path):
        self.root, self.daemons = root, []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
        self.env["SLURM_CONF"] = str(root / "slurm.conf")

    def start(self) -> None:
        root = self.root
        for d in ("state", "spool", "munge"):
            (root / d).mkdir()
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = root / "munge" / "socket"
        (root / "slurm.conf").write_text(_config(root, sock))
        # Each in the foreground (-F, -D), so that it is our child and stopped by its pid.
        self._daemon(["munged", "-F", "-f", f"--key-file={key}", f"--socket={sock}",
                      f"--pid-file={root}/munge/pid", f"--seed-file={root}/munge/seed",
                      f"--log-file={root}/munged.log"])
        self._wait(sock.exists, "munged did not create its socket")
        self._daemon(["slurmctld", "-D", "-i"])
        self._daemon(["slurmd", "-D", "-N", "localhost"])
        self._wait(self._idle, "the node did not become idle")

    def _idle(self) -> bool:
        try:
            return self.run(["sinfo", "-h", "-o", "%T"], timeout=10).stdout.strip() == "idle"
        except subprocess.TimeoutExpired:
            return False

    def _daemon(self, cmd) -> None:
        with open(self.root / f"{cmd[0]}.out", "wb") as log:  # the daemon keeps its own copy
            self.daemons.append(subprocess.Popen([_which(cmd[0]), *cmd[1:]], env=self.env,
                                                 stdout=log, stderr=subprocess.STDOUT))

    def _wait(self, ready, what: str, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            gone = [os.path.basename(p.args[0]) for p in self.daemons
                    if p.poll() is not None]
            if gone:
                pytest.fail(f"{', '.join(gone)} exited while starting:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        pytest.fail(f"{what} within {seconds} s:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.root.glob("*.log")) + sorted(
                             self.root.glob("*.out")))

    def run(self, cmd, timeout: float = 60, **env) -> subprocess.CompletedProcess:
        return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, check=False,
                              timeout=timeout, env=dict(self.env, **env))

    def stop(self) -> None:
        if any(p.poll() is None for p in self.daemons[1:]):  # no job outlives the cluster
            try:
                subprocess.run(["scancel", "--user", getpass.getuser()], env=self.env,
                               capture_output=True, check=False, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for p in reversed(self.daemons):  # slurmd, slurmctld, then munged
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture(scope="module")
def slurm():
    missing = [d for d in DAEMONS if _which(d) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} not on PATH): {INSTALL}")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to start tasks; run this test as root")
    cluster = Cluster(pathlib.Path(tempfile.mkdtemp(prefix="rill-slurm-")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


def _output(proc) -> str:
    return proc.stdout + proc.stderr


def test_srun_tasks_join_one_world(slurm):
    proc = slurm.run(["srun", "--mpi=pmi2", "-n", 2, sys.executable,
                      SCRIPTS / "slurm_ranks.py"])
    out = _output(proc)
    assert proc.returncode == 0, out
    assert "rank 0 of 2 is worker:0 (chief), sum 1, slurm task 0 of 2" in out
    assert "rank 1 of 2 is worker:1, sum 1, slurm task 1 of 2" in out


def test_srun_takes_the_parameter_servers_from_rill_num_ps(slurm):
    proc = slurm.run(["srun", "--mpi=pmi2", "-n", 3, sys.executable,
                      SCRIPTS / "slurm_ranks.py"], RILL_NUM_PS="1")
    out = _output(proc)
    assert proc.returncode == 0, out
    for line in ("rank 0 of 3 is ps:0, sum 3", "rank 1 of 3 is worker:0 (chief), sum 3",
                 "rank 2 of 3 is worker:1, sum 3"):
        assert line in out, out


def test_srun_without_pmi_names_the_fix_instead_of_running_alone(slurm):
    # MpiDefault=none: each task would otherwise be rank 0 of a world of its own.
    proc = slurm.run(["srun", "-n", 2, sys.executable, SCRIPTS / "slurm_ranks.py"])
    out = _output(proc)
    assert proc.returncode != 0, out
    assert "DistributedError" in out and "task 1 of 2" in out, out
    assert "srun --mpi=pmi2" in out and "rank 0 of" not in out, out


def test_rill_launch_with_no_interface_mpi_speaks_names_the_fix(slurm):
    # SLURM_MPI_TYPE chooses rill-launch's interface; with none, MPI starts each rank alone.
    proc = slurm.run(["salloc", "-n", 2, *_launch("-n", 2, "--timeout", 30,
                                                   SCRIPTS / "slurm_ranks.py")],
                     SLURM_MPI_TYPE="none")
    out = _output(proc)
    assert proc.returncode != 0, out
    assert "srun started 2 tasks, but MPI found only this one" in out, out
    assert "srun --mpi=pmi2" in out and "rank 0 of" not in out, out


def test_srun_with_one_task_is_a_world_of_one(slurm):
    proc = slurm.run(["srun", "-n", 1, sys.executable, SCRIPTS / "slurm_ranks.py"])
    assert proc.returncode == 0, _output(proc)
    assert "rank 0 of 1 is worker:0 (chief), sum 0, slurm task 0 of 1" in proc.stdout


def _launch(*args):
    return [sys.executable, "-m", "rill.distributed.launch", *args]


def test_rill_launch_in_an_allocation_starts_the_ranks_with_srun(slurm):
    proc = slurm.run(["salloc", "-n", 2, *_launch("-n", 2, "--timeout", 30,
                                                   SCRIPTS / "slurm_ranks.py")])
    out = _output(proc)
    assert proc.returncode == 0, out
    # Labelled by bootstrap.py, and each rank is the srun task of its own rank.
    assert "worker0 | rank 0 of 2 is worker:0 (chief), sum 1, slurm task 0 of 2" in out
    assert "worker1 | rank 1 of 2 is worker:1, sum 1, slurm task 1 of 2" in out
    rows = [line for line in out.splitlines() if "│ worker" in line]
    assert len(rows) == 2 and all("finished" in r and "exit 0" in r for r in rows), out


def test_rill_launch_in_an_allocation_names_a_killed_rank(slurm):
    proc = slurm.run(["salloc", "-n", 3, *_launch("-n", 3, "--timeout", 30,
                                                   SCRIPTS / "killed.py", "SIGKILL")])
    out = _output(proc)
    assert proc.returncode != 0, out
    assert "rank 2 (worker2) was killed by SIGKILL" in out, out
    assert out.count("was killed by") == 1, out  # srun stopped the others: not causes
    assert "did not complete within" not in out, out


def test_rill_launch_in_a_batch_job_starts_a_failed_job_again(slurm):
    log = slurm.root / "batch.out"
    command = " ".join(map(str, _launch("-n", 2, "--max-restarts", 1, "--timeout", 30,
                                        SCRIPTS / "flaky.py")))
    proc = slurm.run(["sbatch", "--wait", "-n", 2, "-o", log, "--wrap", command])
    out = _output(proc) + (log.read_text() if log.exists() else "")
    assert proc.returncode == 0, out
    assert "rank 1 (worker1) failed with exit code 3" in out, out
    assert "starting it again (1 of 1 restarts)" in out, out
    assert "worker0 | attempt 1 finished" in out and "worker1 | attempt 1 finished" in out
    assert "attempt 0 finished" not in out
