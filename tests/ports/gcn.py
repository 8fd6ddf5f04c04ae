"""A two-layer graph convolutional network (Kipf & Welling), written as a PyTorch program
after pytorch/examples' gcn: a sparse normalized adjacency A_hat = D^-1/2 (A + I) D^-1/2,
sparse bag-of-words features, H1 = relu(A_hat @ (X W1)), logits = A_hat @ (H1 W2),
log_softmax, NLL on the training nodes, Adam with weight decay.

The data is a synthetic graph of Cora's size (2708 nodes, 5278 undirected edges: 13264
stored entries of A_hat with the self loops, 1433 binary features, 7 classes), with class
structure: most edges join nodes of one class and each class favours its own words, so
accuracy means something. tests/ports/test_sparse_gcn.py runs this file on PyTorch and, with only
the import block swapped, on rill; bench/gcn.py times its training step.
"""
# --- imports: the only lines that change between PyTorch and rill ---
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
# --- end of imports ---

NODES, EDGES, FEATURES, CLASSES = 2708, 5278, 1433, 7


def make_graph(seed=0, nodes=NODES, edges=EDGES, features=FEATURES, classes=CLASSES,
               same_class=0.8, words=18, topic_words=120, on_topic=0.6):
    """NumPy arrays: A_hat as (indices [2, nnz] int64 in row-major order, values float32),
    features [nodes, features] float32 (rows normalized to sum 1), labels int64, and the
    train / test node ids (20 training nodes per class, as Cora's split; 1000 test nodes)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=nodes)
    members = [np.flatnonzero(labels == c) for c in range(classes)]
    pairs = set()
    while len(pairs) < edges:
        a = int(rng.integers(nodes))
        if rng.random() < same_class:
            b = int(rng.choice(members[labels[a]]))
        else:
            b = int(rng.integers(nodes))
        if a != b:
            pairs.add((min(a, b), max(a, b)))
    ends = np.array(sorted(pairs), dtype=np.int64)
    rows = np.concatenate([ends[:, 0], ends[:, 1], np.arange(nodes)])
    cols = np.concatenate([ends[:, 1], ends[:, 0], np.arange(nodes)])
    degree = np.bincount(rows, minlength=nodes).astype(np.float64)
    order = np.lexsort((cols, rows))
    rows, cols = rows[order], cols[order]
    values = (1.0 / np.sqrt(degree[rows] * degree[cols])).astype(np.float32)
    topics = [rng.choice(features, size=topic_words, replace=False) for _ in range(classes)]
    x = np.zeros((nodes, features), dtype=np.float32)
    for i in range(nodes):
        own = rng.random(words) < on_topic
        chosen = np.where(own, rng.choice(topics[labels[i]], size=words),
                          rng.integers(0, features, size=words))
        x[i, chosen] = 1.0
    x /= x.sum(axis=1, keepdims=True)
    perm = rng.permutation(nodes)
    train = np.concatenate([perm[labels[perm] == c][:20] for c in range(classes)])
    test = np.setdiff1d(perm, train)[:1000]
    return (np.stack([rows, cols]), values, x, labels.astype(np.int64), np.sort(train),
            np.sort(test))


class GraphConv(nn.Module):
    """H' = A_hat @ (H W): the features of each node's neighbourhood, mixed by W."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        nn.init.xavier_normal_(self.weight)

    def forward(self, h, adj):
        # As pytorch/examples' gcn writes it: torch.mm takes a sparse first operand too.
        support = torch.mm(h, self.weight)
        return torch.spmm(adj, support)


class GCN(nn.Module):
    def __init__(self, in_features, hidden, classes):
        super().__init__()
        self.gc1 = GraphConv(in_features, hidden)
        self.gc2 = GraphConv(hidden, classes)

    def forward(self, x, adj):
        h = F.relu(self.gc1(x, adj))
        return F.log_softmax(self.gc2(h, adj), dim=1)


def to_tensors(graph):
    """The graph as the library's tensors: A_hat and the features sparse (COO, coalesced)."""
    indices, values, x, labels, train, test = graph
    adj = torch.sparse_coo_tensor(torch.from_numpy(indices), torch.from_numpy(values),
                                  (x.shape[0], x.shape[0])).coalesce()
    features = torch.from_numpy(x).to_sparse()
    return (features, adj, torch.from_numpy(labels), torch.from_numpy(train),
            torch.from_numpy(test))


def build_model(seed=0, hidden=16):
    torch.manual_seed(seed)
    return GCN(FEATURES, hidden, CLASSES)


def make_step(model, optimizer):
    """One training step on (features, adj, labels, train nodes); returns the loss."""
    def step(features, adj, labels, train):
        optimizer.zero_grad()
        out = model(features, adj)
        loss = F.nll_loss(out[train], labels[train])
        loss.backward()
        optimizer.step()
        return loss
    return step


def accuracy(model, features, adj, labels, nodes):
    with torch.no_grad():
        predicted = model(features, adj).argmax(dim=1)
        return (predicted[nodes] == labels[nodes]).float().mean().item()


def train(model, tensors, epochs=50, lr=0.01, weight_decay=5e-4):
    """The loss of every epoch and the test accuracy at the end."""
    features, adj, labels, train_nodes, test_nodes = tensors
    optimizer = optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    step = make_step(model, optimizer)
    losses = [step(features, adj, labels, train_nodes).item() for _ in range(epochs)]
    return losses, accuracy(model, features, adj, labels, test_nodes)
