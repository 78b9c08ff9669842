"""Python PyTorch baseline for `spot_bench --workloads train`.

Trains the same CNN on the same data pipeline as the C++ trainer
(src/train/trainer.cc TrainLoop) and prints one JSON line with samples/s:

  index_select: the whole normalized training set in memory, a permutation per
                epoch, each step index_select of the batch, zero_grad, forward,
                cross_entropy, backward, step, loss.item() (what C++ does).
  dataloader:   the idiomatic DataLoader(TensorDataset(x, y), batch_size=B,
                shuffle=True) loop most users write; otherwise the same step.

Each variant starts from the same seeded model, runs --warmup-steps untimed
steps, then times --steps steps. Run with Debian's /usr/bin/python3.
"""
import argparse
import contextlib
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import spot_models  # noqa: E402


def index_select_batches(x, y, batch, seed):
    """Yields (x, y) batches forever, like the C++ loop (a permutation per epoch)."""
    n = x.shape[0]
    gen = torch.Generator().manual_seed(seed)
    xb = torch.empty((batch,) + tuple(x.shape[1:]))
    yb = torch.empty(batch, dtype=torch.long)
    while True:
        order = torch.randperm(n, generator=gen)
        for begin in range(0, n, batch):
            idx = order[begin:begin + batch]
            if idx.numel() != xb.shape[0]:
                xb.resize_((idx.numel(),) + tuple(x.shape[1:]))
                yb.resize_(idx.numel())
            torch.index_select(x, 0, idx, out=xb)
            torch.index_select(y, 0, idx, out=yb)
            yield xb, yb


def dataloader_batches(x, y, batch, seed):
    """Yields (x, y) batches forever from the idiomatic DataLoader."""
    torch.manual_seed(seed)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True)
    while True:
        yield from loader


def run(args, batches):
    """Trains warm-up + timed steps; returns (samples/s over the timed steps, last loss)."""
    torch.manual_seed(args.seed)
    model = torch.jit.load(args.module) if args.module else spot_models.make_model(args.model)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    samples, seconds, loss_value = 0, 0.0, float("nan")
    for step in range(args.warmup_steps + args.steps):
        t0 = time.perf_counter()
        xb, yb = next(batches)
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        loss_value = loss.item()
        if step >= args.warmup_steps:
            seconds += time.perf_counter() - t0
            samples += xb.shape[0]
    return samples / seconds, loss_value


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    p.add_argument("--module", default="", help="a TorchScript module instead of --model")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed steps first")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--optimizer", default="adam", choices=["adam"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--variants", default="index_select,dataloader")
    p.add_argument("--profile", action="store_true",
                   help="print torch.autograd.profiler's table for each variant to stderr")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    x, y = spot_models.load_fashion_mnist(args.data, "train")
    makers = {"index_select": index_select_batches, "dataloader": dataloader_batches}
    out = {"model": args.module or args.model, "batch": args.batch, "steps": args.steps,
           "warmup_steps": args.warmup_steps, "threads": torch.get_num_threads(),
           "torch": torch.__version__}
    for name in args.variants.split(","):
        prof = (torch.autograd.profiler.profile() if args.profile
                else contextlib.nullcontext())
        with prof:
            rate, loss = run(args, makers[name](x, y, args.batch, args.seed))
        if args.profile:
            print(f"== {name} ==\n" + prof.key_averages().table(
                sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
        out[name + "_samples_per_s"] = rate
        out[name + "_last_loss"] = loss
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
