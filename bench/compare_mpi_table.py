#!/usr/bin/python3
"""Joins weft-perf, mpi-bench and mem-bound-probe JSON output into side-by-side tables.

Called by `bench/compare --peer mpi`; usable on its own:

    bench/compare_mpi_table.py --run 2 weft2.json mpi2.json probe2.json \\
        [--run 4 weft4.json mpi4.json probe4.json] [--record-dir bench/results]
    bench/compare_mpi_table.py --collective broadcast --run 2 weft2.json mpi2.json ...

The all-reduce inputs use weft-perf's -J schema (see compare_table.py, whose readers this
script reuses); the probe input is mem-bound-probe's -J array of
    {"size": B, "nprocs": n, "copy_gbps": x, "memcpy_gbps": .., "stream_copy_gbps": .., "sum_gbps": y, ...}
(per-process GB/s with n processes running at once, minimum over processes). The memory bound
for busbw is copy_gbps at the same size, the faster of memcpy and a streaming-store copy (see
bench/mem_bound_probe.cc).

Each JSON argument may be a comma-separated list of runs of the same sweep (bench/compare
--repeats); the table then holds the per-size medians (where the lists of one --run differ in
length, each list's medians over all its runs, with a warning, and no --round-speeds). With
--round-speeds NRANKS B/A,B/A,...
(cpu-pair-latency's median before and after each round, in ns), a round whose two readings lie
more than 1.5x apart (the machine changed speed during it, and timed Weft and its peer at
different speeds) is left out where other rounds remain, and so is a steady round more than
1.5x slower than the fastest steady one (a median over rounds at two speeds pairs neither).
Each --run is one rank count and gets its own table and verdicts. Targets (reported, never
enforced through the exit status), for all-reduce:
  * Weft's busbw >= 2x Open MPI's at every size >= 1 MiB;
  * Weft's busbw >= 70% of the memory bound at every size >= 16 MiB;
  * Weft's 8-byte time <= Open MPI's: with --latency-pair runs for that rank count, the median
    over its steady pairs (readings within 1.5x of each other) of Weft's time / Open MPI's, each
    pair's two runs side by side; else the sweeps' 8-byte medians;
and for broadcast and all-gather (no probe input):
  * Weft's busbw >= Open MPI's at every size >= 64 KiB.

Exit status: 0 when the inputs were read and every row's data check passed ("wrong": 0 in
both placements; whether or not the targets were met), 1 when an input cannot be used (it holds
no usable row, say) or a data check failed (wrong elements, or "wrong" not a count), 2 for bad
usage.
"""

import argparse
import datetime
import json
import statistics
import os
import platform
import subprocess
import sys

from compare_table import (InputError, fmt, fmt_bw, human_size, load_median_rows, metric, unused_record_path,
                           wrong_rows)

MIB = 1 << 20
BUSBW_TARGET_MIN_SIZE = MIB
BUSBW_TARGET_RATIO = 2.0
BOUND_TARGET_MIN_SIZE = 16 * MIB
BOUND_TARGET_FRACTION = 0.70
LATENCY_SIZE = 8
OTHER_TARGET_MIN_SIZE = 64 * 1024
# What each collective is called in the record, and how its busbw is defined.
COLLECTIVES = {
    "allreduce": ("All-reduce", "MPI_Allreduce (float32 sum)", "2(n-1)/n"),
    "broadcast": ("Broadcast", "MPI_Bcast (float32, root 0; in place by nature, so Weft's in-place "
                  "weftBcast is compared)", "1"),
    "allgather": ("All-gather", "MPI_Allgather (float32; size = the whole output, size/n per rank)",
                  "(n-1)/n"),
}


def warn(message):
    print(f"compare_mpi_table: warning: {message}", file=sys.stderr)


