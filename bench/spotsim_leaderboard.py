#!/usr/bin/python3
"""SpotSim's out-of-sample leaderboard: every shared availability and preemption
folder, under the leave-one-out and time-split protocols of `spot sim eval`
(docs/spotsim.md, "Evaluation protocol"), with the zones' real spot prices
where a series exists.

Usage: bench/spotsim_leaderboard.py [--spot build/bin/spot] [--data ../shared/data]
           [--out build/leaderboard] [--samples 300] [--policies od,greedy,up,hazard-up,forecast-up,mdp]
           [--multi-zone [--mz-samples 100] [--checkpoint-gb 50] [--mz-policies LIST]]
           [--folder DIR ... [--nodes N] [--ondemand-price K] [--prices F.csv]]
Writes DIR/<folder>.<protocol>.json (the command's JSON) and prints the
leaderboard as Markdown tables, with the wall time of the whole run and
mdp's decision time per tick against the tick (one zone, in-sample runs on
one thread with and without it: simulation included, so an upper bound).
`spot sim eval` simulates on every core; the figures do not depend on it.

--multi-zone runs the multi-zone pass instead: every folder's zones of one
instance type as ONE market (`spot sim eval --multi-zone`), time-split,
with real prices where they exist and, where the zones span regions, a
checkpoint of --checkpoint-gb moved at the catalog's inter-region egress
price on every move across regions; then the same markets drawn again from
synthetic models fitted to each zone (`--synthetic-fit`). Zones of unequal
length are cut to the shortest (aligned at their first tick).

--folder DIR (repeatable) scores your own markets instead of the shared
folders, with the same protocols, jobs and tables: every trace file in DIR
(the shared records' JSON, probe CSVs, SkyNomad's JSON, including its
layout <zone>_<kind>/full.json), as a gang of --nodes, priced at
--ondemand-price when given, else at the on-demand price the traces record
(each zone its own), else 3; --prices adds a spot price CSV.
"""
import argparse
import json
import os
import subprocess
import sys
import time

# Folder, how it is priced, the job. Prices: a price CSV for every zone, the
# trace files' own series ("prices" field), or none (spot at 1.0/h). The
# on-demand price is the instance type's list price where real spot prices
# are used (p3.2xlarge $3.06/h, r5.16xlarge $4.032/h in us-east-1), else the
# paper's k = 3 against spot at 1.0/h. Jobs: C = 48 h, D = 60 h, d = 0.2 h
# (Can't Be Late), as a gang of the folder's node count; gcp-c3 records span
# only 45.6 h, so its job is C = 8 h, D = 10 h (the same 0.8 fraction).
FOLDERS = [
    ("availability/aws-2022-10", None, dict(k=3, nodes=1)),
    ("availability/aws-v100-2023-02", "prices/aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv",
     dict(k=3.06, nodes=1)),
    ("availability/aws-v100x16-2023-08", None, dict(k=3, nodes=16)),
    ("preemption/aws-v100-2023-04", None, dict(k=3.06, nodes=1)),
    ("preemption/aws-r5-2023-05", None, dict(k=4.032, nodes=1)),
    ("preemption/aws-v100x4-2023-08", None, dict(k=3, nodes=4)),
    ("preemption/gcp-c3-2023-04", None, dict(k=3, nodes=1, C=8, D=10)),
]
# Out of sample first; in-sample (registered defaults, chosen on these very
# traces) last, to show how much looking at the scored data flatters a policy.
PROTOCOLS = ["loo", "time-split", "in-sample"]


def trace_files(d):
    """The trace files of folder `d`: its JSON and CSV files, and SkyNomad's
    <zone>_<kind>/full.json."""
    out = []
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if os.path.isfile(p) and f.endswith((".json", ".csv")):
            out.append(p)
        elif os.path.isfile(os.path.join(p, "full.json")):
            out.append(os.path.join(p, "full.json"))
    return out


