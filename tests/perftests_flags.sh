#!/usr/bin/env bash
# perftests_flags.sh MPIRUN PERFDIR: the *_perf drivers refuse bad flags with a message that names
# the option and the value, fit their buffers to memory, and label what they compare.
#
# Proves, on PERFDIR's all_reduce_perf (and broadcast_perf, reduce_scatter_perf), one rank and no
# MPI unless said:
# - a bad flag exits 2 with a message naming it as typed and why: a missing value (-b, --minbytes)
#   says it needs one; an unknown letter in a group (-qn) is named, not the argument before it;
#   --iters=abc names --iters; sizes that are inf, nan, negative, a fraction of a byte or beyond a
#   size_t (-e 1e30 no longer reads as 0, "33554432 > 0"); a -f that is not an integer (2K, 1.5,
#   -2); -f 1 with -i steps by bytes, as in nccl-tests; --offset past 4095 is refused, and
#   --offset 16 runs with right values, saying so in the banner and the -J file;
# - memory: under ulimit -d, a -e far beyond it runs with maxBytes lowered ("Reducing maxBytes to N
#   due to memory limitation", nccl-tests' line) so that the buffers fit, counting 2 buffers with
#   -c 0 (no "expected" buffer) and 3 with -c 1; a -b that cannot fit exits 2 saying so; under
#   ulimit -v (address space, which the fit does not read) the failed allocation names the buffer
#   and its size; with mpirun, 2 ranks on this host each get less than MemAvailable / 6;
# - -T 2 sets CHORUS_TIMEOUT_MS=2000 (the banner and the -J file say so): a rank whose peer never
#   comes ends with the library's timeout error within seconds (the default waits 10 minutes);
#   a CHORUS_TIMEOUT_MS the user set wins;
# - the -J file is valid JSON with a UTF-8 path (é) kept as it is and a byte that is not UTF-8
#   (0xff) read as Latin-1;
# - under mpirun: -r on all_reduce (no root) is ignored with a note, as nccl-tests ignores it, and
#   an -r past the ranks on broadcast exits 2 with a message, not an MPI_Abort; the memcpy line's
#   busbw is the float sum row's under -d all -o all; reduce_scatter_perf --compare gloo (Gloo has
#   none) prints no Gloo summary line; the header's peer columns sit over the rows' numbers with
#   --compare mpi and gloo (gloo(us) was one column off).
# Timings are never judged. Exits 77 (SKIP) without python3; without mpirun, after the one-rank
# checks.
set -u
mpirun=${1:?usage: perftests_flags.sh MPIRUN PERFDIR} perfdir=${2:?}
exe=$perfdir/all_reduce_perf

# shellcheck source-path=SCRIPTDIR source=support/verdict.sh
. "$(dirname "$0")/support/verdict.sh"
command -v python3 >/dev/null || skip "python3 not found"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Launcher variables of an enclosing job must not reach the children.
unset CHORUS_RANK CHORUS_NRANKS CHORUS_ROOT RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
unset CHORUS_TIMEOUT_MS
for v in $(env | awk -F= '/^(OMPI_COMM_WORLD|PMI_|PMIX_RANK|MV2_COMM_WORLD)/ {print $1}'); do
    unset "$v"
done

