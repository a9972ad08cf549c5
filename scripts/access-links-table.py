#!/usr/bin/env python3
"""One compact Markdown table per lab JSON file written by scripts/access-links.sh.

    scripts/access-links-table.py lab-access/cubic-*.json

Per case: the median critical completion time of `simultaneous` and `late` (ms, with the
90th percentile), and the fixture's median goodput (Mbit/s, both workloads) with its
ratio to stock's over paired repeats (the median of case / stock within each repeat and
workload); with cross traffic also the median bottleneck share. Failed runs are counted.
"""
import json
import statistics
import sys


def percentile(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def table(path):
    data = json.load(open(path))
    config = data["config"]
    runs = [r for r in data["results"] if r.get("completed", True)]
    failed = len(data["results"]) - len(runs)
    cross = config["link"].get("cross_flows", 0) > 0
    by = {}
    for r in runs:
        by.setdefault(r["case"], []).append(r)
    stock = {(r["workload"], r["repeat"]): r for r in by.get("stock", [])}
    head = "| case | simultaneous ms (p90) | late ms (p90) | goodput Mbit/s | x stock (paired) |"
    rule = "|---|---|---|---|---|"
    if cross:
        head += " bottleneck share |"
        rule += "---|"
    lines = [
        f"{config['link']['description']}; {config['repeats']} repeats, seed {config['seed']}"
        + (f"; {failed} runs failed" if failed else "; every run completed"),
        "",
        head,
        rule,
    ]
    for case in config["cases"]:
        rs = by.get(case, [])
        if not rs:
            continue
        cells = []
        for w in ("simultaneous", "late"):
            t = [r["critical_complete_ms"] for r in rs if r["workload"] == w]
            cells.append(f"{statistics.median(t):.1f} ({percentile(t, 90):.1f})")
        goodput = statistics.median(r["fixture_goodput_mbit"] for r in rs)
        ratios = [
            r["fixture_goodput_mbit"] / stock[(r["workload"], r["repeat"])]["fixture_goodput_mbit"]
            for r in rs
            if (r["workload"], r["repeat"]) in stock
        ]
        ratio = f"{statistics.median(ratios):.3f}" if ratios else "-"
        row = f"| {case} | {cells[0]} | {cells[1]} | {goodput:.2f} | {ratio} |"
        if cross:
            share = statistics.median(r["bottleneck_share"] for r in rs)
            row += f" {share:.3f} |"
        lines.append(row)
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(table(p) for p in sys.argv[1:]))
