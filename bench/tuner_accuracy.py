#!/usr/bin/python3
"""The tuner's cost model against measurement: all-reduce (float32 sum, out of place, shared
memory) on 2, 4 and 8 local ranks from 8 B to 32 MiB, with the ring and the tree forced (and
recursive doubling and one-shot up to 512 KiB), beside the model's predictions for each
(weft-topo --predict; with --tune measure, the predictions the communicators logged at
WEFT_DEBUG=INFO after fitting the model to all-reduces timed at init, each algorithm's from
the runs that timed it) and the tuner's own choice. Prints the tables and records them in
bench/results/YYYY-MM-DD-tuner-accuracy.md (-2, -3, ... where the day has one already).

Targets (reported, not enforced): predictions within 25% of the measured time where the machine
is quiet, and the tuner never choosing an algorithm measured more than 1.5x slower than the
best one at that size.

    bench/tuner_accuracy.py [--quick] [--tune measure] [--no-record] [--name LABEL]   (BUILD_DIR: default build/)
"""

import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

from compare_table import unused_record_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
ALGOS = {"ring": "ring", "tree": "tree", "rd": "recursive-doubling", "oneshot": "one-shot"}


def fail(message, status=1):
    """Exits with `status` after one line on stderr, named for the script that runs."""
    print(f"{os.path.basename(sys.argv[0])}: {message}", file=sys.stderr)
    sys.exit(status)


def tool(name):
    """BUILD_DIR's bin/NAME; exits 1 where it is not built."""
    path = os.path.join(BUILD, "bin", name)
    if not os.access(path, os.X_OK):
        fail(f"{path} is missing; build the tree first (cmake --build {BUILD}) or point BUILD_DIR at one")
    return path


def run_perf(nranks, algo, min_bytes, max_bytes, iters, work, log_choices=False, log_predictions=False):
    """Times per size; with log_choices, also the algorithm the communicator chose per size and
    its predicted time for each algorithm (from its WEFT_DEBUG=INFO lines); with
    log_predictions, the times and those predictions."""
    path = os.path.join(work, f"{nranks}-{algo or 'tuner'}.json")
    env = dict(os.environ, WEFT_TRANSPORT="shm")  # and main's WEFT_TUNE
    if algo:
        env["WEFT_ALGO"] = f"allreduce:{algo}"
    if log_choices or log_predictions:
        env["WEFT_DEBUG"] = "INFO"
    cmd = [tool("weftrun"), "-n", str(nranks), tool("weft-perf"),
           "allreduce", "-b", min_bytes, "-e", max_bytes, "-f", "4", "-n", str(iters), "-w", "3", "-c", "0",
           "-J", path]
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE if log_choices or log_predictions else None, text=True)
    if done.returncode != 0:
        if done.stderr:
            sys.stderr.write(done.stderr)
        fail(f"weft-perf on {nranks} ranks ({algo or 'nothing forced'}, {min_bytes} to {max_bytes} B) failed "
             f"(exit status {done.returncode})")
    with open(path, encoding="utf-8") as f:
        times = {row["size"]: row["oop"]["time_us"] for row in json.load(f)}
    if log_predictions:
        return times, logged_predictions(done.stderr)
    if not log_choices:
        return times
    chosen = {int(m.group(1)): m.group(2)
              for m in re.finditer(r"all-reduce of (\d+) bytes on \d+ ranks: ([a-z-]+)", done.stderr)}
    return times, chosen, logged_predictions(done.stderr)


def logged_predictions(text):
    """{size: {algorithm: us}} from the WEFT_DEBUG=INFO lines "all-reduce of B bytes in 4-byte
    elements on N ranks, predicted: ring 12.1 us, tree 13.0 us, ..." in `text`: the float32 calls
    measured, not weft-perf's own 8-byte ones (a double), which the model may price otherwise."""
    return {int(m.group(1)): {name: float(us) for name, us in re.findall(r"([a-z-]+) ([\d.]+) us", m.group(2))}
            for m in re.finditer(r"all-reduce of (\d+) bytes in 4-byte elements on \d+ ranks, predicted: (.*)", text)}


