"""A discrete-event model of a between-graph training step: workers, parameter servers, links.

What runs, per worker and step (rill's captured replicas, lib/distributed/graphs/):
  1. the worker spends `step_overhead` of CPU (dispatch, guards) and sends each ps a "run"
     message carrying `request_bytes` (a sharded lookup's ids; 0 for a dense model);
  2. each ps, once it has applied (or dropped) that worker's previous contribution, answers
     with `pull_bytes` (the variables, or the looked-up rows), after `ps_msg` of its CPU;
  3. with every answer in, the worker computes (a sample of `compute`) and sends each ps
     `push_bytes` (the gradient); its step ends there (the sends complete on their own);
  4. each ps handles the gradient (`ps_msg`), then by mode:
       async      applies it (`apply_time(apply_bytes)`), and the worker may pull again;
       sync, b    counts it for the step the worker pulled; the first n - b of a step are
                  applied together (one apply), a later one for an applied step is dropped
                  (the paper's backup workers, §4.4); a worker pulls again once its own
                  contribution was applied or dropped.
A ps is one thread: its message handling and applies run one at a time, in arrival order,
and so does its end of every message's CPU (copies, the network stack between hosts): rill's
ps serves all its workers from one event loop (graphs/server.py), so n workers' messages cost
it n times one's, while each worker pays its own end beside the others.

Resources: a link is `latency + bytes / bandwidth`; messages between hosts queue on the
sender's outgoing NIC, then on the receiver's incoming one, each a message at a time (so a ps
answering n workers sends n x pull_bytes through its NIC, and n workers pushing to it queue
at its NIC); a message streams through both (it ends when the later of the two is through,
the sender never waiting for the receiver: buffers, as TCP has). Messages within a host use
the `local` link and no NIC. Every CPU cost runs on its host's CPU, shared by processor sharing:
with `cores` cores, `background` other busy processes, and each idle task of ours counting
as `spin` of a busy one (rill's waits yield-spin for a few ms before they sleep), a job
progresses at min(1, cores / (busy + background + spin * idle)), and a message waits
`handoff` per process beyond the cores before its receiver runs (an oversubscribed host's
scheduling delay). `cores=inf` (the default, a cluster of dedicated machines) makes every
CPU cost its plain duration and a message's arrival immediate.

The engine is a heap of (time, sequence, callback); `Simulation.run(steps)` returns the
chief's step times and the throughput. Everything is seconds and bytes.
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field

import numpy as np


# ---- the engine ----------------------------------------------------------------------------

class Engine:
    """A clock and a heap of pending callbacks, run in time order (ties in schedule order)."""

    def __init__(self):
        self.now = 0.0
        self.heap: list = []
        self.order = itertools.count()

    def at(self, when: float, fn, *args) -> None:
        heapq.heappush(self.heap, (when, next(self.order), fn, args))

    def after(self, delay: float, fn, *args) -> None:
        self.at(self.now + delay, fn, *args)

    def run(self, stop=lambda: False) -> None:
        while self.heap and not stop():
            self.now, _, fn, args = heapq.heappop(self.heap)
            fn(*args)


# ---- the model's parameters ----------------------------------------------------------------

@dataclass
class Compute:
    """A worker's compute time per step: `median` x lognormal(`sigma`); with probability
    `slow_prob` a step is `slow_factor` times longer (a straggler); `samples`, when given,
    are drawn from instead (measured times, bootstrapped), scaled by `scale`."""
    median: float = 0.0
    sigma: float = 0.0
    slow_prob: float = 0.0
    slow_factor: float = 1.0
    samples: tuple = ()
    scale: float = 1.0

    def sample(self, rng: np.random.Generator) -> float:
        if self.samples:
            return self.scale * self.samples[rng.integers(len(self.samples))]
        t = self.median * (math.exp(self.sigma * rng.standard_normal()) if self.sigma else 1.0)
        if self.slow_prob and rng.random() < self.slow_prob:
            t *= self.slow_factor
        return t

    @classmethod
    def fit(cls, times, slow_above: float = 2.0) -> "Compute":
        """Median and log-spread of measured times (sigma from the interquartile range, so
        that the tail does not inflate it), and the tail as a slow fraction: the steps over
        `slow_above` x the median, and their median ratio to it."""
        t = np.asarray(times, float)
        med = float(np.median(t))
        q1, q3 = np.percentile(np.log(t), [25, 75])
        slow = t[t > slow_above * med]
        return cls(median=med, sigma=float((q3 - q1) / 1.349), slow_prob=len(slow) / len(t),
                   slow_factor=float(np.median(slow) / med) if len(slow) else 1.0)


@dataclass
class Link:
    latency: float = 0.0                 # s, one way
    bandwidth: float = math.inf          # bytes/s

    def time(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth


@dataclass
class Traffic:
    """What a worker's step moves to and from one ps, and what that ps's update touches."""
    request_bytes: float = 0.0   # worker -> ps before the answer (a lookup's ids)
    pull_bytes: float = 0.0      # ps -> worker (variables, or looked-up rows)
    push_bytes: float = 0.0      # worker -> ps (the gradient)
    apply_bytes: float = 0.0     # bytes the ps's update writes


@dataclass
class Setup:
    """One job: its workers and ps tasks, where they run, and what each costs."""
    workers: int = 1
    traffic: list = field(default_factory=lambda: [Traffic()])  # one per ps
    compute: Compute = field(default_factory=Compute)
    mode: str = "sync"                   # "sync" or "async"
    backups: int = 0                     # sync: a step applies the first workers - backups
    network: Link = field(default_factory=Link)   # between hosts
    local: Link = field(default_factory=Link)     # within a host (shared memory)
    step_overhead: float = 0.0           # worker CPU per step
    ps_msg: float = 0.0                  # ps CPU per message handled (each pull, each push)
    byte_cpu: float = 0.0                # CPU per byte at each end of a message (copies)
    net_msg: float = 0.0                 # more CPU per message between hosts, at each end
    net_byte: float = 0.0                # more CPU per byte between hosts, at each end (TCP)
    overlap: float = 0.0                 # of a receiver's CPU for a message between hosts,
    #                                      the part that runs while the sender's does
    apply_fixed: float = 0.0             # ps CPU per apply
    apply_rate: float = math.inf         # bytes/s of an update
    hosts: list | None = None            # host of each task: ps 0.., then workers; None: own
    cores: float = math.inf              # per host
    shared_cpu: bool = False             # every host on the same cores (the bed: one machine)
    background: float = 0.0              # busy processes per host that are not ours
    spin: float = 0.0                    # an idle task's weight on its host's CPU
    handoff: float = 0.0                 # a message's wait per process beyond the cores
    batch: int = 1                       # examples per worker step (for throughput)
    seed: int = 0

    def apply_time(self, nbytes: float) -> float:
        return self.apply_fixed + nbytes / self.apply_rate


# ---- resources -----------------------------------------------------------------------------

class Host:
    """A machine's CPU (processor sharing) and its NIC (in and out, one message at a time)."""

    def __init__(self, engine: Engine, cores: float, background: float, spin: float):
        self.engine, self.cores, self.background, self.spin = engine, cores, background, spin
        self.jobs: dict = {}         # id -> [remaining work, done callback]
        self.tasks = 0               # our tasks on this host (idle ones spin)
        self.last = 0.0
        self.version = 0
        self.ids = itertools.count()
        self.nic_out = self.nic_in = 0.0

    def rate(self) -> float:
        if math.isinf(self.cores):
            return 1.0
        idle = max(self.tasks - len(self.jobs), 0)
        return min(1.0, self.cores / max(len(self.jobs) + self.background + self.spin * idle,
                                         1e-12))

    def handoff_delay(self, per_excess: float) -> float:
        """How long a message waits for its receiver to be scheduled: `per_excess` for each
        process wanting a core beyond the cores (ours, idle ones counting as spinning, and
        the background); nothing on a host with a core for everyone."""
        if not per_excess or math.isinf(self.cores):
            return 0.0
        idle = max(self.tasks - len(self.jobs), 0)
        excess = len(self.jobs) + self.spin * idle + self.background - self.cores
        return per_excess * max(excess, 0.0)

    def run(self, work: float, done) -> None:
        """Run `work` seconds of CPU here, then call done()."""
        if math.isinf(self.cores):
            self.engine.after(work, done)
            return
        self._advance()
        self.jobs[next(self.ids)] = [work, done]
        self._schedule()

    def _advance(self) -> None:
        spent = (self.engine.now - self.last) * self.rate()
        for job in self.jobs.values():
            job[0] -= spent
        self.last = self.engine.now

    def _schedule(self) -> None:
        self.version += 1
        if self.jobs:
            key, job = min(self.jobs.items(), key=lambda kv: kv[1][0])
            self.engine.after(max(job[0], 0.0) / self.rate(), self._finish, key, self.version)

    def _finish(self, key, version) -> None:
        if version != self.version:
            return  # the set of jobs changed since this was scheduled
        self._advance()
        _, done = self.jobs.pop(key)
        self._schedule()
        done()


