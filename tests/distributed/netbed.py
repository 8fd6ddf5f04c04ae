"""A cluster on one machine, for tests: Linux network namespaces as hosts, joined by a switch.

Each host is a network namespace with one interface, eth0, at 10.77.0.<i+1>/24 (i = 0, 1,
...); the other end of each host's veth pair is a port of a bridge inside a namespace of its
own (the switch), so the machine's own network (the root namespace) is not touched at all.
rill-launch runs on host 0 (the launching host) with `--hosts` and `--iface eth0`: MPICH's
Hydra mpiexec starts its proxy on every other host through `-launcher ssh` with
HYDRA_LAUNCHER_EXEC set to a script the bed writes, which Hydra calls as ssh would be
(`-x <host> <command line>`) and which runs the command line inside that host's namespace
(`nsenter --net`: unlike `ip netns exec` it leaves /sys as it is, where the CPU cgroups
are) with a host name of its own (a UTS namespace: `h1`, ...). Hydra forks the
proxy of the launching host itself, as it does on a real cluster.

What is a cluster's and what is not. The hosts share the machine's kernel, its filesystems
(the status board and the checkpoints are on a "shared filesystem" for free), its pids and
its shared memory. So:
- the ranks of different hosts talk over TCP through the veth pairs and the bridge, and the
  ranks of one host through MPICH's shared memory, only because the bed sets UCX_TLS=tcp,self
  (UCX's transports, MPICH's network layer here): left to itself, UCX sees one boot id and
  would carry messages between namespaces through shared memory;
- rill-launch cannot look at the processes of ranks on other hosts (their host name differs),
  as on a cluster; a test can, through `Bed.pids(host)` (`ip netns pids`).

Faults, all per host: `kill_host` (SIGKILL every process in the namespace), `link(host, up)`,
`cap(host, rate)` (a tbf qdisc on both directions of its link: this kernel has tbf and htb,
no netem) and `slow(host, share)` (a CPU quota for the host's processes through a cgroup of
its own; the bed's launcher script puts each proxy there before it starts).

Namespaces are named rnb<pid of the test process>-<name>; a bed deletes the namespaces (and
ends the processes) of beds whose process is gone (a crashed run) before it makes its own,
and its own when it is closed. Addresses are only ever 10.77.0.0/24, and only inside the
namespaces.

    python tests/distributed/netbed.py measure [--hosts 2,3,4,5,6]

prints (JSON) the link's latency and bandwidth between two hosts, and the step time of a
synchronous parameter-server job over 2..6 hosts (one worker on each host, the ps on host
0): what bench/scale/ calibrates its model with (`measure_link`, `measure_steps`).
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
PREFIX = "rnb"
SUBNET = "10.77.0"
IFACE = "eth0"
# On ranks, as the module docstring says: TCP between hosts, MPICH's shared memory within one.
RANK_ENV = {"UCX_TLS": "tcp,self"}
# What a test's environment must not carry into a bed job (a resource manager's settings).
CLUSTER = ("PMI_", "RILL_", "HYDRA_", "SLURM_", "PBS_", "LSB_", "PE_HOSTFILE", "UCX_", "FI_",
           "MPIR_CVAR_")


def _ip(*args, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=30)


def unavailable() -> str | None:
    """Why no bed can be made here (None if one can): needs Linux, root, `ip` and `tc`,
    a namespace that can be made, and Hydra's mpiexec beside this Python."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CI runs as root)"
    for tool in ("ip", "tc", "ss", "nsenter", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (iproute2 / util-linux)"
    hydra = os.path.join(os.path.dirname(sys.executable), "mpiexec.hydra")
    if not os.path.exists(hydra):
        return f"no Hydra mpiexec at {hydra} (pip install mpich)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _namespaces() -> list:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ns_pids(ns: str) -> list:
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def _kill_all(ns: str) -> None:
    """SIGKILL every process in the namespace until none is left (a dying process's
    children may be forked meanwhile)."""
    for _ in range(50):
        pids = _ns_pids(ns)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _remove(ns: str) -> None:
    _kill_all(ns)
    _ip("netns", "del", ns, check=False)


def remove_stale() -> list:
    """Delete the namespaces of beds whose test process is gone; returns their names."""
    gone = []
    for ns in _namespaces():
        m = re.fullmatch(rf"{PREFIX}(\d+)(x\d+)?-\w+", ns)
        if m and not _alive(int(m.group(1))):
            _remove(ns)
            gone.append(ns)
    for cg in _cgroup_roots():
        for d in cg.glob(f"{PREFIX}*"):
            m = re.fullmatch(rf"{PREFIX}(\d+)(x\d+)?-\w+", d.name)
            if m and not _alive(int(m.group(1))):
                _rmdir_cgroup(d)
    return gone


# ---- CPU quotas (a straggler host) ---------------------------------------------------------

def _cgroup_roots() -> list:
    """Where a cgroup with a CPU quota can be made: cgroup v2's root (with the cpu
    controller) or v1's cpu hierarchy."""
    roots = []
    v2 = pathlib.Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists() and \
            "cpu" in (v2 / "cgroup.controllers").read_text().split():
        roots.append(v2)
    v1 = pathlib.Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists():
        roots.append(v1)
    return roots


def _rmdir_cgroup(path: pathlib.Path) -> None:
    procs = path / "cgroup.procs"
    for _ in range(50):
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)


