"""Runs benchmark variants side by side, each in its own process, and times them in rotation.

Shared by bench/capture.py, bench/control_flow.py and bench/train.py. Why a process per
variant: no framework's BLAS or OpenMP threads spin beside another's, and each variant keeps
its libraries' default thread counts. Why rotation: the parent hands out blocks of
consecutive calls to one variant at a time, starting each round at the next variant, with a
pause between blocks, so machine noise falls on all variants alike while no two ever run at
once.

A script supplies a module-level `setup(label, what) -> (call, first)`: `call()` runs once
what is timed, and `first` is what the script checks across variants before any timing
(making it may call `call()`: the first call of a captured or jitted function traces and
compiles, and is never timed). `setup` travels to the workers by name, so it must live at
the top level of the script. The scripts are run as `python bench/X.py`, which puts bench/
on sys.path; spawned workers get the parent's sys.path, so they import this module too.

    procs, conns, skipped, found = harness.start(modules, setup, warmup_calls)
    try:
        first = harness.set_up(conns, what)
        ...                                   # the script checks `first`
        samples = harness.time_in_rotation(conns, repeats, block, settle)
    finally:
        harness.stop(procs, conns)
"""
from __future__ import annotations

import importlib
import importlib.metadata
import io
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

# A pause between blocks: BLAS and OpenMP worker threads keep spinning for a while after
# their last task, and would otherwise steal the cores from the next process's block.
SETTLE_S = 0.2
QUICK_SETTLE_S = 0.02      # --quick smoke runs: the figures do not matter there


def versions() -> dict:
    out = {}
    for dist in ("numpy", "rill", "torch", "jax"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def machine() -> dict:
    """The machine and library versions, for a --json report (bench/report.py prints them
    above each table): the date (UTC), the CPU, and the BLAS this process loaded."""
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "cpu": cpu_model(), "blas": blas_libraries(),
            **versions()}


def cpu_model() -> str:
    """"AMD EPYC (family 26, model 2)": /proc/cpuinfo's name, family and model on Linux (a VM
    often names only the vendor's line; the family tells the generation)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break
    except OSError:
        return platform.processor() or platform.machine()
    name = fields.get("model name", platform.machine())
    if "cpu family" in fields:
        return f"{name} (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return name


def blas_libraries() -> list[str]:
    """The BLAS libraries loaded here, as threadpoolctl reports them ("openblas 0.3.31
    SkylakeX, 2 threads"); [] without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture') or ''}, "
            f"{i.get('num_threads')} threads".replace(" ,", ",")
            for i in threadpool_info() if i.get("user_api") == "blas"]


# ---- one process per variant ---------------------------------------------------------------

def worker(label: str, module: str, setup, warmup_calls: int, from_other_interpreter: bool,
           conn, first_path: str | None = None) -> None:
    """Serves one variant. First answers ("ok", version of `module`), or why `module` does
    not import. Then answers ("setup", what) with the `first` of `setup(label, what)` (then
    warms up), ("time", n, inner) with n samples, each the mean ms of `inner` consecutive
    calls; None ends it. A failure is sent back as {"error": traceback}. A worker given
    `first_path` imports from there first: a variant at another commit (`with_base`), whose
    `setup` sees the label without its BASE suffix."""
    if first_path:
        sys.path.insert(0, first_path)
        label = label.removesuffix(BASE)
    if from_other_interpreter:
        # Started from another interpreter (see `start`), this process got the parent's
        # sys.path: add that interpreter's own site-packages, where its extra libraries are.
        import site
        sys.path.extend(p for p in site.getsitepackages() if p not in sys.path)
    # rill is imported in every process: its import sets glibc's malloc to keep freed
    # buffers (lib/cpu_memory.py), and every variant gets the same allocator.
    rill = importlib.import_module("rill")
    if first_path and not rill.__file__.startswith(first_path):
        conn.send(f"rill came from {rill.__file__}, not from the base tree {first_path}")
        return
    try:
        imported = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 -- an absent or broken framework: rows skipped
        conn.send(f"{type(e).__name__}: {e}")
        return
    conn.send(("ok", getattr(imported, "__version__", None)))
    call = None
    while (msg := conn.recv()) is not None:
        try:
            if msg[0] == "setup":
                call = None  # drop the previous setup's model before building the next
                call, first = setup(label, msg[1])
                for _ in range(warmup_calls):
                    call()
                conn.send(first)
            else:
                _, n, inner = msg
                call()  # the block's first call re-warms caches after the other processes
                samples = []
                for _ in range(n):
                    t = time.perf_counter()
                    for _ in range(inner):
                        call()
                    samples.append((time.perf_counter() - t) * 1e3 / inner)
                conn.send(samples)
        except Exception:  # noqa: BLE001 -- any failure goes back to the parent
            conn.send({"error": traceback.format_exc()})
            return


