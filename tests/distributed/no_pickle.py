"""ps_training.py (same arguments) with mpi4py's pickling forbidden in every rank: the
parameter-server exchange must go through typed buffers only."""
import pathlib
import runpy
import sys

from mpi4py import MPI


def forbidden(*args, **kwargs):
    raise RuntimeError("mpi4py pickled or unpickled a message")


MPI.pickle.__init__(forbidden, forbidden)
script = str(pathlib.Path(__file__).with_name("ps_training.py"))
sys.argv = [script, *sys.argv[1:]]
runpy.run_path(script, run_name="__main__")
