"""Language models capture and equal eager (issue 15): an LSTM language model with a tied
embedding, gradient clipping and SGD; a GPT-style model with AdamW weight-decay groups and
clipping. Embedding gradients are sparse eagerly and dense inside a graph (a graph's shapes
are fixed); the updates they make are the same."""
from __future__ import annotations

import numpy as np
import pytest

import rill
from rill import nn

VOCAB, SEQ, BATCH = 50, 12, 4


class LSTMLanguageModel(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.lstm = nn.LSTM(d, d)
        self.decoder = nn.Linear(d, VOCAB)
        self.decoder.weight = self.embed.weight  # tied, as the word language model does

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        return self.decoder(out)


class GPT(nn.Module):
    def __init__(self, d=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(rill.randn(SEQ, d) * 0.02)
        self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0,
                                                                batch_first=True)
                                     for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.mask = rill.tensor(np.triu(np.full((SEQ, SEQ), -1e9, np.float32), 1))

    def forward(self, tokens):
        h = self.embed(tokens) + self.pos
        for block in self.blocks:
            h = block(h, src_mask=self.mask)
        return self.head(self.norm(h))


def _lstm_setup():
    model = LSTMLanguageModel()
    return model, rill.optim.SGD(model.parameters(), lr=0.5)


def _gpt_setup():
    model = GPT()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = rill.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                            {"params": no_decay, "weight_decay": 0.0}], lr=3e-3)
    return model, opt


def _train(setup, captured: bool, steps=10):
    rill.manual_seed(0)
    model, opt = setup()

    def step(x, y):
        opt.zero_grad()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        rill.optim.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return loss

    run = rill.capture(step) if captured else step
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        tokens = rng.integers(0, VOCAB, (BATCH, SEQ + 1))
        x, y = rill.tensor(tokens[:, :-1]), rill.tensor(tokens[:, 1:])
        losses.append(float(run(x, y)))
    return losses, {n: p.numpy().copy() for n, p in model.named_parameters()}, run


@pytest.mark.parametrize("setup", [_lstm_setup, _gpt_setup], ids=["lstm_tied_sgd", "gpt_adamw"])
def test_language_model_captured_equals_eager_for_ten_steps(setup):
    eager_losses, eager_params, _ = _train(setup, captured=False)
    losses, params, run = _train(setup, captured=True)
    assert len(run.variants) == 1 and not run.retraces  # traced once, ran ten times
    # Sparse (eager) and dense (graph) embedding gradients sum the same numbers in another
    # order, and clipping scales by a norm summed in another order: equal to rounding. Adam
    # turns a gradient that is zero but for rounding (attention's key bias) into steps of
    # up to lr, so there parameters agree to a fraction of one step (lr 3e-3), not to ulps.
    np.testing.assert_allclose(losses, eager_losses, rtol=2e-5)
    atol = 2e-6 if setup is _lstm_setup else 3e-4
    for name, value in eager_params.items():
        np.testing.assert_allclose(params[name], value, rtol=2e-4, atol=atol, err_msg=name)
    assert eager_losses[-1] < eager_losses[0]


def test_manual_sparse_update_under_capture_equals_eager():
    def run(captured):
        rill.manual_seed(0)
        table = nn.Embedding(VOCAB, 8)

        def step(tokens):
            table.weight.grad = None
            table(tokens).square().sum().backward()
            with rill.no_grad():
                table.weight -= 0.1 * table.weight.grad
        f = rill.capture(step) if captured else step
        for i in range(3):
            f(rill.tensor([[1, 2, 2, 7]]) + i)
        return table.weight.numpy()

    np.testing.assert_allclose(run(True), run(False), rtol=1e-6, atol=1e-7)
