"""Hardening, round 2 (issue 30): distributed jobs never hang and blame the right rank.

Each job is a real rill-launch job (tests/distributed/round2_jobs.py), bounded in time: a
rank is stopped (SIGSTOP) or leaves at the moment a finding named, and the job must end
within a bound with an error naming that rank and its role."""
from __future__ import annotations

import pathlib
import struct
import sys
import time

import numpy as np
import pytest

import rill

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
from launching import launch  # noqa: E402

JOB = HERE / "round2_jobs.py"
pytest.importorskip("mpi4py", reason="real jobs need mpi4py (pip install 'rill[distributed]')")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the watcher and /proc are Linux-only")


def _timed(*args, bound):
    start = time.monotonic()
    rc, out = launch(*args, timeout=bound + 30)
    took = time.monotonic() - start
    assert took < bound, f"the job took {took:.0f} s (bound {bound} s):\n{out}"
    return rc, out


def _causes(out):
    return [line for line in out.splitlines() if line.startswith("rill-launch: rank")]


@linux_only
@pytest.mark.timeout(90)
def test_a_rank_stopped_after_its_last_exchange_does_not_hang_mpi_shutdown():
    """Rank 2 stops after the last all-reduce: the others used to wait in MPI_Finalize
    forever. Now they meet at a barrier with the job's deadline first, and name it."""
    rc, out = _timed("-n", 3, "--timeout", 3, JOB, "stop_after_last", bound=45)
    assert rc != 0, out
    assert "shutdown barrier" in out and "did not complete within 3 s" in out, out
    assert "waiting for rank 2 (worker2), stopped (process state T" in out, out
    causes = _causes(out)
    assert causes and causes[0].startswith("rill-launch: rank 2 (worker2) was stopped "
                                           "(process state T"), out
    assert "last seen entering all_reduce" in causes[0], out


@linux_only
@pytest.mark.timeout(90)
def test_ranks_that_finish_far_apart_end_the_job_normally():
    """The deadline at the shutdown barrier is for ranks that cannot come (stopped, gone):
    one still working past the timeout after the others finished is waited for."""
    rc, out = _timed("-n", 3, "--timeout", 2, JOB, "finish_apart", bound=45)
    assert rc == 0, out
    assert all(f"rank {r} done" in out for r in range(3)), out


@linux_only
@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["graph_no_close", "graph_vanish"])
def test_a_graph_ps_ends_naming_a_worker_that_left_without_close(mode):
    """worker:1 ends its script without dist.close(), or its process vanishes: the ps used
    to serve forever. It ends with a DistributedError naming the worker."""
    rc, out = _timed("-n", 3, "--ps", 1, "--timeout", 5, JOB, mode, bound=45)
    assert rc != 0, out
    if mode == "graph_no_close":  # the ps says it, from the worker's word at exit
        assert "DistributedError" in out, out
        assert "worker:1 (rank 2) will not: it said so at exit: worker:1 (rank 2) exited " \
               "without calling rill.distributed.close()" in out, out
    else:  # no word at exit: the launcher (or the ps, from the board) names it
        assert "rank 2 (worker1) exited (code 0) without reaching the job's end" in out or \
            "worker:1 (rank 2) will not" in out, out
    assert "worker1 done" in out, out


@linux_only
@pytest.mark.timeout(90)
def test_a_stopped_worker_is_named_not_the_ps_it_blocks():
    """worker:1 is stopped mid-training (sync replicas): worker:0 waits for ps:0, which waits
    for worker:1. The timeout used to blame ps:0; it names the stopped worker first."""
    rc, out = _timed("-n", 3, "--ps", 1, "--timeout", 3, JOB, "graph_stop", bound=45)
    assert rc != 0, out
    timeouts = [line for line in out.splitlines() if "did not complete within" in line]
    assert timeouts, out
    # who each timeout waits for, first (a line may be cut where the launcher's own output
    # interleaves, as it ends the job)
    named = [line.split("waiting for ", 1)[1] for line in timeouts if "waiting for " in line]
    assert any(n.startswith("rank 2 (worker1), stopped (process state T") for n in named), out
    assert all("rank 2 (worker1)".startswith(n) or n.startswith("rank 2 (worker1)")
               for n in named), out
    causes = _causes(out)
    assert causes and causes[0].startswith("rill-launch: rank 2 (worker1) was stopped"), out
    assert not any("rank 0 (ps0) was" in c for c in causes), out


