"""Loads the weights `spot train` wrote into the TorchScript module and evaluates it.

    /usr/bin/python3 examples/torchscript/evaluate.py --module runs/torchscript/resnet.pt \
        --state runs/ts-resnet/model.pt [--limit N]

Prints one JSON line: {"accuracy": ..., "loss": ..., "count": ...} on the first N
Fashion-MNIST test images (all by default), as `spot train` computes them.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import spot_models  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--module", required=True, help="the TorchScript file spot train trained")
    p.add_argument("--state", required=True, help="model.pt written by spot train")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit", type=int, default=0, help="first N test images (0 = all)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = torch.jit.load(args.module)
    model.load_state_dict(torch.load(args.state))
    x, y = spot_models.load_fashion_mnist(args.data, "test")
    if args.limit:
        x, y = x[:args.limit], y[:args.limit]
    print(json.dumps(spot_models.evaluate(model, x, y)))


if __name__ == "__main__":
    main()