# ---- the bed -------------------------------------------------------------------------------

LAUNCHER = """#!/bin/sh
# Hydra's ssh launcher, for the bed: called as `ssh [-x] HOST COMMAND LINE` would be, it runs
# the command line in HOST's network namespace, with HOST's host name (and CPU cgroup).
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
case "$host" in
%(cases)s
  *) echo "netbed launcher: no host $host in this bed" >&2; exit 255;;
esac
if [ -n "$cg" ] && [ -d "$cg" ]; then echo $$ > "$cg/cgroup.procs"; fi
exec nsenter --net="/run/netns/$ns" unshare --uts sh -c "hostname $name && exec $*"
"""


class Host:
    def __init__(self, bed: "Bed", index: int):
        self.index, self.name = index, f"h{index}"
        self.ns = f"{bed.prefix}-{self.name}"
        self.address = f"{SUBNET}.{index + 1}"
        self.port = self.name  # its port on the switch
        self.cgroup: pathlib.Path | None = None

    def __repr__(self):
        return f"Host({self.name}, {self.address})"


class Bed:
    """`hosts` hosts on one switch (module docstring). Use as a context manager, or call
    close(); `launch` runs rill-launch on host 0 over the hosts it is given."""

    def __init__(self, hosts: int = 3, tag: str | None = None):
        remove_stale()
        self.prefix = f"{PREFIX}{os.getpid()}{tag or ''}"
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="rill-netbed-"))
        self.hosts = [Host(self, i) for i in range(hosts)]
        self.switch = f"{self.prefix}-sw"
        self._made: list = []
        self._threads: list = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # -- making and unmaking

    def _build(self) -> None:
        sw = self.switch
        _ip("netns", "add", sw)
        self._made.append(sw)
        _ip("-n", sw, "link", "set", "lo", "up")
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "up")
        for h in self.hosts:
            _ip("netns", "add", h.ns)
            self._made.append(h.ns)
            _ip("-n", sw, "link", "add", h.port, "type", "veth", "peer", "name", IFACE,
                "netns", h.ns)
            _ip("-n", sw, "link", "set", h.port, "master", "br0", "up")
            _ip("-n", h.ns, "addr", "add", f"{h.address}/24", "dev", IFACE)
            _ip("-n", h.ns, "link", "set", IFACE, "up")
            _ip("-n", h.ns, "link", "set", "lo", "up")
            if h.index:  # the launching host's processes are not started by the launcher
                self._make_cgroup(h)
        cases = "\n".join(f"  {h.address}|{h.name}) ns={h.ns}; name={h.name}; "
                          f"cg={self.tmp / ('cgroup-' + h.name)};;" for h in self.hosts)
        self.launcher = self.tmp / "launcher.sh"
        self.launcher.write_text(LAUNCHER % {"cases": cases})
        self.launcher.chmod(self.launcher.stat().st_mode | stat.S_IXUSR)
        self._wait_for_links()

    def _wait_for_links(self, limit: float = 10.0) -> None:
        """Until every host's eth0 is up and its address usable (IPv4 has no DAD, but the
        veth's carrier comes a moment after `up`)."""
        deadline = time.monotonic() + limit
        for h in self.hosts:
            while "LOWER_UP" not in _ip("-n", h.ns, "link", "show", IFACE).stdout:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"netbed: {h.ns}'s {IFACE} did not come up")
                time.sleep(0.02)

    def close(self) -> None:
        for t in self._threads:
            t.stop()
        for h in self.hosts:
            if h.cgroup is not None:
                _rmdir_cgroup(h.cgroup)
        for ns in reversed(self._made):
            _remove(ns)
        self._made.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- running things

    def env(self, **extra) -> dict:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(CLUSTER)}
        paths = [str(HERE), str(HERE.parent)]  # the scripts' helpers, tests/launching.py
        clean["PYTHONPATH"] = os.pathsep.join(paths + [clean.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        return dict(clean, HYDRA_LAUNCHER="ssh", HYDRA_LAUNCHER_EXEC=str(self.launcher),
                    **RANK_ENV, **{k: str(v) for k, v in extra.items()})

    def on(self, host: Host | int, *command: str) -> list:
        """The command line that runs `command` on `host` (its namespace and host name)."""
        h = self.host(host)
        line = " ".join(_quote(c) for c in command)
        return ["nsenter", f"--net=/run/netns/{h.ns}", "unshare", "--uts", "sh", "-c",
                f"hostname {h.name} && exec {line}"]

    def host(self, host) -> Host:
        return host if isinstance(host, Host) else self.hosts[host]

    def hosts_arg(self, per_host) -> str:
        """--hosts for rill-launch: per_host[i] ranks on host i (0: none there)."""
        return ",".join(f"{h.address}:{n}" for h, n in zip(self.hosts, per_host) if n)

    def launch_command(self, per_host, *args) -> list:
        """rill-launch, on host 0, with per_host[i] ranks on host i, then ARGS (-n is
        added: the sum of per_host)."""
        return self.on(0, sys.executable, "-m", "rill.distributed.launch",
                       "-n", str(sum(per_host)), "--hosts", self.hosts_arg(per_host),
                       "--iface", IFACE, *map(str, args))

    def launch(self, per_host, *args, timeout: float = 60, env: dict | None = None):
        """Run rill-launch over the bed; returns (exit code, combined output)."""
        proc = subprocess.run(self.launch_command(per_host, *args), capture_output=True,
                              text=True, timeout=timeout, env=env or self.env(),
                              cwd=str(HERE))
        return proc.returncode, proc.stdout + proc.stderr

    def start(self, per_host, *args, env: dict | None = None) -> "Job":
        """Start rill-launch over the bed without waiting: a Job whose output is read as it
        comes (Job.wait_for a line, Job.finish)."""
        return Job(subprocess.Popen(self.launch_command(per_host, *args),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env or self.env(), cwd=str(HERE),
                                    start_new_session=True))

    def pids(self, host) -> list:
        return _ns_pids(self.host(host).ns)

    def listeners(self, host) -> list:
        """[(local address, port, [process names])] of the TCP sockets listening there."""
        out = subprocess.run(["ip", "netns", "exec", self.host(host).ns, "ss", "-Hltnp"],
                             capture_output=True, text=True, timeout=10).stdout
        found = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 4:
                continue
            addr, _, port = parts[3].rpartition(":")
            names = re.findall(r'\("([^"]+)"', line)
            found.append((addr.strip("[]"), int(port), names))
        return found

    # -- faults

    def kill_host(self, host) -> list:
        """SIGKILL every process on the host (as if it lost power); returns their pids."""
        h = self.host(host)
        pids = _ns_pids(h.ns)
        _kill_all(h.ns)
        return pids

    def link(self, host, up: bool) -> None:
        """The host's link up or down (its eth0, inside its namespace)."""
        _ip("-n", self.host(host).ns, "link", "set", IFACE, "up" if up else "down")

    def cap(self, host, rate: str = "20mbit", burst: str = "32kb",
            latency: str = "100ms") -> None:
        """A token bucket (tbf) on both directions of the host's link: rate is what it can
        send and receive."""
        h = self.host(host)
        for ns, dev in ((h.ns, IFACE), (self.switch, h.port)):
            subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
                            "rate", rate, "burst", burst, "latency", latency],
                           check=True, capture_output=True, text=True, timeout=10)

    def uncap(self, host) -> None:
        h = self.host(host)
        for ns, dev in ((h.ns, IFACE), (self.switch, h.port)):
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"],
                           capture_output=True, text=True, timeout=10)

    def slow(self, host, share: float | None) -> bool:
        """Let the host's processes use `share` of one CPU from now on (a CPU quota on its
        cgroup; None: no limit); False where the bed has no CPU cgroups (then use bursts)."""
        h = self.host(host)
        if h.cgroup is None:
            return False
        period = 100_000
        quota = "max" if share is None else str(max(int(period * share), 1000))
        if (h.cgroup / "cpu.max").exists():
            (h.cgroup / "cpu.max").write_text(f"{quota} {period}")
        else:
            (h.cgroup / "cpu.cfs_period_us").write_text(str(period))
            (h.cgroup / "cpu.cfs_quota_us").write_text("-1" if share is None else quota)
        return True

    def _make_cgroup(self, h: Host) -> None:
        """A CPU cgroup for the host, without a quota yet (slow() sets one), which the
        launcher script puts each proxy on the host into."""
        for root in _cgroup_roots():
            path = root / f"{self.prefix}-{h.name}"
            try:
                path.mkdir(exist_ok=True)
            except OSError:
                continue
            h.cgroup = path
            (self.tmp / f"cgroup-{h.name}").symlink_to(path)
            return

    def bursts(self, host, stopped: float = 0.15, running: float = 0.05) -> "Bursts":
        """SIGSTOP/SIGCONT every process on the host, over and over, until stopped."""
        b = Bursts(self, self.host(host), stopped, running)
        self._threads.append(b)
        b.start()
        return b


