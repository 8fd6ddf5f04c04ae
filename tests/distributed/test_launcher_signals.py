"""rill-launch behaves as a cluster user needs on day one (issue 33, item 4): a stop signal to
it (SIGTERM from a scheduler, Ctrl-C, a closed terminal) stops the whole job — mpiexec, the
ranks and the processes they started — removes the job's shared memory, says for each rank
who stopped it and why, and exits with 128 + the signal; a rank's exit message is shown; a
timeout names the rank busy in its own code; the script and --timeout are checked before any
rank starts. Each job is a real rill-launch job (tests/distributed/signal_jobs.py), bounded
in time, and every test checks that nothing of the job is left running."""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
from launching import clean_env, command, launch  # noqa: E402

JOB = HERE / "signal_jobs.py"
pytest.importorskip("mpi4py", reason="real jobs need mpi4py (pip install 'rill[distributed]')")
pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="the watcher, /proc and /dev/shm are Linux-only")]


# ---- what a job leaves behind --------------------------------------------------------------

def _alive(pid: int) -> bool:
    """A process that still runs (a zombie has ended: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _descendants(pid: int) -> set:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_bytes()
                parents[int(entry)] = int(stat.rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for child, parent in parents.items():
            if parent == p and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _segments(pids) -> set:
    """The /dev/shm files these processes map (MPICH's mpich_shm_*)."""
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                out.update(line.split()[-1] for line in f if "/dev/shm/" in line)
        except OSError:
            continue
    return out


def _gone(pids, within: float) -> list:
    """The pids still running after `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not [p for p in pids if _alive(p)]:
            return []
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


class Job:
    """rill-launch -n 3 signal_jobs.py MODE DIR, started so that the test can signal it."""

    def __init__(self, tmp_path, mode: str, n: int = 3):
        self.dir, self.n = tmp_path, n
        self.out = open(tmp_path / "out.txt", "w+")
        self.proc = subprocess.Popen(command("-n", n, "--timeout", 20, JOB, mode, tmp_path),
                                     stdout=self.out, stderr=subprocess.STDOUT,
                                     env=clean_env(), start_new_session=True)

    def running(self, within: float = 40.0):
        """Wait until every rank has written its pids; returns (job's processes, the pids
        the ranks wrote, the shared-memory files they map)."""
        deadline = time.monotonic() + within
        files = [self.dir / f"{r}.pids" for r in range(self.n)]
        while not all(f.exists() for f in files):
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, "the job did not start:\n" + self.output()
            time.sleep(0.1)
        time.sleep(0.5)  # a few all-reduces
        written = {int(p) for f in files for p in f.read_text().split()}
        processes = _descendants(self.proc.pid) | written
        return processes, written, _segments(processes)

    def output(self) -> str:
        self.out.flush()
        return (self.dir / "out.txt").read_text()

    def end(self, within: float) -> tuple[int, str, float]:
        start = time.monotonic()
        try:
            rc = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"rill-launch did not end within {within} s:\n" + self.output())
        return rc, self.output(), time.monotonic() - start

    def kill(self) -> None:
        """Leave nothing behind when a test fails."""
        for pid in _descendants(self.proc.pid) | {self.proc.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


@pytest.fixture
def job(tmp_path):
    jobs = []

    def start(mode: str, n: int = 3) -> Job:
        jobs.append(Job(tmp_path, mode, n))
        return jobs[-1]
    yield start
    for j in jobs:
        if j.proc.poll() is None:
            j.kill()
        j.out.close()


def _rank_lines(out: str) -> list:
    return [line for line in out.splitlines() if line.startswith("rill-launch: rank ")]


# ---- stop signals --------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=lambda s: s.name)
def test_a_stop_signal_to_rill_launch_stops_the_whole_job(job, sig):
    """What Slurm sends first (SIGTERM), Ctrl-C (SIGINT), a closed terminal (SIGHUP): every
    process of the job ends — mpiexec, the ranks, a rank's child, a grandchild in a session
    of its own, an orphan — its shared memory is removed, each rank's line says rill-launch
    stopped it after that signal, and rill-launch exits with 128 + the signal."""
    j = job("train")
    processes, written, segments = j.running()
    assert len(written) == 12 and segments, (written, segments)
    j.proc.send_signal(sig)
    rc, out, took = j.end(within=25)
    assert rc == 128 + sig, out
    assert took < 12, out  # the ranks stop on SIGTERM at once; no SIGKILL deadline reached
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    lines = _rank_lines(out)
    assert len(lines) == 3, out
    for r, line in enumerate(sorted(lines)):
        assert line.startswith(f"rill-launch: rank {r} (worker{r}): stopped by rill-launch "
                               f"after {sig.name}, last seen entering all_reduce"), out
    assert not _gone(processes, within=3), f"left running: {_gone(processes, 0)}\n{out}"
    assert not [s for s in segments if os.path.exists(s)], (segments, out)


def test_a_second_signal_kills_a_job_that_ignores_sigterm(job):
    """Ranks that ignore SIGTERM: a second Ctrl-C kills the job at once (their watchers would
    wait 5 s), and each rank's line still says rill-launch stopped it after SIGINT."""
    j = job("deaf")
    processes, _, segments = j.running()
    j.proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert j.proc.poll() is None, j.output()  # still stopping: the ranks ignored SIGTERM
    j.proc.send_signal(signal.SIGINT)
    rc, out, took = j.end(within=20)
    assert rc == 128 + signal.SIGINT, out
    assert took < 4.5, out  # before the watchers' own 5 s
    assert "received again: killing the job now" in out, out
    lines = _rank_lines(out)
    assert len(lines) == 3 and all("by rill-launch after SIGINT" in line for line in lines), out
    assert not _gone(processes, within=3), out
    assert not [s for s in segments if os.path.exists(s)], (segments, out)


def test_a_killed_rill_launch_still_stops_its_job(job):
    """SIGKILL cannot be caught: mpiexec gets SIGTERM from the kernel when rill-launch dies
    (PR_SET_PDEATHSIG), and the ranks and their processes still end."""
    j = job("train")
    processes, _, segments = j.running()
    j.proc.kill()
    j.proc.wait(timeout=10)
    assert not _gone(processes, within=15), j.output()
    for s in segments:  # nobody is left to remove them; the next rill-launch would
        if os.path.exists(s):
            os.unlink(s)


# ---- what a rank says when it fails --------------------------------------------------------

@pytest.mark.parametrize("mode, said", [
    ("exit_message", "worker1 gives up: its shard of the data set is empty"),
    ("raises", "ValueError: worker1 found a NaN in its batch")])
def test_a_failing_rank_s_own_words_are_shown_by_the_launcher(mode, said):
    rc, out = launch("-n", 3, "--timeout", 20, JOB, mode, timeout=60)
    assert rc == 1, out
    assert f"rill-launch: rank 1 (worker1) failed with exit code 1: {said}" in out, out
    if mode == "exit_message":  # and in the rank's output, as Python prints it
        assert f"worker1 | {said}" in out, out
    others = [line for line in _rank_lines(out) if "rank 1" not in line.split(":")[1]]
    assert len(others) == 2 and all("after the failure of rank 1 (worker1)" in line
                                    for line in others), out


def test_processes_a_rank_leaves_running_end_with_the_job(tmp_path):
    """A rank starts a process in a session of its own that ignores SIGTERM, and ends: the
    job still succeeds, and that process does not outlive it."""
    rc, out = launch("-n", 2, "--timeout", 20, JOB, "leave_children", timeout=60)
    assert rc == 0, out
    left = [int(line.rsplit(" ", 1)[1]) for line in out.splitlines() if "left pid" in line]
    assert len(left) == 2, out
    assert not _gone(left, within=3), out


# ---- timeouts ------------------------------------------------------------------------------

def test_a_timeout_in_a_graph_job_names_the_busy_worker_not_only_the_ps():
    """worker:1 works in its own code past the timeout before a synchronous step: worker:0
    waits for ps:0, which waits for worker:1. The error names ps:0 as waited for (in its
    serve loop) and worker:1 as the rank in its own code all that time; the launcher's
    line for each rank says what it was doing."""
    rc, out = launch("-n", 3, "--ps", 1, "--timeout", 3, JOB, "graph_busy", timeout=60)
    assert rc != 0, out
    error = next(line for line in out.splitlines()
                 if line.startswith("rill-launch: rank 1 (worker0) failed"))
    assert "did not complete within 3 s: waiting for rank 0 (ps0)" in error, out
    assert "in its serve loop" in error, out
    assert "all the time this rank waited" in error and "rank 2 (worker1), last seen " \
           "entering send" in error and "in its own code" in error, out
    worker1 = [line for line in _rank_lines(out) if line.startswith("rill-launch: rank 2")]
    assert worker1 and "in its own code" in worker1[0], out


# ---- checked before any rank starts --------------------------------------------------------

@pytest.fixture
def fake_mpiexec(tmp_path):
    """An --mpiexec that only records that it was started."""
    marker = tmp_path / "started"
    path = tmp_path / "mpiexec"
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)
    return path, marker


