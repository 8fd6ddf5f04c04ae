"""bench/distributed.py runs (a smoke run: real rill-launch jobs, tiny sizes)."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).parent.parent


def test_distributed_bench_quick_run():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "distributed.py"), "--quick"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for row in ("scalar", "dense", "sparse", "all-reduce"):
        assert row in proc.stdout
