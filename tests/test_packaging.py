"""pyproject lists every package folder, and the README's quick start is what CI runs."""
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parent.parent


def _package_folders():
    found = set()
    for top, name in (("lib", "rill"), ("kernels", "rill.kernels")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([name, *rel.parts]))
    return found


def test_every_package_folder_is_listed_in_pyproject():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(config["tool"]["setuptools"]["packages"]) == _package_folders()


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Quick start")
    block = readme[start:].split("```")[1].strip().splitlines()
    assert len(block) == 2, block
    assert block[1] in (ROOT / ".ci" / "run").read_text()


def test_kernels_package_is_importable_as_rill_kernels():
    import rill.kernels.numpy.special as special
    assert hasattr(special, "erf")


def test_readme_demo_command_names_files_that_exist():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Quick start")
    demo = readme[start:].split("```")[1].strip().splitlines()[0]
    paths = [word for word in demo.split() if word.startswith("tutorials/")]
    assert paths, demo
    for path in paths:
        assert (ROOT / path).is_file(), path


def test_readme_python_examples_run(tmp_path):
    """The README's Python blocks, in order, in a fresh interpreter (as a reader would run
    them: one sets SciPy's array-API switch, which only works before SciPy is imported)."""
    import os
    import re
    import subprocess
    import sys
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks
    env = {k: v for k, v in os.environ.items() if k != "SCIPY_ARRAY_API"}
    done = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "model.rill").is_file()  # the example saves a file
    assert "Tensor (100, 2)" in done.stdout
