#!/usr/bin/python3
"""Joins weft-perf and gloo-allreduce-bench JSON output into a side-by-side table.

Called by bench/compare; usable on its own:

    bench/compare_table.py --weft weft.json --gloo gloo.json [--record-dir bench/results]

Both inputs use weft-perf's -J schema: a JSON array of rows
    {"collective": "allreduce", "size": B, "count": N, "type": "float", "redop": "sum",
     "root": -1, "nranks": n, "oop": {"time_us": t, "algbw": x, "busbw": y, "wrong": w},
     "ip": {...}}
Only all-reduce float sum rows are compared; a size present on one side only is shown with
"-" and counts as missing data for the targets.

Targets (reported, never enforced through the exit status):
  * Weft's busbw >= Gloo's at every size >= 1 MiB;
  * Weft's 8-byte time <= 1/5 of Gloo's.

Exit status: 0 when the inputs were read and every row's data check passed ("wrong": 0 in
both placements; whether or not the targets were met), 1 when an input cannot be used (it holds
no usable row, say) or a data check failed (wrong elements, or "wrong" not a count: null from
a run with -c 0, a string, ...), 2 for bad usage.
"""

import argparse
import datetime
import json
import statistics
import os
import platform
import sys

MIB = 1 << 20
BUSBW_TARGET_MIN_SIZE = MIB
LATENCY_SIZE = 8
LATENCY_TARGET_RATIO = 0.2


class InputError(Exception):
    pass


def warn(message):
    print(f"compare_table: warning: {message}", file=sys.stderr)


def load_rows(path, label, collective="allreduce", redop="sum", nranks=None):
    """Returns {size: row} for the float rows of one collective (and reduction) in a JSON file;
    with nranks, every row must be of that many ranks (files mixed up fail, not compare)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"cannot read {label} results {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise InputError(f"{label} results {path} are not valid JSON: {e}") from e
    if not isinstance(data, list):
        raise InputError(f"{label} results {path}: expected a JSON array of rows")

    rows = {}
    for index, row in enumerate(data):
        try:
            if (row["collective"], row["type"], row["redop"]) != (collective, "float", redop):
                continue
            size = int(row["size"])
            row_ranks = int(row["nranks"])
            for placement in ("oop", "ip"):
                if not isinstance(row[placement], dict):
                    raise TypeError(f"'{placement}' is not an object")
        except (KeyError, TypeError, ValueError) as e:
            warn(f"{label} row {index} skipped: malformed ({e!r})")
            continue
        if nranks is not None and row_ranks != nranks:
            raise InputError(f"{label} results {path}: a row of {row_ranks} ranks, not {nranks}")
        if size in rows:
            warn(f"{label}: more than one row for {size} B; using the first")
            continue
        rows[size] = dict(row, size=size, nranks=row_ranks)  # numbers, whatever the JSON spelled
    if not rows:
        raise InputError(f"{label} results {path} hold no usable {collective} float {redop} rows")
    return rows


def load_median_rows(paths, label, collective="allreduce", redop="sum", nranks=None):
    """load_rows over several runs of the same sweep: per size present in every run, the median
    of each timing (time_us, algbw, busbw) and the worst data check. One path: its rows as is."""
    runs = [load_rows(path, f"{label} run {i + 1}" if len(paths) > 1 else label, collective, redop, nranks)
            for i, path in enumerate(paths)]
    if len(runs) == 1:
        return runs[0]
    rows = {}
    for size in sorted(set.intersection(*(set(run) for run in runs))):
        row = json.loads(json.dumps(runs[0][size]))  # a deep copy
        for placement in ("oop", "ip"):
            for key in ("time_us", "algbw", "busbw"):
                values = [metric(run[size], placement, key) for run in runs]
                if all(v is not None for v in values):
                    row[placement][key] = statistics.median(values)
            # The worst run's: one that is not a count at all, else the largest count.
            wrongs = [run[size][placement].get("wrong") for run in runs]
            invalid = [w for w in wrongs if not is_count(w)]
            row[placement]["wrong"] = invalid[0] if invalid else max(wrongs)
        rows[size] = row
    if not rows:
        raise InputError(f"{label}: no size is in every one of the {len(paths)} runs")
    return rows


def is_count(value):
    """Whether a "wrong" value is an element count: an int >= 0 (not a bool, string or null)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def metric(row, placement, key):
    """A number from one placement of a row, or None when absent or not a number."""
    if row is None:
        return None
    value = row.get(placement, {}).get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def wrong_rows(rows, label):
    """Descriptions of rows whose data check did not pass: only "wrong": 0 passes; a count
    above 0 found wrong elements, and anything else (null: not checked, a string, true, a
    float, absent) is no data check at all."""
    bad = []
    for size, row in sorted(rows.items()):
        for placement in ("oop", "ip"):
            wrong = row[placement].get("wrong")
            if not is_count(wrong):
                found = f"\"wrong\": {json.dumps(wrong)}" if "wrong" in row[placement] else "no \"wrong\""
                bad.append(f"{label} {human_size(size)} {placement}: no data check ({found}, not an element count)")
            elif wrong != 0:
                bad.append(f"{label} {human_size(size)} {placement}: {wrong} wrong")
    return bad


