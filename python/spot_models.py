"""The models of `spot train` in Python PyTorch.

Module and parameter names match src/train/model.cc and src/train/gpt_model.cc,
so the state dict that `spot train` writes (model.pt) loads with
model.load_state_dict(torch.load(...)).
"""
import gzip
import math
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


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, context, dropout):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).tril(),
                             persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = self.attn_dropout(att.softmax(-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class GptMlp(nn.Module):
    def __init__(self, width, dropout):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, width, heads, context, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context, dropout)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = GptMlp(width, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """`model: {name: gpt}`: nanoGPT's layout and initialization, the output layer tied to
    the token embedding. Token ids [b, T] -> next-token logits [b, T, vocab]."""

    def __init__(self, vocab, layers=4, heads=4, width=128, context=128, dropout=0.0):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, width),
            wpe=nn.Embedding(context, width),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(width, heads, context, dropout) for _ in range(layers)]),
            ln_f=nn.LayerNorm(width)))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for block in self.transformer.h:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, idx):
        t = idx.size(1)
        tf = self.transformer
        x = tf.drop(tf.wte(idx) + tf.wpe(torch.arange(t, device=idx.device)))
        for block in tf.h:
            x = block(x)
        return F.linear(tf.ln_f(x), tf.wte.weight)


def make_model(name):
    return {"cnn": Cnn, "mlp": Mlp}[name]()


def load_tokens(directory, split, dtype="uint16"):
    """The token ids of train.bin or val.bin (dataset: {name: tokens}) as int64 [N]."""
    name = "train.bin" if split == "train" else "val.bin"
    ids = np.fromfile(os.path.join(directory, name), dtype=np.dtype(dtype).newbyteorder("<"))
    return torch.from_numpy(ids.astype(np.int64))


def windows(tokens, idx, context, stride):
    """Samples `idx` of a token stream as spot train cuts them: inputs and next-token
    targets, [len(idx), context] each."""
    pos = torch.as_tensor(idx).unsqueeze(1) * stride + torch.arange(context + 1).unsqueeze(0)
    w = tokens[pos]
    return w[:, :-1], w[:, 1:]


def window_count(tokens, context, stride):
    return (len(tokens) - context - 1) // stride + 1


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

