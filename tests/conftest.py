"""Test configuration: every kernel result is checked against its op's shape/dtype rule, and
the gpu device runs through Triton's interpreter unless this machine has a real GPU.

The folders mirror lib/ and kernels/ (tests/ops for lib/ops, tests/kernels/numpy for
kernels/numpy, ...); tests of lib/'s top-level modules sit here. The modules here that are
not tests (ops_table.py, op_cases.py, launching.py, saved_graphs.py, ...) are shared by
several folders: pytest puts this folder on sys.path, as the folder of this conftest, so a
test anywhere below imports them by name. Test files' names stay unique across folders
(pytest imports each by its name)."""
import importlib.util
import os

# Must be set before rill is imported: the eager interpreter reads it once.
os.environ.setdefault("RILL_CHECK_KERNELS", "1")
# A fused group's generated C loop is compiled before its first call, not in the background
# while the NumPy function runs it (the same bits either way): the tests run the C loops.
os.environ.setdefault("RILL_NATIVE_WAIT", "1")


def _has_cuda_gpu() -> bool:
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


if "RILL_TRITON_INTERPRET" not in os.environ and not _has_cuda_gpu():
    os.environ["RILL_TRITON_INTERPRET"] = "1"
    # Triton reads its own flag when it is first imported, which torch (torch._dynamo, e.g.
    # through torch.utils.checkpoint) may do before rill's kernels: set it from the start.
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state (rill's default generator and NumPy's
    legacy one), so initial weights and draws do not change from run to run."""
    import rill
    rill.manual_seed(0)
    np.random.seed(0)
    yield
