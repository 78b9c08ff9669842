"""A small CNN on Fashion-MNIST in plain PyTorch, made preemption-proof with
spottrain: it resumes from its newest checkpoint, saves every --save-every
steps and when a termination notice comes (then exits 0), and reports its
progress to the controller under `spot run`.

    PYTHONPATH=python python3 examples/pytorch-fashion-mnist/train.py --steps 300

Writes one `step,loss` line per step (9 significant digits) to stdout or
--loss-log, so a resumed run can be compared with an uninterrupted one.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import spottrain

MEAN, STD = 0.2860, 0.3530  # the training images' pixel statistics


def load_split(directory, split):
    """(images [n,1,28,28] float32 normalized, labels [n] int64) from the gzipped IDX files."""
    prefix = "train" if split == "train" else "t10k"
    images_path = os.path.join(directory, prefix + "-images-idx3-ubyte.gz")
    labels_path = os.path.join(directory, prefix + "-labels-idx1-ubyte.gz")
    with gzip.open(images_path) as f:
        raw = f.read()
    if len(raw) < 16 or int.from_bytes(raw[:4], "big") != 2051 or (len(raw) - 16) % 784:
        raise ValueError(f"{images_path}: not an IDX image file of 28x28 images")
    images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(labels_path) as f:
        raw = f.read()
    if len(raw) < 8 or int.from_bytes(raw[:4], "big") != 2049 or len(raw) - 8 != len(images):
        raise ValueError(f"{labels_path}: not an IDX label file with {len(images)} labels")
    labels = np.frombuffer(raw, dtype=np.uint8, offset=8)
    x = (torch.from_numpy(images.astype(np.float32) / 255.0) - MEAN) / STD
    return x, torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


def batch_indices(step, n, batch, seed, rank=0, world=1):
    """The samples of `rank` at `step`: a pure function of the step (epoch
    order from (seed, epoch), the global batch cut into `world` shards), so a
    resumed run needs no sampler state."""
    per_epoch = n // (batch * world)
    epoch, pos = divmod(step, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100003 + epoch))
    start = (pos * world + rank) * batch
    return order[start:start + batch], epoch


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum())
                      for i in range(0, len(x), 1000))
    model.train()
    return correct / len(x)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="directory of the gzipped IDX files")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--save-every", type=int, default=100, help="0: only at a notice and the end")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--checkpoint-dir", default=None,
                   help="without SpotTrain (SPOT_CHECKPOINT_DIR wins); default ./checkpoints")
    p.add_argument("--loss-log", default=None, help="append step,loss lines here, not stdout")
    p.add_argument("--slow-step-ms", type=float, default=0, help="sleep this long each step")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.save_every < 0 or args.lr <= 0 or args.slow_step_ms < 0:
        p.error("--save-every and --slow-step-ms must be >= 0, --lr > 0")
    return args  # argparse exits 2 on bad input


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    try:
        x, y = load_split(args.data, "train")
        test_x, test_y = load_split(args.data, "test")
        spottrain.init(checkpoint_dir=args.checkpoint_dir)
    except (OSError, ValueError) as e:  # spottrain.ConfigError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    out = open(args.loss_log, "a", buffering=1) if args.loss_log else sys.stdout

    with spottrain.Run(total_steps=args.steps, save_every=args.save_every,
                       state={"model": model, "optimizer": optimizer}) as run:
        for step in run.steps():
            idx, epoch = batch_indices(step, len(x), args.batch_size, args.seed)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"{step + 1},{loss.item():.9g}", file=out, flush=True)
            # The last step's report carries the test accuracy; the loop's
            # final (done) report repeats it to the controller.
            metrics = None
            if step + 1 == args.steps:
                metrics = {"test_accuracy": evaluate(model, test_x, test_y)}
            run.report(loss=loss.item(), samples=len(idx), epoch=epoch, metrics=metrics)
            if args.slow_step_ms:
                time.sleep(args.slow_step_ms / 1000)
    print(f"test accuracy {evaluate(model, test_x, test_y):.4f} after {run.step} steps",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
