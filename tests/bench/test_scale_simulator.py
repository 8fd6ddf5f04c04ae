"""The step model of bench/scale/simulate.py on cases with closed-form answers, and the
message sizes bench/scale/calibrate.py reads from a partitioned graph."""
import importlib.util
import math
import pathlib
import sys

import pytest
from scipy.stats import norm

SCALE = pathlib.Path(__file__).resolve().parents[2] / "bench" / "scale"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, SCALE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sim = _load("simulate")
Compute, Link, Setup, Traffic, simulate = sim.Compute, sim.Link, sim.Setup, sim.Traffic, \
    sim.simulate

MB = 1e6


def test_one_worker_step_is_compute_plus_two_transfers():
    link = Link(latency=1e-4, bandwidth=1e9)
    setup = Setup(workers=1, traffic=[Traffic(pull_bytes=MB, push_bytes=MB)],
                  compute=Compute(median=0.01), network=link)
    got = simulate(setup, steps=20)
    assert got.step_times == pytest.approx(0.01 + 2 * link.time(MB), rel=1e-9)
    assert got.throughput == pytest.approx(1 / (0.01 + 2 * link.time(MB)), rel=1e-9)


def test_sync_workers_of_fixed_time_step_together():
    # n workers, no link cost: a step is the compute and the ps's apply, whatever n is
    for n in (1, 4, 16):
        setup = Setup(workers=n, traffic=[Traffic(apply_bytes=1e6)], apply_rate=1e9,
                      compute=Compute(median=0.02))
        got = simulate(setup, steps=20)
        assert got.step_times == pytest.approx(0.021, rel=1e-9)
        assert got.throughput == pytest.approx(n / 0.021, rel=1e-9)


def test_a_ps_nic_serializes_its_answers():
    # 1 ps answering 8 workers: their pulls leave its NIC one after another (T = 10 ms
    # each); with compute 0 each worker pushes as its pull lands, and the pushes come in
    # through the NIC's other direction meanwhile: a step is 8 pulls and the last push
    link = Link(latency=0.0, bandwidth=1e8)
    setup = Setup(workers=8, traffic=[Traffic(pull_bytes=MB, push_bytes=MB)], network=link)
    got = simulate(setup, steps=10)
    assert got.applied_times == pytest.approx(9 * MB / 1e8, rel=1e-6)
    # half duplex would be 16 transfers; a NIC of its own per worker 2: it is the ps's NIC


def test_sync_step_is_the_slowest_of_n_lognormal_workers():
    # every worker starts each step together, so a step is the max of n draws: its median
    # is median * exp(sigma * z) with Phi(z) = 0.5 ** (1 / n)
    n, sigma = 8, 0.3
    setup = Setup(workers=n, compute=Compute(median=0.1, sigma=sigma), seed=1)
    got = simulate(setup, steps=600)
    expected = 0.1 * math.exp(sigma * norm.ppf(0.5 ** (1 / n)))
    assert got.median_step == pytest.approx(expected, rel=0.04)


def test_backup_workers_cut_a_heavy_tail():
    # 5 workers, a step slow (10x) with probability 0.2: without backups 1 - 0.8**5 = 67 %
    # of steps wait for a straggler (median 10x); with one backup most steps do not. A
    # straggler's late push is dropped, but it holds the backup's place for its 10 steps,
    # so a second one in that time still stalls a step: the gain in examples a second
    # (4 of 5 workers' batches per step against 5) is smaller than the median's
    slow = Compute(median=0.01, slow_prob=0.2, slow_factor=10)
    plain = simulate(Setup(workers=5, compute=slow, seed=2), steps=300)
    backed = simulate(Setup(workers=5, backups=1, compute=slow, seed=2), steps=300)
    assert plain.median_step == pytest.approx(0.1, rel=1e-6)
    assert backed.median_step == pytest.approx(0.01, rel=1e-6)
    assert backed.throughput > 1.1 * plain.throughput
    assert backed.dropped > 0


