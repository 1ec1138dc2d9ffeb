#!/usr/bin/env bash
# The bench scripts on bad arguments and small inputs, in seconds: no benchmark runs. Stub
# binaries (a fake BUILD_DIR) stand in for the tools; records go to a scratch directory, never
# to bench/results.
#   bench/script_tests.sh BUILD_DIR compare_table|compare_mpi_table|compare|ddp_compare|kernel_ratio|tuner_accuracy|tuner_rescore
# BUILD_DIR (a built tree) is used by tuner_rescore alone, for weft-topo and hwloc.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$1
mode=$2
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-bench-tests.XXXXXX")
trap 'rm -rf "$work"' EXIT

# expect STATUS PATTERN COMMAND...: COMMAND exits STATUS and prints a line matching PATTERN (grep
# -E, stdout and stderr together), and no Python traceback.
expect() {
  local want=$1 pattern=$2
  shift 2
  local rc=0
  "$@" > "$work/out" 2>&1 || rc=$?
  if [[ $rc != "$want" ]] || ! grep -Eq -- "$pattern" "$work/out" || grep -q '^Traceback' "$work/out"; then
    echo "FAILED: $(printf '%q ' "$@"): exit $rc; want $want and a line matching '$pattern':"
    cat "$work/out"
    exit 1
  fi
}

# rows FILE NRANKS WRONG: weft-perf -J rows (all-reduce, float sum, 8 B to 16 MiB), with NRANKS
# and each placement's WRONG as JSON values ('2', '"2"', 'null', ...).
rows() {
  "$py" - "$@" <<'PY'
import json, sys
path, nranks, wrong = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
def placement(size):
    return {"time_us": 1 + size / 1e3, "algbw": size / 1e9, "busbw": size / 1e9, "wrong": wrong}
json.dump([{"collective": "allreduce", "size": s, "count": s // 4, "type": "float", "redop": "sum", "root": -1,
            "nranks": nranks, "oop": placement(s), "ip": placement(s)} for s in (8, 1 << 20, 16 << 20)],
          open(path, "w"))
PY
}

# lat FILE TIME_US [WRONG]: one 8-byte all-reduce row of 2 ranks, as a paired latency run writes it.
lat() {
  "$py" - "$1" "$2" "${3:-0}" <<'PY'
import json, sys
path, time_us, wrong = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
placement = {"time_us": time_us, "algbw": 8 / time_us / 1e3, "busbw": 8 / time_us / 1e3, "wrong": wrong}
json.dump([{"collective": "allreduce", "size": 8, "count": 2, "type": "float", "redop": "sum", "root": -1,
            "nranks": 2, "oop": placement, "ip": placement}], open(path, "w"))
PY
}

probe_rows() {  # FILE: mem-bound-probe -J rows for the sizes rows() writes
  echo '[{"size": 8, "nprocs": 2, "copy_gbps": 5}, {"size": 1048576, "nprocs": 2, "copy_gbps": 5},
         {"size": 16777216, "nprocs": 2, "copy_gbps": 5}]' > "$1"
}

records() { find "$work/rec" -name '*.md' 2>/dev/null | wc -l; }

