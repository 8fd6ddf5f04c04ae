"""Kernels compiled from C on the user's machine (build.py), where one pass in C beats a chain
of NumPy passes: each is an extension module beside this file, built at its first use and
cached on disk, and each has a NumPy kernel that runs where there is no C compiler."""


def modules_for(graph) -> list[str]:
    """The compiled modules the CPU kernels of the graph's nodes (subgraphs included) may
    load: each kernel file names its own in COMPILED (for build.prefetch)."""
    import sys
    from rill.ops.primitive import PRIMITIVES
    found: dict = {}
    stack = [graph]
    while stack:
        for node in stack.pop().nodes:
            stack.extend(node.subgraphs.values())
            if node.device is not None and node.device.kind != "cpu":
                continue  # its kernel is another device's
            primitive = PRIMITIVES.get(node.op)  # graph ops (input, read, ...) have none
            kernel = primitive.kernels.get("cpu") if primitive is not None else None
            home = sys.modules.get(getattr(kernel, "__module__", None) or "")
            found.update(dict.fromkeys(getattr(home, "COMPILED", ())))
    return list(found)
