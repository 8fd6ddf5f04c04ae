"""bench/distributed.py runs (a smoke run: real rill-launch jobs, tiny sizes), the captured
null steps beside the eager ones."""
import importlib.util
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# by path, under its own name: "distributed" alone may be another installed package
_SPEC = importlib.util.spec_from_file_location("rill_bench_distributed",
                                               ROOT / "bench" / "distributed.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_distributed_bench_quick_run(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "distributed.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for row in ("scalar", "dense", "sparse", "all-reduce", "scalar-captured", "dense-captured",
                "sparse-captured", "captured / eager"):
        assert row in proc.stdout
    results = json.loads(out.read_text())
    for case in ("scalar", "dense"):
        eager, captured = results[case][0], results[case + "-captured"][0]
        assert captured["median_ms"] > 0 and captured["n"] == 4  # 8 steps, 4 after warm-up
        # the ps applied every step of the captured job: pull + push, synchronously
        assert captured["stats"]["applied"] == captured["stats"]["contributions"] == 8
        assert results[case + "-ratio"][0] == captured["median_ms"] / eager["median_ms"]
    sparse = results["sparse-captured"][0]
    if bench.sharded_embedding() is None:
        assert sparse == bench.PENDING and "pending" in proc.stdout
    elif isinstance(sparse, str):  # ShardedEmbedding is new: its failure is in its cell
        assert sparse.startswith("failed: ") and "failed" in proc.stdout
        assert "sparse-captured with 1 workers failed: " in proc.stderr
    else:  # async: the ps applies each of the 8 steps' contributions
        assert sparse["stats"]["applied"] == 8
