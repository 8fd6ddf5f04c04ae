"""bench/native.py runs end to end: `--quick` calls every compiled kernel beside its NumPy
kernel, checks that their results agree (bit for bit where promised), times a few calls each
way and writes the report. The figures are not checked."""
import json
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "native.py"


@pytest.mark.skipif(shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None,
                    reason="no C compiler on this machine")
def test_native_bench_quick_run(tmp_path):
    out = tmp_path / "native.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())["cases"]
    assert len(report) == 17 and "adam_update, AdamW (1M,)" in report
    for name, row in report.items():
        assert row["compiled_us"] > 0 and row["numpy_us"] > 0, name
        assert name in proc.stdout
    assert report["scaled_add (512, 784)"]["same_bits"] is True
    assert report["fused where(x > 0, g, 0) (32, 16, 32, 32)"]["same_bits"] is True
