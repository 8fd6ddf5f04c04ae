"""A small CNN image classifier, written as a PyTorch program.

Synthetic 12x12 one-channel images of four classes (a bright bar in one of four places, plus
noise), fed through a DataLoader, trained with SGD + momentum and a StepLR schedule, then
scored in eval mode. tests/ports/test_ports.py runs this file once as written and once with
only the import block swapped for rill's.
"""
# --- imports: the only lines that change between PyTorch and rill ---
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset
# --- end of imports ---

NUM_CLASSES = 4
SIZE = 12


def make_data(seed=0, n=192):
    """Images (n, 1, 12, 12) float32 and labels (n,) int64: the class says where the bar is."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, size=n)
    images = rng.normal(0.0, 0.3, size=(n, 1, SIZE, SIZE))
    for i, c in enumerate(labels):
        if c == 0:
            images[i, 0, 2:4, :] += 1.0       # top bar
        elif c == 1:
            images[i, 0, 8:10, :] += 1.0      # bottom bar
        elif c == 2:
            images[i, 0, :, 2:4] += 1.0       # left bar
        else:
            images[i, 0, :, 8:10] += 1.0      # right bar
    return images.astype(np.float32), labels.astype(np.int64)


class Net(nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2, 2)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(p=dropout)
        self.fc1 = nn.Linear(16 * 3 * 3, 32)
        self.fc2 = nn.Linear(32, NUM_CLASSES)

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        x = x.view(x.size(0), -1)
        x = self.dropout(F.relu(self.fc1(x)))
        return self.fc2(x)


def build_model(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return Net(dropout=dropout)


def make_loader(images, labels, batch_size=32, shuffle=False):
    dataset = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)


def get_device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train(model, data, device, epochs=2, lr=0.05, shuffle=False):
    """Returns the loss of every step, the running training accuracy and the learning rate of
    every epoch."""
    model.to(device)
    loader = make_loader(*data, shuffle=shuffle)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.5)
    losses, accuracies, lrs = [], [], []
    for epoch in range(epochs):
        model.train()
        correct, seen = 0, 0
        lrs.append(scheduler.get_last_lr()[0])
        for batch_idx, (inputs, targets) in enumerate(loader):
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            _, predicted = outputs.max(1)
            seen += targets.size(0)
            correct += predicted.eq(targets).sum().item()
        assert batch_idx == len(loader) - 1
        accuracies.append(correct / seen)
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == lr * 0.5 ** epochs
    return losses, accuracies, lrs


def evaluate(model, data, device):
    """Returns (mean loss, accuracy) over the data, in eval mode and without gradients."""
    loader = make_loader(*data, batch_size=64)
    model.eval()
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            outputs = model(inputs)
            total_loss += F.cross_entropy(outputs, targets, reduction="sum").item()
            _, predicted = torch.max(outputs.data, 1)
            correct += (predicted == targets).sum().item()
    return total_loss / len(loader.dataset), correct / len(loader.dataset)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def save_and_reload(model, path, device, dropout=0.0):
    """Saves the state_dict to a file and loads it into a fresh model, as a checkpoint would."""
    torch.save(model.state_dict(), path)
    restored = Net(dropout=dropout).to(device)
    restored.load_state_dict(torch.load(path, map_location=device))
    return restored


def main():
    device = get_device()
    model = build_model(dropout=0.25)
    print(f"{count_parameters(model)} parameters, on {device}")
    losses, accuracies, _ = train(model, make_data(seed=0), device)
    test_loss, test_accuracy = evaluate(model, make_data(seed=1, n=128), device)
    print(f"train loss {losses[0]:.3f} -> {losses[-1]:.3f}, accuracy per epoch {accuracies}, "
          f"test loss {test_loss:.4f}, "
          f"test accuracy {test_accuracy:.3f}")


if __name__ == "__main__":
    main()
