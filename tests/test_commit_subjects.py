"""Commit subjects fit in 72 characters, with the detail in the body (git's own tools, and
`git log --oneline` in an 80-column terminal, cut longer ones). Checked for every commit
after SINCE, the last commit before the rule held; the history before it is left as it is.
Skipped outside a git checkout (an installed copy, an sdist)."""
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SINCE = "42fcfd1"  # the last commit before the rule: its subjects were not held to it
LIMIT = 72


def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_commit_subjects_fit_in_72_characters():
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    if _git("cat-file", "-e", f"{SINCE}^{{commit}}").returncode != 0:
        pytest.skip(f"a shallow clone without {SINCE}")
    log = _git("log", "--format=%h %s", f"{SINCE}..HEAD")
    assert log.returncode == 0, log.stderr
    long = [line for line in log.stdout.splitlines() if len(line.split(" ", 1)[1]) > LIMIT]
    assert not long, (f"commit subjects over {LIMIT} characters (put the detail in the body; "
                      f"`git commit --amend` before it lands): {long}")
