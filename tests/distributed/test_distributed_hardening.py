"""Hardening of rill.distributed (issue 14, finding 9): a killed rank is named by rank, role
and signal; a job on one host listens on loopback only; parameter-server messages are typed
buffers, never pickles. Every job is bounded in time."""
from __future__ import annotations

import ast
import ipaddress
import os
import pathlib
import pickle
import queue
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import rill

SCRIPTS = pathlib.Path(__file__).parent  # the job scripts beside this file
LIB = pathlib.Path(rill.__file__).parent / "distributed"

pytestmark = pytest.mark.timeout(240)

from launching import clean_env as _env, command as _command, launch  # noqa: E402


# ---- a killed rank is named ----------------------------------------------------------------

@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_a_killed_rank_is_named_by_rank_role_and_signal(signal_name):
    rc, out = launch("-n", 3, "--timeout", 30, SCRIPTS / "killed.py", signal_name, timeout=90)
    assert rc != 0, out
    assert f"rank 2 (worker2) was killed by {signal_name}" in out, out
    assert out.count("was killed by") == 1, out  # the others were stopped, not the cause
    rows = [line for line in out.splitlines() if "worker2" in line and "│" in line]
    assert rows and f"killed by {signal_name}" in rows[-1], out  # the rank table marks it
    # The survivors were stopped when rank 2 died, not left to their own deadline.
    assert "did not complete within" not in out, out
    assert "the second all-reduce completed" not in out


@pytest.mark.parametrize("watcher_stopped_after", [0.3, None])
def test_a_rank_signalled_with_its_whole_job_is_stopped_not_killed(tmp_path,
                                                                    watcher_stopped_after):
    """srun signals every process of a step: the rank's SIGTERM may kill it before its
    watcher's own arrives. The watcher then records a stop, not a kill (a cause); a SIGTERM
    to the rank alone stays a kill."""
    import signal
    import subprocess
    import sys
    import time
    from rill.distributed.status import StatusBoard
    path = str(tmp_path / "board")
    StatusBoard(path, 1)  # created before the watcher opens it
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "watched_sleeper.py"), path],
                            env=_env())
    board = StatusBoard(path, 1)
    deadline = time.monotonic() + 30
    while not board.read()[0].pid and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(board.read()[0].pid, signal.SIGTERM)  # the rank first
    if watcher_stopped_after is not None:
        time.sleep(watcher_stopped_after)
        os.kill(proc.pid, signal.SIGTERM)  # then its watcher
    proc.wait(timeout=30)
    row = board.read()[0]
    if watcher_stopped_after is None:
        assert (row.ending, row.code) == ("killed", signal.SIGTERM)
    else:
        assert (row.ending, row.code) == ("stopped", signal.SIGTERM)


def test_a_timeout_names_a_peer_that_was_killed(tmp_path):
    from rill.distributed.collectives import timeout_error
    from rill.distributed.status import StatusBoard
    from rill.distributed.world import World
    path = str(tmp_path / "board")
    board = StatusBoard(path, 3, rank=0)
    board.note("all_reduce")
    watcher = StatusBoard(path, 3)
    watcher.started(2, 4242)
    watcher.ended(2, "killed", 9)
    watcher.ended(2, "stopped", 15)  # the first account stands
    error = timeout_error(World(0, 3, 0, 2.0, board=board), "all_reduce")
    assert "rank 1 (worker1), last seen entering starting" in str(error)
    assert "rank 2 (worker2), killed by SIGKILL" in str(error)


# ---- loopback only on one host -------------------------------------------------------------

def _children(pid: int) -> set:
    """pid and every process descended from it."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = {pid}, [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p and child not in found:
                found.add(child)
                frontier.append(child)
    return found


def _socket_inodes(pid: int) -> set:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _address(hex_address: str):
    """An address as /proc/net/{tcp,udp}[6] writes it: hex words in host byte order."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # little-endian words
    return ipaddress.ip_address(raw), int(port, 16)


