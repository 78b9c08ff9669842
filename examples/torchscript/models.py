"""Two models a user might bring, defined in plain PyTorch for 28x28 grey images.

    SmallResNet      residual CNN: stem, three residual blocks (16-32-64 channels), head
    SmallTransformer each image row is a token: 28 tokens of 28 pixels, a 2-layer encoder

export.py scripts them with torch.jit.script and saves them; `spot train` trains the
saved files natively (model: {torchscript: FILE}); evaluate.py loads the trained weights
back into the same module.
"""
import torch
from torch import nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                          nn.BatchNorm2d(c_out))
        else:
            self.shortcut = nn.Sequential(nn.Identity())

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 10, width: int = 16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = Block(width, width, 1)
        self.layer2 = Block(width, 2 * width, 2)
        self.layer3 = Block(2 * width, 4 * width, 2)
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x):
        h = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.head(h.mean(dim=[2, 3]))


class SmallTransformer(nn.Module):
    def __init__(self, classes: int = 10, width: int = 64, heads: int = 4, layers: int = 2,
                 dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Linear(28, width)
        self.pos = nn.Parameter(torch.randn(1, 28, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        h = self.embed(x.squeeze(1)) + self.pos
        h = self.norm(self.encoder(h))
        return self.head(h.mean(dim=1))


MODELS = {"resnet": SmallResNet, "transformer": SmallTransformer}
