#!/usr/bin/python3
"""The tuner's cost model against measurement: all-reduce (float32 sum, out of place, shared
memory) on 2, 4 and 8 local ranks from 8 B to 64 MiB, with the ring and the tree forced (and
recursive doubling and one-shot up to 1 MiB), beside the model's predictions for each
(weft-topo --predict) and the tuner's own choice. Prints the tables and records them in
bench/results/YYYY-MM-DD-tuner-accuracy.md.

Targets (reported, not enforced): predictions within 25% of the measured time where the machine
is quiet, and the tuner never choosing an algorithm measured more than 1.5x slower than the
best one at that size.

    bench/tuner_accuracy.py [--quick] [--no-record] [--name LABEL]     (BUILD_DIR: default build/)
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
ALGOS = {"ring": "ring", "tree": "tree", "rd": "recursive-doubling", "oneshot": "one-shot"}


def run_perf(nranks, algo, max_bytes, iters, work):
    path = os.path.join(work, f"{nranks}-{algo or 'tuner'}.json")
    env = dict(os.environ, WEFT_TRANSPORT="shm")
    if algo:
        env["WEFT_ALGO"] = f"allreduce:{algo}"
    cmd = [os.path.join(BUILD, "bin", "weftrun"), "-n", str(nranks), os.path.join(BUILD, "bin", "weft-perf"),
           "allreduce", "-b", "8", "-e", max_bytes, "-f", "4", "-n", str(iters), "-w", "3", "-c", "0", "-J", path]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(path, encoding="utf-8") as f:
        return {row["size"]: row["oop"]["time_us"] for row in json.load(f)}


def predictions(nranks):
    out = subprocess.run([os.path.join(BUILD, "bin", "weft-topo"), "--predict", str(nranks)], check=True,
                         capture_output=True, text=True).stdout
    return {row["size"]: row for row in map(json.loads, out.splitlines())}


def human(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 and 4 ranks, up to 4 MiB, 5 iterations")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--name", default="", help="appended to the results file's name, e.g. a run's label")
    args = parser.parse_args()
    rank_counts = [2, 4] if args.quick else [2, 4, 8]
    top, iters = ("4M", 5) if args.quick else ("64M", 10)
    loadavg = open("/proc/loadavg").read().split()[:3]
    sections, errors, bad_choices = [], [], []
    with tempfile.TemporaryDirectory() as work:
        for n in rank_counts:
            measured = {a: run_perf(n, a, top if a in ("ring", "tree") else "1M", iters, work) for a in ALGOS}
            tuner = run_perf(n, None, top, iters, work)
            predicted = predictions(n)
            rows = []
            for size in sorted(tuner):
                p = predicted.get(size, {})
                cells = [human(size)]
                for a, name in ALGOS.items():
                    m = measured[a].get(size)
                    pr = p.get(name)
                    if m is not None and pr is not None and a in ("ring", "tree"):
                        errors.append(abs(pr - m) / m)
                    cells.append(f"{m:.1f} / {pr:.1f}" if m is not None and pr is not None else "-")
                best = min(measured[a][size] for a in ALGOS if size in measured[a])
                choice = p.get("choice", "?")
                ratio = tuner[size] / best if best > 0 else float("nan")
                if ratio > 1.5:
                    bad_choices.append(f"{n} ranks {human(size)}: {choice} {tuner[size]:.1f} us vs best {best:.1f} us")
                cells += [choice, f"{tuner[size]:.1f}", f"{ratio:.2f}"]
                rows.append(cells)
            sections.append((n, rows))
    loadavg_after = open("/proc/loadavg").read().split()[:3]

    header = ["size"] + [f"{a} measured / predicted (us)" for a in ALGOS] + ["tuner's choice", "choice measured (us)",
                                                                              "choice / best measured"]
    errors.sort()
    within = sum(e <= 0.25 for e in errors)
    median = errors[len(errors) // 2] if errors else float("nan")
    lines = []
    for n, rows in sections:
        lines += [f"## {n} ranks{' (oversubscribed: 2 cores)' if n > (os.cpu_count() or n) else ''}", "",
                  "| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines.append("")
    verdicts = [
        f"- ring and tree predictions within 25% of measurement: {within} of {len(errors)} "
        f"(median error {median:.0%}): **{'MET' if errors and within == len(errors) else 'MISSED'}**",
        f"- tuner's choice never > 1.5x the best measured: **{'MET' if not bad_choices else 'MISSED'}**"
        + ("" if not bad_choices else " (" + "; ".join(bad_choices) + ")"),
    ]
    print("\n".join(verdicts + [""] + lines))
    if args.no_record:
        return 0
    today = datetime.date.today().isoformat()
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    suffix = ("-quick" if args.quick else "") + (f"-{args.name}" if args.name else "")
    path = os.path.join(ROOT, "bench", "results", f"{today}-tuner-accuracy{suffix}.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join([
            f"# Tuner: predicted vs measured all-reduce, {today}", "",
            "Float32 sum, out of place, WEFT_TRANSPORT=shm, weft-perf -f 4, times per iteration (max over ranks). "
            "Each algorithm forced with WEFT_ALGO=allreduce:ALGO (recursive doubling and one-shot up to 1 MiB); "
            "predictions from the default shared-memory link costs (weft-topo --predict N); the tuner's choice run "
            "with no WEFT_ALGO.", "",
            f"- Machine: {os.uname().nodename}, {os.cpu_count()} CPUs; load average before {' '.join(loadavg)}, "
            f"after {' '.join(loadavg_after)}",
            f"- Weft revision: {commit}",
            f"- Command: bench/tuner_accuracy.py{' --quick' if args.quick else ''}"
            f"{' --name ' + args.name if args.name else ''}", "",
            *verdicts, "", *lines]))
    print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
