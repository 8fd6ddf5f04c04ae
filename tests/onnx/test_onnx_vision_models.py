"""torchvision-style image classifiers written in torch (a small ResNet with basic blocks,
a small MobileNet with inverted residuals, depthwise convolutions, squeeze-and-excitation
and hard-swish), exported by both of torch's exporters, imported with plain
rill.onnx.load: the outputs match PyTorch's, and 5 steps of SGD with momentum on the same
data give the same losses and then the same outputs in rill and in torch."""
import warnings

import numpy as np
import pytest

import rill

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
rill_onnx = pytest.importorskip("rill.onnx")
nn = torch.nn


class _BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


class _ResNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(_BasicBlock(8, 8, 1), _BasicBlock(8, 16, 2))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.layers(self.stem(x)), 1)
        return self.fc(torch.flatten(x, 1))


def _conv_bn(cin, cout, kernel=1, stride=1, groups=1, act=nn.ReLU6):
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class _SqueezeExcite(nn.Module):
    def __init__(self, channels, squeezed):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))


class _InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand, se=False, act=nn.ReLU6):
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            _conv_bn(cin, hidden, act=act),
            _conv_bn(hidden, hidden, 3, stride, groups=hidden, act=act),  # depthwise
            *([_SqueezeExcite(hidden, 8)] if se else []),
            _conv_bn(hidden, cout, act=None))

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


class _MobileNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.features = nn.Sequential(
            _conv_bn(3, 8, 3, 2, act=nn.Hardswish),
            _InvertedResidual(8, 8, 1, 2),
            _InvertedResidual(8, 12, 2, 3, se=True, act=nn.Hardswish),
            _InvertedResidual(12, 12, 1, 2, se=True, act=nn.Hardswish),
            _conv_bn(12, 24, act=nn.Hardswish))
        self.classifier = nn.Sequential(nn.Linear(24, 16), nn.Hardswish(),
                                        nn.Linear(16, classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def _build(kind):
    torch.manual_seed(0)
    model = {"resnet": _ResNet, "mobilenet": _MobileNet}[kind]()
    with torch.no_grad():  # statistics and affine terms as a trained network has them
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model.eval()


def _export(model, x, folder, dynamo):
    """Two exports of `model`: as a user makes it (torch.onnx.export's defaults, which fold
    each BatchNorm into its Conv), and one with the BatchNorms kept, for fine-tuning the
    same parameters torch has. The paths (folded, kept)."""
    folded, kept = folder / "folded.onnx", folder / "kept.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation note
        if dynamo:  # one export, saved before and after the optimizer the default runs
            program = torch.onnx.export(model, (x,), dynamo=True, optimize=False)
            program.save(kept)
            program.optimize()
            program.save(folded)
        else:
            torch.onnx.export(model, (x,), folded, dynamo=False)
            torch.onnx.export(model, (x,), kept, dynamo=False, do_constant_folding=False)
    return folded, kept


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["resnet", "mobilenet"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_vision_model_matches_torch_and_fine_tunes_alike(tmp_path, kind, dynamo):
    if dynamo:
        pytest.importorskip("onnxscript")  # torch's default exporter needs it
    model = _build(kind)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3, 16, 16)).astype(np.float32)
    labels = np.array([0, 3, 1, 4])
    with torch.no_grad():
        want = model(torch.tensor(x)).numpy()

    folded, kept = _export(model, torch.tensor(x), tmp_path, dynamo)
    assert "BatchNormalization" not in {n.op_type for n in onnx.load(folded).graph.node}
    np.testing.assert_allclose(rill_onnx.load(folded)(rill.tensor(x)).numpy(), want,
                               rtol=1e-4, atol=1e-5)

    f = rill_onnx.load(kept)
    np.testing.assert_allclose(f(rill.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    ours = [p for _, p in f.module.named_parameters()]
    # one Parameter per torch Parameter (BatchNorm's scale and shift included; its running
    # statistics stay buffers, as torch's)
    assert sorted(p.size for p in ours) == sorted(p.numel() for p in model.parameters())
    opt_torch = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt_rill = rill.optim.SGD(ours, lr=0.05, momentum=0.9)
    xt, yt = torch.tensor(x), torch.tensor(labels)
    xr, yr = rill.tensor(x), rill.tensor(labels)
    theirs, mine = [], []
    for _ in range(5):  # BatchNorm's statistics frozen (eval mode), as when fine-tuning
        opt_torch.zero_grad()
        loss = nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        opt_torch.step()
        theirs.append(loss.item())
        opt_rill.zero_grad()
        loss = rill.nn.functional.cross_entropy(f(xr), yr)
        loss.backward()
        opt_rill.step()
        mine.append(loss.item())
    np.testing.assert_allclose(mine, theirs, rtol=1e-5)
    assert theirs[-1] < theirs[0]  # the steps did learn something
    fresh = rng.normal(size=(4, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.tensor(fresh)).numpy()
    np.testing.assert_allclose(f(rill.tensor(fresh)).numpy(), want, rtol=1e-4, atol=1e-5)