def test_async_throughput_grows_with_workers_until_the_ps_saturates():
    # each contribution costs the ps a pull and a push message and an apply: 2 * 1 ms +
    # 1 ms, so it applies at most 1 / 3 ms = 333 a second; below that, n / (compute + ps)
    c, m, a = 0.05, 1e-3, 1e-3
    rates = {}
    for n in (1, 4, 64):
        setup = Setup(workers=n, mode="async", compute=Compute(median=c), ps_msg=m,
                      apply_fixed=a)
        rates[n] = simulate(setup, steps=400).throughput
    assert rates[1] == pytest.approx(1 / (c + 2 * m + a), rel=0.01)
    assert rates[4] == pytest.approx(4 / (c + 2 * m + a), rel=0.03)
    assert rates[64] == pytest.approx(1 / (2 * m + a), rel=0.02)


def test_a_ps_pays_its_end_of_every_message_on_its_one_thread():
    # CPU m per message between hosts at each end, nothing else costs. The ps's one thread
    # takes each worker's run and push messages in and its pull out: 3 n m a step, which
    # sets the step from 4 workers on; below, a step is the chain through it after the
    # last push arrives: the n pushes and n runs in, a pull out, the worker's receive and
    # its push out, (2 n + 3) m. Ends paid beside each other would make it n-independent.
    m = 1e-3
    for n in (1, 2, 3, 4, 8):
        got = simulate(Setup(workers=n, net_msg=m), steps=20)
        assert got.step_times == pytest.approx(max(3 * n, 2 * n + 3) * m, rel=1e-9)


def test_streamed_messages_cost_one_end_on_the_path():
    # overlap 1: a message's receiver copies out while its sender copies in, so a message
    # between hosts takes m, not 2 m; the ps's thread still pays its end of all three
    # messages a worker step, 3 n m, which now sets the step at every n
    m = 1e-3
    for n in (1, 2, 4):
        got = simulate(Setup(workers=n, net_msg=m, overlap=1.0), steps=20)
        assert got.step_times == pytest.approx(3 * n * m, rel=1e-9)


def test_an_idle_task_weighs_spin_on_a_shared_core():
    # one core, a worker computing c while its ps (same host) waits: the waiting ps takes
    # spin of a busy process's share, so the compute runs at 1 / (1 + spin)
    c = 0.01
    for spin in (0.0, 0.25, 1.0):
        setup = Setup(workers=1, compute=Compute(median=c), hosts=[0, 0], cores=1,
                      spin=spin)
        assert simulate(setup, steps=10).step_times == pytest.approx(c * (1 + spin),
                                                                     rel=1e-9)


def test_processor_sharing_on_one_core():
    # two workers' compute on one host with one core: each runs at half speed
    setup = Setup(workers=2, compute=Compute(median=0.01), hosts=[0, 1, 1], cores=1)
    got = simulate(setup, steps=10)
    assert got.step_times == pytest.approx(0.02, rel=1e-9)


def test_refuses_backups_that_leave_no_worker():
    with pytest.raises(ValueError, match="backups"):
        simulate(Setup(workers=2, backups=2))


def test_message_sizes_come_from_the_partitioned_graph():
    pytest.importorskip("mpi4py")
    cal = _load("calibrate")
    import rill
    import rill.distributed as dist
    from rill import nn
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
    dist.place_on_ps(model, ps_tasks=2, by="round_robin")  # ps 0: weights, ps 1: biases
    opt = rill.optim.SGD(model.parameters(), lr=0.1)

    @rill.capture
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    got = cal.traffic_of(step, rill.randn(12, 5), rill.randint(0, 3, (12,)), mode="sync")
    weights, biases = 4 * (16 * 5 + 3 * 16), 4 * (16 + 3)
    assert [(t.pull_bytes, t.push_bytes, t.request_bytes) for t in got] == \
        [(weights, weights, 0), (biases, biases, 0)]
    assert [t.apply_bytes >= t.push_bytes for t in got] == [True, True]
