"""Test configuration: every kernel result is checked against its op's shape/dtype rule."""
import os

# Must be set before rill is imported: the eager interpreter reads it once.
os.environ.setdefault("RILL_CHECK_KERNELS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(0)
