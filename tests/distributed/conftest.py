"""Fixtures of the distributed tests: `netbed`, a cluster of network namespaces (netbed.py)."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))


@pytest.fixture
def netbed():
    """make(hosts) -> a netbed.Bed of that many hosts, torn down after the test (whatever
    happens in it); the test is skipped, with the reason, where no namespace can be made."""
    import netbed as nb
    why = nb.unavailable()
    if why:
        pytest.skip(f"no network test bed here: {why}")
    beds = []

    def make(hosts: int = 3):
        bed = nb.Bed(hosts, tag=f"x{len(beds)}" if beds else None)
        beds.append(bed)
        return bed
    yield make
    for bed in beds:
        bed.close()