def _bound_sockets() -> dict:
    """{inode: (protocol, address, port)} of TCP sockets listening and UDP sockets bound."""
    out = {}
    for protocol in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = pathlib.Path(f"/proc/net/{protocol}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port = _address(fields[1])
            listening = fields[3] == "0A" if protocol.startswith("tcp") else port != 0
            if listening:
                out[int(fields[9])] = (protocol, address, port)
    return out


def _loopback(address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def test_a_job_on_one_host_listens_only_on_loopback(tmp_path):
    flag = tmp_path / "looked"
    proc = subprocess.Popen(_command("-n", 2, "--timeout", 60, SCRIPTS / "listen_probe.py", flag),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env())
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                     daemon=True).start()
    seen, ranks = [], set()
    try:
        deadline = time.monotonic() + 90
        while len(ranks) < 2:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "".join(seen)
            seen.append(line)
            if line.rstrip().endswith(" ready"):
                ranks.add(int(line.split("pid ")[1].split()[0]))
        processes = _children(proc.pid)
        assert ranks <= processes, (ranks, processes)  # the ranks themselves are looked at
        sockets = _bound_sockets()
        held = {}
        for pid in processes:
            try:
                name = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            for inode in _socket_inodes(pid) & set(sockets):
                held.setdefault(inode, []).append(f"{name}[{pid}]")
        report = "\n".join(f"{sockets[i][0]} {sockets[i][1]}:{sockets[i][2]} held by "
                           f"{', '.join(who)}" for i, who in held.items())
        exposed = [i for i in held if not _loopback(sockets[i][1])]
        assert not exposed, "listening beyond loopback:\n" + report
    finally:
        flag.touch()
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    while (line := lines.get(timeout=10)) is not None:
        seen.append(line)
    assert proc.returncode == 0, "".join(seen)


# ---- parameter-server messages: typed, never pickled ----------------------------------------

def _wire():
    from rill.distributed import wire
    return wire


def test_ps_messages_round_trip_through_the_typed_wire_format():
    wire = _wire()
    idx = np.array([3, 1, 4], np.int64)
    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    entries = [("value", "0.weight", np.ones((2, 3), np.float64)),
               ("value", "bias", np.array(1.5, np.float16)),
               ("indices", "emb.weight", idx), ("rows", "emb.weight", rows),
               ("value", "empty", np.zeros((0, 4), np.int32)),
               ("value", "flags", np.array([True, False]))]
    buffer = wire.encode("push", 7, entries)
    assert isinstance(buffer, (bytes, bytearray))
    message = wire.decode(buffer, "rank 1 (worker0)")
    assert (message.kind, message.step) == ("push", 7)
    assert [(f, n) for f, n, _ in message.entries] == [(f, n) for f, n, _ in entries]
    for (_, _, got), (_, _, sent) in zip(message.entries, entries):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        np.testing.assert_array_equal(got, sent)
    pull = wire.decode(wire.encode("pull", 3, [("wanted", "bias", np.zeros(0, np.uint8)),
                                               ("indices", "emb.weight", idx)]), "rank 1")
    assert pull.kind == "pull" and [(f, n) for f, n, _ in pull.entries] == \
        [("wanted", "bias"), ("indices", "emb.weight")]
    close = wire.decode(wire.encode("close", 0, []), "rank 1 (worker0)")
    assert (close.kind, close.step, close.entries) == ("close", 0, [])


class _RunsCode:
    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(os.environ["RILL_TEST_MARKER"]),))


def _valid() -> bytearray:
    wire = _wire()
    return bytearray(wire.encode("push", 2, [("value", "w", np.ones(3, np.float32))]))