cd "$work"
case $mode in
  compare_table)
    table=$here/compare_table.py
    rows good.json 2 0
    rows ranks-text.json '"2"' 0
    rows four.json 4 0
    echo '[]' > empty.json
    echo '[{"junk": 1}, 3, {"collective": "allreduce"}]' > junk.json
    expect 0 '^recorded ' "$table" --weft good.json --gloo good.json --record-dir rec
    # Nothing usable is an input that cannot be used: exit 1, and no "NO DATA" record.
    for input in empty junk; do
      expect 1 "weft results $input.json hold no usable" "$table" --weft $input.json --gloo good.json --record-dir rec
      expect 1 "gloo results $input.json hold no usable" "$table" --weft good.json --gloo $input.json --record-dir rec
    done
    [[ $(records) == 1 ]] || { echo "FAILED: unusable input was recorded:"; ls rec; exit 1; }
    # Only "wrong": 0 passes the data check.
    for wrong in '"3"' true null '"0"' 0.0 -1; do
      rows bad.json 2 "$wrong"
      expect 1 'data check FAILED: weft 8 B oop: no data check' "$table" --weft bad.json --gloo good.json --record-dir rec
    done
    rows bad.json 2 5
    expect 1 'data check FAILED: gloo 1 MiB ip: 5 wrong' "$table" --weft good.json --gloo bad.json --record-dir rec
    [[ $(records) == 1 ]] || { echo "FAILED: a failed data check was recorded:"; ls rec; exit 1; }
    # "nranks": "2" is 2 ranks: it matches 2, and a mismatch names both counts as numbers.
    expect 0 '^recorded .*-2\.md' "$table" --weft ranks-text.json --gloo good.json --record-dir rec
    grep -q '^2 ranks on one machine' rec/*-2.md || { echo "FAILED: the record lost the rank count:"; cat rec/*-2.md; exit 1; }
    expect 1 'gloo results four.json: a row of 4 ranks, not 2$' "$table" --weft ranks-text.json --gloo four.json
    ;;
  compare_mpi_table)
    table=("$py" "$here/compare_mpi_table.py")
    rows good.json 2 0
    rows bad.json 2 '"3"'
    probe_rows probe.json
    echo '[]' > empty.json
    # Round counts that differ: every round of each list is kept (this once raised IndexError).
    expect 0 'round counts differ \(2 weft, 1 mpi, 1 probe\), so every round is kept' \
      "${table[@]}" --run 2 good.json,good.json good.json probe.json
    expect 0 'round counts differ \(1 weft, 3 mpi, 2 probe\), so every round is kept; --round-speeds ignored' \
      "${table[@]}" --run 2 good.json good.json,good.json,good.json probe.json,probe.json --round-speeds 2 10/10
    expect 0 '^target \(2 ranks\)' "${table[@]}" --run 2 good.json good.json,good.json probe.json
    # A round left out of the tables (its speed changed) still has its data checks counted, and a
    # "wrong" that is no count fails them even beside a round that passed.
    expect 1 'data check FAILED: weft \(2 ranks\) 8 B oop: no data check' "${table[@]}" \
      --run 2 good.json,bad.json good.json,good.json probe.json,probe.json --round-speeds 2 10/10,30/10
    # Paired 8-byte runs decide the latency verdict: the steady pairs only (readings within 1.5x),
    # all of them where none held steady; each pair's data checks count.
    lat w-fast.json 0.40; lat m-fast.json 0.50; lat w-slow.json 0.90; lat w-bad.json 0.40 3
    expect 0 "8-byte time <= Open MPI's: MET \\(median Weft/Open MPI time ratio 0.80 .*1 of 3 pairs steady" \
      "${table[@]}" --run 2 good.json good.json probe.json --latency-pair 2 w-fast.json m-fast.json 100/100/110 \
      --latency-pair 2 w-slow.json m-fast.json 100/400/400 --latency-pair 2 w-fast.json m-fast.json unknown
    expect 0 "MISSED \\(median Weft/Open MPI time ratio 1.80 .*the speed changed in every pair: all kept" \
      "${table[@]}" --run 2 good.json good.json probe.json --latency-pair 2 w-slow.json m-fast.json 100/400/400
    expect 0 '^recorded ' "${table[@]}" --run 2 good.json good.json probe.json --record-dir rec \
      --latency-pair 2 w-fast.json m-fast.json 100/100/100
    grep -q '^Paired 8-byte runs (2 ranks)' rec/*.md || { echo "FAILED: the record lost the pairs:"; cat rec/*.md; exit 1; }
    expect 1 'data check FAILED: weft 8 B pair \(2 ranks\) 8 B oop: 3 wrong' "${table[@]}" \
      --run 2 good.json good.json probe.json --latency-pair 2 w-bad.json m-fast.json 100/100/100
    expect 1 'mpi 8 B pair \(2 ranks\) results empty.json hold no usable' "${table[@]}" \
      --run 2 good.json good.json probe.json --latency-pair 2 w-fast.json empty.json 100/100/100
    expect 1 'probe results empty.json hold no usable rows' "${table[@]}" --run 2 good.json good.json empty.json
    expect 1 'mpi \(2 ranks\) results empty.json hold no usable' "${table[@]}" --run 2 good.json empty.json probe.json
    ;;
  compare)
    # --repeats, --bind, --host-mem and --collective are for --peer mpi: refused (2) before any run, where a
    # missing build would otherwise be the first error (1).
    for args in "--repeats 3" "--repeats 1" "--peer gloo --repeats 2" "--repeats 2 --quick" "--bind" \
                "--collective broadcast" "--repeats 0 --peer mpi" "--peer nosuch" "--bogus" "--host-mem" \
                "--peer mpi --collective allgather --host-mem" "--latency-pairs 2" "--peer mpi --latency-pairs x" \
                "--peer mpi --collective broadcast --latency-pairs 2"; do
      # shellcheck disable=SC2086
      expect 2 '^compare: ' env BUILD_DIR="$work/none" "$here/compare" $args
    done
    expect 1 "^compare: $work/none/bin/weftrun is missing" env BUILD_DIR="$work/none" "$here/compare" --peer mpi --repeats 2
    expect 0 '^Usage: bench/compare' "$here/compare" --help
    ;;
  ddp_compare)
    # A stub weftrun leaves a mark: nothing may run before the arguments are checked.
    mkdir -p stub/bin
    printf '#!/bin/sh\ntouch "%s/ran"\nexit 1\n' "$work" > stub/bin/weftrun
    chmod +x stub/bin/weftrun
    for args in "1 0" "0" "0 3" "abc" "-5" "60 3x" "1 2 3" "1 --help" "''" "' 5'" "--steps 5"; do
      eval "set -- $args"
      expect 2 '^ddp_compare: ' env BUILD_DIR="$work/stub" "$here/ddp_compare.sh" "$@"
      [[ ! -e ran ]] || { echo "FAILED: ddp_compare.sh $args ran a benchmark"; exit 1; }
    done
    for args in --help -h; do
      expect 0 '^Usage: bench/ddp_compare.sh \[STEPS \[ROUNDS\]\]' env BUILD_DIR="$work/stub" "$here/ddp_compare.sh" $args
      [[ ! -e ran ]] || { echo "FAILED: ddp_compare.sh $args ran a benchmark"; exit 1; }
    done
    ;;
  kernel_ratio)
    # Refused by argparse (2), before the (missing) kernel_bench is looked for (1).
    for args in "--size 12345" "--size abc" "--repetitions 0" "--repetitions -1" "--repetitions 1.5" \
                "--min-time 0" "--min-time inf"; do
      # shellcheck disable=SC2086
      expect 2 'kernel_ratio.py: error: argument --' "$here/kernel_ratio.py" --bench "$work/none" $args
    done
    expect 2 'choose from 16384, 262144, 67108864' "$here/kernel_ratio.py" --bench "$work/none" --size 12345
    expect 1 "^kernel_ratio: no $work/none" "$here/kernel_ratio.py" --bench "$work/none" --size 16384
    printf '#!/bin/sh\necho "not a report"\n' > not-json
    chmod +x not-json
    expect 1 '^kernel_ratio: .*printed no JSON report' "$here/kernel_ratio.py" --bench "$work/not-json" --size 16384
    ;;
  tuner_accuracy)
    expect 1 "tuner_accuracy.py: $work/none/bin/weftrun is missing" \
      env BUILD_DIR="$work/none" "$here/tuner_accuracy.py" --quick --no-record
    for args in "--repeats 0" "--repeats -1" "--repeats x" "--tune nosuch"; do
      # shellcheck disable=SC2086
      expect 2 'tuner_accuracy.py: error: argument --' env BUILD_DIR="$work/none" "$here/tuner_accuracy.py" $args
    done
    # Two runs on one day, from a copy of the scripts (records land beside it, in its
    # bench/results), over stubs of weftrun, weft-perf and weft-topo: the second record is -2.
    mkdir -p stub/bin repo/bench/results
    cp "$here/tuner_accuracy.py" "$here/compare_table.py" repo/bench/
    printf '#!/bin/sh\nshift 2\nexec "$@"\n' > stub/bin/weftrun
    cat > stub/bin/weft-perf <<'PY'
#!/usr/bin/python3
import json, os, sys
args = sys.argv[1:]
sizes = [8, 512 << 10] if args[args.index("-b") + 1] == "8" else [2 << 20, 8 << 20]
json.dump([{"size": s, "oop": {"time_us": 1 + s / 1e3}} for s in sizes], open(args[args.index("-J") + 1], "w"))
if os.environ.get("WEFT_DEBUG") == "INFO":
    for s in sizes:
        print(f"all-reduce of {s} bytes on 2 ranks: ring", file=sys.stderr)
        print(f"all-reduce of {s} bytes in 4-byte elements on 2 ranks, predicted: ring 1.0 us, tree 2.0 us",
              file=sys.stderr)
PY
    cat > stub/bin/weft-topo <<'PY'
#!/usr/bin/python3
import json, sys
for s in (8, 512 << 10, 2 << 20, 8 << 20):
    print(json.dumps({"nranks": int(sys.argv[2]), "size": s, "ring": 1 + s / 1e3, "tree": 2 + s / 1e3,
                      "recursive-doubling": 3.0, "one-shot": 4.0, "choice": "ring"}))
PY
    chmod +x stub/bin/*
    today=$(date +%F)
    for _ in 1 2; do
      expect 0 '^recorded ' env BUILD_DIR="$work/stub" "$py" repo/bench/tuner_accuracy.py --quick
    done
    names=$(cd repo/bench/results && ls)
    want=$(printf '%s\n' "$today-tuner-accuracy-quick-2.md" "$today-tuner-accuracy-quick.md")
    [[ $names == "$want" ]] || { echo "FAILED: want records:"; echo "$want"; echo "got:"; echo "$names"; exit 1; }
    ;;
  tuner_rescore)
    record=$here/results/2026-11-26-h100-host/tuner-accuracy-quick-defaults.md
    expect 1 'tuner_rescore.py: cannot read /nonexistent.md: No such file' "$here/tuner_rescore.py" /nonexistent.md
    expect 1 "tuner_rescore.py: $work/none/bin/weft-topo is missing" env BUILD_DIR="$work/none" "$here/tuner_rescore.py" "$record"
    # hwloc reads the live machine where it cannot parse HWLOC_SYNTHETIC: that is refused (2).
    for synthetic in bogus:1 "pack:1 core:0 pu:1" "pack:x"; do
      expect 2 "tuner_rescore.py: error: --synthetic '$synthetic': hwloc did not accept it" \
        env BUILD_DIR="$build" "$here/tuner_rescore.py" "$record" --synthetic "$synthetic"
    done
    expect 0 '^re-scored: ' env BUILD_DIR="$build" "$here/tuner_rescore.py" "$record" \
      --synthetic 'pack:1 l3:1(size=300MiB) core:16 pu:1'
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
echo "bench scripts, $mode: ok"