class Network:
    def __init__(self, setup: Setup, hosts: list):
        self.setup, self.hosts = setup, hosts

    def send(self, engine: Engine, src: int, dst: int, nbytes: float, done,
             src_thread: "Serial | None" = None, dst_thread: "Serial | None" = None) -> None:
        """Move nbytes from host src to host dst (copy costs on both CPUs), then done().
        An end given a thread (a ps's one thread) pays its CPU there, in turn with the
        thread's other work; otherwise on its host, beside everything else. Between hosts,
        `overlap` of the receiver's CPU runs while the sender's does (the bytes stream: the
        receiver copies out what the sender has put in), the rest once all has arrived."""
        s = self.setup
        a, b = self.hosts[src], self.hosts[dst]
        # the CPU a message costs at each end: copies, and between hosts the network stack's
        cpu = nbytes * s.byte_cpu + (s.net_msg + nbytes * s.net_byte if src != dst else 0.0)
        streamed = s.overlap * cpu if src != dst else 0.0

        def at_receiver(work, then):
            if not work:
                then()
            elif dst_thread is not None:
                dst_thread.submit(work, then)
            else:
                b.run(work, then)

        def received():
            at_receiver(cpu - streamed, done)

        def arrived():  # the receiver must get a core to notice it
            wait = b.handoff_delay(s.handoff)
            if wait:
                engine.after(wait, received)
            else:
                received()

        def transfer():
            if src == dst:
                engine.after(s.local.time(nbytes), landed)
                return
            wire = nbytes / s.network.bandwidth
            a.nic_out = max(engine.now, a.nic_out) + wire       # leaves the sender's NIC
            b.nic_in = max(a.nic_out, b.nic_in + wire)         # through the receiver's
            engine.at(b.nic_in + s.network.latency, landed)

        pending = [2 if streamed else 1]  # the bytes, and the receiver's streamed part

        def landed():
            pending[0] -= 1
            if not pending[0]:
                arrived()

        def start_streaming():
            if streamed:
                at_receiver(streamed, landed)
        if not cpu:
            transfer()
        elif src_thread is not None:
            src_thread.submit(cpu, transfer, next_up=True, started=start_streaming)
        else:
            start_streaming()
            a.run(cpu, transfer)


