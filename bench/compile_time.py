"""Cold first-call time of captured steps: what `rill.capture` costs before its first result
(trace, optimization passes, lowering, building the program), and `import rill`.

Cases: the captured training steps of bench/capture.py (the MLP at batch 16 and 128, the
2-layer GPT, the conv net with BatchNorm) and the captured LSTM step of bench/control_flow.py,
built by those scripts' own functions (imported, not copied). Each case runs in a fresh
Python process (a subprocess of this script: nothing of rill is warm; the OS file cache and
Python's .pyc files are), which builds the model (not timed), times the first call of the
captured step, then the next STEADY_CALLS calls. The compile time is the first call minus the
median of those; the table gives the median over --repeats fresh processes of each. Inside
the first call, the time spent in rill.capture.passes.pipeline.optimize and .lower and in
building the executor's Program is measured by wrapping them (reading rill's internals, as a
diagnostic); "trace and the rest" is the remainder of the compile time. The same is done for
the uncaptured (eager) step, whose first call pays the cold costs that are not capture's
(first use of BLAS and of each kernel), for comparison.

`import rill` is timed in fresh processes too: `import numpy` first, then `import rill`.

rill keeps no disk cache of compiled graphs: every new process traces and compiles again.
The C kernels of rill.kernels.native are cached on disk once built (~/.cache/rill/native):
by default the processes find them there, as every run after a machine's first does;
`--cold-kernels` gives each process an empty cache ($RILL_CACHE_DIR in a new temporary
folder), so that its first call also compiles the C kernels the step uses (a machine's first
run).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/compile_time.py   # ~ a minute
    python bench/compile_time.py --quick            # smoke run: one process per case
    python bench/compile_time.py --cases gpt lstm --repeats 5 --json compile_time.json
    python bench/compile_time.py --cold-kernels     # every process builds its C kernels
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

STEADY_CALLS = 5
TARGET_S = 2.0             # the target, cold, without a disk cache
CACHED_TARGET_S = 0.3      # the target with a disk cache of compiled graphs
# case (short, for the table) -> (bench script, what that script's rill_case takes); the
# cases' full names in bench/capture.py are "mlp, batch 16", "mlp, batch 128", "gpt, 2 layers
# d=64", "conv net with BatchNorm", and in bench/control_flow.py the LSTM 128->256, seq 50,
# batch 32
CASES = {"mlp b16": ("capture", ("mlp", 16)),
         "mlp b128": ("capture", ("mlp", 128)),
         "gpt 2L d64": ("capture", ("gpt", 8)),
         "conv+BN": ("capture", ("convbn", 32)),
         "lstm": ("control_flow", None)}


# ---- in the fresh process ------------------------------------------------------------------

def time_import() -> dict:
    t = time.perf_counter()
    import numpy  # noqa: F401 -- timed
    numpy_s = time.perf_counter() - t
    t = time.perf_counter()
    import rill  # noqa: F401 -- timed
    return {"numpy_s": numpy_s, "rill_s": time.perf_counter() - t}


def timed_internals() -> dict:
    """Wraps the passes, lowering and Program construction capture calls, adding their
    seconds to the returned dict."""
    from rill.capture import function
    from rill.capture.passes import pipeline
    spent = {"passes_s": 0.0, "lower_s": 0.0, "program_s": 0.0}

    def wrap(owner, name, key):
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - t
        setattr(owner, name, timed)
    wrap(pipeline, "optimize", "passes_s")
    wrap(pipeline, "lower", "lower_s")
    wrap(function, "Program", "program_s")
    return spent


def one_case(case: str, captured: bool, quick: bool) -> dict:
    """Builds the case's step, times its first call and the next STEADY_CALLS."""
    t = time.perf_counter()
    import rill  # noqa: F401
    import_s = time.perf_counter() - t
    spent = timed_internals()
    script, what = CASES[case]
    if script == "capture":
        import capture
        call, _ = capture.rill_case(*what, captured=captured)
    else:
        import control_flow
        sizes = control_flow.QUICK if quick else control_flow.FULL
        call, _ = control_flow.rill_case(sizes, captured=captured)
    t = time.perf_counter()
    call()
    first_s = time.perf_counter() - t
    steady = []
    for _ in range(STEADY_CALLS):
        t = time.perf_counter()
        call()
        steady.append(time.perf_counter() - t)
    return {"import_s": import_s, "first_s": first_s, "steady_s": statistics.median(steady),
            **spent}


def child(argv) -> None:
    """`compile_time.py --child import` or `--child CASE eager|captured [quick]`: one
    measurement, as a JSON line on stdout."""
    if argv[0] == "import":
        out = time_import()
    else:
        out = one_case(argv[0], argv[1] == "captured", len(argv) > 2)
    print("RESULT " + json.dumps(out), flush=True)


# ---- the parent ----------------------------------------------------------------------------

COLD_KERNELS = False  # set by --cold-kernels


