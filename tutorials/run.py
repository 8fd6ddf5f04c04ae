"""Run a tutorial notebook as a script: `python tutorials/run.py tutorials/02-train-digits.ipynb`.

The notebook's code cells run in order in one namespace, as a Jupyter kernel would run them:
what they print is printed, and a cell that ends with an expression shows its value (unless
the line ends with `;`). Lines that start with `%` or `!` (IPython magics and shell escapes)
are skipped. Plots use matplotlib's non-interactive Agg backend; `plt.show()` saves each open
figure into the folder named by the environment variable RILL_TUTORIAL_FIGURES (if set) and
closes it.

A cell that raises stops the run: its traceback names the cell (`02-train-digits.ipynb[cell
7]`, counting every cell of the notebook from 1, as Jupyter lists them) and the exit status
is 1. Only the standard library is used here, so it runs wherever rill is installed.
"""
import ast
import json
import linecache
import os
import pathlib
import sys
import time
import traceback

os.environ.setdefault("MPLBACKEND", "Agg")  # before anything imports matplotlib
# The tutorials multiply small matrices, for which one BLAS thread is as fast as several,
# and several are far slower when other processes (a parallel test run) share the cores.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def code_cells(notebook: dict, name: str):
    """(label, source) of each code cell, the label being `name[cell N]`; magics blanked."""
    if notebook.get("nbformat") != 4:
        raise SystemExit(f"{name}: not an nbformat 4 notebook")
    for number, cell in enumerate(notebook.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source)
        # Blank lines keep the line numbers of the rest of the cell.
        lines = ["" if line.lstrip().startswith(("%", "!")) else line
                 for line in source.splitlines()]
        yield f"{name}[cell {number}]", "\n".join(lines) + "\n"


def run_cell(label: str, source: str, namespace: dict) -> None:
    """Execute one cell; show the value of a last expression statement, as Jupyter does."""
    # Registered so that tracebacks (and rill's error locations) can quote the cell's lines.
    linecache.cache[label] = (len(source), None, source.splitlines(True), label)
    tree = ast.parse(source, filename=label)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        node = tree.body[-1]
        line = source.splitlines()[node.end_lineno - 1].encode()  # offsets count bytes
        after = line[node.end_col_offset:].decode()
        if not after.lstrip().startswith(";"):  # `f();` shows nothing, as in Jupyter
            last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, label, "exec"), namespace)  # noqa: S102 - running cells is the point
    if last is not None:
        value = eval(compile(last, label, "eval"), namespace)
        if value is not None:
            print(repr(value))


def install_show(stem: str) -> None:
    """Make plt.show() save the open figures (when asked to) and close them."""
    import matplotlib.pyplot as plt

    folder = os.environ.get("RILL_TUTORIAL_FIGURES")
    count = 0

    def show(*args, **kwargs):
        nonlocal count
        for number in plt.get_fignums():
            if folder:
                count += 1
                os.makedirs(folder, exist_ok=True)
                path = os.path.join(folder, f"{stem}-{count}.png")
                plt.figure(number).savefig(path, dpi=100, bbox_inches="tight")
                print(f"[figure saved to {path}]")
        plt.close("all")

    plt.show = show


def print_traceback(etype, value, tb):
    """sys.excepthook in Python: unlike the built-in one, it quotes the cells' lines (from
    linecache). rill's import wraps it with its own hook, which hides rill's frames."""
    traceback.print_exception(etype, value, tb)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python tutorials/run.py NOTEBOOK.ipynb", file=sys.stderr)
        return 2
    path = pathlib.Path(argv[0])
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = list(code_cells(notebook, path.name))
    if any("matplotlib" in source for _, source in cells):
        install_show(path.stem)
    sys.excepthook = print_traceback
    namespace = {"__name__": "__main__", "__file__": str(path.resolve())}
    sys.argv = [str(path)]
    start = time.perf_counter()
    for label, source in cells:
        try:
            run_cell(label, source, namespace)
        except BaseException as error:  # noqa: BLE001 - report any failure, then stop
            sys.stdout.flush()
            tb = error.__traceback__
            # Drop this file's frames: the traceback starts in the cell.
            while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                tb = tb.tb_next
            sys.excepthook(type(error), error, tb)  # rill's hook hides rill's own frames
            print(f"\n{path}: {label.rsplit('[', 1)[1][:-1]} failed "
                  f"({type(error).__name__})", file=sys.stderr)
            return 1
    print(f"\n{path}: {len(cells)} code cells ran in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
