"""Kernels compiled from C on the user's machine (build.py), where one pass in C beats a chain
of NumPy passes: each is an extension module beside this file, built at its first use and
cached on disk, and each has a NumPy kernel that runs where there is no C compiler."""
