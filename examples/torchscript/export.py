"""Scripts the example models and saves them for `spot train`.

    /usr/bin/python3 examples/torchscript/export.py --out runs/torchscript

writes resnet.pt and transformer.pt (torch.jit.script(model).save), their initial
weights drawn from --seed.
"""
import argparse
import os
import warnings

import torch

import models


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True, help="directory for the .pt files")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=sorted(models.MODELS), help="export one model")
    args = p.parse_args()
    # PyTorch 1.13 warns about its own TransformerEncoderLayer when scripting it.
    warnings.filterwarnings("ignore", message=".batch_first. was found in ScriptModule constants")
    os.makedirs(args.out, exist_ok=True)
    for name, cls in sorted(models.MODELS.items()):
        if args.only and name != args.only:
            continue
        torch.manual_seed(args.seed)
        scripted = torch.jit.script(cls())
        path = os.path.join(args.out, name + ".pt")
        scripted.save(path)
        count = sum(t.numel() for t in scripted.parameters())
        print(f"{path}: {name}, {count} parameters")


if __name__ == "__main__":
    main()
