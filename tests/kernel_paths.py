"""Running a test on rill's compiled C kernels and on the NumPy ones (as RILL_NATIVE=0 runs):

    @pytest.fixture(params=PATHS)
    def path(request, monkeypatch):
        return compiled_or_numpy(request, monkeypatch, "softmax")
"""
from __future__ import annotations

import shutil

import pytest

from rill.kernels.native import build

PATHS = ["native", "numpy"]
needs_compiler = pytest.mark.skipif(shutil.which(build._compiler()[0]) is None,
                                    reason="no C compiler on this machine")


def compiled_or_numpy(request, monkeypatch, module: str) -> str:
    """Turns the compiled kernels on (checking that `module` builds) or off for the test;
    skips the compiled run where this machine has no C compiler."""
    if request.param == "native":
        if shutil.which(build._compiler()[0]) is None:
            pytest.skip("no C compiler on this machine")
        monkeypatch.setattr(build, "ENABLED", True)
        assert build.load(module) is not None, build.why_not(module)
    else:
        monkeypatch.setattr(build, "ENABLED", False)
    return request.param