@pytest.mark.parametrize("case", ["missing", "syntax", "directory", "unreadable"])
def test_a_script_that_cannot_run_starts_no_rank(tmp_path, fake_mpiexec, case):
    mpiexec, marker = fake_mpiexec
    script = tmp_path / "train.py"
    if case == "syntax":
        script.write_text("import rill\nfor i in range(3)\n    print(i)\n")
    elif case == "directory":
        script.mkdir()
    elif case == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        script.write_text("print('hi')\n")
        script.chmod(0)
    rc, out = launch("-n", 2, "--mpiexec", mpiexec, script, timeout=30)
    assert rc == 2, out
    assert "the script cannot run, so no rank was started" in out, out
    want = {"missing": f"no such file: {script}",
            "syntax": "SyntaxError: expected ':'",
            "directory": "is a directory without a __main__.py",
            "unreadable": "is not readable"}[case]
    assert want in out, out
    if case == "syntax":
        assert 'File "' + str(script) + '", line 2' in out, out
    assert not marker.exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-5", "0", "five"])
def test_timeout_must_be_positive_finite_seconds(tmp_path, fake_mpiexec, value):
    mpiexec, marker = fake_mpiexec
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    rc, out = launch("-n", 2, "--mpiexec", mpiexec, f"--timeout={value}", script, timeout=30)
    assert rc == 2 and "--timeout" in out, out
    assert ("positive, finite number of seconds" if value != "five"
            else "is not a number of seconds") in out, out
    assert not marker.exists()


def test_the_default_timeout_is_a_minute_and_documented():
    from rill.distributed.world import DEFAULT_TIMEOUT_S
    assert DEFAULT_TIMEOUT_S == 60
    help_text = subprocess.run(command("--help"), capture_output=True, text=True,
                               env=clean_env(), timeout=30).stdout
    assert "default 60" in " ".join(help_text.split()), help_text
    readme = (HERE.parent.parent / "README.md").read_text()
    assert "--timeout" in readme and "60 s" in readme
