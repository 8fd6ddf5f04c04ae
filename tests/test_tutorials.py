"""Tutorials are executed as they are: each notebook must run to the end through
tutorials/run.py (they assert their results), and is stored without outputs."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

TUTORIALS_DIR = pathlib.Path(__file__).parent.parent / "tutorials"
RUNNER = TUTORIALS_DIR / "run.py"
NOTEBOOKS = sorted(TUTORIALS_DIR.glob("*.ipynb"))


def run_notebook(path, tmp_path, timeout=180):
    env = dict(os.environ, RILL_TUTORIAL_FIGURES=str(tmp_path / "figures"))
    return subprocess.run([sys.executable, str(RUNNER), str(path)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=TUTORIALS_DIR.parent,
                          check=False)


def test_there_are_tutorials():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_tutorial_runs(path, tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    proc = run_notebook(path, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if "plt.show()" in path.read_text(encoding="utf-8"):
        assert list((tmp_path / "figures").glob(f"{path.stem}-*.png")), proc.stdout[-2000:]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_clean(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code
    for i, cell in enumerate(notebook["cells"], start=1):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"cell {i} has stored outputs"
            assert cell["execution_count"] is None, f"cell {i} has an execution count"
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.reads(path.read_text(encoding="utf-8"), as_version=4))


# ---- the runner itself, on small notebooks made here ----------------------------------------

def write_notebook(path, *sources):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# A title"}]
    cells += [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
               "source": source} for source in sources]
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                "cells": cells}), encoding="utf-8")
    return path


def test_runner_runs_cells_in_one_namespace(tmp_path):
    path = write_notebook(tmp_path / "ok.ipynb",
                          "%matplotlib inline\nx = 20\n!echo skipped",
                          ["y = x + 1\n", "print('printed', y)\n", "y * 2"],
                          "y + 1;  # a semicolon hides the value, as in Jupyter")
    proc = run_notebook(path, tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["printed 21", "42"], proc.stdout
    # then only the summary line (which names the notebook's path: pytest's folder for it
    # may hold "22" in its name): the value the semicolon hides was not shown
    rest = [line for line in lines[2:] if line.strip()]
    assert len(rest) == 1 and "code cells ran in" in rest[0], proc.stdout


def test_runner_names_the_failing_cell(tmp_path):
    path = write_notebook(tmp_path / "bad.ipynb",
                          "print('first')",
                          "import rill\n\nrill.ones(2, 3) @ rill.ones(2, 3)",
                          "print('never')")
    proc = run_notebook(path, tmp_path, timeout=60)
    assert proc.returncode == 1
    assert "first" in proc.stdout and "never" not in proc.stdout
    assert "cell 3 failed (ShapeError)" in proc.stderr, proc.stderr
    # rill's message points at the line in the cell, and the traceback quotes it.
    assert "[at bad.ipynb[cell 3]:3]" in proc.stderr, proc.stderr
    assert "rill.ones(2, 3) @ rill.ones(2, 3)" in proc.stderr, proc.stderr
