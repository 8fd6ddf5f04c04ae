"""A word-level LSTM language model, written as a PyTorch program.

A synthetic token stream (mostly a fixed successor rule, sometimes a random token) is cut
into (batch, seq_len) windows; the model trains with truncated backpropagation through time
(the hidden state carried between windows, detached), gradient clipping and Adam, then
generates greedily. tests/ports/test_ports.py runs this file once as written and once with
only the import block swapped for rill's.
"""
# --- imports: the only lines that change between PyTorch and rill ---
import math

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
# --- end of imports ---

VOCAB = 12


def make_stream(seed=0, length=2000, noise=0.1):
    """A token stream (int64) in which token t is followed by (3 t + 1) mod VOCAB, mostly."""
    rng = np.random.default_rng(seed)
    stream = np.empty(length, dtype=np.int64)
    stream[0] = 0
    for i in range(1, length):
        if rng.random() < noise:
            stream[i] = rng.integers(VOCAB)
        else:
            stream[i] = (3 * stream[i - 1] + 1) % VOCAB
    return stream


def batchify(stream, batch_size):
    """Cuts the stream into batch_size parallel rows, as the word language model example does."""
    data = torch.from_numpy(stream)
    rows = data.size(0) // batch_size
    data = data.narrow(0, 0, rows * batch_size)
    return data.view(batch_size, -1).contiguous()


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab_size=VOCAB, embed_dim=16, hidden_size=32, num_layers=2, dropout=0.0):
        super().__init__()
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden_size, num_layers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(hidden_size, vocab_size)
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.decoder.bias.data.zero_()
        self.decoder.weight.data.uniform_(-initrange, initrange)

    def init_hidden(self, batch_size):
        weight = next(self.parameters())
        return (weight.new_zeros(self.num_layers, batch_size, self.hidden_size),
                weight.new_zeros(self.num_layers, batch_size, self.hidden_size))

    def forward(self, tokens, hidden=None):
        embedded = self.embedding(tokens)
        output, hidden = self.lstm(embedded, hidden)
        return self.decoder(output), hidden


def build_model(seed=0):
    torch.manual_seed(seed)
    return LSTMLanguageModel()


def detach_hidden(hidden):
    return tuple(h.detach() for h in hidden)


def train(model, stream, steps=8, batch_size=8, seq_len=12, lr=3e-3, clip=0.5):
    """Returns the loss and the pre-clipping gradient norm of every step."""
    data = batchify(stream, batch_size)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=lr)
    model.train()
    hidden = None
    losses, norms = [], []
    windows = (data.size(1) - 1) // seq_len
    for step in range(steps):
        start = (step % windows) * seq_len
        if start == 0:
            hidden = model.init_hidden(batch_size)    # a new pass starts from a zero state
        inputs = data[:, start:start + seq_len]
        targets = data[:, start + 1:start + 1 + seq_len]
        if hidden is not None:
            hidden = detach_hidden(hidden)
        optimizer.zero_grad()
        logits, hidden = model(inputs, hidden)
        loss = criterion(logits.view(-1, model.vocab_size), targets.reshape(-1))
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
        norms.append(float(norm))
    return losses, norms


def generate(model, prompt, length=10):
    """Greedy continuation of a list of token ids; returns the whole list."""
    model.eval()
    tokens = list(prompt)
    with torch.no_grad():
        logits, hidden = model(torch.tensor([prompt], dtype=torch.long))
        next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        for _ in range(length):
            tokens.append(next_token.item())
            logits, hidden = model(next_token, hidden)
            next_token = torch.argmax(logits[:, -1], dim=-1).unsqueeze(1)
    return tokens


def perplexity(model, stream, batch_size=4, seq_len=20):
    data = batchify(stream, batch_size)
    model.eval()
    criterion = nn.CrossEntropyLoss()
    total, count = 0.0, 0
    with torch.no_grad():
        hidden = model.init_hidden(batch_size)
        for start in range(0, data.size(1) - 1 - seq_len, seq_len):
            inputs = data[:, start:start + seq_len]
            targets = data[:, start + 1:start + 1 + seq_len]
            logits, hidden = model(inputs, hidden)
            total += criterion(logits.view(-1, model.vocab_size), targets.reshape(-1)).item()
            count += 1
    return math.exp(total / count)


def main():
    model = build_model()
    losses, _ = train(model, make_stream(), steps=200, lr=1e-2)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
          f"held-out perplexity {perplexity(model, make_stream(seed=1, length=400)):.2f}; "
          f"generated {generate(model, [0, 1])}")


if __name__ == "__main__":
    main()