def measure_all(nranks, top, repeats, work, own_predictions=False):
    """Per algorithm (forced), the median over `repeats` runs of each size. The algorithms take
    turns within each repeat, so that a noisy spell of the machine hits all of them alike. Small
    sizes (to 512 KiB) run many iterations, since one descheduling of an oversubscribed rank
    would swamp a short average; large ones (recursive doubling and one-shot stop at 512 KiB)
    run few.

    With own_predictions (WEFT_TUNE=measure), also the median over the same runs of what each
    run's communicators predicted for the algorithm they ran: each fits the model at its own
    init, so its prices and its times come from the same moment of the machine."""
    runs = {a: [] for a in ALGOS}
    priced = {a: [] for a in ALGOS}
    for _ in range(repeats):
        for a in ALGOS:
            times, predicted = {}, {}
            for low, high, iters in (("8", "512K", 100), ("2M", top, 10)):
                if low == "2M" and a not in ("ring", "tree"):
                    continue
                if own_predictions:
                    t, p = run_perf(nranks, a, low, high, iters, work, log_predictions=True)
                    predicted.update({size: row[ALGOS[a]] for size, row in p.items() if ALGOS[a] in row})
                else:
                    t = run_perf(nranks, a, low, high, iters, work)
                times.update(t)
            runs[a].append(times)
            priced[a].append(predicted)
    median = {a: {size: statistics.median(run[size] for run in runs[a]) for size in runs[a][0]} for a in ALGOS}
    own = {a: {size: statistics.median(p[size] for p in priced[a] if size in p)
               for size in runs[a][0] if any(size in p for p in priced[a])} for a in ALGOS}
    return median, own


def communicator_choices(nranks, top, work):
    """The algorithm each size ran with when nothing was forced, and the predictions it was
    chosen by, as the communicator logged them."""
    _, small, small_predicted = run_perf(nranks, None, "8", "512K", 3, work, log_choices=True)
    _, large, large_predicted = run_perf(nranks, None, "2M", top, 1, work, log_choices=True)
    chosen = {**small, **large}
    return chosen, {size: dict(p, choice=chosen.get(size)) for size, p in {**small_predicted, **large_predicted}.items()}


def cpu_pair_latency():
    """The cross-CPU cache-line round trip over 2 s (cpu-pair-latency's summary), or None where
    the tool is not built or this machine has one CPU."""
    path = os.path.join(BUILD, "bin", "cpu-pair-latency")
    if not os.path.exists(path):
        return None
    done = subprocess.run([path], capture_output=True, text=True)
    match = re.search(r"min (\d+) median (\d+) max (\d+)", done.stdout)
    return "{1} ns (min {0}, max {2})".format(*match.groups()) if done.returncode == 0 and match else None


class SyntheticError(ValueError):
    """hwloc did not take a synthetic description."""


