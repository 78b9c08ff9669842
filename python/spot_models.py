"""The models of `spot train` in Python PyTorch.

Module and parameter names match src/train/model.cc, so the state dict that
`spot train` writes (model.pt) loads with model.load_state_dict(torch.load(...)).
"""
import gzip
import os

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

FASHION_MNIST_MEAN = 0.2860
FASHION_MNIST_STD = 0.3530


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.dropout = nn.Dropout(0.25)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x)), inplace=True), 2)
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h)), inplace=True), 2)
        h = self.dropout(F.relu(self.fc1(h.flatten(1)), inplace=True))
        return self.fc2(h)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 256)
        self.fc2 = nn.Linear(256, 128)
        self.dropout = nn.Dropout(0.2)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        h = F.relu(self.fc1(x.flatten(1)), inplace=True)
        h = self.dropout(F.relu(self.fc2(h), inplace=True))
        return self.fc3(h)


def make_model(name):
    return {"cnn": Cnn, "mlp": Mlp}[name]()


def load_fashion_mnist(directory, split):
    """Returns (images [n,1,28,28] float32 normalized, labels [n] int64)."""
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(directory, prefix + "-images-idx3-ubyte.gz")) as f:
        raw = f.read()
    images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(directory, prefix + "-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    x = (x - FASHION_MNIST_MEAN) / FASHION_MNIST_STD
    return x, torch.from_numpy(labels.astype(np.int64))


_MASK = (1 << 64) - 1


def _splitmix64(state):
    """One SplitMix64 step: (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


def epoch_order(seed, epoch, n):
    """The sample order of an epoch as spot train draws it (src/train/sampler.cc):
    Fisher-Yates driven by SplitMix64, unbiased bounded draws by rejection."""
    _, first = _splitmix64(seed & _MASK)
    state = first ^ ((epoch * 0xD1B54A32D192ED03) & _MASK)
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        limit = _MASK - _MASK % bound
        while True:
            state, x = _splitmix64(state)
            if x < limit:
                break
        j = x % bound
        order[i], order[j] = order[j], order[i]
    return order


def evaluate(model, x, y, batch=1000):
    """Accuracy and mean cross-entropy of `model` (in eval mode, no gradients) on x, y,
    as spot train computes them: {"accuracy", "loss", "count"}."""
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            logits = model(x[i:i + batch])
            loss += F.cross_entropy(logits, y[i:i + batch], reduction="sum").item()
            correct += (logits.argmax(1) == y[i:i + batch]).sum().item()
    return {"accuracy": correct / len(x), "loss": loss / len(x), "count": len(x)}

