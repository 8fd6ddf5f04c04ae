"""rill.kernels: the compute behind each primitive, one package per device kind.

numpy/ holds the CPU kernels. Each module registers its kernels on the primitives by name
when imported; `rill` imports them at start-up.
"""