def human_size(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def join(weft, gloo, placement):
    """One dict per size present on either side, in size order."""
    table = []
    for size in sorted(set(weft) | set(gloo)):
        w, g = weft.get(size), gloo.get(size)
        entry = {
            "size": size,
            "weft_time": metric(w, placement, "time_us"),
            "gloo_time": metric(g, placement, "time_us"),
            "weft_busbw": metric(w, placement, "busbw"),
            "gloo_busbw": metric(g, placement, "busbw"),
        }
        wb, gb = entry["weft_busbw"], entry["gloo_busbw"]
        entry["ratio"] = wb / gb if wb is not None and gb else None
        table.append(entry)
    return table


def busbw_verdict(table):
    big = [e for e in table if e["size"] >= BUSBW_TARGET_MIN_SIZE]
    missing = [e for e in big if e["weft_busbw"] is None or e["gloo_busbw"] is None]
    below = [e for e in big if e not in missing and e["weft_busbw"] < e["gloo_busbw"]]
    if below:
        sizes = ", ".join(f"{human_size(e['size'])} ({e['ratio']:.2f}x)" for e in below)
        return "MISSED", f"below Gloo at {sizes}"
    if not big:
        return "NO DATA", "no size >= 1 MiB in the sweep"
    if missing:
        sizes = ", ".join(human_size(e["size"]) for e in missing)
        return "INCOMPLETE", f"met where both sides ran, but no data for {sizes}"
    detail = f"{len(big)} sizes from {human_size(big[0]['size'])} to {human_size(big[-1]['size'])}"
    rated = [e for e in big if e["ratio"] is not None]
    if rated:
        worst = min(rated, key=lambda e: e["ratio"])
        detail += f"; lowest ratio {worst['ratio']:.2f}x at {human_size(worst['size'])}"
    return "MET", detail


def latency_verdict(table):
    entry = next((e for e in table if e["size"] == LATENCY_SIZE), None)
    if entry is None or entry["weft_time"] is None or not entry["gloo_time"]:
        return "NO DATA", f"the {LATENCY_SIZE}-byte row is missing on one side or both", None
    ratio = entry["weft_time"] / entry["gloo_time"]
    detail = (f"Weft {entry['weft_time']:.2f} us, Gloo {entry['gloo_time']:.2f} us, "
              f"ratio {ratio:.3f} (target <= {LATENCY_TARGET_RATIO})")
    return ("MET" if ratio <= LATENCY_TARGET_RATIO else "MISSED"), detail, ratio


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_bw(value):
    return "-" if value is None else (f"{value:.4f}" if value < 1 else f"{value:.2f}")


COLUMNS = ("size", "weft time (us)", "gloo time (us)", "weft busbw (GB/s)",
           "gloo busbw (GB/s)", "busbw ratio")


def table_cells(table):
    return [(human_size(e["size"]), fmt(e["weft_time"]), fmt(e["gloo_time"]),
             fmt_bw(e["weft_busbw"]), fmt_bw(e["gloo_busbw"]), fmt(e["ratio"]))
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


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_lines():
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count()
    return [f"- CPU: {cpu_model()}", f"- nproc: {nproc}",
            f"- Kernel: {platform.system()} {platform.release()}"]


def nranks_of(*sides):
    for rows in sides:
        for row in rows.values():
            if isinstance(row.get("nranks"), int):
                return row["nranks"]
    return None


def unused_record_path(record_dir, stem):
    """record_dir/stem.md, or stem-2.md, stem-3.md, ... where that is taken: a second run on
    one day must not overwrite the first's record."""
    path = os.path.join(record_dir, f"{stem}.md")
    n = 2
    while os.path.exists(path):
        path = os.path.join(record_dir, f"{stem}-{n}.md")
        n += 1
    return path


def write_record(args, table, verdicts, nranks):
    today = datetime.date.today().isoformat()
    suffix = "-quick" if args.quick else ""
    path = unused_record_path(args.record_dir, f"{today}-allreduce-vs-gloo{suffix}")
    placement = "out-of-place" if args.placement == "oop" else "in-place"
    commands = [c for c in (args.compare_cmd, args.weft_cmd, args.gloo_cmd) if c]
    lines = [
        f"# All-reduce: Weft vs Gloo, {today}{' (quick sweep)' if args.quick else ''}",
        "",
        f"{nranks or '?'} ranks on one machine over TCP loopback, float32 sum. Times are per "
        f"iteration, {placement}, the maximum over ranks; busbw = algbw * 2(n-1)/n in GB/s; "
        "ratio = Weft busbw / Gloo busbw. Gloo runs its ring all-reduce (gloo::allreduce, "
        "RING) over its TCP transport.",
        "",
        "## Machine",
        "",
        *machine_lines(),
        *([f"- Load average before the runs: {args.loadavg}"] if args.loadavg else []),
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
        "## Targets",
        "",
        *[f"- {name}: **{status}** ({detail})" for name, status, detail in verdicts],
        "",
        "## Results",
        "",
        markdown_table(table),
        "",
    ]
    os.makedirs(args.record_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weft", required=True, help="weft-perf -J output")
    parser.add_argument("--gloo", required=True, help="gloo-allreduce-bench -J output")
    parser.add_argument("--placement", choices=("oop", "ip"), default="oop",
                        help="which timing to compare (default: out-of-place)")
    parser.add_argument("--record-dir", help="write YYYY-MM-DD-allreduce-vs-gloo.md here")
    parser.add_argument("--quick", action="store_true",
                        help="the runs used the quick sweep (recorded with a -quick suffix)")
    parser.add_argument("--compare-cmd", help="the bench/compare command line, for the record")
    parser.add_argument("--weft-cmd", help="the weft-perf command line, for the record")
    parser.add_argument("--gloo-cmd", help="the Gloo command line, for the record")
    parser.add_argument("--commit", help="Weft revision, for the record")
    parser.add_argument("--loadavg", help="/proc/loadavg before the runs, for the record")
    args = parser.parse_args(argv)

    try:
        weft = load_rows(args.weft, "weft")
        gloo = load_rows(args.gloo, "gloo", nranks=next(iter(weft.values()))["nranks"])
    except InputError as e:
        print(f"compare_table: {e}", file=sys.stderr)
        return 1

    table = join(weft, gloo, args.placement)
    for name, mine, other in (("Weft", weft, gloo), ("Gloo", gloo, weft)):
        only = sorted(set(mine) - set(other))
        if only:
            warn(f"sizes run on {name} only: {', '.join(human_size(s) for s in only)}")

    bw_status, bw_detail = busbw_verdict(table)
    lat_status, lat_detail, _ = latency_verdict(table)
    verdicts = [
        ("busbw >= Gloo at every size >= 1 MiB", bw_status, bw_detail),
        ("8-byte latency <= 1/5 of Gloo's", lat_status, lat_detail),
    ]

    print(text_table(table))
    print()
    for name, status, detail in verdicts:
        print(f"target: {name}: {status} ({detail})")

    bad = wrong_rows(weft, "weft") + wrong_rows(gloo, "gloo")
    for line in bad:
        print(f"compare_table: data check FAILED: {line}", file=sys.stderr)
    if bad:
        return 1

    if args.record_dir:
        path = write_record(args, table, verdicts, nranks_of(weft, gloo))
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
