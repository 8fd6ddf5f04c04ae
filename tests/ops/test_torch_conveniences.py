"""The small conveniences a PyTorch port expects: inference_mode, set/get_default_dtype,
rill.compile, rill.backends, rill.nn.parallel."""
import numpy as np
import pytest

import rill


@pytest.fixture
def float64_default():
    rill.set_default_dtype(rill.float64)
    try:
        yield
    finally:
        rill.set_default_dtype(rill.float32)


def test_inference_mode_is_no_grad_and_its_tensors_stay_usable():
    w = rill.ones(3, requires_grad=True)
    with rill.inference_mode():
        y = w * 2
        assert not rill.is_grad_enabled()
    assert not y.requires_grad and rill.is_grad_enabled()
    (y * w).sum().backward()   # torch refuses this; rill's buffers are immutable values
    assert w.grad.tolist() == [2.0, 2.0, 2.0]

    @rill.inference_mode
    def bare(x):
        return x * 2

    @rill.inference_mode()
    def called(x):
        return x * 2
    assert not bare(w).requires_grad and not called(w).requires_grad
    with rill.no_grad(), rill.inference_mode(False):
        assert (w * 2).requires_grad
    with pytest.raises(rill.ArgumentError, match="mode"):
        rill.inference_mode("yes")


def test_default_dtype_reaches_creation_ops_and_python_floats(float64_default):
    torch = pytest.importorskip("torch")
    assert rill.get_default_dtype() is rill.float64
    made = {"tensor": rill.tensor([1.5]), "zeros": rill.zeros(2), "ones": rill.ones(2),
            "full": rill.full((2,), 0.5), "empty": rill.empty(2), "eye": rill.eye(2),
            "arange float": rill.arange(0.0, 2.0), "linspace": rill.linspace(0, 1, 3),
            "randn": rill.randn(2), "rand": rill.rand(2), "int * 0.5": rill.arange(3) * 0.5,
            "complex": rill.tensor([1j]), "Linear": rill.nn.Linear(2, 2).weight}
    torch.set_default_dtype(torch.float64)
    try:
        theirs = {"tensor": torch.tensor([1.5]), "zeros": torch.zeros(2),
                  "ones": torch.ones(2), "full": torch.full((2,), 0.5),
                  "empty": torch.empty(2), "eye": torch.eye(2),
                  "arange float": torch.arange(0.0, 2.0), "linspace": torch.linspace(0, 1, 3),
                  "randn": torch.randn(2), "rand": torch.rand(2),
                  "int * 0.5": torch.arange(3) * 0.5, "complex": torch.tensor([1j]),
                  "Linear": torch.nn.Linear(2, 2).weight}
    finally:
        torch.set_default_dtype(torch.float32)
    assert {k: str(v.dtype) for k, v in made.items()} == \
        {k: str(v.dtype).replace("torch.", "") for k, v in theirs.items()}
    assert rill.arange(3).dtype is rill.int64
    with pytest.raises(rill.DTypeError, match="floating"):
        rill.set_default_dtype(rill.int32)


def test_a_capture_traced_under_one_default_dtype_traces_again_under_another():
    @rill.capture
    def f(x):
        return x + rill.ones(2)
    assert f(rill.ones(2, dtype=rill.float16)).dtype is rill.float32
    rill.set_default_dtype(rill.float64)
    try:
        with pytest.warns(rill.CaptureWarning, match="get_default_dtype"):
            out = f(rill.ones(2, dtype=rill.float16))
    finally:
        rill.set_default_dtype(rill.float32)
    assert out.dtype is rill.float64
    assert "get_default_dtype" in f.retraces[-1]


def test_compile_is_capture_with_torch_keywords():
    def f(x):
        return (x * 2).sum()
    compiled = rill.compile(f)
    assert float(compiled(rill.ones(3))) == 6.0
    assert compiled.graph_for(rill.ones(3)) is not None          # a captured function
    assert rill.compile(f, disable=True) is f
    debug = rill.compile(backend="eager", mode="reduce-overhead", fullgraph=True)(f)
    assert float(debug(rill.ones(2))) == 4.0 and not debug.optimize
    model = rill.compile(rill.nn.Linear(3, 2))
    assert model(rill.ones(4, 3)).shape == (4, 2)
    for kwargs, message in (({"dynamic": True}, "symbolic shapes"),
                            ({"backend": "cudagraphs"}, "no rill counterpart"),
                            ({"backend": lambda gm, inputs: gm}, "no rill counterpart"),
                            ({"mode": "fast"}, "mode must be"),
                            ({"options": {"triton.cudagraphs": True}}, "inductor settings")):
        with pytest.raises(rill.ArgumentError, match=message):
            rill.compile(f, **kwargs)


def test_backends_settings_are_kept_and_checked():
    cudnn = rill.backends.cudnn
    before = cudnn.benchmark
    cudnn.benchmark = True
    cudnn.deterministic = True
    assert cudnn.benchmark is True and cudnn.deterministic is True
    cudnn.benchmark, cudnn.deterministic = before, False
    assert rill.backends.mps.is_available() is False and not cudnn.is_available()
    rill.backends.cuda.matmul.allow_tf32 = False
    with pytest.raises(rill.ArgumentError, match="no setting 'benchmrk'"):
        cudnn.benchmrk = True
    with pytest.raises(rill.ArgumentError, match="bool"):
        cudnn.benchmark = "yes"


def test_nn_parallel_wrappers_run_the_model_and_name_state_as_torch():
    torch = pytest.importorskip("torch")
    model = rill.nn.Linear(3, 2)
    dp = rill.nn.parallel.DataParallel(model)
    x = rill.ones(4, 3)
    np.testing.assert_array_equal(dp(x).numpy(), model(x).numpy())
    ddp = rill.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    ddp(x).sum().backward()                  # a world of one: the gradient is the local one
    assert model.weight.grad.tolist() == [[4.0] * 3] * 2
    keys = sorted(torch.nn.DataParallel(torch.nn.Linear(3, 2)).state_dict())
    assert sorted(dp.state_dict()) == keys == sorted(ddp.state_dict())
    with pytest.raises(rill.DistributedError, match="no_sync"):
        ddp.no_sync()
    with pytest.raises(rill.DistributedError, match="process_group"):
        rill.nn.parallel.DistributedDataParallel(model, process_group=object())
    ddp.remove()
