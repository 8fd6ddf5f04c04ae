# %% [markdown]
# # Tutorial 1: eager tensors and tape autodiff
#
# rill runs every op eagerly, the moment it is called. Ops on tensors that have
# `requires_grad=True` are recorded on a tape, and `loss.backward()` walks that tape
# in reverse, accumulating d(loss)/d(leaf) into each leaf's `.grad`.
# Below, a tiny network learns a noisy sine curve by plain gradient descent.
# Run: `python tutorials/01_eager_autodiff.py [--steps N]`.

# %%
import argparse
import math
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

import rill

parser = argparse.ArgumentParser(description="Fit a small MLP to y = sin(3x) + noise.")
parser.add_argument("--steps", type=int, default=3000, help="gradient-descent steps")
args = parser.parse_args()
console = Console()
rill.manual_seed(0)  # every random draw below repeats from run to run

# %% [markdown]
# ## A synthetic data set
#
# 256 points on [-1, 1] as a (256, 1) column, with targets sin(3x) plus Gaussian
# noise of standard deviation 0.1. Plain tensors: they do not require grad.

# %%
n = 256
x = rill.linspace(-1.0, 1.0, n).reshape(n, 1)
y = rill.sin(3.0 * x) + 0.1 * rill.randn(n, 1)

# %% [markdown]
# ## A 1-hidden-layer MLP
#
# `relu(x @ w1 + b1) @ w2 + b2` with 32 hidden units. Each parameter is a leaf
# tensor with `requires_grad=True`, so backward() fills in its `.grad`.

# %%
hidden = 32
w1 = rill.randn(1, hidden, requires_grad=True)
b1 = rill.zeros(hidden, requires_grad=True)
w2 = (rill.randn(hidden, 1) * hidden ** -0.5).requires_grad_()
b2 = rill.zeros(1, requires_grad=True)
params = [w1, b1, w2, b2]


def loss_fn():  # mean squared error of the model on the whole data set
    error = rill.relu(x @ w1 + b1) @ w2 + b2 - y
    return rill.sum(error * error) / n


# %% [markdown]
# ## Training by gradient descent
#
# Each step runs the forward pass (taped), then `loss.backward()`, then the update.
# The update changes leaves that require grad in place, which rill allows only under
# `rill.no_grad()`. `.grad` accumulates over backward calls, so we reset it each step.

# %%
lr = 0.1
initial_loss = float(loss_fn())
history = {0: initial_loss}
checkpoints = {args.steps * k // 4 for k in range(1, 5)}
start = time.perf_counter()

columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
with Progress(*columns, console=console) as progress:
    task = progress.add_task("training", total=args.steps)
    for step in range(1, args.steps + 1):
        loss = loss_fn()
        loss.backward()
        with rill.no_grad():
            for p in params:
                p -= lr * p.grad
                p.grad = None
        if step % 20 == 0 or step in checkpoints:
            progress.update(task, description=f"loss {float(loss):.4f}")
        if step in checkpoints:
            history[step] = float(loss)  # loss before this step's update
        progress.advance(task)

elapsed = time.perf_counter() - start
final_loss = float(loss_fn())

# %% [markdown]
# ## Results: the loss at a few checkpoints and after training

# %%
table = Table(title="MSE loss")
for column in ("step", "loss"):
    table.add_column(column, justify="right")
for step, value in history.items():
    table.add_row(str(step), f"{value:.4f}")
table.add_row("final", f"{final_loss:.4f}", style="bold")
console.print(table)

# %% [markdown]
# ## Functional autodiff with `rill.grad`
#
# `rill.grad(f)` returns the derivative function of f; no `.grad` attribute is
# involved. The derivative of tanh must match the identity 1 - tanh(x)^2.

# %%
dtanh = rill.grad(rill.tanh)
table = Table(title="d/dx tanh(x)")
for column in ("x", "rill.grad(rill.tanh)(x)", "1 - tanh(x)^2"):
    table.add_column(column, justify="right")
for value in (-2.0, -0.5, 0.0, 0.5, 2.0):
    point = rill.tensor(value)
    derivative, expected = float(dtanh(point)), float(1.0 - rill.tanh(point) ** 2)
    table.add_row(f"{value:+.1f}", f"{derivative:.6f}", f"{expected:.6f}")
    assert math.isclose(derivative, expected, abs_tol=1e-6), (value, derivative, expected)
console.print(table)

# %% [markdown]
# ## Regression check: the test suite runs this script, so training must keep working

# %%
assert final_loss < 0.25 * initial_loss, (initial_loss, final_loss)
console.print(f"[green]ok[/green]: loss {initial_loss:.4f} -> {final_loss:.4f} in {elapsed:.2f} s")
