"""Every example in rill's docstrings runs and prints what it says."""
import doctest
import importlib
import pkgutil

import pytest

import rill

MODULES = sorted(m.name for m in pkgutil.walk_packages(rill.__path__, "rill."))


@pytest.mark.parametrize("name", ["rill"] + MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"rill": rill}, optionflags=doctest.ELLIPSIS |
                             doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} failing examples in {name}"
