"""bench/capture.py runs end to end: `--quick` builds every variant, checks that rill eager
and captured (and torch, NumPy, jax where present) agree on the first losses and outputs,
times a few calls and prints the tables. The figures themselves are not checked."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).parent.parent
SCRIPT = ROOT / "bench" / "capture.py"


def test_capture_bench_quick_run():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for case in ("mlp, batch 16", "mlp, batch 128", "chain of 50 ops"):
        assert case in proc.stdout, proc.stdout[-3000:]
    assert "rill captured" in proc.stdout
