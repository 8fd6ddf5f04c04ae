"""Which host a timeout blames, from the probes on the status board, without a test bed:
rill-launch's verdict (job_report.unheard) and a timing-out rank's own words
(collectives._unanswered), for the orders in which the ranks' deadlines can fire."""
from __future__ import annotations

import time
import types

from rill.distributed import collectives, job_report
from rill.distributed.status import Row


def _row(host, probed=(), answered=()):
    return Row(collectives=2, operation="all_reduce", ago=3.0, pid=100, ending="running",
               code=0, ended_ago=None, hostname=host, probed=frozenset(probed),
               answered=frozenset(answered))


ARGS = types.SimpleNamespace(ps=0)


def test_a_host_the_others_cannot_reach_is_named():
    rows = [_row("h0", {1, 2}, {2}), _row("h1"), _row("h2", {0, 1}, {0})]
    lines = job_report.unheard(ARGS, rows)
    assert len(lines) == 1 and lines[0].startswith("host h1 stopped answering"), lines


def test_a_host_that_heard_from_no_other_is_named_when_its_rank_timed_out_first():
    """h1's link is saturated or down and its rank's deadline came first: only its probes
    are on the board, and they reached neither h0 nor h2."""
    rows = [_row("h0"), _row("h1", {0, 2}, ()), _row("h2")]
    lines = job_report.unheard(ARGS, rows)
    assert len(lines) == 1 and lines[0].startswith("host h1 stopped answering"), lines
    assert "heard from none of h0, h2" in lines[0]


def test_one_unanswered_peer_host_names_nobody():
    """Two hosts: h0 not hearing h1 cannot say whose link failed."""
    rows = [_row("h0", {1}, ()), _row("h1")]
    assert job_report.unheard(ARGS, rows) == []


def test_a_rank_that_heard_from_no_other_host_suspects_its_own():
    rows = [_row("h0"), _row("h1"), _row("h2")]
    w = types.SimpleNamespace(rank=1, num_ps=0, size=3)
    probes = types.SimpleNamespace(probed={0, 2}, answered=set(), sent_at=time.monotonic())
    text = collectives._unanswered(w, rows, probes)
    assert "this host (h1) or its network link most likely failed" in text, text
    probes.answered = {0}  # h0 answered: h2 is the silent one, as before
    text = collectives._unanswered(w, rows, probes)
    assert "rank 2" in text and "this host" not in text, text