# refused WANT ARGS...: all_reduce_perf ARGS exits 2 and prints the line WANT (fixed string).
refused() {
    local want=$1 out rc
    shift
    out=$(timeout 60 "$exe" "$@" 2>&1)
    rc=$?
    [ $rc -eq 2 ] || fail "all_reduce_perf $* exited $rc, not 2: $out"
    grep -qxF -- "$want" <<<"$out" || fail "all_reduce_perf $* did not say '$want': $out"
    echo "refused $*: $want"
}
refused "option '-b' needs a value" -b
refused "option '--minbytes' needs a value" --minbytes
refused "unknown option '-q'" -b 8 -qn 5
refused "unknown option '--nosuch'" --nosuch=1
refused "invalid value 'abc' for option --iters: an integer from 1 to 1073741824" --iters=abc
refused "invalid value 'abc' for option -n: an integer from 1 to 1073741824" -n abc
big=99999999999999999999
too_large="too large for a size (2^64 - 1 bytes at most)"
refused "invalid value '1e30' for option -e: $too_large" -e 1e30
refused "invalid value '$big' for option --maxbytes: $too_large" --maxbytes $big
refused "invalid value 'inf' for option -e: not a finite size" -e inf
refused "invalid value 'nan' for option -e: not a number (nan)" -e nan
refused "invalid value '-8' for option -b: a size cannot be negative" -b -8
refused "invalid value '0.1' for option -b: not a whole number of bytes" -b 0.1
not_size="not a size (a number, then K, M or G for KiB, MiB, GiB)"
refused "invalid value '12X' for option -i: $not_size" -i 12X
factor="the step factor is an integer, 2 or more to multiply the size (0 or 1: step by -i bytes),"
factor+=" with no K/M/G"
refused "invalid value '2K' for option -f: $factor" -f 2K
refused "invalid value '1.5' for option -f: $factor" -f 1.5
refused "invalid value '-2' for option --stepfactor: $factor" --stepfactor=-2
# -f 1 steps by -i (nccl-tests' default factor); 1.5K is a whole number of bytes: 1536, 1544, 1552.
out=$(timeout 60 "$exe" -b 1.5K -e 1552 -f 1 -i 8 -n 1 -w 0 2>&1) ||
    fail "-f 1 -i 8 exited $?: $out"
[ "$(awk '!/^#/ && NF > 12 {print $1}' <<<"$out" | tr '\n' ' ')" = "1536 1544 1552 " ] ||
    fail "-b 1.5K -e 1552 -f 1 -i 8 did not give the rows 1536 1544 1552: $out"
echo "-f 1 -i 8: rows 1536 1544 1552"
refused "invalid value '4096' for option --offset: an integer from 0 to 4095" --offset 4096
# --offset 16: the buffers start 16 bytes past a page (the banner and the -J file say so); the
# rows check out (-c 1) and run under the sanitizers' builds like any other.
out=$(timeout 60 "$exe" --offset 16 -b 8 -e 1M -f 32 -n 2 -w 1 -c 1 -J "$dir/offset.json" 2>&1) ||
    fail "--offset 16 exited $?: $out"
grep -qxF "# --offset 16: each host buffer starts 16 bytes past a page boundary" <<<"$out" ||
    fail "--offset 16: no banner line: $out"
grep -q '^# Out of bounds values : 0 OK' <<<"$out" || fail "--offset 16: wrong values: $out"
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["flags"]["offset"] != 16)' \
    "$dir/offset.json" || fail "--offset 16: the -J file's flags.offset is not 16"
echo "--offset 16: banner, values right, flags.offset 16"

# Memory. 384 MiB of data for the process: far below -e 100G.
limit=$((384 << 20))
fit() { # fit CHECK: the lowered maxBytes of a run with -c CHECK, and its buffer count
    local out
    out=$(ulimit -d $((limit >> 10)) && timeout 120 "$exe" -b 8 -e 100G -f 1048576 -n 1 -w 0 \
        -c "$1" 2>&1) || fail "-e 100G under ulimit -d $((limit >> 10)) (-c $1) exited $?: $out"
    grep -E '^# Reducing maxBytes to [0-9]+ due to memory limitation ' <<<"$out" || fail "-e 100G" \
        "under ulimit -d (-c $1): no 'Reducing maxBytes' line: $out"
    grep -q '^ *8388608 ' <<<"$out" || fail "-e 100G under ulimit -d (-c $1): no 8 MiB row: $out"
}
for check in 0 1; do
    line=$(fit $check) || exit 1
    echo "$line"
    max=$(sed -E 's/^# Reducing maxBytes to ([0-9]+) .*/\1/' <<<"$line")
    nbufs=$(sed -E 's/.*: ([0-9]+) buffers a rank.*/\1/' <<<"$line")
    [ "$nbufs" = $((check + 2)) ] || fail "-c $check: $nbufs buffers counted, not $((check + 2))"
    [ $((max * nbufs)) -lt $limit ] || fail "-c $check: $nbufs buffers of $max bytes exceed it"
    if [ "$check" = 0 ]; then
        grep -q 'send, receive;' <<<"$line" || fail "-c 0 counts an expected buffer: $line"
    fi
done
out=$(ulimit -d $((limit >> 10)) && timeout 60 "$exe" -b 1G -e 2G -n 1 -w 0 2>&1)
rc=$?
if [ $rc -ne 2 ] ||
    ! grep -q '^not enough memory for -b 1073741824: 3 buffers a rank of at most ' <<<"$out"; then
    fail "-b 1G under ulimit -d exited $rc without 'not enough memory for -b': $out"
