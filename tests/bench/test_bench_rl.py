"""bench/rl.py runs end to end: `--quick` plays the forced episode in rill and PyTorch, checks
that their losses and gradients agree, times a few sampled episodes and writes the report.
The figures are not checked; the agreement check is, on a tampered gradient."""
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "rl.py"


def test_rl_bench_quick_run(tmp_path):
    out = tmp_path / "rl.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "REINFORCE, 20-step episodes" in proc.stdout, proc.stdout[-3000:]
    report = json.loads(out.read_text())
    assert set(report["median_ms"]) == {"rill eager", "torch eager"}
    assert all(ms > 0 for ms in report["median_ms"].values())
    assert report["steps_per_episode"] == 20


def test_the_forced_episodes_must_agree(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import rl
    first = {label: rl.setup(label, True)[1] for label in (rl.RILL, rl.TORCH)}
    rl.check(first)  # the same episode in both: agrees
    loss, grads = first[rl.TORCH]
    grads = [g.copy() for g in grads]
    grads[0][0, 0] += np.float32(0.01) * max(float(np.abs(grads[0]).max()), 1.0)
    first[rl.TORCH] = (loss, grads)
    with pytest.raises(SystemExit, match="disagrees"):
        rl.check(first)