def load_probe(path):
    """Returns {size: copy GB/s} from mem-bound-probe's JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"cannot read probe results {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise InputError(f"probe results {path} are not valid JSON: {e}") from e
    if not isinstance(data, list):
        raise InputError(f"probe results {path}: expected a JSON array of rows")
    bound = {}
    for index, row in enumerate(data):
        try:
            size, copy = int(row["size"]), row["copy_gbps"]
            if isinstance(copy, bool) or not isinstance(copy, (int, float)):
                raise TypeError("copy_gbps is not a number")
        except (KeyError, TypeError, ValueError) as e:
            warn(f"probe row {index} skipped: malformed ({e!r})")
            continue
        bound.setdefault(size, float(copy))
    if not bound:
        raise InputError(f"probe results {path} hold no usable rows")
    return bound


def median_probe(paths):
    """load_probe over several runs: per size, the median copy rate."""
    runs = [load_probe(path) for path in paths]
    return {size: statistics.median(run[size] for run in runs if size in run)
            for size in set().union(*runs)}


STEADY_SPEED_RATIO = 1.5


def steady_rounds(speeds, rounds):
    """The indexes of the rounds to keep, and a line for the record: the rounds whose machine
    speed held (readings within STEADY_SPEED_RATIO of each other), or every round where none
    did. `speeds` is "B/A,B/A,..." or None."""
    if not speeds:
        return list(range(rounds)), None
    try:
        pairs = [tuple(float(v) for v in item.split("/")) for item in speeds.split(",")]
        if len(pairs) != rounds or any(len(p) != 2 or min(p) <= 0 for p in pairs):
            raise ValueError
    except ValueError:
        warn(f"--round-speeds '{speeds}' does not give a before/after pair for each of {rounds} rounds: ignored")
        return list(range(rounds)), None
    steady = [i for i, p in enumerate(pairs) if max(p) / min(p) <= STEADY_SPEED_RATIO]
    readings = ", ".join(f"round {i + 1}: {p[0]:.0f}/{p[1]:.0f}" for i, p in enumerate(pairs))
    line = f"machine speed (cpu-pair-latency before/after each round, ns): {readings}"
    if not steady:
        return list(range(rounds)), line + "; the speed changed in every round: all kept"
    # Medians over rounds at two speeds would pair neither: keep the fastest steady speed's.
    fastest = min(max(pairs[i]) for i in steady)
    keep = [i for i in steady if max(pairs[i]) <= STEADY_SPEED_RATIO * fastest]
    if len(keep) == rounds:
        return keep, line + "; every round kept"
    def named(ids):
        return f"round{'s' if len(ids) > 1 else ''} {', '.join(ids)}"

    reasons = []
    changed = [str(i + 1) for i in range(rounds) if i not in steady]
    slower = [str(i + 1) for i in steady if i not in keep]
    if changed:
        reasons.append(f"{named(changed)} (the speed changed during {'them' if len(changed) > 1 else 'it'})")
    if slower:
        reasons.append(f"{named(slower)} (steady, but over {STEADY_SPEED_RATIO:g}x slower than the fastest "
                       "steady round)")
    return keep, line + "; left out: " + " and ".join(reasons)


def join(weft, mpi, bound, placement):
    """One dict per all-reduce size present on either side, in size order."""
    table = []
    for size in sorted(set(weft) | set(mpi)):
        w, m = weft.get(size), mpi.get(size)
        e = {
            "size": size,
            "weft_time": metric(w, placement, "time_us"),
            "mpi_time": metric(m, placement, "time_us"),
            "weft_busbw": metric(w, placement, "busbw"),
            "mpi_busbw": metric(m, placement, "busbw"),
            "bound": bound.get(size),
        }
        wb, mb, b = e["weft_busbw"], e["mpi_busbw"], e["bound"]
        e["ratio"] = wb / mb if wb is not None and mb else None
        e["of_bound"] = wb / b if wb is not None and b else None
        table.append(e)
    return table


def threshold_verdict(table, min_size, value_key, need, what):
    """MET when e[value_key] >= need at every size >= min_size (None counts as missing)."""
    big = [e for e in table if e["size"] >= min_size]
    if not big:
        return "NO DATA", f"no size >= {human_size(min_size)} in the sweep"
    missing = [e for e in big if e[value_key] is None]
    below = [e for e in big if e[value_key] is not None and e[value_key] < need]
    if below:
        sizes = ", ".join(f"{human_size(e['size'])} ({e[value_key]:.2f})" for e in below)
        return "MISSED", f"{what} below {need:g} at {sizes}"
    if missing:
        sizes = ", ".join(human_size(e["size"]) for e in missing)
        return "INCOMPLETE", f"met where data exists, but no data for {sizes}"
    worst = min(big, key=lambda e: e[value_key])
    return "MET", (f"{len(big)} sizes from {human_size(big[0]['size'])} to "
                   f"{human_size(big[-1]['size'])}; lowest {what} {worst[value_key]:.2f} at "
                   f"{human_size(worst['size'])}")


def latency_verdict(table):
    e = next((e for e in table if e["size"] == LATENCY_SIZE), None)
    if e is None or e["weft_time"] is None or not e["mpi_time"]:
        return "NO DATA", f"the {LATENCY_SIZE}-byte row is missing on one side or both"
    ratio = e["weft_time"] / e["mpi_time"]
    detail = (f"Weft {e['weft_time']:.2f} us, Open MPI {e['mpi_time']:.2f} us, "
              f"ratio {ratio:.2f} (target <= 1)")
    return ("MET" if ratio <= 1.0 else "MISSED"), detail


def parse_speeds(text):
    """cpu-pair-latency readings "R0/R1/R2" (ns) around a pair's runs, or None where they are missing
    ("unknown")."""
    try:
        values = [float(v) for v in text.split("/")]
    except ValueError:
        return None
    return values if len(values) >= 2 and min(values) > 0 else None


def paired_latency(pairs):
    """The 8-byte verdict from side-by-side runs: `pairs` holds (weft_us, mpi_us, readings or None)
    per pair. Returns (status, detail, the steady flag of each pair)."""
    steady = [r is not None and max(r) / min(r) <= STEADY_SPEED_RATIO for _, _, r in pairs]
    used = [p for p, ok in zip(pairs, steady) if ok]
    note = f"{len(used)} of {len(pairs)} pairs steady"
    if not used:
        used = pairs
        note = ("no pair had speed readings: all kept" if all(r is None for _, _, r in pairs)
                else "the speed changed in every pair: all kept")
    ratios = [w / m for w, m, _ in used]
    ratio = statistics.median(ratios)
    wins = sum(1 for r in ratios if r <= 1.0)
    detail = (f"median Weft/Open MPI time ratio {ratio:.2f} over paired runs (target <= 1; {note}; "
              f"Weft at or under Open MPI in {wins} of {len(used)})")
    return ("MET" if ratio <= 1.0 else "MISSED"), detail, steady


def pair_lines(pairs, steady):
    lines = ["| pair | runs first | weft 8 B (us) | mpi 8 B (us) | weft / mpi | cpu-pair-latency before / "
             "between / after (ns) | steady |", "|---:|---|---:|---:|---:|---|---|"]
    for i, ((w, m, r), ok) in enumerate(zip(pairs, steady)):
        readings = " / ".join(f"{v:.0f}" for v in r) if r else "-"
        lines.append(f"| {i + 1} | {'weft' if i % 2 == 0 else 'mpi'} | {w:.2f} | {m:.2f} | {w / m:.2f} | "
                     f"{readings} | {'yes' if ok else 'no'} |")
    return lines


def verdicts_of(table, collective, paired=None):
    """The targets' verdicts; `paired` (status, detail), from paired runs, decides the 8-byte one
    in place of the sweeps' medians."""
    if collective != "allreduce":
        return [("busbw >= Open MPI's at every size >= 64 KiB",
                 *threshold_verdict(table, OTHER_TARGET_MIN_SIZE, "ratio", 1.0, "Weft/MPI busbw ratio"))]
    return [
        ("busbw >= 2x Open MPI at every size >= 1 MiB",
         *threshold_verdict(table, BUSBW_TARGET_MIN_SIZE, "ratio", BUSBW_TARGET_RATIO,
                            "Weft/MPI busbw ratio")),
        ("busbw >= 70% of the memory bound at every size >= 16 MiB",
         *threshold_verdict(table, BOUND_TARGET_MIN_SIZE, "of_bound", BOUND_TARGET_FRACTION,
                            "busbw/bound")),
        ("8-byte time <= Open MPI's", *(paired or latency_verdict(table))),
    ]


