"""bench/devices.py runs end to end: `--quick` checks that the split graphs give the same
bits as one device and that every hop is a send/recv pair, times a few alternations and
prints its figures, the load average and the BLAS. The figures themselves are not checked
(the machine is shared)."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "devices.py"


def test_devices_bench_quick_run():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "BLAS: " in out and "load average before" in out and "load average after" in out
    assert "matmuls per device: {'cpu': 8, 'cpu:1': 8}" in out, out
    assert re.search(r"speedup\s+\d+\.\d\dx", out), out
    assert "NumPy alone, same chains" in out and "bare Locks" in out, out
    for size in ("4 bytes", "4 MB"):
        assert f"send/recv between cpu:0 and cpu:1, {size}:" in out, out
    assert re.search(r"send/recv pair: -?\d+\.\d us for 4 bytes", out), out
