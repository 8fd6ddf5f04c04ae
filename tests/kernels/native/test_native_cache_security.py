"""rill's on-disk cache against a second local user (kernels/cache.py, kernels/native/build.py,
kernels/triton/tuning.py), written from the attacks an outside probe made:

- another user swapped the generated C source between its writing and its compiling, in a
  cache folder they could write: rill compiled, loaded and cached their code;
- a link (or a copy) under one module's name made rill load another module: a wrong result.

The second user is simulated with `setpriv` to a uid no one has (the tests run as root, as CI
does; elsewhere they are skipped). Every victim runs in a fresh process, as a user would.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from rill.kernels.native import build

ATTACKER = 54321  # a uid with no account: the "other user"

needs_root = pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0 or shutil.which("setpriv") is None,
    reason="simulating a second user needs root and setpriv")
needs_compiler = pytest.mark.skipif(shutil.which(build._compiler()[0]) is None,
                                    reason="no C compiler")

# The victim: a compiled kernel module, and a fused group's generated loop (waited for), then
# what each gave and why; the fused result is checked against NumPy's.
VICTIM = textwrap.dedent("""
    import numpy as np, rill
    from rill.capture.passes import fuse
    from rill.kernels.native import build
    fuse.MIN_ELEMENTS["cpu"] = 1
    try:
        print("module", build.load("lstm_cell") is not None)
    except rill.Error as e:
        print("module refused", type(e).__name__, str(e).replace(chr(10), " "))
    x = rill.tensor(np.arange(12, dtype=np.float32))
    got = rill.capture(lambda a: a * 2.0 + 1.0)(x).numpy()
    assert got.tolist() == (np.arange(12) * 2.0 + 1.0).tolist(), got
    print("fused", str(build.why_not("fused")).replace(chr(10), " "))
