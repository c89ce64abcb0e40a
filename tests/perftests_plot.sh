#!/usr/bin/env bash
# perftests_plot.sh MPIRUN EXE PLOT: perftests/plot turns *_perf -J files into a PNG.
#
# Proves: two --compare mpi runs of EXE at 2 ranks, one as a user would start it and one under
# MALLOC_MMAP_MAX_=0, write JSON files that pass perftests_json_check.py (each records whether
# MALLOC_MMAP_MAX_ was set); PLOT draws both into one PNG (the file starts with the PNG
# signature and is not empty) and prints its path; PLOT fails, writing nothing, on a file that is
# not a -J file. Exits 77 (SKIP) without gnuplot, python3 or mpirun.
set -u
mpirun=${1:?usage: perftests_plot.sh MPIRUN EXE PLOT} exe=${2:?} plot=${3:?}
here=$(dirname "$0")

skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
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

echo '{"rows": 3}' >"$dir/bad.json"
if "$plot" -o "$dir/bad.png" "$dir/bad.json" 2>"$dir/err"; then
    fail "plot accepted a file that is not a -J file"
fi
[ ! -e "$dir/bad.png" ] || fail "plot wrote a PNG for a file that is not a -J file"
echo "plot refused bad.json: $(cat "$dir/err")"
echo PASS