COLUMNS = ("size", "weft time (us)", "mpi time (us)", "weft busbw (GB/s)", "mpi busbw (GB/s)",
           "busbw ratio", "bound (GB/s)", "weft / bound")


def table_cells(table):
    return [(human_size(e["size"]), fmt(e["weft_time"]), fmt(e["mpi_time"]),
             fmt_bw(e["weft_busbw"]), fmt_bw(e["mpi_busbw"]), fmt(e["ratio"]),
             fmt_bw(e["bound"]), fmt(e["of_bound"]))
            for e in table]


def text_table(table):
    cells = table_cells(table)
    widths = [max(len(c[i]) for c in [COLUMNS] + cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(COLUMNS, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def markdown_table(table):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---:|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_cells(table)]
    return "\n".join(lines)


def command_output(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def machine_lines():
    model = None
    for line in (command_output(["lscpu"]) or "").splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
            break
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count()
    uname = command_output(["uname", "-a"]) or " ".join(platform.uname())
    return [f"- `uname -a`: {uname}", f"- CPU (lscpu model name): {model or 'unknown'}",
            f"- nproc: {nproc}"]


def write_record(args, sections):
    today = datetime.date.today().isoformat()
    suffix = (("-quick" if args.quick else "") + ("-bound" if args.bound else "")
              + ("-hostmem" if args.host_mem else ""))
    path = unused_record_path(args.record_dir, f"{today}-{args.collective}-vs-openmpi{suffix}")
    placement = "out-of-place" if args.placement == "oop" else "in-place"
    commands = [c for c in [args.compare_cmd] + (args.cmd or []) if c]
    title, mpi_call, factor = COLLECTIVES[args.collective]
    bound_text = ("bound = the all-reduce memory bound from mem-bound-probe in the same run: "
                  "per-process memcpy bandwidth at that size with n processes copying at once (see "
                  "bench/mem_bound_probe.cc); weft / bound = Weft busbw / bound. "
                  if args.collective == "allreduce" else "")
    lines = [
        f"# {title}: Weft over shm vs Open MPI, {today}{' (quick sweep)' if args.quick else ''}",
        "",
        f"Ranks on one machine. Weft runs with WEFT_TRANSPORT=shm; Open MPI runs {mpi_call} with "
        "its defaults (coll/tuned over the vader shared-memory BTL). Times are per iteration, "
        f"{placement}, the maximum over ranks; busbw = algbw * {factor} in GB/s; ratio = Weft "
        f"busbw / Open MPI busbw. {bound_text}Each rank count is a separate section; with more "
        "ranks than cores the ranks share cores (oversubscribed)"
        f"{', and the probe measures under the same sharing' if bound_text else ''}."
        + (" Weft's ranks (and the probe's) run under `weftrun --bind-to core` where there are "
           "at most 2 of them, as Open MPI binds its own by default." if args.bound else "")
        + (" Weft's buffers come from weftHostMemAlloc (weft-perf -H): all-reduces of 256 KiB or "
           "more read the peers' buffers directly (src/coll/direct_allreduce.cc); Open MPI's are "
           "plain host memory." if args.host_mem else ""),
        "",
        "## Machine",
        "",
        *machine_lines(),
        *([f"- Load average before the runs: {args.loadavg}"] if args.loadavg else []),
        *([f"- Load average after the runs: {args.loadavg_after}"] if args.loadavg_after else []),
        f"- Weft revision: {args.commit or 'unknown'}",
        "",
        "## Commands",
        "",
        "```",
        *commands,
        "```",
        "",
        *(["$WORK is a scratch directory that bench/compare removes afterwards.", ""]
          if any("$WORK" in c for c in commands) else []),
    ]
    for nranks, table, verdicts, rounds_line, pairs in sections:
        oversubscribed = nranks > (os.cpu_count() or nranks)
        lines += [
            f"## {nranks} ranks{' (oversubscribed)' if oversubscribed else ''}",
            "",
            *([f"Rounds: {rounds_line}.", ""] if rounds_line else []),
            "Targets:",
            "",
            *[f"- {name}: **{status}** ({detail})" for name, status, detail in verdicts],
            "",
            markdown_table(table),
            "",
        ]
        if pairs:
            lines += [f"Paired 8-byte runs ({nranks} ranks), in the order they ran:", "", *pairs, ""]
    os.makedirs(args.record_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", nargs="+", action="append", required=True,
                        metavar="NRANKS WEFT_JSON MPI_JSON [PROBE_JSON]",
                        help="one rank count's weft-perf, mpi-bench and (all-reduce) "
                             "mem-bound-probe -J outputs (repeatable)")
    parser.add_argument("--collective", choices=sorted(COLLECTIVES), default="allreduce",
                        help="the collective the runs timed (default: allreduce)")
    parser.add_argument("--placement", choices=("oop", "ip"), default="oop",
                        help="which timing to compare (default: out-of-place)")
    parser.add_argument("--record-dir", help="write YYYY-MM-DD-COLLECTIVE-vs-openmpi.md here")
    parser.add_argument("--host-mem", action="store_true",
                        help="Weft's buffers were from weftHostMemAlloc (recorded with a -hostmem suffix)")
    parser.add_argument("--bound", action="store_true",
                        help="Weft's ranks were bound to cores (recorded with a -bound suffix)")
    parser.add_argument("--quick", action="store_true",
                        help="the runs used the quick sweep (recorded with a -quick suffix)")
    parser.add_argument("--compare-cmd", help="the bench/compare command line, for the record")
    parser.add_argument("--cmd", action="append", help="a benchmark command line, for the "
                        "record (repeatable, in run order)")
    parser.add_argument("--commit", help="Weft revision, for the record")
    parser.add_argument("--loadavg", help="/proc/loadavg before the runs, for the record")
    parser.add_argument("--loadavg-after", help="/proc/loadavg after the runs, for the record")
    parser.add_argument("--latency-pair", nargs=4, action="append", default=[],
                        metavar=("NRANKS", "WEFT", "MPI", "R0/R1/R2"),
                        help="one pair of 8-byte runs side by side (weft-perf and mpi-bench -J files) with "
                             "cpu-pair-latency's readings (ns) before, between and after them, or 'unknown' (repeatable; "
                             "in the order they ran, Weft's run first in the 1st, 3rd, ... pair, as bench/compare "
                             "runs them)")
    parser.add_argument("--round-speeds", nargs=2, action="append", metavar=("NRANKS", "B/A,..."),
                        help="cpu-pair-latency's median (ns) before and after each round of that rank "
                             "count's runs (repeatable)")
    args = parser.parse_args(argv)
    speeds = dict(args.round_speeds or [])

    sections = []
    bad = []
    want = 4 if args.collective == "allreduce" else 3
    redop = "sum" if args.collective == "allreduce" else "none"
    for run in args.run:
        if len(run) != want:
            parser.error(f"--run for {args.collective} takes {want} values, got {len(run)}")
        nranks_text, weft_path, mpi_path = run[:3]
        try:
            nranks = int(nranks_text)
        except ValueError:
            parser.error(f"--run: '{nranks_text}' is not a rank count")
        all_weft, all_mpi = weft_path.split(","), mpi_path.split(",")
        all_probe = run[3].split(",") if want == 4 else []
        if len(all_mpi) != len(all_weft) or len(all_probe) not in (0, len(all_weft)):
            # No round pairs its runs with the others': each list's medians over all its runs.
            counts = f"{len(all_weft)} weft, {len(all_mpi)} mpi" + (f", {len(all_probe)} probe" if all_probe else "")
            warn(f"{nranks} ranks: the runs' round counts differ ({counts}), so every round is kept"
                 + ("; --round-speeds ignored" if nranks_text in speeds else ""))
            keep, rounds_line = None, None
        else:
            keep, rounds_line = steady_rounds(speeds.get(nranks_text), len(all_weft))

        def kept(paths):
            return paths if keep is None else [paths[i] for i in keep]

        try:
            weft = load_median_rows(kept(all_weft), f"weft ({nranks} ranks)", args.collective, redop, nranks)
            mpi = load_median_rows(kept(all_mpi), f"mpi ({nranks} ranks)", args.collective, redop, nranks)
            bound = median_probe(kept(all_probe)) if want == 4 else {}
            checked = [(weft, "weft"), (mpi, "mpi")]
            if keep is not None and len(keep) < len(all_weft):  # every round's data checks count, kept or not
                checked = [(load_median_rows(paths, f"{name} ({nranks} ranks)", args.collective, redop, nranks), name)
                           for paths, name in ((all_weft, "weft"), (all_mpi, "mpi"))]
        except InputError as e:
            print(f"compare_mpi_table: {e}", file=sys.stderr)
            return 1
        table = join(weft, mpi, bound, args.placement)
        missing = [human_size(e["size"]) for e in table if e["bound"] is None]
        if missing and want == 4:
            warn(f"{nranks} ranks: no probe bound for {', '.join(missing)}")
        pairs = []
        try:
            for pair_ranks, weft_pair, mpi_pair, readings in args.latency_pair:
                if pair_ranks != nranks_text:
                    continue
                rows = [load_median_rows([path], f"{name} 8 B pair ({nranks} ranks)", args.collective, redop, nranks)
                        for path, name in ((weft_pair, "weft"), (mpi_pair, "mpi"))]
                for pair_rows, name in zip(rows, ("weft", "mpi")):
                    bad += wrong_rows(pair_rows, f"{name} 8 B pair ({nranks} ranks)")
                times = [metric(r.get(LATENCY_SIZE), args.placement, "time_us") for r in rows]
                if None in times or times[1] == 0:
                    raise InputError(f"{weft_pair} / {mpi_pair}: no {LATENCY_SIZE}-byte time on one side")
                pairs.append((times[0], times[1], parse_speeds(readings)))
        except InputError as e:
            print(f"compare_mpi_table: {e}", file=sys.stderr)
            return 1
        pair_table, paired = [], None
        if pairs:
            status, detail, steady = paired_latency(pairs)
            sweep = next((e for e in table if e["size"] == LATENCY_SIZE), None)
            if sweep and sweep["weft_time"] is not None and sweep["mpi_time"] is not None:
                detail += f"; the sweeps' medians: Weft {sweep['weft_time']:.2f} us, Open MPI {sweep['mpi_time']:.2f} us"
            paired = (status, detail)
            pair_table = pair_lines(pairs, steady)
        verdicts = verdicts_of(table, args.collective, paired)
        sections.append((nranks, table, verdicts, rounds_line, pair_table))
        for rows, name in checked:
            bad += wrong_rows(rows, f"{name} ({nranks} ranks)")

        print(f"-- {nranks} ranks (Weft over shm vs Open MPI, "
              f"{'out-of-place' if args.placement == 'oop' else 'in-place'})")
        print(text_table(table))
        print()
        if rounds_line:
            print(f"rounds ({nranks} ranks): {rounds_line}")
        for name, status, detail in verdicts:
            print(f"target ({nranks} ranks): {name}: {status} ({detail})")
        if pair_table:
            print(f"paired 8-byte runs ({nranks} ranks):")
            print("\n".join(pair_table))
        print()

    for line in bad:
        print(f"compare_mpi_table: data check FAILED: {line}", file=sys.stderr)
    if bad:
        return 1
    if args.record_dir:
        print(f"recorded {write_record(args, sections)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