class Bursts(threading.Thread):
    def __init__(self, bed, host, stopped, running):
        super().__init__(daemon=True, name=f"netbed bursts {host.name}")
        self.bed, self.h, self.stopped, self.running = bed, host, stopped, running
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            pids = _ns_pids(self.h.ns)
            _signal_all(pids, signal.SIGSTOP)
            self.done.wait(self.stopped)
            _signal_all(pids + _ns_pids(self.h.ns), signal.SIGCONT)
            self.done.wait(self.running)

    def stop(self):
        self.done.set()
        if self.is_alive():
            self.join(5)
        _signal_all(_ns_pids(self.h.ns), signal.SIGCONT)


def _signal_all(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _quote(text: str) -> str:
    import shlex
    return shlex.quote(text)


class Job:
    """A running rill-launch: its output lines as they come."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines = proc, []
        self._new = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._new:
                self.lines.append(line.rstrip("\n"))
                self._new.notify_all()
        with self._new:
            self._new.notify_all()

    def wait_for(self, text: str, timeout: float) -> bool:
        """Until a line containing `text` has come (True), the job ended or time ran out."""
        deadline = time.monotonic() + timeout
        with self._new:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    return any(text in line for line in self.lines)
                self._new.wait(min(left, 0.1))
        return True

    def finish(self, timeout: float) -> tuple:
        """(exit code, output, seconds waited); kills the job if it outlives `timeout`."""
        start = time.monotonic()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait(10)
        self._reader.join(5)
        return rc, "\n".join(self.lines), time.monotonic() - start

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


# ---- measurements for the simulator (bench/scale/) ----------------------------------------

def measure_link(bed: Bed, sizes=(8, 1 << 10, 1 << 16, 1 << 20, 1 << 23),
                 repeats: int = 20) -> dict:
    """Ping-pong between one rank on host 0 and one on host 1 over the bed's TCP link:
    {"latency_s": half the round trip of the smallest message, "bandwidth_Bps": the largest
    message's bytes per second one way, "points": [(bytes, one-way seconds)]}."""
    rc, out = bed.launch([1, 1], "--timeout", 60, HERE / "netbed_pingpong.py",
                         ",".join(map(str, sizes)), repeats, timeout=120)
    if rc != 0:
        raise RuntimeError(f"ping-pong failed:\n{out}")
    line = next(t for t in out.splitlines() if "pingpong " in t)
    points = json.loads(line.split("pingpong ", 1)[1])
    small, large = points[0], points[-1]
    return {"latency_s": small[1], "bandwidth_Bps": large[0] / large[1], "points": points}


def measure_steps(hosts=(2, 3, 4, 5, 6), steps: int = 30, backups: int = 0) -> dict:
    """Step times of a synchronous parameter-server job (multihost_jobs.py steptime: a
    captured step of a 5-16-3 MLP, its variables on the ps) with the ps alone on host 0 and
    one worker on each other host, for each number of hosts in `hosts`: {hosts: {"workers",
    "mean_s" (a worker's wall time over its steps / steps, averaged over workers),
    "median_s", "per_worker": [{"host", "steps_s", ...}]}}."""
    import statistics
    out = {}
    for n in hosts:
        with Bed(n) as bed:
            result = bed.tmp / "steps"
            rc, text = bed.launch([1] * n, "--ps", 1, "--timeout", 60, HERE /
                                  "multihost_jobs.py", "steptime", result, steps, backups,
                                  timeout=300)
            if rc != 0:
                raise RuntimeError(f"step-time job on {n} hosts failed:\n{text}")
            runs = [json.loads(p.read_text()) for p in sorted(bed.tmp.glob("steps-worker*"))]
        out[n] = {"workers": len(runs),
                  "mean_s": statistics.mean(r["wall_s"] / max(len(r["steps_s"]), 1)
                                            for r in runs),
                  "median_s": statistics.median(t for r in runs for t in r["steps_s"]),
                  "per_worker": runs}
    return out


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="measure the bed's link and step times")
    p.add_argument("what", choices=["measure", "check"])
    p.add_argument("--hosts", default="2,3,4,5,6")
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args(argv)
    why = unavailable()
    if why:
        print(f"no bed here: {why}", file=sys.stderr)
        return 1
    if a.what == "check":
        with Bed(2):
            print("bed ok")
        return 0
    with Bed(2) as bed:
        link = measure_link(bed)
    steps = measure_steps(tuple(int(h) for h in a.hosts.split(",")), a.steps)
    for n, r in steps.items():  # the per-step lists are long: summaries only
        r.pop("per_worker")
    print(json.dumps({"link": link, "steps": steps}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
