"""Constructor and call arguments of the wrong type or range raise a rill.Error that names
the argument, never a bare TypeError from deep inside."""
import numpy as np
import pytest

import rill
from rill import nn


def _manager(tmp_path, **kw):
    return rill.train.CheckpointManager(rill.train.Checkpoint(step=0), tmp_path, **kw)


CASES = [
    ("sequential_str_index", lambda tmp: nn.Sequential(nn.ReLU())["a"], rill.IndexingError,
     "indexed by an int"),
    ("progress_total_str", lambda tmp: rill.train.Progress(total="10"), rill.ArgumentError,
     "total must be an int"),
    ("load_state_dict_none", lambda tmp: nn.Linear(2, 2).load_state_dict(None),
     rill.ArgumentError, "mapping of names"),
    ("from_arrays_ragged", lambda tmp: rill.data.Dataset.from_arrays([[1, 2], [3]]),
     rill.ArgumentError, "rectangular"),
    ("max_to_keep_str", lambda tmp: _manager(tmp, max_to_keep="3"), rill.ArgumentError,
     "max_to_keep must be an int"),
    ("every_n_steps_zero", lambda tmp: _manager(tmp, every_n_steps=0), rill.ArgumentError,
     "every_n_steps"),
    ("every_seconds_negative", lambda tmp: _manager(tmp, every_seconds=-1.0),
     rill.ArgumentError, "every_seconds"),
    ("dropout_str", lambda tmp: nn.Dropout("a"), rill.ArgumentError, "probability p"),
    ("leaky_relu_str", lambda tmp: nn.LeakyReLU("a"), rill.ArgumentError, "negative_slope"),
    ("attention_none_key", lambda tmp: nn.MultiheadAttention(4, 2)(rill.ones(3, 1, 4), None,
                                                                   None),
     rill.ArgumentError, "key must be a tensor"),
    ("sgd_lr_str", lambda tmp: rill.optim.SGD([nn.Parameter(rill.ones(1))], lr="0.1"),
     rill.ArgumentError, "lr"),
    ("adam_betas_float", lambda tmp: rill.optim.Adam([nn.Parameter(rill.ones(1))], betas=0.9),
     rill.ArgumentError, "betas"),
    ("conv_kernel_float", lambda tmp: nn.Conv2d(3, 4, 3.0), rill.ArgumentError, "kernel_size"),
]


@pytest.mark.parametrize("call,error,text", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_bad_argument_raises_a_named_rill_error(tmp_path, call, error, text):
    with pytest.raises(error, match=text):
        call(tmp_path)


def test_check_number_bounds():
    from rill.errors import check_number
    assert check_number(3, "n", "op", integer=True, low=1) == 3
    with pytest.raises(rill.ArgumentError, match=r"n must be a number in \(0, 1\]"):
        check_number(0, "n", "op", low=0, high=1, low_open=True)
    with pytest.raises(rill.ArgumentError, match="must be an int"):
        check_number(True, "n", "op", integer=True)
    assert check_number(np.float32(0.5).item(), "p", "op", low=0, high=1) == 0.5
