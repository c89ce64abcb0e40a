#!/usr/bin/env bash
# perftests_table.sh TABLE: perftests/table's columns and summaries, on -J files written here.
#
# Proves, on an all-gather at 2 ranks (user and mmap0 runs, two parts each) whose times are
# chosen so that the two comparisons disagree: each row's ratios in each run (MPI time over
# Chorus'), the lesser of the two (Chorus against each MPI in the run that timed both) and the
# better MPI over the user run's Chorus (across runs); a later part's row replacing an earlier
# one's at the same size; the summaries' geometric means and rows below 1 for both columns;
# the 0 B row kept out of them; the 64 MiB yardstick against the run's memcpy; take_back's
# range; the compared library named per collective from its own files (a Gloo run of one
# collective beside MPI runs of another: Gloo there, MPI here, where every collective was Gloo);
# and a directory with no -J files refused with a message and exit 1. No MPI run: the files are
# written by this script. Exits 77 (SKIP) without python3.
set -u
table=${1:?usage: perftests_table.sh TABLE}

# shellcheck source-path=SCRIPTDIR source=support/verdict.sh
. "$(dirname "$0")/support/verdict.sh"
command -v python3 >/dev/null || skip "python3 not found"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# One -J file: $1 name, $2 memcpy GB/s at 64 MiB (or 0: none), then size:chorus_us:mpi_us...
# (COMPARE=gloo: a --compare gloo run)
write_run() {
    python3 - "$dir/$1" "$2" "${@:3}" <<'EOF'
import json, os, sys
path, gbps, specs = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
rows = []
for spec in specs:
    size, chorus, mpi = spec.split(":")
    size, chorus, mpi = int(size), float(chorus), float(mpi)
    bus = size / chorus / 1e3 / 2 if chorus else 0.0
    rows.append({"size": size, "count": size // 4, "type": "float", "redop": "none",
                 "root": -1, "algo": "oneshot",
                 "out_of_place": {"time_us": chorus, "busbw": bus, "wrong": 0},
                 "in_place": {"time_us": chorus, "busbw": bus, "wrong": 0},
                 "mpi": {"time_us": mpi, "vs": "out_of_place"}})
summary = {"memcpy": {"nbytes": 64 << 20, "gbps": gbps}} if gbps else {}
with open(path, "w", encoding="utf-8") as f:
    json.dump({"program": "all_gather_perf", "flags": {"compare": os.environ.get("COMPARE", "mpi")},
               "mpi_library": "Open MPI v4.1.4", "rows": rows, "summary": summary}, f)
EOF
}

# 8 B: each run has Chorus ahead (1.5 and 1.25) but the user run's Chorus is slow and the mmap0
#   run's MPI fast: across runs 0.5.
# 1 KiB: the first part says 1.0 / 1.0, the second part (replacing it) 2.0 and 0.8.
# 64 MiB: even in both runs (1.0, 1.0); busbw 64 MiB / 10000 us / 2 = 3.36 GB/s, of 8.0 GB/s memcpy.
write_run all_gather_np2_user_1small.json 0 0:0.01:0.01 8:0.40:0.60 1024:1:1
write_run all_gather_np2_user_2mid.json 0 1024:1.0:2.0
write_run all_gather_np2_user_3large.json 8.0 67108864:10000:10000
write_run all_gather_np2_mmap0_1small.json 0 0:0.01:0.02 8:0.16:0.20 1024:1:1
write_run all_gather_np2_mmap0_2mid.json 0 1024:2.5:2.0
write_run all_gather_np2_mmap0_3large.json 0 67108864:12000:12000
printf 'all_gather_np2_user_1small 6.50\nall_gather_np2_mmap0_1small 1.20\n' >"$dir/take_back.txt"

echo "+ $table $dir"
out=$("$table" "$dir") || fail "table exited $?"
echo "$out"

want_line() {
    grep -qxF -- "$1" <<<"$out" || fail "no line: $1"
}
# | ranks | size | Chorus | busbw | algo | MPI | ratio | Chorus mmap0 | MPI mmap0 | ratio | lesser | better |
want_line "| 2 | 8 B | 0.40 | 0.01 | oneshot | 0.60 | 1.50 | 0.16 | 0.20 | 1.25 | 1.25 | 0.50 |"
want_line "| 2 | 1 KiB | 1.00 | 0.51 | oneshot | 2.00 | 2.00 | 2.50 | 2.00 | 0.80 | 0.80 | 2.00 |"
want_line "| 2 | 64 MiB | 10000 | 3.36 | oneshot | 10000 | 1.00 | 12000 | 12000 | 1.00 | 1.00 | 1.00 |"
# geometric means over 8 B, 1 KiB, 64 MiB (the 0 B row apart): (1.25 * 0.8 * 1)^(1/3) = 1.00,
# (0.5 * 2 * 1)^(1/3) = 1.00
want_line "- 2 ranks: the lesser in-run ratio: geometric mean 1.00 over 3 sizes; below 1: 1 KiB (0.80)"
want_line "  - the better MPI across runs over Chorus: geometric mean 1.00 over 3 sizes; below 1: 8 B (0.50)"
want_line "  - the 0 B row (no element a rank: an empty call for both) is left out of the means and the lists: ratio 1.00 in run, 1.00 across runs"
want_line "  - user run \`3large\`: busbw 3.36 GB/s at 64 MiB, 42% of the single-core memcpy the run measured (8.00 GB/s at 64 MiB)"
want_line "  - take_back before the runs (a write over a peer's lines, x a private one): 1.20-6.50"

# The peer per collective: broadcast's files are a Gloo run, all-gather's MPI runs.
COMPARE=gloo write_run broadcast_np2_user_1small.json 0 8:1.0:300
out=$("$table" "$dir") || fail "table exited $?"
want_line "| ranks | size | Chorus µs | busbw GB/s | algo | MPI µs | ratio | Chorus µs, mmap0 run | MPI µs, mmap0 run | ratio | lesser ratio | better MPI / Chorus |"
want_line "| ranks | size | Chorus µs | busbw GB/s | algo | Gloo µs | ratio | Chorus µs, mmap0 run | Gloo µs, mmap0 run | ratio | lesser ratio | better Gloo / Chorus |"
echo "table: MPI for all_gather, Gloo for broadcast"

empty=$(mktemp -d)
trap 'rm -rf "$dir" "$empty"' EXIT
if msg=$("$table" "$empty" 2>&1); then
    fail "table on a directory with no -J files exited 0"
fi
grep -q "no COLL_npN" <<<"$msg" || fail "table on an empty directory said: $msg"
echo "PASS: perftests/table's columns, summaries and refusal"
