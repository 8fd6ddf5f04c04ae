"""bench/capture.py runs end to end: `--quick` builds every variant, checks that rill eager
and captured (and torch, NumPy, jax where present) agree on the first losses and outputs,
times a few calls and prints the tables and the targets; `--per-node` times the nodes of a
captured step. The figures themselves are not checked."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "capture.py"


def run(*args):
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=180, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_capture_bench_quick_run():
    out = run("--quick")
    for case in ("mlp, batch 16", "mlp, batch 128", "chain of 50 ops", "gpt, 2 layers d=64",
                 "conv net with BatchNorm"):
        assert case in out, out[-3000:]
    assert "rill captured" in out
    assert "BLAS" in out
    assert "every case: captured not slower than rill eager" in " ".join(out.split())


def test_capture_bench_per_node():
    out = run("--per-node", "--quick", "--cases", "conv")
    assert "conv net with BatchNorm" in out and "slowest nodes" in out, out[-3000:]
    assert "gpt" not in out


def test_capture_bench_base_commit_runs_beside_the_tree():
    # --base: rill's variants also run from `git archive HEAD` of lib/ and kernels/, each
    # worker checking that it imported rill from there (bench/harness.py's with_base)
    out = run("--quick", "--cases", "batch 16", "--base", "HEAD")
    assert "rill eager @base" in out and "rill captured @base" in out, out[-3000:]
    assert "@base skipped" not in out, out[-3000:]
