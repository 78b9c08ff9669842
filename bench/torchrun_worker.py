"""torchrun elastic baseline for `spot_bench --workloads elastic`.

The same MLP, data, global batch and optimizer as the elastic `spot worker`,
trained the way torchrun users do: DistributedDataParallel over Gloo, a
DistributedSampler, a checkpoint file every --ckpt-every steps that rank 0
writes (atomically) and every worker loads when torchrun (re)starts it. Any
membership change makes torchrun stop and restart ALL workers; they continue
from the checkpoint.

Rank 0 appends "step,world,unix_ms" to --step-log after every step.
Run under Debian's /usr/bin/python3 -m torch.distributed.run.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import spot_models  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64, help="global batch")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--ckpt", required=True)
    p.add_argument("--ckpt-every", type=int, default=50)
    p.add_argument("--step-log", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--pid-dir", default="", help="each rank writes its pid to DIR/rank<k>")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.pid_dir:
        with open(os.path.join(a.pid_dir, f"rank{rank}"), "w") as f:
            f.write(str(os.getpid()))
    x, y = spot_models.load_fashion_mnist(a.data, "train")
    if a.train_limit:
        x, y = x[: a.train_limit], y[: a.train_limit]
    torch.manual_seed(0)
    model = DDP(spot_models.make_model("mlp"))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    step = 0
    if os.path.exists(a.ckpt):
        state = torch.load(a.ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        step = state["step"]
    local = max(1, a.batch_size // world)
    n = x.shape[0]
    log = open(a.step_log, "a") if rank == 0 else None
    while step < a.steps:
        epoch, k = divmod(step * a.batch_size, n)
        g = torch.Generator().manual_seed(epoch)
        order = torch.randperm(n, generator=g)
        begin = k + rank * local
        idx = order[begin:begin + local]
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        step += 1
        if rank == 0:
            log.write(f"{step},{world},{int(time.time() * 1000)}\n")
            log.flush()
            if step % a.ckpt_every == 0:
                tmp = a.ckpt + ".tmp"
                torch.save({"model": model.module.state_dict(), "optim": opt.state_dict(),
                            "step": step}, tmp)
                os.replace(tmp, a.ckpt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