def _malformed():
    wire = _wire()
    good = _valid()
    header = wire.HEADER.size
    cases = {
        "empty": b"",
        "a pickle": pickle.dumps(_RunsCode()),
        "a pickle of a dict": pickle.dumps({"op": "push", "step": 0, "dense": {}}),
        "bad magic": b"XXXX" + good[4:],
        "newer version": good[:4] + bytes([99]) + good[5:],
        "unknown kind": good[:5] + bytes([77]) + good[6:],
        "truncated": good[:-3],
        "trailing bytes": good + b"\0" * 8,
        "more entries than sent": good[:16] + (2).to_bytes(4, "little") + good[20:],
    }
    entry = header  # the first entry's header follows the message header
    cases["unknown field"] = good[:entry] + bytes([9]) + good[entry + 1:]
    cases["unknown dtype"] = good[:entry + 1] + bytes([200]) + good[entry + 2:]
    cases["too many dims"] = good[:entry + 2] + bytes([200]) + good[entry + 3:]
    huge = good[:]
    huge[wire.ENTRY.size + entry:wire.ENTRY.size + entry + 8] = (2**62).to_bytes(8, "little")
    cases["a shape larger than the message"] = bytes(huge)
    bad_name = good[:]
    name_at = wire.ENTRY.size + entry + 8  # one dimension, then the name
    bad_name[name_at] = 0xFF
    cases["a name that is not UTF-8"] = bytes(bad_name)
    return cases