fi
echo "-b 1G under ulimit -d: refused"
out=$(ulimit -v $((1000 << 10)) && timeout 60 "$exe" -b 8 -e 600M -n 1 -w 0 -c 0 2>&1)
rc=$?
want='cannot allocate the receive buffer: posix_memalign of 629145664 bytes failed'
if [ $rc -eq 0 ] || ! grep -q "$want" <<<"$out"; then
    fail "-e 600M under ulimit -v exited $rc without naming the buffer and its size: $out"
fi
echo "-e 600M under ulimit -v: $(grep 'cannot allocate' <<<"$out")"

# -T: a rank alone of 2 (its peer never starts) ends at the library's deadline, -T's 2 s.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
start=$SECONDS
out=$(CHORUS_RANK=0 CHORUS_NRANKS=2 CHORUS_ROOT=127.0.0.1:$port timeout 60 "$exe" -T 2 -b 8 -e 8 \
    -n 1 -w 0 2>&1)
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -q 'CHORUS_TIMEOUT_MS' <<<"$out"; then
    fail "-T 2, the peer missing: exit $rc after $((SECONDS - start)) s, no timeout error: $out"
fi
echo "-T 2, the peer missing: exit $rc after $((SECONDS - start)) s"
out=$(timeout 60 "$exe" -T 3 -b 8 -e 8 -n 1 -w 0 -J "$dir/t.json" 2>&1) ||
    fail "-T 3 exited $?: $out"
want="# -T 3: CHORUS_TIMEOUT_MS=3000: a wait of a call that takes longer fails it, and the run"
grep -qxF "$want ends with the error" <<<"$out" || fail "-T 3: no banner line: $out"
python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))["environment"]
sys.exit(e.get("CHORUS_TIMEOUT_MS") != "3000")' "$dir/t.json" ||
    fail "-T 3: the -J file records no CHORUS_TIMEOUT_MS=3000"
out=$(CHORUS_TIMEOUT_MS=1500 timeout 60 "$exe" -T 3 -b 8 -e 8 -n 1 -w 0 2>&1) ||
    fail "-T 3 exited $?"
grep -qxF '# -T 3 ignored: CHORUS_TIMEOUT_MS=1500 is set' <<<"$out" ||
    fail "-T 3 under CHORUS_TIMEOUT_MS=1500: $out"
echo "-T: sets CHORUS_TIMEOUT_MS, leaves the user's"

# JSON strings: UTF-8 kept, a stray byte read as Latin-1; both files valid JSON.
for name in "é" $'\xff'; do
    out=$(timeout 60 "$exe" -b 8 -e 8 -n 1 -w 0 -J "$dir/$name.json" 2>&1) ||
        fail "-J $name exited $?: $out"
    python3 - "$dir/$name.json" <<'EOF' || fail "-J $dir/$name.json: bad JSON strings"
import json, os, sys
path = sys.argv[1]
raw = open(path, "rb").read()
arg = json.loads(raw.decode("utf-8"))["args"][-1]  # valid UTF-8 text, valid JSON
name = os.fsencode(path)
try:
    want = name.decode("utf-8")
except UnicodeDecodeError:
    want = name.decode("latin-1")
if arg != want:
    sys.exit(f"args[-1] is {arg!r}, expected {want!r}")
print(f"-J {path!r}: args[-1] {arg!r}")
EOF
done

if ! command -v "$mpirun" >/dev/null; then
    skip "mpirun ($mpirun) not found; the one-rank checks passed"
fi
mpi() { # mpi NP EXE ARGS...
    local np=$1
    shift
    timeout -k 10 120 "$mpirun" --oversubscribe --allow-run-as-root -np "$np" "$@"
}
out=$(mpi 2 "$exe" -r 5 -b 8 -e 8 -n 1 -w 0 2>&1) || fail "all_reduce_perf -r 5 exited $?: $out"
grep -qxF '# -r 5 ignored: all_reduce has no root (as in nccl-tests)' <<<"$out" ||
    fail "all_reduce_perf -r 5: no note: $out"
