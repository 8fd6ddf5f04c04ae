"""bench/report.py: BENCHMARKS.md's tables are what the run files in bench/results/ give, each
table made from a script's --json report (medians side by side, the ratios, the machine),
and the hand-written rest of the page is left alone."""
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402  (bench/report.py)

MACHINE = {"date": "2026-11-30 11:00 UTC", "cpu": "AMD EPYC (family 26, model 2)", "cpus": 2,
           "numpy": "2.4.6", "torch": "2.13.0+cpu", "blas": ["openblas 0.3.31 SkylakeX, 2 threads"]}


def test_benchmarks_page_is_what_the_run_files_give():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--check"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_a_models_report_renders_medians_ratios_and_the_machine(tmp_path, monkeypatch):
    models = {"machine": MACHINE, "repeats": 20, "threads": 2, "models": {
        "alexnet": {"what": "AlexNet, batch 8", "median_ms": {
            "rill eager": 137.2, "rill captured": 129.2, "torch eager": 224.2}}}}
    (tmp_path / "models.json").write_text(json.dumps(models))
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    text = report.generated()
    assert "2026-11-30 11:00 UTC; AMD EPYC (family 26, model 2), 2 CPUs" in text
    assert "openblas 0.3.31 SkylakeX, 2 threads" in text
    row = next(line for line in text.splitlines() if line.startswith("| AlexNet"))
    # medians, then eager / torch, captured / torch, captured / eager
    assert row == "| AlexNet, batch 8 | 137.2 | 129.2 | 224.2 | 0.61 | 0.58 | 0.94 |"
    assert "No run file yet" in text  # the scripts without a file are named, with their command


def test_only_the_generated_part_of_the_page_changes(tmp_path, monkeypatch):
    page = tmp_path / "BENCHMARKS.md"
    page.write_text(f"# Benchmarks\n\nintro\n\n{report.BEGIN}\nold table\n{report.END}\n\n"
                    "## Notes\n\nby hand\n")
    monkeypatch.setattr(report, "PAGE", page)
    monkeypatch.setattr(report, "RESULTS", tmp_path)  # no run files: "No run file yet"
    with pytest.raises(SystemExit, match="run `python bench/report.py`"):
        report.main(["--check"])
    report.main([])
    text = page.read_text()
    assert "old table" not in text and "No run file yet" in text
    assert text.startswith("# Benchmarks\n\nintro\n\n") and text.endswith("## Notes\n\nby hand\n")
    report.main(["--check"])  # now up to date
