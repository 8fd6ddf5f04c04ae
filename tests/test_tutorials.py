"""Tutorials are executed as they are: each must run to the end (they assert their results)."""
import pathlib
import subprocess
import sys

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).parent.parent / "tutorials").glob("*.py"))


def test_there_are_tutorials():
    assert TUTORIALS


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.name)
def test_tutorial_runs(path):
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
