#!/usr/bin/env bash
# perftests_plot.sh MPIRUN EXE PLOT: perftests/plot turns *_perf -J files into a PNG.
#
# Proves: two --compare mpi runs of EXE at 2 ranks, one as a user would start it and one under
# MALLOC_MMAP_MAX_=0, write JSON files that pass perftests_json_check.py (each records whether
# MALLOC_MMAP_MAX_ was set); PLOT draws both into one PNG (the file starts with the PNG
# signature and is not empty) and prints its path; two files of one label whose sizes are apart
# (the user run's rows cut in two, as perftests/sweep cuts a run) are one series of every row, and
# two whose sizes overlap are two series, each naming its file; a --compare gloo file's peer series
# is named Gloo, not MPI; PLOT fails, writing nothing and with a message naming the file and the row
# (no Python traceback), on a file that is not a -J file or has a row without a type or that is not
# an object; and it refuses an output in a directory that does not exist with a message (gnuplot
# then wrote the PNG to stdout, and plot died decoding it). Exits 77 (SKIP) without gnuplot, python3
# or mpirun.
set -u
mpirun=${1:?usage: perftests_plot.sh MPIRUN EXE PLOT} exe=${2:?} plot=${3:?}
here=$(dirname "$0")

# shellcheck source-path=SCRIPTDIR source=support/verdict.sh
. "$(dirname "$0")/support/verdict.sh"
command -v gnuplot >/dev/null || skip "gnuplot not found (apt-get install gnuplot-nox)"
command -v python3 >/dev/null || skip "python3 not found"
command -v "$mpirun" >/dev/null || skip "mpirun ($mpirun) not found"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# -b 1K -e 64K -f 8: 1K, 8K, 64K, one dtype and op: 3 rows.
args=(-b 1K -e 64K -f 8 -d float -o sum -n 4 -w 1 --compare mpi)
env -u MALLOC_MMAP_MAX_ CHORUS_PERF_JSON_ROWS=3 CHORUS_PERF_JSON_OUT="$dir/user.json" \
    CHORUS_PERF_JSON_ENV=MALLOC_MMAP_MAX_= "$here/perftests_run.sh" mpi 2 "$mpirun" "$exe" \
    "${args[@]}" || fail "the run as a user would start it"
env MALLOC_MMAP_MAX_=0 CHORUS_PERF_JSON_ROWS=3 CHORUS_PERF_JSON_OUT="$dir/mmap0.json" \
    CHORUS_PERF_JSON_ENV=MALLOC_MMAP_MAX_=0 "$here/perftests_run.sh" mpi 2 "$mpirun" "$exe" \
    "${args[@]}" || fail "the run under MALLOC_MMAP_MAX_=0"

echo "+ $plot -o $dir/out.png $dir/user.json $dir/mmap0.json"
printed=$("$plot" -o "$dir/out.png" "$dir/user.json" "$dir/mmap0.json") || fail "plot exited $?"
[ "$printed" = "$dir/out.png" ] || fail "plot printed '$printed', not the PNG's path"
[ -s "$dir/out.png" ] || fail "no PNG, or an empty one"
magic=$(head -c 8 "$dir/out.png" | od -An -tx1 | tr -d ' \n')
[ "$magic" = 89504e470d0a1a0a ] || fail "out.png does not start with the PNG signature ($magic)"
echo "PNG: $(wc -c <"$dir/out.png") bytes"

# The user run cut in two bands of sizes (1K and 8K; 64K): one series of 3 points each for
# Chorus and MPI. The same file twice: two of each, named by file.
python3 - "$dir" <<'PY' || fail "could not cut user.json in two"
import json, sys
d = sys.argv[1]
run = json.load(open(f"{d}/user.json"))
for name, keep in (("lo", lambda r: r["size"] <= 8192), ("hi", lambda r: r["size"] > 8192)):
    json.dump({**run, "rows": [r for r in run["rows"] if keep(r)]}, open(f"{d}/{name}.json", "w"))
PY
"$plot" -v -o "$dir/bands.png" "$dir/lo.json" "$dir/hi.json" >/dev/null 2>"$dir/bands.err" ||
    fail "plot of two bands exited $?: $(cat "$dir/bands.err")"
cat "$dir/bands.err"
[ "$(grep -c '^series ' "$dir/bands.err")" = 2 ] &&
    grep -q '^series Chorus: .*: 3 points from 2 file(s)$' "$dir/bands.err" &&
    grep -q '^series MPI: .*: 3 points from 2 file(s)$' "$dir/bands.err" ||
    fail "two bands of one label are not one Chorus and one MPI series of 3 points"
"$plot" -v -o "$dir/twice.png" "$dir/user.json" "$dir/user.json" >/dev/null 2>"$dir/twice.err" ||
    fail "plot of one file twice exited $?: $(cat "$dir/twice.err")"
cat "$dir/twice.err"
[ "$(grep -c '^series .*(user\.json): 3 points from 1 file(s)$' "$dir/twice.err")" = 4 ] ||
    fail "one file twice is not four series of 3 points, each naming user.json"

# The peer's series is named from the file: Gloo for a --compare gloo run.
python3 - "$dir" <<'PY' || fail "could not write gloo.json"
import json, sys
d = sys.argv[1]
run = json.load(open(f"{d}/user.json"))
run["flags"]["compare"] = "gloo"
json.dump(run, open(f"{d}/gloo.json", "w"))
PY
"$plot" -v -o "$dir/gloo.png" "$dir/gloo.json" >/dev/null 2>"$dir/gloo.err" ||
    fail "plot of gloo.json exited $?: $(cat "$dir/gloo.err")"
cat "$dir/gloo.err"
if ! grep -q '^series Gloo: ' "$dir/gloo.err" || grep -q '^series MPI' "$dir/gloo.err"; then
    fail "a --compare gloo file's peer series is not named Gloo"
fi

# refused NAME WANT: plot of $dir/NAME.json fails with WANT (a fixed string) and no traceback,
# writing no PNG.
refused() {
    if "$plot" -o "$dir/$1.png" "$dir/$1.json" 2>"$dir/err"; then
        fail "plot accepted $1.json"
    fi
    [ ! -e "$dir/$1.png" ] || fail "plot wrote a PNG for $1.json"
    if ! grep -qF -- "$2" "$dir/err" || grep -q Traceback "$dir/err"; then
        fail "plot on $1.json did not say '$2': $(cat "$dir/err")"
    fi
    echo "plot refused $1.json: $(cat "$dir/err")"
}
echo '{"rows": 3}' >"$dir/bad.json"
refused bad "bad.json: no 'rows' list"
echo '{"rows": [{"size": 8}]}' >"$dir/notype.json"
refused notype "notype.json: row 0 has no 'type'"
echo '{"rows": [1, 2]}' >"$dir/ints.json"
refused ints "ints.json: row 0 is 1, not an object"

# An output directory that does not exist: a message, not gnuplot's PNG decoded as text.
if "$plot" -o "$dir/nosuch/x.png" "$dir/user.json" >"$dir/out" 2>"$dir/err"; then
    fail "plot -o into a directory that does not exist exited 0"
fi
if ! grep -qF "directory $dir/nosuch does not exist" "$dir/err" || grep -q Traceback "$dir/err" ||
    [ -s "$dir/out" ]; then
    fail "plot -o $dir/nosuch/x.png said: $(cat "$dir/err")"
fi
echo "plot refused -o $dir/nosuch/x.png: $(cat "$dir/err")"
echo PASS
