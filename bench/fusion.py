"""Captured steps with and without fusion + memory planning, in one process, blocks interleaved."""
import sys, time, statistics, json
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from rill.capture.passes import pipeline
from rill.capture.passes.fuse import fuse_where_it_pays
from rill.capture.passes.memory import memory
import capture as B
import control_flow as C
from threadpoolctl import threadpool_info
print(json.dumps([{k: i.get(k) for k in ("internal_api", "num_threads", "architecture", "version")} for i in threadpool_info()]))

CONFIGS = {"plain": [], "fuse": [fuse_where_it_pays], "fuse+plan": [fuse_where_it_pays, memory]}

def make(case, passes):
    pipeline.EXECUTION_PASSES[:] = passes
    if case == "lstm":
        call, read = C.rill_case(dict(C.FULL), captured=True)
    else:
        kind, batch = B.CASES[case]
        call, read = B.rill_case(kind, batch, captured=True)
    t = time.perf_counter(); first = read(call()); compile_s = time.perf_counter() - t
    for _ in range(3): call()
    return call, first, compile_s

cases = sys.argv[1:] or ["mlp, batch 16", "mlp, batch 128", "conv net with BatchNorm", "gpt, 2 layers d=64", "lstm"]
for case in cases:
    calls, firsts = {}, {}
    for name, passes in CONFIGS.items():
        calls[name], firsts[name], c = make(case, passes)
        print(f"{case}: {name} first call {c:.2f}s", flush=True)
    pipeline.EXECUTION_PASSES[:] = []
    samples = {k: [] for k in calls}
    block = 10 if "lstm" in case or "conv" in case or "gpt" in case else 40
    rounds = 12
    for r in range(rounds):
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            call = calls[name]
            for _ in range(block):
                t = time.perf_counter(); call(); samples[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    mins = {k: min(v) * 1e3 for k, v in samples.items()}
    print(f"{case}: " + "  ".join(f"{k} median {med[k]:.3f} ms (min {mins[k]:.3f})" for k in med)
          + f"  ratio fuse/plain {med['fuse']/med['plain']:.3f}  fuse+plan/plain {med['fuse+plan']/med['plain']:.3f}", flush=True)