out=$(mpi 2 "$perfdir/broadcast_perf" -r 5 -b 8 -e 8 -n 1 -w 0 2>&1)
rc=$?
want="invalid value '5' for option -r: 2 ranks have roots 0 to 1 (-1: each in turn)"
if [ $rc -ne 2 ] || ! grep -qxF "$want" <<<"$out" ||
    grep -qiE 'MPI_ABORT|ORTE_ERROR|Using devices' <<<"$out"; then
    fail "broadcast_perf -r 5 on 2 ranks: exit $rc: $out"
fi
echo "-r: ignored with a note without a root, refused up front past the ranks"

# 2 ranks on this host share MemAvailable: a -b of all of it cannot fit 3 buffers of 2 ranks.
kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) # kB; mawk's numbers stop at 2^31 - 1
if [ -n "$kb" ]; then
    avail=$((kb * 1024))
    out=$(mpi 2 "$exe" -b "$avail" -e $((avail * 2)) -n 1 -w 0 2>&1)
    rc=$?
    line=$(grep '^# Reducing maxBytes to ' <<<"$out")
    max=$(sed -E 's/^# Reducing maxBytes to ([0-9]+) .*/\1/' <<<"$line")
    if [ $rc -ne 2 ] || ! grep -q ' 2 ranks on this host;' <<<"$line" || [ -z "$max" ] ||
        [ "$max" -ge $((avail / 6)) ] || ! grep -q '^not enough memory for -b ' <<<"$out"; then
        fail "-b MemAvailable on 2 ranks: exit $rc: $out"
    fi
    echo "2 ranks: $line"
fi

# The memcpy line's busbw is the float sum row's, not the last sweep's (bfloat16 avg).
out=$(mpi 2 "$exe" -b 4K -e 4K -d all -o all -n 1 -w 0 --compare mpi -J "$dir/y.json" 2>&1) ||
    fail "-d all -o all --compare mpi exited $?: $out"
python3 - "$dir/y.json" <<'EOF' || fail "the memcpy line is not the float sum row's"
import json, sys
run = json.load(open(sys.argv[1]))
row = [r for r in run["rows"] if (r["type"], r["redop"]) == ("float", "sum")][0]
mc = run["summary"]["memcpy"]
if mc["busbw"] != row["out_of_place"]["busbw"] or mc["nbytes"] != row["size"]:
    sys.exit(f"memcpy {mc}, float sum row {row['out_of_place']}")
print(f"memcpy line: busbw {mc['busbw']} of the float sum row")
EOF

# reduce_scatter --compare gloo: ignored (Gloo has none, or the build has no Gloo), and the summary
# says nothing of Gloo.
out=$(mpi 2 "$perfdir/reduce_scatter_perf" -b 8 -e 64 -f 8 -n 1 -w 0 --compare gloo 2>&1) ||
    fail "reduce_scatter_perf --compare gloo exited $?: $out"
if ! grep -q '^# --compare gloo ignored: ' <<<"$out" || grep -q '^# Gloo' <<<"$out"; then
    fail "reduce_scatter_perf --compare gloo: $(grep -E '^# (--compare|Gloo)' <<<"$out")"
fi
echo "reduce_scatter --compare gloo: ignored, no Gloo summary"

# Header over rows: each header word's last column is the row's field's (rows have no "#").
aligned() {
    python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
hdr = next(l for l in lines if re.match(r"^#\s+size\s+count", l))
rows = [l for l in lines if re.match(r"^\s+\d+\s+\d+\s", l)]
ends = lambda l: [m.end() for m in re.finditer(r"\S+", l)]
bad = [r for r in rows if ends(r) != ends(hdr)[1:]]
print("\n".join([hdr] + bad[:1]) if bad or not rows else f"{len(rows)} rows aligned")
sys.exit(1 if bad or not rows else 0)'
}
for peer in mpi gloo; do
    out=$(mpi 2 "$exe" -b 8 -e 4K -f 8 -n 1 -w 0 --compare $peer 2>&1) ||
        fail "--compare $peer exited $?: $out"
    if grep -q "^# --compare $peer ignored" <<<"$out"; then
        echo "--compare $peer ignored here: $(grep "^# --compare $peer ignored" <<<"$out")"
        continue
    fi
    msg=$(aligned <<<"$out") || fail "--compare $peer: header and rows do not line up: $msg"
    echo "--compare $peer: $msg"
done
echo PASS