class Serial:
    """One thread's work queue on a host: jobs run one at a time, in submission order."""

    def __init__(self, host: Host):
        self.host, self.queue, self.busy = host, [], False

    def submit(self, work: float, done, next_up: bool = False, started=None) -> None:
        """Queue `work`; `next_up` runs it before what is queued: the rest of the job that
        just ended (a send its handling posted, as the ps's event loop posts each answer
        while handling the request). `started()`, if given, is called as the work begins."""
        if next_up:
            self.queue.insert(0, (work, done, started))
        else:
            self.queue.append((work, done, started))
        if not self.busy:
            self._next()

    def _next(self) -> None:
        if not self.queue:
            self.busy = False
            return
        self.busy = True
        work, done, started = self.queue.pop(0)
        if started is not None:
            started()

        def finished():
            done()
            self._next()
        self.host.run(work, finished)


# ---- the step protocol ---------------------------------------------------------------------

class ParameterServer:
    def __init__(self, sim: "Simulation", index: int):
        self.sim, self.index = sim, index
        self.host = sim.host_of(("ps", index))
        self.thread = Serial(sim.hosts[self.host])
        self.step = 0                # applied steps (sync) or applied contributions (async)
        self.counted: list = []      # workers counted toward the current sync step
        self.waiting: dict = {}      # worker -> its pull, held until its push is settled
        self.unsettled: set = set()  # workers whose last push is not applied or dropped yet
        self.pulled: dict = {}       # worker -> the step it pulled
        self.dropped = 0

    def pull(self, worker: int, answer) -> None:
        """A worker's run message arrived: answer once its previous push is settled."""
        if worker in self.unsettled:
            self.waiting[worker] = answer
        else:
            self._answer(worker, answer)

    def _answer(self, worker: int, answer) -> None:
        self.pulled[worker] = self.step
        self.thread.submit(self.sim.setup.ps_msg, answer)

    def _settle(self, workers) -> None:
        for w in workers:
            self.unsettled.discard(w)
            answer = self.waiting.pop(w, None)
            if answer is not None:
                self._answer(w, answer)

    def expect(self, worker: int) -> None:
        """The worker sent a push: its next pull waits for it (the step numbers tell the ps
        so, even when the small run message overtakes the large push)."""
        self.unsettled.add(worker)

    def push(self, worker: int) -> None:
        """A worker's gradient arrived."""
        self.thread.submit(self.sim.setup.ps_msg, lambda: self._contribute(worker))

    def _contribute(self, worker: int) -> None:
        s = self.sim.setup
        work = s.apply_time(s.traffic[self.index].apply_bytes)
        if s.mode == "async":
            def applied():
                self.step += 1
                self.sim.applied(self.index)
                self._settle([worker])
            self.thread.submit(work, applied)
            return
        if self.pulled[worker] < self.step:      # its step was applied without it: stale
            self.dropped += 1
            self._settle([worker])
            return
        self.counted.append(worker)
        if len(self.counted) == s.workers - s.backups:
            counted, self.counted = self.counted, []
            self.step += 1  # later pushes for this step are stale from now

            def applied():
                self.sim.applied(self.index)
                self._settle(counted)
            self.thread.submit(work, applied)