""")


def _victim(cache_root: Path, timeout: float = 240) -> dict:
    env = dict(os.environ, RILL_CACHE_DIR=str(cache_root), RILL_NATIVE_WAIT="1")
    env.pop("RILL_NATIVE", None)
    done = subprocess.run([sys.executable, "-c", VICTIM], env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def _as_attacker(*command) -> list[str]:
    """`command` as the other user would run it."""
    return ["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups", *command]


def _everything_under(folder: Path) -> list[Path]:
    return [Path(d) / f for d, _, files in os.walk(folder) for f in files]


@pytest.fixture
def shared():
    """A folder every user may reach (pytest's tmp_path is under a folder private to root)."""
    base = Path(tempfile.mkdtemp(prefix="rill-shared-", dir=tempfile.gettempdir()))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _unsafe_layouts(base: Path):
    """(cache root, what is wrong) for folders another user can change."""
    open_root = base / "open"
    open_root.mkdir()
    os.chmod(open_root, 0o777)                      # writable by all, no sticky bit
    yield open_root, "no sticky bit"

    sticky = base / "sticky-with-their-folder"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    subprocess.run(_as_attacker("mkdir", "-m", "777", str(sticky / "native")), check=True)
    yield sticky, f"belongs to user {ATTACKER}"

    theirs = base / "theirs"
    theirs.mkdir()
    os.chown(theirs, ATTACKER, ATTACKER)
    yield theirs, f"belongs to user {ATTACKER}"

    above = base / "open-above"
    above.mkdir()
    os.chmod(above, 0o777)                          # another user could rename what is below
    (above / "cache").mkdir()
    yield above / "cache", "no sticky bit"


@needs_root
@needs_compiler
@pytest.mark.timeout(600)
def test_a_cache_folder_another_user_can_change_is_refused_and_nothing_is_built(shared):
    for root, why in _unsafe_layouts(shared):
        before = set(_everything_under(root))
        said = _victim(root)
        assert said["module"].startswith("refused CacheError"), (root, said)
        assert why in said["module"] and "RILL_CACHE_DIR" in said["module"], said
        assert "refusing the cache folder" in said["fused"], said   # NumPy ran the group
        assert set(_everything_under(root)) == before, root       # nothing written or built


# The attacker's loop: until told to stop, try to put a C file, a header and a module of their
# own everywhere under the shared folder that a build could read from, and log what happened.
ATTACK = textwrap.dedent("""
    import os, sys, time
    root, log, stop = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3])
    evil = b'__attribute__((constructor)) static void evil(void) {}\\n'
    outcomes = set()
    while time.time() < stop and not os.path.exists(log + ".stop"):
        folders = {folder: files for folder, _, files in os.walk(root)}
        folders.setdefault(os.path.join(root, "native"), [])
        for folder, files in folders.items():
            for name in files + ["common.h", "generated.c"]:
                try:
                    path = os.path.join(folder, name)
                    tmp = os.path.join(folder, ".swap")
                    with open(tmp, "wb") as f:
                        f.write(evil)
                    os.replace(tmp, path)
                    outcomes.add("swapped " + path)
                except OSError as e:
                    outcomes.add(type(e).__name__)
        time.sleep(0.001)
    open(log, "w").write("\\n".join(sorted(outcomes)))
""")


@needs_root
@needs_compiler
@pytest.mark.timeout(600)
def test_a_sticky_shared_folder_like_tmp_keeps_the_builds_private_while_another_user_attacks(
        shared):
    """RILL_CACHE_DIR=/tmp-like (sticky, writable by all): the folders rill makes there are its
    user's alone, so the attacker's swaps fail and the victim builds and runs its own code."""
    root = shared / "tmp-like"
    root.mkdir()
    os.chmod(root, 0o1777)
    (shared / "theirs").mkdir()
    os.chown(shared / "theirs", ATTACKER, ATTACKER)
    log = shared / "theirs" / "attack.log"
    attacker = subprocess.Popen(_as_attacker(sys.executable, "-c", ATTACK, str(root), str(log),
                                             "300"), stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        said = _victim(root)
    finally:
        Path(f"{log}.stop").touch()
        attacker.wait(timeout=60)
    assert said == {"module": "True", "fused": "None"}, said         # built, loaded, and right
    outcomes = log.read_text().splitlines()
    assert "PermissionError" in outcomes, outcomes                    # they did try
    assert not [o for o in outcomes if o.startswith("swapped") and "/native" in o], outcomes
    native = root / "native"
    info = native.stat()
    assert info.st_uid == 0 and info.st_mode & 0o777 == 0o700
    built = [p for p in native.iterdir() if p.suffix == ".so"]
    # the module it loaded, its fused group's, elementwise.c, built ahead of the captured
    # step's first call for its `add` (whose kernel may run it: build.prefetch), and the
    # compiled bind (dispatch.c), built at import
    assert {p.name.split("-")[0] for p in built} == {"lstm_cell", "fused", "elementwise",
                                                     "dispatch"}, built
    assert all(p.stat().st_uid == 0 for p in built)
    assert not [p for p in native.iterdir() if p.name.startswith(".build-")]  # cleaned up


@needs_compiler
@pytest.mark.timeout(600)
def test_a_link_or_a_copy_under_a_modules_name_is_never_loaded(tmp_path):
    """The probe's wrong result: all generated modules shared one name and the check followed
    links. Now a link is refused, and another build's file under this name has no init function
    of this build's name (PyInit_<name>_h<hash>), so it is refused too; NumPy runs instead."""
    env = dict(os.environ, RILL_CACHE_DIR=str(tmp_path))
    env.pop("RILL_NATIVE", None)
    first = subprocess.run([sys.executable, "-c",
                            "from rill.kernels.native import build\n"
                            "assert build.load('softmax') and build.load('lstm_cell')"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    native = tmp_path / "native"
    (softmax,) = native.glob("softmax-*")
    (lstm,) = native.glob("lstm_cell-*")
    check = ("import numpy as np, rill\n"
             "from rill.kernels.native import build\n"
             "print(build.load('softmax') is None, build.why_not('softmax'))\n"
             "x = rill.randn(4, 7)\n"
             "got = rill.softmax(x, axis=-1).numpy()\n"
             "e = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))\n"
             "assert np.allclose(got, e / e.sum(-1, keepdims=True), atol=1e-6)\n")
    softmax.unlink()
    softmax.symlink_to(lstm.name)
    linked = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True,
                            text=True, timeout=300)
    assert linked.returncode == 0, linked.stderr
    assert linked.stdout.startswith("True") and "symbolic link" in linked.stdout
    softmax.unlink()
    shutil.copy(lstm, softmax)
    copied = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True,
                            text=True, timeout=300)
    assert copied.returncode == 0, copied.stderr
    assert copied.stdout.startswith("True") and "PyInit_softmax_h" in copied.stdout


@needs_root
def test_a_tuning_file_another_user_could_write_is_ignored(tmp_path):
    """The Triton tuning cache follows the same rules: a file that is another user's, a link,
    or one in a folder others may write is not read (a warning says why), and tuning falls
    back to the heuristic."""
    from rill.kernels.triton import tuning
    folder = tmp_path / "tuning"
    folder.mkdir(mode=0o700)
    path = folder / "gemm_tuning.json"
    key = tuning.make_key("matmul", "float32", 70, 90, 130, device="Fake GPU")
    path.write_text(json.dumps({"version": tuning.CACHE_VERSION,
                                "entries": {key: list(tuning.DOT_CANDIDATES[0])}}))
    assert tuning.TuningCache(path).get(key) == tuning.DOT_CANDIDATES[0]   # this user's: read

    os.chown(path, ATTACKER, ATTACKER)
    with pytest.warns(UserWarning, match=f"belongs to user {ATTACKER}"):
        assert tuning.TuningCache(path).get(key) is None
    os.chown(path, 0, 0)

    os.chmod(folder, 0o777)
    with pytest.warns(UserWarning, match="others may write it"):
        assert tuning.TuningCache(path).get(key) is None
    os.chmod(folder, 0o700)

    real = tmp_path / "elsewhere.json"
    path.rename(real)
    path.symlink_to(real)
    with pytest.warns(UserWarning, match="symbolic link"):
        assert tuning.TuningCache(path).get(key) is None


DEFAULT_VICTIM = textwrap.dedent("""
    import warnings, numpy as np, rill
    from rill.kernels import cache
    from rill.kernels.native import build
    x = rill.ones((2, 8, 20, 20))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = rill.nn.functional.conv2d(x, rill.ones((8, 8, 3, 3)), padding=1).numpy()
        modules = [build.load(name) for name in ("conv", "softmax", "lstm_cell")]
    assert got[0, 0, 5, 5] == 72.0 and got[0, 0, 0, 0] == 32.0, got[0, 0]
    said = [str(w.message) for w in caught if issubclass(w.category, cache.CacheWarning)]
    print(len(said), said[0] if said else "", modules == [None] * 3)
""")


@needs_root
@needs_compiler
@pytest.mark.timeout(300)
def test_a_default_cache_folder_that_cannot_be_used_warns_once_and_numpy_runs(shared):
    """No $RILL_CACHE_DIR, and ~/.cache is open to all: the kernels still run (NumPy's), with
    one warning naming the folder and the fix, not an error at every op."""
    home = shared / "home"
    (home / ".cache").mkdir(parents=True)
    os.chmod(home / ".cache", 0o777)
    env = dict(os.environ, HOME=str(home))
    for key in ("RILL_CACHE_DIR", "RILL_NATIVE"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, "-c", DEFAULT_VICTIM], env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    count, rest = done.stdout.split(" ", 1)
    assert count == "1" and "refusing the cache folder" in rest and "RILL_CACHE_DIR" in rest
    assert rest.strip().endswith("True"), rest


@needs_root
@needs_compiler
@pytest.mark.timeout(300)
def test_a_group_may_write_the_cache_only_if_it_is_the_users_private_group(shared):
    """umask 002 (Debian's and Ubuntu's user private groups) makes folders group-writable:
    that group is the user alone, so the folder is used; another group's is refused."""
    from rill.kernels import cache
    if not cache._private_group(os.getgid()):
        pytest.skip("this user's primary group is not private to it")
    mine = shared / "group-mine"
    mine.mkdir()
    os.chmod(mine, 0o775)
    assert _victim(mine)["module"] == "True"
    theirs = shared / "group-theirs"
    theirs.mkdir()
    os.chown(theirs, 0, ATTACKER)
    os.chmod(theirs, 0o775)
    said = _victim(theirs)
    assert said["module"].startswith("refused CacheError") and "others may write" in \
        said["module"], said