def predictions(nranks, synthetic=""):
    """weft-topo --predict's rows by size, for this host or, with `synthetic`, for the host that
    hwloc synthetic description gives (HWLOC_SYNTHETIC). hwloc ignores a description it cannot
    parse and reads the live machine instead: that raises SyntheticError, told by the topology
    weft-topo dumps (WEFT_TOPO_DUMP_FILE), which names its backend."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as work:
        dump = os.path.join(work, "topology.xml")
        if synthetic:
            env["HWLOC_SYNTHETIC"] = synthetic
            env["WEFT_TOPO_DUMP_FILE"] = dump
            env.pop("WEFT_TOPO_FILE", None)  # it would take precedence
        command = [tool("weft-topo"), "--predict", str(nranks)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            fail(f"{' '.join(command)} failed (exit status {done.returncode}): {done.stderr.strip()}")
        if synthetic:
            try:
                with open(dump, encoding="utf-8") as f:
                    took = re.search(r'<info\s+name="Backend"\s+value="Synthetic"', f.read()) is not None
            except OSError as e:
                raise SyntheticError(f"weft-topo dumped no topology to check it by ({e.strerror})") from e
            if not took:
                raise SyntheticError("hwloc did not accept it (it read the live machine instead)")
    return {row["size"]: row for row in map(json.loads, done.stdout.splitlines())}


def human(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def positive_int(text):
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 and 4 ranks, up to 8 MiB, one run")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="runs per configuration (at least 1); the median is kept")
    parser.add_argument("--tune", choices=("defaults", "measure"), default="defaults",
                        help="WEFT_TUNE for every run; measure: the predictions are the communicators' own")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--name", default="", help="appended to the results file's name, e.g. a run's label")
    args = parser.parse_args()
    for name in ["weftrun", "weft-perf"] + (["weft-topo"] if args.tune == "defaults" else []):
        tool(name)  # before any run
    os.environ["WEFT_TUNE"] = args.tune  # for every run
    rank_counts = [2, 4] if args.quick else [2, 4, 8]
    top, repeats = ("8M", 1) if args.quick else ("32M", args.repeats)
    loadavg = open("/proc/loadavg").read().split()[:3]
    round_trip = cpu_pair_latency()
    sections, errors, bad_choices, unverified, mismatches = [], [], [], [], []
    choice_run_errors = []  # --tune measure: the same times against the choice run's own predictions
    with tempfile.TemporaryDirectory() as work:
        for n in rank_counts:
            measured, own = measure_all(n, top, repeats, work, own_predictions=args.tune == "measure")
            chosen, logged = communicator_choices(n, top, work)
            if args.tune == "measure":  # each algorithm priced by the runs that timed it
                predicted = {size: dict(p, **{ALGOS[a]: own[a][size] for a in ALGOS if size in own[a]})
                             for size, p in logged.items()}
            else:
                predicted = predictions(n)
            rows = []
            for size in sorted(measured["ring"]):
                p = predicted.get(size, {})
                cells = [human(size)]
                for a, name in ALGOS.items():
                    m = measured[a].get(size)
                    pr = p.get(name)
                    if m is not None and pr is not None and a in ("ring", "tree"):
                        errors.append(abs(pr - m) / m)
                        other = logged.get(size, {}).get(name) if args.tune == "measure" else None
                        if other is not None:
                            choice_run_errors.append(abs(other - m) / m)
                    cells.append(f"{m:.1f} / {pr:.1f}" if m is not None and pr is not None else "-")
                best = min(measured[a][size] for a in ALGOS if size in measured[a])
                choice = p.get("choice", "?")
                if chosen.get(size) != choice:
                    mismatches.append(f"{n} ranks {human(size)}: model {choice}, communicator {chosen.get(size)}")
                key = next((a for a, name in ALGOS.items() if name == choice), None)
                choice_us = measured.get(key, {}).get(size, float("nan"))
                ratio = choice_us / best if best > 0 else float("nan")
                if math.isnan(ratio):  # the choice was not measured at this size: not a pass
                    unverified.append(f"{n} ranks {human(size)}: {choice} not measured")
                elif ratio > 1.5:
                    bad_choices.append(f"{n} ranks {human(size)}: {choice} {choice_us:.1f} us vs best {best:.1f} us")
                cells += [choice, f"{choice_us:.1f}", f"{ratio:.2f}"]
                rows.append(cells)
            sections.append((n, rows))
    loadavg_after = open("/proc/loadavg").read().split()[:3]
    round_trip_after = cpu_pair_latency()

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
    other_pairing = [] if not choice_run_errors else [
        f"- for comparison, the same times against the predictions of the one run with nothing forced "
        f"(how this script paired them before 2026-11-27): {sum(e <= 0.25 for e in choice_run_errors)} of "
        f"{len(choice_run_errors)} within 25%"]
    verdicts = [
        f"- ring and tree predictions within 25% of measurement: {within} of {len(errors)} "
        f"(median error {median:.0%}): **{'MET' if errors and within == len(errors) else 'MISSED'}**",
        f"- tuner's choice never > 1.5x the best measured: "
        f"**{'MISSED' if bad_choices else 'INCOMPLETE' if unverified else 'MET'}**"
        + ("" if not bad_choices + unverified else " (" + "; ".join(bad_choices + unverified) + ")"),
        "- the communicator ran the model's choice at every size: not checked (with --tune measure the model's "
        "choice is the one the communicator logged)" if args.tune == "measure" else
        f"- the communicator ran the model's choice at every size: {'yes' if not mismatches else 'NO'}"
        + ("" if not mismatches else " (" + "; ".join(mismatches) + ")"),
    ] + other_pairing
    print("\n".join(verdicts + [""] + lines))
    if args.no_record:
        return 0
    today = datetime.date.today().isoformat()
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    suffix = ("-quick" if args.quick else "") + ("-measured" if args.tune == "measure" else "") + \
        (f"-{args.name}" if args.name else "")
    path = unused_record_path(os.path.join(ROOT, "bench", "results"), f"{today}-tuner-accuracy{suffix}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join([
            f"# Tuner: predicted vs measured all-reduce, {today}", "",
            "Float32 sum, out of place, WEFT_TRANSPORT=shm, weft-perf -f 4, times per iteration (max over ranks), "
            f"median of {repeats} run(s): 100 iterations up to 512 KiB, 10 above. "
            "Each algorithm forced with WEFT_ALGO=allreduce:ALGO (recursive doubling and one-shot up to 512 KiB); "
            + ("predictions as the communicators logged them with WEFT_TUNE=measure (the model fitted to "
               "all-reduces they timed at init): each algorithm's, the median of what the runs that timed it "
               "predicted for it, so that prices and times come from the same communicators; the choice, from "
               "a run with nothing forced. "
               if args.tune == "measure" else
               "predictions from the default shared-memory link costs (weft-topo --predict N). ")
            + "The tuner's choice is "
            "the model's, checked against what the communicator logged with no WEFT_ALGO; its time is that "
            "algorithm's forced median.", "",
            f"- Machine: {os.uname().nodename}, {os.cpu_count()} CPUs; load average before {' '.join(loadavg)}, "
            f"after {' '.join(loadavg_after)}",
            f"- Cross-CPU cache-line round trip (cpu-pair-latency, 2 s): before {round_trip or 'not measured'}, "
            f"after {round_trip_after or 'not measured'}",
            f"- Weft revision: {commit}",
            f"- Command: bench/tuner_accuracy.py{' --quick' if args.quick else ''}"
            f"{' --tune measure' if args.tune == 'measure' else ''}"
            f"{' --name ' + args.name if args.name else ''}", "",
            *verdicts, "", *lines]))
    print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