def run(args, folder, prices, job, protocol):
    d = os.path.join(args.data, folder)
    cmd = [args.spot, "sim", "eval", "--protocol", protocol, "--policies", args.policies,
           "--samples", str(args.samples), "--format", "json",
           "--compute-hours", str(job.get("C", 48)), "--deadline-hours", str(job.get("D", 60)),
           "--changeover-hours", "0.2", "--nodes", str(job["nodes"])]
    if job["k"] is not None:
        cmd += ["--ondemand-price", str(job["k"])]
    for f in trace_files(d):
        cmd += ["--trace", f]
    if prices:
        cmd += ["--prices", os.path.join(args.data, prices)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\nexit {p.returncode}: {p.stderr}")
    out = os.path.join(args.out, f"{label(folder).replace('/', '_')}.{protocol}.json")
    with open(out, "w") as fh:
        fh.write(p.stdout)
    return json.loads(p.stdout), time.monotonic() - t0


def decision_time(args):
    """An upper bound on mdp's seconds per decision (simulation included) on
    the 195 s aws-v100-2023-02 us-east-1a trace, from two in-sample evals
    that differ only by mdp; and the tick."""
    folder, prices, job = FOLDERS[1]
    trace = os.path.join(args.data, folder, "us-east-1a_v100_1.json")
    if not os.path.exists(trace):
        return None
    base = [args.spot, "sim", "eval", "--protocol", "in-sample", "--samples", str(args.samples),
            "--format", "json", "--trace", trace, "--compute-hours", "48",
            "--deadline-hours", "60", "--changeover-hours", "0.2", "--ondemand-price",
            str(job["k"]), "--prices", os.path.join(args.data, prices), "--threads", "1"]
    secs = []
    for policies in ("od,up", "od,up,mdp"):
        p = subprocess.run(base + ["--policies", policies], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{' '.join(base)}\nexit {p.returncode}: {p.stderr}")
        secs.append(json.loads(p.stdout)["seconds"])
    gap = 195.0
    # Every job runs at least C = 48 h of ticks: counting only those (and the
    # simulation with the decisions) bounds the time per decision from above.
    ticks = args.samples * 48 * 3600 / gap
    return max(secs[1] - secs[0], 0) / ticks, gap


# The multi-zone markets: name, folder, the trace files' suffix (one
# instance type), prices CSV, job (as FOLDERS), whether to draw a synthetic
# copy too. gcp-c3's regions have no price in the (AWS) egress catalog: its
# moves are free.
MZ_MARKETS = [
    ("aws-2022-10 k80_1", "availability/aws-2022-10", "_k80_1.json", None, dict(k=3, nodes=1), False),
    ("aws-2022-10 k80_8", "availability/aws-2022-10", "_k80_8.json", None, dict(k=3, nodes=1), False),
    ("aws-2022-10 v100_1", "availability/aws-2022-10", "_v100_1.json", None, dict(k=3, nodes=1),
     False),
    ("aws-2022-10 v100_8", "availability/aws-2022-10", "_v100_8.json", None, dict(k=3, nodes=1),
     False),
    ("aws-v100-2023-02", "availability/aws-v100-2023-02", ".json",
     "prices/aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv", dict(k=3.06, nodes=1), True),
    ("aws-v100x16-2023-08", "availability/aws-v100x16-2023-08", ".json", None,
     dict(k=3, nodes=16), True),
    ("aws-v100-2023-04", "preemption/aws-v100-2023-04", ".json", None, dict(k=3.06, nodes=1), True),
    ("aws-r5-2023-05", "preemption/aws-r5-2023-05", ".json", None, dict(k=4.032, nodes=1), False),
    ("aws-v100x4-2023-08", "preemption/aws-v100x4-2023-08", ".json", None, dict(k=3, nodes=4), True),
    ("gcp-c3-2023-04", "preemption/gcp-c3-2023-04", ".json", None, dict(k=3, nodes=1, C=8, D=10),
     False),
]
MZ_POLICIES = "od,greedy,up,hazard-up,forecast-up,mdp,mdp-zones,omniscient"
EGRESS = "catalog/aws_inter_region_egress.csv"


def region_of(zone):
    """us-east-1a -> us-east-1, us-central1-a -> us-central1 (fleet::RegionOfZone)."""
    if len(zone) >= 3 and zone[-1].isalpha() and zone[-2] == "-":
        return zone[:-2]
    if len(zone) >= 2 and zone[-1].isalpha() and zone[-2].isdigit():
        return zone[:-1]
    return zone


def mz_traces(args, folder, suffix):
    """The folder's trace files of one type, cut to the shortest (copies under
    --out when any is longer)."""
    d = os.path.join(args.data, folder)
    files = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(suffix)]
    loaded = [json.load(open(f)) for f in files]
    n = min(len(j["data"]) for j in loaded)
    if all(len(j["data"]) == n for j in loaded):
        return files
    cut_dir = os.path.join(args.out, "cut", folder.replace("/", "_"))
    os.makedirs(cut_dir, exist_ok=True)
    out = []
    for f, j in zip(files, loaded):
        j["data"] = j["data"][:n]
        if "prices" in j:
            j["prices"] = j["prices"][:n]
        path = os.path.join(cut_dir, os.path.basename(f))
        with open(path, "w") as fh:
            json.dump(j, fh)
        out.append(path)
    return out


def mz_run(args, name, folder, suffix, prices, job, synthetic):
    files = mz_traces(args, folder, suffix)
    policies = args.mz_policies
    regions = sorted({region_of(os.path.basename(f).split("_")[0]) for f in files})
    egress = os.path.join(args.data, EGRESS)
    aws = all(r.count("-") == 2 for r in regions)  # AWS regions: us-east-1
    gb = args.checkpoint_gb if len(regions) > 1 and aws else 0
    cmd = [args.spot, "sim", "eval", "--multi-zone", "--protocol", "time-split",
           "--policies", policies, "--samples", str(args.mz_samples), "--format", "json",
           "--compute-hours", str(job.get("C", 48)), "--deadline-hours", str(job.get("D", 60)),
           "--changeover-hours", "0.2", "--ondemand-price", str(job["k"]),
           "--nodes", str(job["nodes"]), "--checkpoint-gb", str(gb)]
    if gb > 0:
        cmd += ["--egress", egress]
    for f in files:
        cmd += ["--trace", f]
    if prices:
        cmd += ["--prices", os.path.join(args.data, prices)]
    if synthetic:
        cmd += ["--synthetic-fit", "--seed", "1"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\nexit {p.returncode}: {p.stderr}")
    tag = name.replace(" ", "_") + (".synthetic" if synthetic else "")
    with open(os.path.join(args.out, f"multizone_{tag}.json"), "w") as fh:
        fh.write(p.stdout)
    return json.loads(p.stdout), time.monotonic() - t0, regions, gb, len(files)


def multi_zone(args):
    t0 = time.monotonic()
    results = []
    for name, folder, suffix, prices, job, synth in MZ_MARKETS:
        if not os.path.isdir(os.path.join(args.data, folder)):
            print(f"{folder}: not present, skipped", file=sys.stderr)
            continue
        for synthetic in ([False, True] if synth else [False]):
            j, secs, regions, gb, n = mz_run(args, name, folder, suffix, prices, job, synthetic)
            label = name + (" (synthetic fit)" if synthetic else "")
            results.append((label, j, regions, gb, n))
            print(f"multi-zone {label}: {secs:.1f} s", file=sys.stderr)
    total = time.monotonic() - t0
    shown = [p for p in args.mz_policies.split(",") if p not in ("od", "up")]
    print("### Multi-zone, time-split: every zone of a folder's type as ONE market; mean cost / "
          "up's on the same starts [95% bootstrap interval]\n")
    print("| market | zones (regions) | prices | checkpoint GB | up mean $ | "
          + " | ".join(shown) + " |")
    print("|---|---|---|---|---|" + "---|" * len(shown))
    for label, j, regions, gb, n in results:
        m = j["markets"][0]
        pol = m["policies"]
        cells = [ratio(pol[p]) if p in pol else "-" for p in shown]
        print(f"| {label} | {n} ({', '.join(regions)}) | {m['prices']} "
              f"| {gb:g} | {pol['up']['cost']['mean']:.2f} | " + " | ".join(cells) + " |")
    print("\n### Multi-zone: ours against greedy and the bound (ratios of mean costs), p95 against "
          "on-demand, deadline misses where up met\n")
    print("| market | mdp-zones / greedy | mdp-zones / up | mdp / up | mdp-zones / omniscient | "
          "p95/od greedy, up, mdp-zones | misses (up met) mdp-zones |")
    print("|---|---|---|---|---|---|---|")
    sums = {"g": [], "u": [], "m": [], "o": []}
    for label, j, regions, gb, n in results:
        pol = j["markets"][0]["policies"]
        c = {p: pol[p]["cost"]["mean"] for p in pol}
        vals = tuple(c[a] / c[b] if a in c and b in c else None
                     for a, b in (("mdp-zones", "greedy"), ("mdp-zones", "up"), ("mdp", "up"),
                                  ("mdp-zones", "omniscient")))
        if "synthetic" not in label:
            for k, v in zip("gumo", vals):
                if v is not None:
                    sums[k].append(v)
        p95 = " / ".join(f"{pol[p]['cost']['p95'] / pol[p]['od_mean_cost']:.3f}" if p in pol
                         else "-" for p in ("greedy", "up", "mdp-zones"))
        misses = pol["mdp-zones"]["misses_up_met"] if "mdp-zones" in pol else "-"
        print(f"| {label} | " + " | ".join(map(fmt4, vals)) + f" | {p95} | {misses} |")
    if sums["u"]:
        avg = {k: (sum(v) / len(v) if v else None) for k, v in sums.items()}
        print(f"| **mean over the {len(sums['u'])} real markets** | "
              + " | ".join(fmt4(avg[k]) for k in "gumo") + " | | |")
    print("\n### Multi-zone: fitted parameters of mdp and mdp-zones\n")
    print("| market | params |")
    print("|---|---|")
    for label, j, _, _, _ in results:
        for name in ("mdp", "mdp-zones"):
            s = j["markets"][0]["policies"].get(name)
            if s is not None:
                print(f"| {label} ({name}) | "
                      + ", ".join(f"{k}={v}" for k, v in s["params"].items()) + " |")
    runs = sum(j["simulated_runs"] for _, j, _, _, _ in results)
    print(f"\nWall time of the multi-zone pass: {total:.1f} s ({runs} simulated runs, "
          f"{args.mz_samples} starts per market part)")


def label(folder):
    """A folder's name in the tables: a shared folder's path under the data,
    or the last part of your own."""
    return os.path.basename(folder.rstrip("/")) if os.path.isabs(folder) else folder


def fmt4(v):
    return "-" if v is None else f"{v:.4f}"


def dollars(market, policy):
    """A market's mean cost of `policy` over up's on the same starts."""
    ps = market["policies"]
    return ps[policy]["cost"]["mean"] / ps["up"]["cost"]["mean"]


def ratio(s):
    r = s["ratio_to_up"]
    return f"{r['mean']:.4f} [{r['ci95'][0]:.4f}, {r['ci95'][1]:.4f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spot", default="build/bin/spot")
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--out", default="build/leaderboard")
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--policies", default="od,greedy,up,hazard-up,forecast-up,mdp")
    ap.add_argument("--multi-zone", action="store_true",
                    help="run the multi-zone pass (instead of the single-zone leaderboard)")
    ap.add_argument("--mz-samples", type=int, default=100)
    ap.add_argument("--mz-policies", default=MZ_POLICIES,
                    help="policies of the multi-zone pass (od and up are always needed)")
    ap.add_argument("--checkpoint-gb", type=float, default=50)
    ap.add_argument("--folder", action="append", default=[],
                    help="a folder of your own trace files, scored instead of the shared ones "
                         "(repeatable)")
    ap.add_argument("--nodes", type=int, default=1, help="--folder: the job's gang")
    ap.add_argument("--ondemand-price", type=float, default=None,
                    help="--folder: on-demand $/h (default: the traces' own, else 3)")
    ap.add_argument("--prices", default=None, help="--folder: a spot price change-point CSV")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.multi_zone:
        if args.folder:
            sys.exit("--folder scores single zones; for one multi-zone market run "
                     "`spot sim eval --multi-zone --protocol time-split --trace ...`")
        multi_zone(args)
        return
    policies = [p for p in args.policies.split(",") if p != "up"]
    t0 = time.monotonic()
    results = []
    folders = FOLDERS
    if args.folder:
        folders = [(os.path.abspath(f), os.path.abspath(args.prices) if args.prices else None,
                    dict(k=args.ondemand_price, nodes=args.nodes)) for f in args.folder]
    for folder, prices, job in folders:
        for protocol in PROTOCOLS:
            j, secs = run(args, folder, prices, job, protocol)
            results.append((folder, protocol, j, secs))
            print(f"{label(folder)} {protocol}: {secs:.1f} s", file=sys.stderr)
    total = time.monotonic() - t0

    print("### Pooled: mean cost / up's on the same starts [95% bootstrap interval]\n")
    print("| folder | protocol | up mean $ | " + " | ".join(policies) + " |")
    print("|---|---|---|" + "---|" * len(policies))
    for folder, protocol, j, _ in results:
        pooled = j["pooled"]
        cells = [ratio(pooled[p]) for p in policies]
        print(f"| {label(folder)} | {protocol} | {pooled['up']['cost']['mean']:.2f} | "
              + " | ".join(cells) + " |")
    print("\n### The seeds' claims, out of sample (loo): saving against on-demand on the same "
          "start, mean [95% bootstrap interval] and the best start ('up to'); time restarting "
          "(changeovers x d) per hour of compute, mean\n")
    claims = [p for p in args.policies.split(",") if p != "od"]
    print("| folder | " + " | ".join(claims) + " |")
    print("|---|" + "---|" * len(claims))
    for folder, protocol, j, _ in results:
        if protocol != "loo":
            continue
        cells = []
        for p in claims:
            sv = j["pooled"][p]["savings_vs_od"]
            rs = j["pooled"][p]["restart_share"]
            cells.append(f"{100 * sv['mean']:.1f}% [{100 * sv['ci95'][0]:.1f}, "
                         f"{100 * sv['ci95'][1]:.1f}], up to {100 * sv['max']:.1f}%; "
                         f"restart {100 * rs['mean']:.2f}%")
        print(f"| {label(folder)} | " + " | ".join(cells) + " |")
    print("\n### Per zone, in short: the worst zone's mean of cost / up's on the same start, "
          "and its ratio of mean costs (dollars, $); the zones whose p95 cost is above "
          "on-demand's\n")
    ours = [p for p in policies if p not in ("od", "greedy")]
    print("| folder | protocol | zones | " + " | ".join(f"{p} worst zone" for p in ours)
          + " | p95 > od: " + " / ".join(["up"] + ours) + " |")
    print("|---|---|---|" + "---|" * len(ours) + "---|")
    for folder, protocol, j, _ in results:
        ms = j["markets"]
        worst = []
        for p in ours:
            m = max(ms, key=lambda m: m["policies"][p]["ratio_to_up"]["mean"])
            d = max(ms, key=lambda m: dollars(m, p))
            worst.append(f"{m['policies'][p]['ratio_to_up']['mean']:.4f} ({m['name']}); "
                         f"$ {dollars(d, p):.4f} ({d['name']})")
        above = [sum(m["policies"][p]["cost"]["p95"] > m["policies"][p]["od_mean_cost"] * (1 + 1e-9)
                     for m in ms) for p in ["up"] + ours]
        print(f"| {label(folder)} | {protocol} | {len(ms)} | " + " | ".join(worst) + " | "
              + " / ".join(map(str, above)) + " |")
    print("\n### Per zone: mean cost / up's; p95 cost / on-demand's; misses where up met\n")
    print("| folder | protocol | zone | prices | " + " | ".join(args.policies.split(",")) + " |")
    print("|---|---|---|---|" + "---|" * len(args.policies.split(",")))
    for folder, protocol, j, _ in results:
        for m in j["markets"]:
            cells = []
            for p in args.policies.split(","):
                s = m["policies"][p]
                flag = " **p95>od**" if s["cost"]["p95"] > s["od_mean_cost"] * (1 + 1e-9) else ""
                miss = f" miss {s['misses_up_met']}" if s["misses_up_met"] else ""
                cells.append(f"{s['ratio_to_up']['mean']:.3f} / {s['cost']['p95'] / s['od_mean_cost']:.3f}"
                             f"{flag}{miss}")
            print(f"| {label(folder)} | {protocol} | {m['name']} | {m['prices']} | " + " | ".join(cells) + " |")
    print("\n### Fitted parameters\n")
    print("| folder | protocol | zone | policy | params |")
    print("|---|---|---|---|---|")
    for folder, protocol, j, _ in results:
        for m in j["markets"]:
            for p, s in m["policies"].items():
                if s["fitted"]:
                    params = ", ".join(f"{k}={v}" for k, v in s["params"].items())
                    f = s["fit"]
                    if f.get("kept_defaults"):
                        se = f["saving_se"]
                        params += (f" (defaults kept: the cheapest point saved "
                                   f"${f['saving_vs_defaults']:.2f} a start, standard error "
                                   + (f"${se:.2f})" if se is not None else "unknown)"))
                    print(f"| {label(folder)} | {protocol} | {m['name']} | {p} | {params} |")
    dt = None if args.folder else decision_time(args)
    if dt:
        per_tick, gap = dt
        print(f"\nmdp decision time per tick (at most; simulation included): {per_tick * 1e6:.1f} us, "
              f"{per_tick / gap:.2e} of a {gap:.0f} s tick")
    runs = sum(j["simulated_runs"] for _, _, j, _ in results)
    print(f"\nWall time of the whole leaderboard: {total:.1f} s ({runs} simulated runs, "
          f"{args.samples} starts per market part)")


if __name__ == "__main__":
    main()