def receive(label: str, conn):
    answer = conn.recv()
    if isinstance(answer, dict):
        raise SystemExit(f"{label} failed:\n{answer['error']}")
    return answer


def start(modules: dict, setup, warmup_calls: int, executables: dict | None = None,
          first_paths: dict | None = None):
    """One worker per variant: `modules` maps each label, in table order, to the module it
    needs; `executables` optionally maps a label to another Python interpreter to run it,
    `first_paths` a label to a folder its worker imports from first (see `with_base`).
    Returns (procs, conns, skipped, found): skipped maps a label whose module did not import
    to why, found the others to their module's __version__."""
    executables, first_paths = executables or {}, first_paths or {}
    ctx = mp.get_context("spawn")
    procs, conns, skipped, found = {}, {}, {}, {}
    for label, module in modules.items():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker, daemon=True,
                           args=(label, module, setup, warmup_calls, label in executables,
                                 child, first_paths.get(label)))
        if label in executables:
            ctx.set_executable(executables[label])
        try:
            proc.start()
        finally:
            ctx.set_executable(sys.executable)
        procs[label], conns[label] = proc, parent
    for label in modules:
        answer = conns[label].recv()
        if isinstance(answer, tuple):
            found[label] = answer[1]
        else:
            skipped[label] = answer
            procs.pop(label).join(timeout=10)
            conns.pop(label)
    return procs, conns, skipped, found


# ---- rill at an earlier commit, beside the working tree -------------------------------------

BASE = " @base"  # the label of a variant run at the --base commit: "rill eager @base"


def tree_at(rev: str) -> str:
    """A new folder holding `rill` (lib/) and `rill/kernels` (kernels/) as of commit `rev`."""
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(root), "archive", rev, "lib", "kernels"],
                             capture_output=True, check=True, timeout=60).stdout
    folder = Path(tempfile.mkdtemp(prefix="rill-base-"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "lib").rename(folder / "rill")
    (folder / "kernels").rename(folder / "rill" / "kernels")
    return str(folder)


def with_base(modules: dict, rev: str | None) -> tuple[dict, dict]:
    """(modules, first_paths) for `start`: `modules` and, after each rill variant, the same
    variant at commit `rev` (labelled with BASE), imported from that commit's tree: before
    and after in one rotation. Without `rev`, `modules` as it is."""
    if not rev:
        return modules, {}
    tree = tree_at(rev)
    out, first_paths = {}, {}
    for label, module in modules.items():
        out[label] = module
        if module == "rill":
            out[label + BASE] = module
            first_paths[label + BASE] = tree
    return out, first_paths


def set_up(conns: dict, what) -> dict:
    """Has every worker set up `what`; returns each variant's `first`, to be checked."""
    for conn in conns.values():
        conn.send(("setup", what))
    return {label: receive(label, conn) for label, conn in conns.items()}


def time_in_rotation(conns: dict, repeats: int, block: int, settle: float,
                     inner: int = 1) -> dict[str, list[float]]:
    """`repeats` samples per variant, in blocks of `block`, each round starting at the next
    variant, with `settle` seconds' pause after every block."""
    labels = list(conns)
    samples = {label: [] for label in labels}
    for r in range(-(-repeats // block)):
        n = min(block, repeats - r * block)
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            conns[label].send(("time", n, inner))
            samples[label].extend(receive(label, conns[label]))
            time.sleep(settle)
    return samples


def rotation_parser(doc: str, *, repeats: int, block: int, quick: str, unit: str = "samples",
                    cases: bool = True, base: bool = False):
    """The command line the rotating benchmarks share (--quick, --repeats, --block, --cases,
    --json, and --base where the script passes its modules through `with_base`); a script
    adds its own options to the parser it returns."""
    import argparse
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: {quick} (figures are not meaningful)")
    parser.add_argument("--repeats", type=int, default=repeats,
                        help=f"timed {unit} per variant and case")
    parser.add_argument("--block", type=int, default=block,
                        help=f"consecutive {unit} per variant before rotating to the next")
    if cases:
        parser.add_argument("--cases", nargs="+", metavar="WORD",
                            help="run only the cases whose name contains one of these words "
                                 "(e.g. --cases gpt conv)")
    parser.add_argument("--json", help="write samples, medians, ratios and the machine here")
    if base:
        parser.add_argument("--base", metavar="REV",
                            help="also run each rill variant at this commit (its lib/ and kernels/ "
                                 "from `git archive`): before and after in one rotation")
    return parser


def finish(args, report: dict, console,
           quick: str = "a smoke run; these figures are too few to mean anything") -> None:
    """The end of a benchmark run: say that --quick figures mean nothing, and write the
    report where --json asks."""
    if args.quick:
        console.print(f"(--quick: {quick})")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


def stop(procs: dict, conns: dict) -> None:
    for conn in conns.values():
        try:
            conn.send(None)
        except OSError:  # that worker has already stopped (it reported a failure)
            pass
    for proc in procs.values():
        proc.join(timeout=10)