@pytest.mark.timeout(120)
def test_a_graph_job_restarted_at_its_last_checkpoint_can_fetch(tmp_path):
    """Attempt 0 fails after its last checkpoint (step 4); attempt 1 restores it, runs no
    step, and fetches: the values fetched are the ones attempt 0's chief saw."""
    rc, out = _timed("-n", 3, "--ps", 1, "--max-restarts", 1, "--timeout", 10, JOB,
                     "restart_at_end", tmp_path, bound=90)
    assert "attempt 1 starts at step 4" in out, out
    assert rc == 0, out
    # attempt 0's chief fetched before it failed, and both workers of attempt 1 after the
    # restore: the values the ps restored are those attempt 0 ended with
    assert "attempt 0 worker0 fetched at step 0" in out, out
    assert out.count("attempt 1 worker") == 2 and out.count("fetched at step 4") == 2, out
    weights = {line.split("weight ")[1] for line in out.splitlines() if "fetched at" in line}
    assert len(weights) == 1, out


# ---- decoders ------------------------------------------------------------------------------

def _message(shape, code=8, kind=2, field=1):
    from rill.distributed import wire
    head = bytearray(wire.HEADER.size)
    wire.HEADER.pack_into(head, 0, wire.MAGIC, wire.VERSION, kind, 0, 2, 1, 0)
    entry = bytearray(wire.ENTRY.size)
    wire.ENTRY.pack_into(entry, 0, field, code, len(shape), 0, 1)
    return bytes(head + entry + struct.pack(f"<{len(shape)}Q", *shape) + b"w" + b"\0" * 7)


@pytest.mark.parametrize("shape", [(0, 2**61), (2**61, 0), (0, 2**40, 2**40),
                                   (0, 2**31, 2**31, 2**31), (0, 2**62 - 1)])
def test_an_empty_array_with_huge_dimensions_is_refused_naming_the_sender(shape):
    from rill.distributed import wire
    with pytest.raises(rill.DistributedError, match=r"malformed message from rank 3 "
                                                    r"\(worker2\).*more than any array"):
        wire.decode(_message(shape), "rank 3 (worker2)")
    # an empty array NumPy can make still decodes
    message = wire.decode(_message((0, 2**20)), "rank 3 (worker2)")
    assert message.entries[0][2].shape == (0, 2**20)


def test_a_ps_refuses_a_reply_field_its_strategy_does_not_read():
    """A reply may carry meta on the wire (captured graphs); the eager ParameterServer
    reads no meta, and used to fail on it with a KeyError."""
    from rill.distributed import wire
    from rill.distributed.ps import ParameterServer
    ps = ParameterServer.__new__(ParameterServer)
    ps.place, ps.ranges, ps.params = {}, {}, {}
    message = wire.decode(wire.encode("reply", 0, [("meta", "x", np.int64(1))]), "rank 0")
    with pytest.raises(rill.DistributedError, match=r"malformed message from rank 0 \(ps0\)"
                                                    r": a meta entry"):
        ps._checked(message, ("reply",), 0, "rank 0 (ps0)")


def test_an_error_message_without_its_text_is_read_not_raised():
    from rill.distributed import wire
    from rill.distributed.graphs.postbox import error_text
    bare = wire.decode(wire.encode("error", 0, []), "rank 1")
    assert "without its text" in error_text(bare)
    said = wire.decode(wire.encode("error", 0, [("text", "error", np.frombuffer(
        b"it broke", np.uint8))]), "rank 1")
    assert error_text(said) == "it broke"
