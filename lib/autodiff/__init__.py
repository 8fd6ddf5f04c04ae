"""Reverse-mode autodiff over the tape eager mode records (eager/tape.py): the reverse walk
(backward.py, and Tensor.backward), rill.grad and rill.value_and_grad (grad.py), and
@rill.custom_vjp (custom_vjp.py). It sits above ops: gradient rules are written in ops, and
the walk makes seeds, zeros and casts with them."""
