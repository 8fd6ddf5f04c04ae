"""rill.nn: layers, losses and parameter initialization."""
from .parameter import Parameter
