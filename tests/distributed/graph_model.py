"""The model of graph_training.py, in a module of its own: the test checks that a
parameter server never imports it."""
from rill import nn


def mlp(inputs: int, hidden: int, outputs: int):
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, outputs))
