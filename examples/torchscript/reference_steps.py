"""The first steps of a full-batch training in Python PyTorch, to compare with spot train.

    /usr/bin/python3 examples/torchscript/reference_steps.py --module resnet.pt \
        --limit 256 --steps 5 --optimizer sgd --lr 0.05 --momentum 0.9

Trains the TorchScript module on the first N Fashion-MNIST training images in batches of
--batch (all N by default), in the order spot train draws them for --seed (Adam or SGD,
constant learning rate, the module in training mode), and prints the loss of each step as
a JSON list. A `spot train` job with the same data, batch size, seed, optimizer and a
constant schedule takes the same steps on the same batches.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import spot_models  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--module", required=True)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch", type=int, default=0, help="batch size (0 = all N)")
    p.add_argument("--seed", type=int, default=0, help="the job's seed (data order)")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--momentum", type=float, default=0.0, help="sgd only")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = torch.jit.load(args.module)
    model.train()
    x, y = spot_models.load_fashion_mnist(args.data, "train")
    x, y = x[:args.limit], y[:args.limit]
    if args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    batch = args.batch or args.limit
    losses, epoch, index, order = [], 0, 0, None
    for _ in range(args.steps):
        if order is None:
            order = torch.tensor(spot_models.epoch_order(args.seed, epoch, args.limit))
        idx = order[index:index + batch]
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
        index += len(idx)
        if index == args.limit:
            epoch, index, order = epoch + 1, 0, None
    print(json.dumps(losses))


if __name__ == "__main__":
    main()
