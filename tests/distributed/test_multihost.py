"""rill-launch jobs spread over hosts: the network namespaces of netbed.py, one per host,
reached by MPICH's Hydra mpiexec (`rill-launch --hosts ... --iface eth0`), the ranks of
different hosts talking over TCP. The same job scripts the one-host tests run, and the same
results; then the sockets the job listens on, messages from outside the job, and the faults
of a cluster (a host killed, a link down, a straggler, a capped link). Each test makes its
own bed and tears it down; each job is bounded in time."""
from __future__ import annotations

import glob
import json
import pathlib
import sys
import time

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from launching import launch as launch_here  # noqa: E402

pytest.importorskip("mpi4py", reason="real jobs need mpi4py (pip install 'rill[distributed]')")

JOBS = HERE / "multihost_jobs.py"


def _ok(rc, out):
    assert rc == 0, out


# ---- the strategies, over hosts, equal to one host ------------------------------------------

def test_allreduce_ddp_over_three_hosts_equals_one_process(netbed):
    bed = netbed(3)
    rc, out = bed.launch([2, 1, 1], "--timeout", 30, HERE / "allreduce_training.py")
    _ok(rc, out)
    assert out.count("allreduce training ok") == 4, out


def test_eager_parameter_servers_sync_async_and_a_backup_worker_over_hosts(netbed):
    bed = netbed(4)
    rc, out = bed.launch([1, 1, 1], "--ps", 1, "--timeout", 30, HERE / "ps_training.py",
                         "sync0")
    _ok(rc, out)
    assert out.count("sync ps equals one process") == 2
    assert "ps stats {'applied': 6, 'dropped': 0, 'pushes': 12}" in out
    rc, out = bed.launch([1, 1, 1, 1], "--ps", 1, "--timeout", 30, HERE / "ps_training.py",
                         "straggler")
    _ok(rc, out)
    stats = eval(out.split("ps stats ")[1].splitlines()[0], {})  # noqa: S307 - our print
    assert stats["applied"] == 6 and stats["dropped"] >= 1, stats
    rc, out = bed.launch([1, 1, 1], "--ps", 2, "--timeout", 30, HERE / "ps_training.py",
                         "sparse")  # async, a table split over two ps on two hosts
    _ok(rc, out)
    assert "ps0     | sparse ok: rows [1, 5] of [0, 10) changed" in out
    assert "ps1     | sparse ok: rows [17] of [10, 20) changed" in out


def test_a_captured_sync_step_over_hosts_equals_the_one_host_run_bit_for_bit(
        netbed, tmp_path):
    here, there = tmp_path / "one", tmp_path / "bed"
    here.mkdir(), there.mkdir()
    rc, out = launch_here("-n", 3, "--ps", 1, "--timeout", 30, HERE / "graph_training.py",
                          "captured", here, timeout=60)
    _ok(rc, out)
    bed = netbed(3)
    rc, out = bed.launch([1, 1, 1], "--ps", 1, "--timeout", 30, HERE / "graph_training.py",
                         "captured", there)
    _ok(rc, out)
    assert "'applied': 10, 'contributions': 20, 'dropped': 0" in out
    one, many = np.load(here / "captured.npz"), np.load(there / "captured.npz")
    assert sorted(one) == sorted(many) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for name in one:
        np.testing.assert_array_equal(many[name], one[name], err_msg=name)


def test_a_sharded_embedding_across_tasks_on_four_hosts(netbed, tmp_path):
    bed = netbed(4)
    rc, out = bed.launch([1, 1, 1, 1], "--ps", 2, "--timeout", 30,
                         HERE / "graph_embedding.py", tmp_path, timeout=90)
    _ok(rc, out)
    assert out.count("bytes per step checked") == 2, out
    assert out.count("'applied': 120, 'contributions': 120, 'dropped': 0") == 2, out


def test_a_killed_ps_restarts_every_task_from_the_distributed_checkpoint(netbed, tmp_path):
    bed = netbed(3)
    rc, out = bed.launch([1, 1, 1], "--ps", 1, "--max-restarts", 1, "--timeout", 20,
                         HERE / "graph_fault.py", tmp_path / "ckpt", timeout=90)
    _ok(rc, out)
    assert "starting it again (1 of 1 restarts)" in out
    for worker in ("worker0", "worker1"):
        assert f"{worker} | attempt 1 starts at step 8" in out, out
    assert "finished at step 12: the parameters equal an uninterrupted run's bit for bit" in out


# ---- what listens, and messages from outside the job ----------------------------------------