class Worker:
    def __init__(self, sim: "Simulation", index: int):
        self.sim, self.index = sim, index
        self.host = sim.host_of(("worker", index))
        self.answers = 0
        self.ends: list = []         # when each of its steps returned

    def start_step(self) -> None:
        self.sim.hosts[self.host].run(self.sim.setup.step_overhead, self._ask)

    def _ask(self) -> None:
        sim, s = self.sim, self.sim.setup
        self.answers = 0
        for ps in sim.ps:
            t = s.traffic[ps.index]

            def at_ps(ps=ps, t=t):
                ps.pull(self.index, lambda: sim.net.send(
                    sim.engine, ps.host, self.host, t.pull_bytes, self._answered,
                    src_thread=ps.thread))
            sim.net.send(sim.engine, self.host, ps.host, t.request_bytes, at_ps,
                         dst_thread=ps.thread)

    def _answered(self) -> None:
        self.answers += 1
        if self.answers == len(self.sim.ps):
            work = self.sim.setup.compute.sample(self.sim.rng)
            self.sim.hosts[self.host].run(work, self._push)

    def _push(self) -> None:
        sim = self.sim
        for ps in sim.ps:
            ps.expect(self.index)
            sim.net.send(sim.engine, self.host, ps.host, sim.setup.traffic[ps.index].push_bytes,
                         lambda ps=ps: ps.push(self.index), dst_thread=ps.thread)
        self.ends.append(sim.engine.now)
        if not sim.done():
            self.start_step()


@dataclass
class Result:
    step_times: np.ndarray     # the chief's (worker 0's) step durations, s
    applied_times: np.ndarray  # intervals between applied steps of ps 0, s
    throughput: float          # examples/s applied (all ps applied the step)
    dropped: int               # stale pushes dropped (sync with backups)

    @property
    def median_step(self) -> float:
        return float(np.median(self.step_times))


class Simulation:
    def __init__(self, setup: Setup):
        if setup.mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', got {setup.mode!r}")
        if not 0 <= setup.backups < setup.workers:
            raise ValueError(f"backups={setup.backups} must be in [0, workers={setup.workers})")
        self.setup = setup
        self.engine = Engine()
        self.rng = np.random.default_rng(setup.seed)
        tasks = [("ps", i) for i in range(len(setup.traffic))] + \
            [("worker", i) for i in range(setup.workers)]
        placed = setup.hosts if setup.hosts is not None else list(range(len(tasks)))
        if len(placed) != len(tasks):
            raise ValueError(f"hosts names {len(placed)} tasks, the job has {len(tasks)}")
        self.where = dict(zip(tasks, placed))
        if setup.shared_cpu:  # one CPU (and one NIC: the machine's kernel does the copying)
            self.hosts = [Host(self.engine, setup.cores, setup.background, setup.spin)] * \
                (max(placed) + 1)
        else:
            self.hosts = [Host(self.engine, setup.cores, setup.background, setup.spin)
                          for _ in range(max(placed) + 1)]
        for h in placed:
            self.hosts[h].tasks += 1
        self.net = Network(setup, self.hosts)
        self.ps = [ParameterServer(self, i) for i in range(len(setup.traffic))]
        self.workers = [Worker(self, i) for i in range(setup.workers)]
        self.applies = [[] for _ in self.ps]   # times each ps applied
        self.target = 0

    def host_of(self, task) -> int:
        return self.where[task]

    def applied(self, ps: int) -> None:
        self.applies[ps].append(self.engine.now)

    def done(self) -> bool:
        return min(len(a) for a in self.applies) >= self.target

    def run(self, steps: int, warmup: int = 2) -> Result:
        """Run until every ps has applied `steps + warmup` times (sync: steps; async: single
        contributions), then measure over the last `steps`."""
        self.target = steps + warmup
        for w in self.workers:
            w.start_step()
        self.engine.run(self.done)
        ends = np.asarray(self.workers[0].ends)
        durations = np.diff(ends)[warmup:] if len(ends) > warmup + 1 else np.diff(ends)
        completed = np.max(np.asarray([a[:self.target] for a in self.applies]), axis=0)
        window = completed[warmup:]
        per_apply = 1 if self.setup.mode == "async" else self.setup.workers - self.setup.backups
        span = window[-1] - window[0]
        rate = (len(window) - 1) * per_apply * self.setup.batch / span if span > 0 else math.inf
        return Result(step_times=durations, applied_times=np.diff(window), throughput=rate,
                      dropped=sum(p.dropped for p in self.ps))


def simulate(setup: Setup, steps: int = 50, warmup: int = 2) -> Result:
    return Simulation(setup).run(steps, warmup)
