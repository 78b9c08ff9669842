#!/usr/bin/env python3
"""What a PyTorch job pays to restore after a preemption, in Python.

The anchor of `spot_bench --workloads ckpt` section 5's "restart in a new
process" rows, on the Python side: the same 50M MLP (784 -> 4096 x4 -> 10)
with Adam after two steps, saved once with torch.save; then each rep starts a
new Python process that builds the model and optimizer (untimed), and times
torch.load + load_state_dict of both, as a PyTorch training script resumes.
With --cold, the file is dropped from the page cache before each rep
(os.posix_fadvise DONTNEED after a sync).

Usage: bench/torch_load_restart.py [--reps 5] [--threads 2] [--cold] [--dir DIR]
Prints one line per rep and the median (ms).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time, torch
torch.set_num_threads(int(sys.argv[2]))
def build():
    torch.manual_seed(1)
    m = torch.nn.Sequential(
        torch.nn.Linear(784, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 10))
    return m, torch.optim.Adam(m.parameters(), 1e-3)
m, opt = build()
if sys.argv[3] == "save":
    x, y = torch.randn(64, 784), torch.randint(10, (64,))
    for _ in range(2):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    torch.save({"model": m.state_dict(), "optim": opt.state_dict()}, sys.argv[1])
    sys.exit(0)
t0 = time.perf_counter()
state = torch.load(sys.argv[1])
m.load_state_dict(state["model"])
opt.load_state_dict(state["optim"])
print(f"{(time.perf_counter() - t0) * 1e3:.1f}")
"""


def drop_from_page_cache(path):
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cold", action="store_true", help="drop the file from the page cache first")
    ap.add_argument("--dir", help="where the file goes (default: a new temporary directory)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = os.path.join(d, "state.pt")
        subprocess.run([sys.executable, "-c", CHILD, path, str(args.threads), "save"], check=True)
        print(f"state: {os.path.getsize(path) / 1e6:.1f} MB (torch.save)", file=sys.stderr)
        times = []
        for i in range(args.reps):
            if args.cold:
                drop_from_page_cache(path)
            p = subprocess.run([sys.executable, "-c", CHILD, path, str(args.threads), "load"],
                               check=True, capture_output=True, text=True)
            times.append(float(p.stdout.strip()))
            print(f"rep {i + 1}: {times[-1]:.1f} ms", file=sys.stderr)
        cache = "page cache dropped" if args.cold else "page cache warm"
        print(f"torch.load + load_state_dict in a new process ({cache}): median "
              f"{statistics.median(times):.1f} ms of {args.reps} {times}")


if __name__ == "__main__":
    main()