def fresh(args: list[str]) -> dict:
    """Runs this script with `--child args` in a new interpreter and returns its result."""
    with tempfile.TemporaryDirectory() as empty:
        env = dict(os.environ, RILL_CACHE_DIR=empty) if COLD_KERNELS else None
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args],
                              check=False, capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the fresh process for {args} failed:\n{proc.stderr}")
    return json.loads(lines[-1][len("RESULT "):])


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: one process per case, the LSTM at tiny sizes")
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh processes per case (the table gives their median)")
    parser.add_argument("--cases", nargs="+", metavar="WORD",
                        help="run only the cases whose name contains one of these words")
    parser.add_argument("--no-eager", action="store_true",
                        help="skip the uncaptured step's first call (the comparison column)")
    parser.add_argument("--json", help="write every process's figures and the machine here")
    parser.add_argument("--cold-kernels", action="store_true",
                        help="an empty C-kernel cache for every process (a machine's first run)")
    args = parser.parse_args(argv)
    global COLD_KERNELS
    COLD_KERNELS = args.cold_kernels
    if args.quick:
        args.repeats = 1
    quick = ["quick"] if args.quick else []

    # bench/harness.py: run as `python bench/compile_time.py`, the script's folder is on
    # sys.path
    import harness
    from capture import blas
    from rich.console import Console
    from rich.table import Table
    console = Console(width=max(Console().width, 100))  # the table's ten columns on one line
    report = {"machine": harness.machine(), "blas": blas(), "repeats": args.repeats,
              "steady_calls": STEADY_CALLS, "cold_kernels": args.cold_kernels,
              "load_average": {"before": os.getloadavg()},
              "import": [], "cases": {}}
    console.print(f"BLAS: {report['blas']}")

    imports = [fresh(["import"]) for _ in range(max(args.repeats, 3))]
    report["import"] = imports
    console.print(f"import numpy {median_of(imports, 'numpy_s') * 1e3:.0f} ms, then import "
                  f"rill {median_of(imports, 'rill_s') * 1e3:.0f} ms (median of "
                  f"{len(imports)} fresh processes; min "
                  f"{min(r['rill_s'] for r in imports) * 1e3:.0f} ms)")

    kernels = "empty C-kernel cache" if args.cold_kernels else "C kernels cached on disk"
    t = Table(title=f"first call of each captured step, cold (fresh process, {kernels}): "
                    f"seconds, median "
                    f"of {args.repeats} processes; steady = median of the next {STEADY_CALLS}")
    for col in ("case", "first", "steady", "compile", "passes", "lower", "program", "trace+",
                "eager"):
        t.add_column(col, justify="left" if col == "case" else "right")
    for case in CASES:
        if args.cases and not any(word in case for word in args.cases):
            continue
        # in rotation, captured and eager, so that noise falls on both alike
        captured, eager = [], []
        for _ in range(args.repeats):
            captured.append(fresh([case, "captured", *quick]))
            if not args.no_eager:
                eager.append(fresh([case, "eager", *quick]))
        for r in captured + eager:
            r["compile_s"] = r["first_s"] - r["steady_s"]
        for r in captured:
            r["trace_and_rest_s"] = r["compile_s"] - r["passes_s"] - r["lower_s"] - r["program_s"]
        m = {k: median_of(captured, k) for k in ("first_s", "steady_s", "compile_s", "passes_s",
                                                 "lower_s", "program_s", "trace_and_rest_s")}
        eager_extra = median_of(eager, "compile_s") if eager else None
        t.add_row(case, *(f"{m[k]:.3f}" for k in m),
                  f"{eager_extra:.3f}" if eager_extra is not None else "-")
        report["cases"][case] = {"captured": captured, "eager": eager, "median_s": m,
                                 "eager_first_minus_steady_s": eager_extra}
    report["load_average"]["after"] = os.getloadavg()
    console.print(t)
    console.print("compile = first - steady; passes, lower, program: the time inside "
                  "pipeline.optimize, pipeline.lower and Program(); trace+ = compile minus "
                  "those (tracing, autodiff, and whatever else the first call pays); eager = "
                  "the uncaptured step's first call minus its steady call")
    console.print("load average (1, 5, 15 min) before "
                  f"{', '.join(f'{v:.2f}' for v in report['load_average']['before'])}; after "
                  f"{', '.join(f'{v:.2f}' for v in report['load_average']['after'])}")
    if report["cases"]:
        worst = max(report["cases"], key=lambda c: report["cases"][c]["median_s"]["compile_s"])
        w = report["cases"][worst]["median_s"]["compile_s"]
        console.print(f"target, compile <= {TARGET_S:g} s cold: "
                      f"{'met' if w <= TARGET_S else 'NOT met'} (slowest: {worst}, {w:.2f} s)")
        under = [c for c, r in report["cases"].items()
                 if r["median_s"]["compile_s"] <= CACHED_TARGET_S]
        console.print(f"already under the {CACHED_TARGET_S:g} s target set for a disk cache "
                      f"(rill caches its C kernels, not graphs): "
                      f"{', '.join(under) if under else 'none'}")
    harness.finish(args, report, console,
                   quick="a smoke run; one process per case, the LSTM at tiny sizes")


if __name__ == "__main__":
    main()
