"""The Fashion-MNIST CNN with DistributedDataParallel over Gloo, made
preemption-proof with spottrain. Every rank trains on its shard of each
global batch; rank 0 saves; every rank resumes from the version rank 0 picks;
all ranks stop together at a notice (saved, exit 0).

Under `spot run` (or torchrun) the variables come from the launcher. By hand,
two ranks on this machine:

    for r in 0 1; do PYTHONPATH=python MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
      WORLD_SIZE=2 RANK=$r python3 examples/pytorch-ddp/train.py --steps 200 & done; wait
"""
import importlib.util
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import spottrain

# The model, data and flags of the single-process example, beside this one.
_spec = importlib.util.spec_from_file_location(
    "fashion_mnist_example",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch-fashion-mnist",
                 "train.py"))
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)


def main(argv=None):
    args = example.parse_args(argv)  # the single-process example's flags (--batch-size per rank)
    torch.manual_seed(args.seed)  # the same initial weights and dropout stream on every rank
    torch.set_num_threads(args.threads)
    try:
        x, y = example.load_split(args.data, "train")
        test_x, test_y = example.load_split(args.data, "test")
        spottrain.init(checkpoint_dir=args.checkpoint_dir)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(example.Net())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    log_to = args.loss_log if rank == 0 else None
    out = open(log_to, "a", buffering=1) if log_to else (sys.stdout if rank == 0 else None)

    with spottrain.Run(total_steps=args.steps, save_every=args.save_every,
                       state={"model": model.module, "optimizer": optimizer}) as run:
        for step in run.steps():
            idx, epoch = example.batch_indices(step, len(x), args.batch_size, args.seed, rank,
                                               world)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients over the ranks
            optimizer.step()
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss)
            mean_loss = mean_loss.item() / world
            if out is not None:
                print(f"{step + 1},{mean_loss:.9g}", file=out, flush=True)
            run.report(loss=mean_loss, samples=len(idx) * world, epoch=epoch)
            if args.slow_step_ms:
                time.sleep(args.slow_step_ms / 1000)
    if rank == 0:
        accuracy = example.evaluate(model.module, test_x, test_y)
        print(f"test accuracy {accuracy:.4f} after {run.step} steps on {world} ranks", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
