"""What rill-launch says when a job ends: the table of the ranks, and for a job that failed
or was stopped one line per rank — who or what ended it, why, and what it was doing.

The status board (status.py), not the process manager's exit code, says how each rank
ended: mpiexec.gforker exits 0 when a rank is killed, and Hydra's mpiexec reports a pid.
The lines come in two kinds. Causes, earliest first (the first gives the job's exit code):
a rank stopped (SIGSTOP) while the job ran, killed by a signal, failed on its own (with its
own words: its sys.exit message or its exception's first line), or gone before the job's
end; and a hang in MPI shutdown. Then every other rank, saying who stopped it: the process
manager after a cause, rill-launch after a signal it received (JobStop), or a signal from
outside (a resource manager's).

Over several hosts every line names the rank's host too (its watcher writes the host name on
the board). A host that fails takes its ranks and their watchers with it, so they leave no
account, while the watchers elsewhere write theirs ("stopped"): ranks left without one, all
of a host's and none of another's, are named as lost with their host. And when ranks timed
out in an exchange every rank had entered, the probes they sent (collectives.py) say which
host the others stopped hearing from.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from rich.table import Table


def role_of(rank: int, num_ps: int) -> str:
    return f"ps{rank}" if rank < num_ps else f"worker{rank - num_ps}"


def board_rows(a, status: str) -> list:
    from .status import Row, StatusBoard
    if os.path.getsize(status):
        return StatusBoard(status, a.n).read()
    return [Row(0, "not started", None, 0, "running", 0, None)] * a.n


def alive(pid: int) -> bool:
    """The process runs (a zombie, dead but not yet reaped, does not)."""
    from .process_tree import state_of
    if sys.platform.startswith("linux"):
        return state_of(pid) not in (b"Z", b"X", None)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_here(row) -> bool | None:
    """Whether the rank's process still runs: None where this process cannot look (it runs
    on another machine)."""
    from .status import HOST
    if row.host and row.host != HOST:
        return None
    return alive(row.pid)


# How long rill-launch waits for the watchers of other machines to write how their ranks
# ended (it cannot look at their processes; those of a lost host never will): until no new
# account has come for REMOTE_QUIET_S, REMOTE_SETTLE_S at most.
REMOTE_SETTLE_S, REMOTE_QUIET_S = 3.0, 1.0


def settle(a, status: str, limit: float = 7.0) -> None:
    """Give the ranks' watchers time to write how their ranks ended: the process manager
    may end before they do (when it is killed; a stopped rank's watcher ends it with SIGKILL
    after 5 s)."""
    from .process_tree import reap
    start = changed = time.monotonic()
    accounted = None
    while time.monotonic() < start + limit:
        reap()  # ranks whose watcher died are this process's children now
        rows = board_rows(a, status)
        now = time.monotonic()
        ended = sum(row.ending != "running" for row in rows)
        if ended != accounted:
            accounted, changed = ended, now
        remote = now < start + REMOTE_SETTLE_S and now < changed + REMOTE_QUIET_S
        if not any(row.ending == "running" and row.pid and
                   (running_here(row) or running_here(row) is None and remote)
                   for row in rows):
            return
        time.sleep(0.05)


def hosts_of(rows) -> dict:
    """{host name: [ranks]} when the ranks ran on more than one host, else {}."""
    hosts: dict = {}
    for rank, row in enumerate(rows):
        if row.hostname:
            hosts.setdefault(row.hostname, []).append(rank)
    return hosts if len(hosts) > 1 else {}


def rank_on_host(a, rank: int, rows) -> str:
    """"rank 2 (worker1)", and " on h2" over several hosts."""
    on = f" on {rows[rank].hostname}" if hosts_of(rows) and rows[rank].hostname else ""
    return f"rank {rank} ({role_of(rank, a.ps)}){on}"


def lost_hosts(rows) -> dict:
    """{host: [ranks]} of the hosts whose ranks all ended without an account while ranks of
    another host have one: the host failed (its processes died at once, watchers with them)."""
    hosts = hosts_of(rows)

    def silent(r):
        row = rows[r]
        return row.pid and row.ending == "running" and not running_here(row)
    lost = {h: ranks for h, ranks in hosts.items() if all(silent(r) for r in ranks)}
    if not lost or len(lost) == len(hosts):
        return {}
    accounted = any(rows[r].ending != "running" for h, ranks in hosts.items()
                    if h not in lost for r in ranks)
    return lost if accounted else {}


def unheard(a, rows) -> list:
    """The hosts the others stopped hearing from, from the probes of ranks that timed out
    in an exchange every rank had entered: ["rill-launch: ..."] lines (none if the probes do
    not single a host out)."""
    hosts = hosts_of(rows)
    where = {r: h for h, ranks in hosts.items() for r in ranks}
    reach: dict = {}  # (from host, to host) -> answered at least once
    for r, row in enumerate(rows):
        for p in row.probed:
            if r in where and p in where and where[r] != where[p]:
                key = (where[r], where[p])
                reach[key] = reach.get(key, False) or p in row.answered
    lines = []
    for h in hosts:
        into = [k for k in reach if k[1] == h]
        others = {k[0] for k in into}
        # no probe into h answered, and the hosts that probed it heard each other (or one
        # another host), so the fault is h's, not theirs
        heard_elsewhere = any(ok for (x, y), ok in reach.items() if h not in (x, y))
        ranks = ", ".join(f"rank {r} ({role_of(r, a.ps)})" for r in hosts[h])
        if into and not any(reach[k] for k in into) and heard_elsewhere:
            lines.append(f"host {h} stopped answering: no probe from {', '.join(sorted(others))} "
                         f"reached its ranks ({ranks}) while the other hosts answered each "
                         "other: its network link (or the host) failed")
            continue
        # Its own ranks heard from none of two or more other hosts, and nothing says another
        # host heard from it: the one link all those probes share is h's (a rank on h whose
        # deadline came first ends the job before the others publish their probes).
        out = {k[1]: ok for k, ok in reach.items() if k[0] == h}
        if len(out) >= 2 and not any(out.values()) and not any(reach[k] for k in into):
            lines.append(f"host {h} stopped answering: its ranks ({ranks}) heard from none of "
                         f"{', '.join(sorted(out))} while those hosts' ranks were in the same "
                         "exchange: its network link (or the host) most likely failed")
    return lines


def doing(a, rank: int, row) -> str:
    """"last seen entering recv (its collective #3) 0.4 s before it ended, still in it"."""
    if not row.pid:
        return "never started"
    text = f"last seen entering {row.operation} (its collective #{row.collectives})"
    if row.ago is not None:
        before = row.ago - (row.ended_ago or 0.0) if row.ending != "running" else row.ago
        text += f" {max(before, 0.0):.1f} s before it ended"
    if row.left_ago is not None and row.ending != "running":  # as it was when it ended
        row = row._replace(left_ago=max(row.left_ago - (row.ended_ago or 0.0), 0.0))
    state = row.doing(role_of(rank, a.ps))
    return f"{text}, {state}" if state else text


def outcome(a, status: str, rc: int, watch=None, stop=None,
            manager: str = "mpiexec") -> tuple[int, list]:
    """(the job's exit code, the lines that say how it ended: none for a job that
    succeeded). `stop`: rill-launch's JobStop, `manager`: the process manager's name."""
    from .status import signal_name
    rows = board_rows(a, status)
    if stop is not None and stop.received is not None:
        return 128 + stop.received, _stopped_lines(a, rows, stop)
    failed = rc != 0 or any(row.ending in ("killed", "stopped") or row.code or
                            row.ending == "running" and row.pid and
                            running_here(row) is False
                            for row in rows)
    if not failed:
        return rc, []
    stopped = watch.stopped if watch is not None else {}
    causes = []  # (when, exit code, rank or None, text)
    if watch is not None and watch.hung:
        causes.append((0.0, 1, None, watch.hung))
    end = time.monotonic()
    for rank, (since, then) in stopped.items():
        causes.append((-float("inf"), 128 + signal.SIGSTOP, rank,
                       f"rank {rank} ({role_of(rank, a.ps)}) was stopped (process state T, "
                       f"as after SIGSTOP) for the last {end - since:.1f} s of the job, last "
                       f"seen entering {then.operation} (its collective #{then.collectives}); "
                       "the other ranks could not go on without it"))
    lost = lost_hosts(rows)
    for host, ranks in lost.items():
        causes.append((-float("inf"), 1, ranks[0],
                       f"host {host} was lost: " + "; ".join(
                           f"rank {r} ({role_of(r, a.ps)}), pid {rows[r].pid}, last seen "
                           f"entering {rows[r].operation} (its collective "
                           f"#{rows[r].collectives})" for r in ranks) +
                       " — its processes ended together and left no account, while the "
                       f"other hosts' ranks were stopped by {manager} (the host failed, or "
                       "all its processes were killed)"))
    for rank, row in enumerate(rows):
        if rank in stopped or any(rank in ranks for ranks in lost.values()):
            continue
        who = rank_on_host(a, rank, rows)
        seen = f"last seen entering {row.operation} (its collective #{row.collectives})"
        words = f": {row.words}" if row.words else ""
        if row.ending == "killed":
            causes.append((-(row.ended_ago or 0), 128 + row.code, rank,
                           f"{who} was killed by {signal_name(row.code)} (pid {row.pid}), "
                           f"{seen}"))
        elif row.ending == "exited" and row.code:
            causes.append((-(row.ended_ago or 0), row.code, rank,
                           f"{who} failed with exit code {row.code}{words}" +
                           (" (see its output above)" if row.operation == "failed"
                            else f", {seen}")))
        elif row.ending == "exited" and row.operation not in ("finished", "failed") and \
                row.pid:
            # exit 0 without passing the barrier before MPI shutdown (os._exit, or a
            # process that left MPI some other way): the others cannot finish without it
            causes.append((-(row.ended_ago or 0), 1, rank,
                           f"{who} exited (code 0) without reaching the job's end, {seen}"))
    causes.sort(key=lambda c: c[0])
    named = {c[2] for c in causes} | {r for ranks in lost.values() for r in ranks}
    host_of_cause = {ranks[0]: host for host, ranks in lost.items()}
    first = next((f"host {host_of_cause[c[2]]}" if c[2] in host_of_cause else
                  f"rank {c[2]} ({role_of(c[2], a.ps)})" for c in causes if c[2] is not None),
                 None)
    after = f"after the failure of {first}" if first else "after the job's failure"
    others = []
    for rank, row in enumerate(rows):
        if rank in named:
            continue
        who = rank_on_host(a, rank, rows)
        if row.ending == "stopped":
            by = (f"stopped by {manager} {after}" if causes else
                  f"stopped ({signal_name(row.code)}) by a signal from outside rill-launch "
                  f"(its process manager {manager}, or the resource manager)")
            others.append(f"{who}: {by}, {doing(a, rank, row)}")
        elif row.ending == "running" and row.pid:
            others.append(f"{who}: ended with the job {after} (its process, pid {row.pid}, "
                          f"left no exit status), {doing(a, rank, row)}")
        elif row.ending == "exited":
            others.append(f"{who}: finished (exit 0)")
        elif not row.pid:
            others.append(f"{who}: not started")
    verdict = unheard(a, rows)
    if causes:
        return causes[0][1], verdict + [c[3] for c in causes] + others
    return rc or 1, verdict + others


def _stopped_lines(a, rows, stop) -> list:
    """One line per rank of a job that rill-launch stopped on a signal."""
    from .job_stop import KILL_AFTER_S
    from .status import signal_name
    after = f"after {stop.name}"
    lines = []
    for rank, row in enumerate(rows):
        who = rank_on_host(a, rank, rows)
        ended = time.time() - (row.ended_ago or 0.0)
        before = row.ending != "running" and ended < stop.at
        words = f": {row.words}" if row.words else ""
        if not row.pid:
            lines.append(f"{who}: not started when rill-launch stopped the job {after}")
        elif row.ending == "exited" and before:
            lines.append(f"{who}: had ended before rill-launch stopped the job {after} "
                         f"(exit {row.code}{words})")
        elif row.ending == "stopped" or row.ending == "killed" and row.code == signal.SIGKILL \
                and stop.killed:
            how = "stopped" if row.ending == "stopped" else \
                f"killed (SIGKILL: it had not stopped within {KILL_AFTER_S:g} s)"
            lines.append(f"{who}: {how} by rill-launch {after}, {doing(a, rank, row)}")
        elif row.ending == "running":
            lines.append(f"{who}: stopped by rill-launch {after} (its process, pid {row.pid}, "
                         f"left no exit status), {doing(a, rank, row)}")
        elif row.ending == "killed":
            lines.append(f"{who}: killed by {signal_name(row.code)} (pid {row.pid}) while "
                         f"rill-launch stopped the job {after}, {doing(a, rank, row)}")
        else:
            lines.append(f"{who}: exited (code {row.code}){words} while rill-launch stopped "
                         f"the job {after}, {doing(a, rank, row)}")
    return lines


def rank_table(a, status: str, state: str, stopped_by: str | None = None) -> Table:
    """Each rank's role, the exchange it last entered, how many collectives it made, and
    how its process ended (a stopped one: by whom, when `stopped_by` says)."""
    from .status import process_state
    table = Table(title=f"rill-launch: {os.path.basename(a.script)} {state}",
                  title_justify="left")
    rows = board_rows(a, status)
    several = bool(hosts_of(rows))
    for col in ("rank", "role", *(("host",) if several else ()), "last operation",
                "collectives", "process"):
        table.add_column(col)
    for rank, row in enumerate(rows):
        found = process_state(row)
        if found == "gone":
            shown = "gone (no exit status)"
        elif found == "stopped":
            shown = "stopped (state T)"
        elif row.ending == "stopped" and stopped_by:
            shown = f"stopped by {stopped_by}"
        else:
            shown = row.outcome()
        table.add_row(str(rank), role_of(rank, a.ps), *((row.hostname,) if several else ()),
                      row.operation, str(row.collectives), shown)
    return table
