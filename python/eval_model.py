"""Evaluates a model that `spot train` wrote, in Python PyTorch.

    /usr/bin/python3 python/eval_model.py --model cnn --state runs/x/model.pt

Prints one JSON line: {"accuracy": ..., "loss": ..., "count": ...}.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

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
    model.eval()
    x, y = spot_models.load_fashion_mnist(args.data, "test")
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            logits = model(x[i:i + 1000])
            loss += F.cross_entropy(logits, y[i:i + 1000], reduction="sum").item()
            correct += (logits.argmax(1) == y[i:i + 1000]).sum().item()
    print(json.dumps({"accuracy": correct / len(x), "loss": loss / len(x), "count": len(x)}))


if __name__ == "__main__":
    main()
