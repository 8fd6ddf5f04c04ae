"""bench/control_flow.py runs end to end: `--quick` builds every variant at tiny sizes,
checks that captured rill's loss and gradients agree with eager rill's (and torch's, NumPy's,
jax's where present), times a few steps and prints the table. The figures are not checked."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "control_flow.py"


def test_control_flow_bench_quick_run():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "LSTM 8->16, seq 5, batch 4" in proc.stdout, proc.stdout[-3000:]
    for row in ("rill captured", "rill eager", "torch eager", "numpy (floor)"):
        assert row in proc.stdout, proc.stdout[-3000:]
    assert "rill captured / rill eager" in proc.stdout
