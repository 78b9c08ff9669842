"""Evaluates a model that `spot train` wrote, in Python PyTorch.

    /usr/bin/python3 python/eval_model.py --model cnn --state runs/x/model.pt

Prints one JSON line: {"accuracy": ..., "loss": ..., "count": ...}.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spot_models  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True, choices=["cnn", "mlp"])
    p.add_argument("--state", required=True, help="model.pt written by spot train")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    model = spot_models.make_model(args.model)
    model.load_state_dict(torch.load(args.state))
    x, y = spot_models.load_fashion_mnist(args.data, "test")
    print(json.dumps(spot_models.evaluate(model, x, y)))


if __name__ == "__main__":
    main()