def _wait_files(pattern, count, limit):
    deadline = time.monotonic() + limit
    while len(glob.glob(pattern)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(glob.glob(pattern))


def test_sockets_listen_on_the_job_interface_and_outsiders_do_no_harm(netbed, tmp_path):
    """Every socket a rank listens on is bound to its host's address on the job's interface;
    the one exception is Hydra's mpiexec's control port on the launching host (Hydra binds
    it to every interface whatever -iface says). A host outside the job (h3) connects to
    each of them and sends garbage: the job goes on and its sums are right."""
    bed = netbed(4)
    job = bed.start([2, 1, 1, 0], "--timeout", 20, JOBS, "probe", tmp_path)
    try:
        assert _wait_files(str(tmp_path / "ready-*"), 4, 40) == 4, job.output
        seen = {h.name: bed.listeners(h) for h in bed.hosts}
        assert seen["h3"] == []
        wildcard = [(a, p, n) for h in ("h0", "h1", "h2") for a, p, n in seen[h]
                    if a not in (bed.hosts[int(h[1])].address,)]
        # only mpiexec's control port, on the launching host
        assert [(a, "mpiexec" in n) for a, p, n in wildcard] == [("0.0.0.0", True)], seen
        assert all(len([1 for a, p, n in seen[h] if "python" in n and a != "0.0.0.0"]) == k
                   for h, k in (("h0", 2), ("h1", 1), ("h2", 1))), seen
        targets = [(bed.hosts[int(h[1])].address, p) for h in ("h0", "h1", "h2")
                   for a, p, n in seen[h]]
        code = ("import socket, sys, time\n"
                "for t in sys.argv[1:]:\n"
                "    host, port = t.rsplit(':', 1)\n"
                "    s = socket.create_connection((host, int(port)), timeout=2)\n"
                "    s.sendall(b'\\x00\\xffRLPS garbage' * 4096)\n"
                "    time.sleep(0.1)\n"
                "    s.close()\n"
                "print('sent', len(sys.argv) - 1)\n")
        import subprocess
        sent = subprocess.run(bed.on(3, sys.executable, "-c", code,
                                     *[f"{a}:{p}" for a, p in targets]),
                              capture_output=True, text=True, timeout=30)
        assert f"sent {len(targets)}" in sent.stdout, sent.stderr
        (tmp_path / "go").touch()
        rc, out, _ = job.finish(40)
    finally:
        (tmp_path / "go").touch()
        job.finish(40)
    _ok(rc, out)
    assert out.count("probe ok") == 4 and "probe ok on h2" in out, out


# ---- faults ---------------------------------------------------------------------------------

FAULT_TIMEOUT = 4  # the job's --timeout: how long an exchange may wait for a peer


def _fault_job(bed, tmp_path, fault, on_failure=None):
    """The fault job over hosts h0-h2, `fault()` applied when every rank pauses after step 9
    of attempt 0; returns (exit code, output, seconds from the fault to the job's failure,
    total seconds)."""
    start = time.monotonic()
    job = bed.start([1, 1, 1], "--timeout", FAULT_TIMEOUT, "--max-restarts", 1, JOBS,
                    "fault", tmp_path)
    try:
        assert _wait_files(str(tmp_path / "fault-now"), 1, 40) == 1, job.output
        at = time.monotonic()
        fault()
        assert job.wait_for("starting it again", 40), job.output
        failed_after = time.monotonic() - at
        if on_failure:
            on_failure()
        rc, out, _ = job.finish(60)
    finally:
        job.finish(10)
    return rc, out, failed_after, time.monotonic() - start


def _resumed_exactly(out):
    for k in range(3):
        assert f"worker{k} | attempt 1 on h{k} starts at step 8" in out, out
    assert "worker0 | attempt 1 finished at step 16 equal to an uninterrupted run" in out, out


def test_a_host_whose_processes_are_all_killed(netbed, tmp_path):
    bed = netbed(3)
    rc, out, failed_after, total = _fault_job(bed, tmp_path, lambda: bed.kill_host(2))
    _ok(rc, out)
    _resumed_exactly(out)
    # Hydra notices its proxy's connection close at once and ends the job; the other hosts'
    # watchers, apart from what Hydra kills, say their ranks were stopped, and h2's ranks,
    # left without an account, are named as lost with their host
    assert failed_after < FAULT_TIMEOUT, (failed_after, out)
    assert "rill-launch: host h2 was lost: rank 2 (worker2), pid" in out, out
    for k in (0, 1):
        assert f"rank {k} (worker{k}) on h{k}: stopped by mpiexec after the failure of " \
            "host h2" in out, out
    print(f"host killed: failure after {failed_after:.1f} s, job {total:.1f} s")


def test_a_host_whose_link_goes_down(netbed, tmp_path):
    bed = netbed(3)
    rc, out, failed_after, total = _fault_job(bed, tmp_path, lambda: bed.link(2, False),
                                              on_failure=lambda: bed.link(2, True))
    _ok(rc, out)
    _resumed_exactly(out)
    # nothing breaks a TCP connection whose link is down: the job's deadline ends it. Every
    # rank had entered the all-reduce, so none is missing: the probes name the one that
    # stopped answering, with its host, and rill-launch the host the others lost
    assert "did not complete within 4 s" in out, out
    # The first rank to time out ends the job: the other may be stopped before its own
    # timeout says anything, so one of them naming rank 2 on h2 is what is certain.
    named = [k for k in (0, 1)
             if f"all_reduce on worker{k} (rank {k}) did not complete within 4 s. No answer "
             "to a probe" in out and "which had entered it too: rank 2 (worker2) on h2; "
             f"answered: rank {1 - k} on h{1 - k}" in out]
    assert named, out
    assert "rill-launch: host h2 stopped answering: no probe from h0, h1 reached its ranks " \
        "(rank 2 (worker2))" in out, out
    assert failed_after < FAULT_TIMEOUT + 10, (failed_after, out)
    print(f"link down: failure after {failed_after:.1f} s, job {total:.1f} s")


def _step_times(bed, tmp_path, backups, share, tag, steps=40):
    """Mean step time (ms) of each worker of a captured sync job (ps on h0, a worker on each
    of h1-h3), h3 held to `share` of a CPU once every worker has made its first step."""
    d = tmp_path / tag
    d.mkdir()
    job = bed.start([1, 1, 1, 1], "--ps", 1, "--timeout", 30, JOBS, "steptime", d / "r",
                    steps, backups, d / "go")
    try:
        assert _wait_files(str(d / "r-ready-*"), 3, 40) == 3, job.output
        bed.slow(3, share)
        (d / "go").touch()
        rc, out, _ = job.finish(60)
    finally:
        (d / "go").touch()
        job.finish(10)
        bed.slow(3, None)
    _ok(rc, out)
    means = {}
    for f in glob.glob(str(d / "r-worker*.json")):
        r = json.loads(pathlib.Path(f).read_text())
        means[r["host"]] = 1000 * r["wall_s"] / max(len(r["steps_s"]), 1)
    return means


def test_backup_workers_keep_the_step_time_of_the_healthy_workers(netbed, tmp_path):
    bed = netbed(4)
    if not bed.slow(3, None):
        pytest.skip("no CPU cgroup here to make a straggler host with")
    healthy = _step_times(bed, tmp_path, 0, None, "healthy")
    waiting = _step_times(bed, tmp_path, 0, 0.05, "straggler")
    backup = _step_times(bed, tmp_path, 1, 0.05, "backup")
    base = np.mean([healthy["h1"], healthy["h2"]])
    print(f"ms per step: healthy {healthy}, straggler without backup {waiting}, "
          f"with 1 backup {backup}")
    # without a backup every worker waits for h3 each step; with one, h1 and h2 do not
    assert np.mean([waiting["h1"], waiting["h2"]]) > 1.5 * base, (healthy, waiting)
    assert np.mean([backup["h1"], backup["h2"]]) < 0.7 * np.mean([waiting["h1"],
                                                                  waiting["h2"]]), backup


def test_a_capped_link_slows_the_job_but_not_past_its_deadline(netbed, tmp_path):
    import netbed as nb
    bed = netbed(3)
    bed.cap(1, "16mbit")
    link = nb.measure_link(bed, sizes=(8, 1 << 20), repeats=4)
    assert 0.5e6 < link["bandwidth_Bps"] < 2.6e6, link  # 16 Mbit/s is 2 MB/s
    rc, out = bed.launch([1, 1, 1], "--timeout", 30, HERE / "allreduce_training.py")
    _ok(rc, out)  # small messages: the same result over the capped link
    assert out.count("allreduce training ok") == 3
    # 1 MiB per rank through 100 kbit/s cannot make a 3 s deadline: it fails there
    bed.cap(1, "100kbit", burst="4kb")
    (tmp_path / "go").touch()
    start = time.monotonic()
    rc, out = bed.launch([1, 1, 1], "--timeout", 3, JOBS, "probe", tmp_path, timeout=60)
    took = time.monotonic() - start
    assert rc != 0 and "did not complete within 3 s" in out, out
    # the probes queue behind the 1 MiB on h1's link: h1 is named as not answering
    assert "rill-launch: host h1 stopped answering" in out, out
    assert took < 3 + 20, took
