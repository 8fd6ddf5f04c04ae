"""A small GPT (decoder-only transformer), written as a PyTorch program.

Token and position embeddings, causal self-attention written by hand (a lower-triangular mask
registered as a buffer), pre-norm blocks with GELU MLPs, weight tying between the embedding
and the output layer, AdamW with separate decay / no-decay parameter groups, and sampling with
torch.multinomial (temperature, top-k). tests/ports/test_ports.py runs this file once as
written and once with only the import block swapped for rill's.
"""
# --- imports: the only lines that change between PyTorch and rill ---
import math

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
# --- end of imports ---

VOCAB = 16
BLOCK_SIZE = 16


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.n_embd = n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size=VOCAB, block_size=BLOCK_SIZE, n_layer=2, n_head=2, n_embd=32,
                 dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight      # weight tying
        self.apply(self._init_weights)
        # residual projections start smaller, scaled by the depth
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, f"sequence of {t} longer than block size {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])      # only the last position is needed
            loss = None
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {name: p for name, p in self.named_parameters() if p.requires_grad}
        decay = [p for p in param_dict.values() if p.dim() >= 2]
        no_decay = [p for p in param_dict.values() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def make_corpus(seed=0, length=4000):
    """Tokens cycling through a short random 'vocabulary walk', so there is something to learn."""
    rng = np.random.default_rng(seed)
    pattern = rng.permutation(VOCAB)
    offsets = rng.integers(0, 2, size=length)      # sometimes skip a step of the cycle
    positions = np.cumsum(1 + offsets) % VOCAB
    return pattern[positions].astype(np.int64)


def get_batch(corpus, step, batch_size=8, block_size=BLOCK_SIZE):
    """Deterministic windows (so two runs see the same batches)."""
    starts = (np.arange(batch_size) * 97 + step * 31) % (len(corpus) - block_size - 1)
    x = np.stack([corpus[s:s + block_size] for s in starts])
    y = np.stack([corpus[s + 1:s + 1 + block_size] for s in starts])
    return torch.from_numpy(x), torch.from_numpy(y)


def build_model(seed=0):
    torch.manual_seed(seed)
    return GPT()


def train(model, corpus, steps=6, learning_rate=3e-3):
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=learning_rate,
                                           betas=(0.9, 0.95))
    model.train()
    losses = []
    for step in range(steps):
        x, y = get_batch(corpus, step)
        logits, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


def sample(model, prompt, max_new_tokens=8, temperature=1.0, top_k=None, seed=1337):
    torch.manual_seed(seed)
    model.eval()
    idx = torch.tensor([prompt], dtype=torch.long)
    return model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k)


def main():
    model = build_model()
    print(f"{model.get_num_params()} parameters")
    losses = train(model, make_corpus(), steps=100)
    out = sample(model, [3, 5], max_new_tokens=12, top_k=4)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; sample {out[0].tolist()}")


if __name__ == "__main__":
    main()
