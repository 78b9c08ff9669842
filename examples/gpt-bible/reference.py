"""The same GPT job in Python PyTorch, for comparison with spot train.

    /usr/bin/python3 examples/gpt-bible/reference.py examples/gpt-bible.yaml \
        [--steps N] [--init-out init.pt] [--json] [--state model.pt]

Reads the job file (model: {name: gpt}, dataset: {name: tokens}, batch_size, steps, seed,
optimizer adam or sgd, schedule) and trains python/spot_models.Gpt on the same windows in
the same order (spot_models.epoch_order), with the same learning-rate schedule, then
evaluates on the validation windows as spot train does. The initial weights come from
torch.manual_seed(seed); --init-out writes them as a state dict, which a job's
`init: {weights: FILE}` loads, so both sides then start from the same weights and take the
same steps. Prints each step's loss and the validation loss (--json: one JSON object).
--state evaluates the weights spot train wrote (model.pt) instead of training.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import spot_models  # noqa: E402


def learning_rate(schedule, base, step, total):
    """src/train/lr_schedule.cc."""
    kind = schedule.get("type", "constant")
    warmup = schedule.get("warmup_steps", 0)
    if kind == "constant":
        return base
    if step < warmup:
        return base * (step + 1) / warmup
    t = step - warmup
    if kind == "step":
        return base * schedule.get("gamma", 0.1) ** (t // schedule.get("step_size", 1000))
    span = max(1, total - warmup)
    p = min(max(t / span, 0.0), 1.0)
    low = schedule.get("min_lr", 0.0)
    return low + (base - low) * 0.5 * (1.0 + math.cos(math.pi * p))


def make_optimizer(o, params):
    if o.get("type", "sgd") == "adam":
        return torch.optim.Adam(params, lr=o.get("lr", 1e-3),
                                betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                                eps=o.get("eps", 1e-8), weight_decay=o.get("weight_decay", 0.0))
    return torch.optim.SGD(params, lr=o.get("lr", 0.01), momentum=o.get("momentum", 0.9),
                           nesterov=o.get("nesterov", False),
                           weight_decay=o.get("weight_decay", 0.0))


def evaluate(model, tokens, context, stride, batch):
    model.eval()
    n = spot_models.window_count(tokens, context, stride)
    loss = 0.0
    with torch.no_grad():
        for i in range(0, n, batch):
            x, y = spot_models.windows(tokens, torch.arange(i, min(n, i + batch)), context, stride)
            logits = model(x)
            loss += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
    model.train()
    return loss / (n * context)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("job")
    p.add_argument("--steps", type=int, default=0, help="override the job's steps")
    p.add_argument("--init-out", default="", help="write the initial weights here (state dict)")
    p.add_argument("--state", default="",
                   help="no training: load this state dict (spot train's model.pt) and evaluate")
    p.add_argument("--threads", type=int, default=0, help="0: all cores")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with open(args.job) as f:
        job = yaml.safe_load(f)
    if args.threads:
        torch.set_num_threads(args.threads)
    m, d = job["model"], job["dataset"]
    seed = job.get("seed", 0)
    data = d["path"]
    vocab = m.get("vocab") or json.load(open(os.path.join(data, "vocab.json")))["size"]
    context = d.get("context") or m.get("context", 128)
    stride = d.get("stride") or context
    train = spot_models.load_tokens(data, "train", d.get("dtype", "uint16"))
    val = spot_models.load_tokens(data, "val", d.get("dtype", "uint16"))
    if d.get("train_limit"):
        train = train[:(d["train_limit"] - 1) * stride + context + 1]
    if d.get("test_limit"):
        val = val[:(d["test_limit"] - 1) * stride + context + 1]
    torch.manual_seed(seed)
    model = spot_models.Gpt(vocab, m.get("layers", 4), m.get("heads", 4), m.get("width", 128),
                            m.get("context", 128), m.get("dropout", 0.0))
    if args.state:
        model.load_state_dict(torch.load(args.state))
        batch = job.get("eval_batch_size", 1000)
        print(json.dumps({"val_loss": evaluate(model, val, context, stride, batch)}))
        return
    if args.init_out:
        torch.save(dict(model.state_dict()), args.init_out)  # LibTorch reads plain dicts
    opt = make_optimizer(job["optimizer"], model.parameters())
    batch = job["batch_size"]
    n = spot_models.window_count(train, context, stride)
    steps = args.steps or job["steps"]
    losses, epoch, index, order = [], 0, 0, None
    start = time.perf_counter()
    for step in range(steps):
        if order is None:
            order = torch.tensor(spot_models.epoch_order(seed, epoch, n))
        idx = order[index:index + batch]
        x, y = spot_models.windows(train, idx, context, stride)
        for g in opt.param_groups:
            g["lr"] = learning_rate(job.get("schedule", {}), job["optimizer"].get("lr", 1e-3),
                                    step, steps)
        opt.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
        index += len(idx)
        if index == n:
            epoch, index, order = epoch + 1, 0, None
    seconds = time.perf_counter() - start
    val_loss = evaluate(model, val, context, stride, job.get("eval_batch_size", 1000))
    out = {"losses": losses, "val_loss": val_loss, "train_seconds": seconds,
           "tokens_per_s": steps * batch * context / seconds}
    if args.json:
        print(json.dumps(out))
    else:
        for i, loss in enumerate(losses):
            print(f"step {i + 1} loss {loss:.6f}")
        print(f"val loss {val_loss:.4f}, perplexity {math.exp(val_loss):.2f}, "
              f"{out['tokens_per_s']:.0f} tokens/s")


if __name__ == "__main__":
    main()
