"""Eager execution: the dispatcher (bind), the eager interpreter, the tape and autodiff."""