def test_a_malformed_ps_message_raises_and_is_never_unpickled(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("RILL_TEST_MARKER", str(marker))
    wire = _wire()
    cases = _malformed()
    rows_in_a_pull = bytearray(wire.encode("push", 0, [("rows", "w", np.ones(2, np.float32))]))
    rows_in_a_pull[5] = 1 + wire.KINDS.index("pull")  # the kind byte
    cases["a field the kind does not carry"] = bytes(rows_in_a_pull)
    accepted = []
    for what, buffer in cases.items():
        try:
            wire.decode(buffer, "rank 3 (worker2)")
        except rill.DistributedError as e:
            assert "malformed message from rank 3 (worker2)" in str(e), (what, str(e))
        else:
            accepted.append(what)
    assert not accepted
    assert not marker.exists()  # nothing in any of them ran


def test_decoding_mutated_messages_refuses_or_reads_within_the_buffer():
    """Every byte of valid messages changed (and messages cut short): decode either refuses
    with the rill error naming the sender, or returns entries of the format's dtypes, each a
    view inside the buffer, booleans only 0 and 1, with names unique per field."""
    wire = _wire()
    rng = np.random.default_rng(7)
    sources = [wire.encode("push", 5, [("value", "w", np.ones((2, 3), np.float32)),
                                       ("indices", "emb", np.array([4, 1], np.int64)),
                                       ("rows", "emb", np.ones((2, 2), np.float64))]),
               wire.encode("tensor", 9, [("value", "a->b", np.array([True, False, True])),
                                         ("meta", "step", np.array([3], np.int64))])]
    decoded = refused = 0
    for source in sources:
        for at in range(len(source)):
            for value in (0, 1, 2, 0xFF, int(rng.integers(256))):
                changed = bytearray(source)
                changed[at] = value
                for buffer in (changed, bytes(changed[:at])):
                    try:
                        message = wire.decode(buffer, "rank 2 (worker1)")
                    except rill.DistributedError as e:
                        assert "malformed message from rank 2 (worker1)" in str(e)
                        refused += 1
                        continue
                    decoded += 1
                    start = np.frombuffer(buffer, np.uint8).ctypes.data if len(buffer) else 0
                    names = set()
                    for field, name, array in message.entries:
                        assert array.dtype in wire.DTYPES and (field, name) not in names
                        names.add((field, name))
                        if array.nbytes:
                            assert start <= array.ctypes.data and \
                                array.ctypes.data + array.nbytes <= start + len(buffer)
                        if array.dtype == np.bool_:
                            assert array.view(np.uint8).max(initial=0) <= 1
    assert decoded and refused  # both outcomes reached


def test_encoding_refuses_what_the_format_cannot_carry():
    wire = _wire()
    with pytest.raises(rill.DistributedError):
        wire.encode("push", 0, [("value", "w", np.array(["a"]))])
    with pytest.raises(rill.DistributedError):
        wire.encode("gossip", 0, [])


@pytest.mark.parametrize("payload", ["pickle", "truncated"])
def test_a_ps_refuses_a_message_that_is_not_a_rill_message(payload):
    rc, out = launch("-n", 2, "--ps", 1, "--timeout", 30, SCRIPTS / "ps_malformed.py",
                     payload, timeout=90)
    assert rc != 0, out
    assert "DistributedError" in out and "malformed message from rank 1 (worker0)" in out, out
    assert "UNPICKLED" not in out and "without complaint" not in out, out


@pytest.mark.parametrize("setup", ["sync0", "sparse"])
def test_parameter_server_training_never_pickles(setup):
    rc, out = launch("-n", 3, "--ps", 1 if setup == "sync0" else 2, "--timeout", 30,
                     SCRIPTS / "no_pickle.py", setup, timeout=120)
    assert rc == 0, out
    assert "pickled" not in out


# mpi4py's lowercase methods pickle Python objects; the uppercase ones move raw buffers.
_PICKLING = {"send", "recv", "isend", "irecv", "bcast", "gather", "scatter", "allgather",
             "alltoall", "sendrecv", "ssend", "issend", "bsend", "ibsend", "mprobe", "improbe",
             "allreduce", "reduce", "scan", "exscan"}


def test_no_pickle_where_data_crosses_processes():
    problems = []
    for path in sorted(LIB.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                if name.split(".")[0] in ("pickle", "cPickle", "dill", "marshal", "shelve"):
                    problems.append(f"{path.name}:{node.lineno} imports {name}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _PICKLING:
                receiver = ast.unparse(node.func.value)
                if node.func.attr not in ("reduce", "scan") or "comm" in receiver.lower():
                    problems.append(f"{path.name}:{node.lineno} {ast.unparse(node.func)}")
    assert not problems, problems


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the watcher is Linux-only")
def test_a_rank_killed_from_outside_while_the_job_stops_is_named_killed(tmp_path):
    """A SIGKILL that reaches the rank before mpiexec's stop request reaches its watcher:
    the rank died of a signal the watcher never sent, so it was killed, not stopped."""
    import signal
    import time
    from rill.distributed import bootstrap
    from rill.distributed.status import StatusBoard
    path = str(tmp_path / "board")
    StatusBoard(path, 1)
    watcher = os.fork()
    if watcher == 0:  # the watcher; its child returns from watch() and idles as the rank
        try:
            bootstrap.watch(path, 0, 1)
            time.sleep(60)
        finally:
            os._exit(0)
    board = StatusBoard(path, 1)

    def state(pid):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    deadline = time.monotonic() + 20
    while not board.read()[0].pid and time.monotonic() < deadline:
        time.sleep(0.01)
    rank = board.read()[0].pid
    os.kill(watcher, signal.SIGSTOP)  # the watcher is not scheduled (a busy machine)
    while state(watcher) != "T":
        time.sleep(0.01)
    os.kill(rank, signal.SIGKILL)     # the rank's process is killed
    while state(rank) != "Z":
        time.sleep(0.01)
    os.kill(watcher, signal.SIGINT)   # then mpiexec stops the job
    os.kill(watcher, signal.SIGCONT)
    os.waitpid(watcher, 0)
    assert board.read()[0].outcome() == "killed by SIGKILL"


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_rill_launch_removes_only_unmapped_shared_memory_segments():
    import mmap
    from rill.distributed import launch as launcher
    names = [f"mpich_shm_rilltest{os.getpid()}_{i}" for i in range(2)]
    files = [open(os.path.join("/dev/shm", n), "w+b") for n in names]
    try:
        for f in files:
            f.write(b"\0" * 4096)
            f.flush()
        held = mmap.mmap(files[1].fileno(), 4096)  # a live job still maps this one
        assert set(names) <= launcher._shared_segments()
        launcher._remove_orphans(names)
        assert not os.path.exists(os.path.join("/dev/shm", names[0]))
        assert os.path.exists(os.path.join("/dev/shm", names[1]))
        held.close()
    finally:
        for f, n in zip(files, names):
            f.close()
            if os.path.exists(os.path.join("/dev/shm", n)):
                os.unlink(os.path.join("/dev/shm", n))
