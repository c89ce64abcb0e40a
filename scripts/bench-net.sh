#!/usr/bin/env bash
# bench-net.sh RESULTS_DIR: all-reduce across simulated hosts over a shaped network, ring vs tree vs
# the tuner's choice, and the net transport against a plain TCP stream on loopback.
#
# 1. Namespaces (tests/support/netns_run.sh, needs root): one network namespace per host, each
#    host's egress shaped with netem "delay 50us rate 1gbit" (where the kernel has no netem, tbf
#    applies the rate only and the summary says the delay was not emulated). all_reduce_perf
#    (launched by env: CHORUS_RANK/NRANKS/ROOT) at 4 ranks (2 hosts x 2) and 8 ranks (2 x 4,
#    4 x 2), with CHORUS_ALGO=ring, CHORUS_ALGO=tree and unset (auto), 8 B .. 16 MiB (-f 4;
#    16 MiB itself, which 8 x 4^k misses, in a second launch). Summary per layout: size, ring /
#    tree / auto out-of-place time (us), auto/best (auto's time over the faster of ring and tree:
#    1.00 means the tuner picked right), then every column all_reduce_perf prints beyond
#    nccl-tests' own (e.g. algo, pred), per run.
# 2. Loopback: all_reduce_perf at 2 ranks on 2 simulated hosts (CHORUS_HOSTID, CHORUS_SOCKET_IFNAME
#    ==lo, so the ranks talk through the net transport over 127.0.0.1) at 16 MiB, next to
#    tcp_stream at 16 MiB over 1 and 4 sockets; ratio = all-reduce busbw / tcp_stream GB/s (at 2
#    ranks busbw = algbw = bytes each rank sends per second, with both directions busy at once,
#    while tcp_stream loads one direction).
#
# Raw outputs go to RESULTS_DIR/raw/, the tables to RESULTS_DIR/summary.txt (also printed).
# Options (environment): BUILD_DIR (default build), ITERS (20), WARMUP (5), MAX_BYTES (16M),
# LAYOUTS ("2x2 2x4 4x2"), NETEM ("delay 50us rate 1gbit"), RUN_TIMEOUT (seconds per run, 900).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ] || [[ $1 == -* ]]; then
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
results=$1
build=${BUILD_DIR:-build}
iters=${ITERS:-20}
warmup=${WARMUP:-5}
max_bytes=${MAX_BYTES:-16M}
layouts=${LAYOUTS:-2x2 2x4 4x2}
netem=${NETEM:-delay 50us rate 1gbit}
# The rate in the spec, in Mb/s, for CHORUS_NET_SPEED_MBPS (0: none given, the NIC's own).
speed_mbps=0
if [[ $netem =~ rate\ ([0-9]+)(gbit|mbit) ]]; then
    speed_mbps=${BASH_REMATCH[1]}
    [ "${BASH_REMATCH[2]}" = gbit ] && speed_mbps=$((speed_mbps * 1000))
fi
run_timeout=${RUN_TIMEOUT:-900}
perf=$build/perftests/all_reduce_perf
stream=$build/perftests/tcp_stream
netns_run=tests/support/netns_run.sh
for f in "$perf" "$stream"; do
    if [ ! -x "$f" ]; then
        echo "bench-net: $f not found: build first (cmake --build $build), or set BUILD_DIR" >&2
        exit 1
    fi
done
unset CHORUS_ALGO CHORUS_HOSTID CHORUS_RANK CHORUS_NRANKS CHORUS_ROOT CHORUS_SOCKET_IFNAME
mkdir -p "$results/raw"
summary=$results/summary.txt
: >"$summary"
out() { echo "$*" | tee -a "$summary"; }

out "# bench-net $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null ||
    echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty'), $(nproc) cores, kernel $(uname -r)"
out "# all_reduce_perf -b 8 -e $max_bytes -f 4 -n $iters -w $warmup -c 1 (float sum)"

# table FILE: rank 0's header and rows of an all_reduce_perf output (netns_run prefixes stripped).
table() {
    if grep -q '^\[rank ' "$1"; then
        sed -n 's/^\[rank 0\] //p' "$1"
    else
        cat "$1"
    fi | awk '/^#[ ]+size[ ]+count/ || ($1 ~ /^[0-9]+$/ && NF >= 13)'
}

# summarize LAYOUT: join the ring, tree and auto tables by size. Columns are found by their header
# names (size, the first time or cputime); any name nccl-tests does not print is an extra column,
# kept per run in the order it came.
summarize() {
    local layout=$1 a
    local args=()
    for a in ring tree auto; do
        args+=("$results/raw/$layout-$a.table")
    done
    awk '
    function isstd(name) {
        return name ~ /^(size|count|type|redop|root|time|cputime|algbw|busbw|#wrong)$/
    }
    FNR == 1 { run++; nextra[run] = 0; tcol[run] = 0; scol[run] = 1 }
    /^#/ {
        n = 0
        for (i = 2; i <= NF; i++) {
            n++
            if ($i == "size") scol[run] = n
            else if (($i == "time" || $i == "cputime") && !tcol[run]) tcol[run] = n
            else if (!isstd($i)) {
                k = ++nextra[run]
                ecol[run, k] = n
                ename[run, k] = $i
            }
        }
        ncols[run] = n
        next
    }
    {
        sz = $(scol[run]); seen[sz] = 1
        if (!(sz in order)) { order[sz] = ++nsizes; sizes[nsizes] = sz }
        t[run, sz] = $(tcol[run] ? tcol[run] : 6)
        for (k = 1; k <= nextra[run]; k++) x[run, sz, k] = $(ecol[run, k])
        for (i = ncols[run] + 1; i <= NF; i++) {   # values beyond the header: unnamed extras
            k = nextra[run] + i - ncols[run]
            x[run, sz, k] = $i
            if (!((run, k) in ename)) { ename[run, k] = "extra" (i - ncols[run]); xmax[run] = k }
        }
    }
    END {
        split("ring tree auto", rn, " ")
        for (r = 1; r <= 3; r++) if (xmax[r] < nextra[r]) xmax[r] = nextra[r]
        printf "%12s  %10s  %10s  %10s  %9s", "size(B)", "ring(us)", "tree(us)", "auto(us)",
               "auto/best"
        for (r = 1; r <= 3; r++)
            for (k = 1; k <= xmax[r]; k++)
                printf "  %12s", rn[r] "." ename[r, k]
        printf "\n"
        for (i = 1; i <= nsizes; i++) {
            sz = sizes[i]
            ring = t[1, sz]; tree = t[2, sz]; auto = t[3, sz]
            best = ""
            if (ring != "" && tree != "") best = ring + 0 < tree + 0 ? ring : tree
            else if (ring != "") best = ring
            else if (tree != "") best = tree
            ratio = (auto != "" && best != "" && best + 0 > 0) ? sprintf("%.2f", auto / best) : "-"
            printf "%12s  %10s  %10s  %10s  %9s", sz, ring == "" ? "-" : ring,
                   tree == "" ? "-" : tree, auto == "" ? "-" : auto, ratio
            for (r = 1; r <= 3; r++)
                for (k = 1; k <= xmax[r]; k++)
                    printf "  %12s", ((r, sz, k) in x) ? x[r, sz, k] : "-"
            printf "\n"
        }
    }' "${args[@]}"
}

# netns_perf MIN_BYTES RAW: all_reduce_perf from MIN_BYTES to max_bytes (-f 4) on the layout
# (hosts, per_host) with envs, output in RAW.
netns_perf() {
    "$netns_run" --hosts "$hosts" --ranks-per-host "$per_host" --netem "$netem" --shape-fallback \
        --timeout "$run_timeout" ${envs[@]+"${envs[@]}"} -- \
        "$perf" -b "$1" -e "$max_bytes" -f 4 -n "$iters" -w "$warmup" -c 1 >"$2" 2>&1
}
max_nbytes=$(awk -v v="$max_bytes" 'BEGIN {
    n = v + 0; u = toupper(substr(v, length(v)))
    if (u == "K") n *= 1024; else if (u == "M") n *= 1048576; else if (u == "G") n *= 1073741824
    printf "%d", n }')

# 1. Namespaces.
shaping=""
netns_ok=1
for layout in $layouts; do
    [ $netns_ok = 1 ] || break
    hosts=${layout%x*} per_host=${layout#*x}
    for algo in ring tree auto; do
        raw=$results/raw/$layout-$algo.txt
        # The shaped link's rate for the tuner: a veth says 10000 Mb/s whatever tbf does to it.
        envs=(--env "CHORUS_NET_SPEED_MBPS=$speed_mbps")
        [ "$algo" = auto ] || envs+=(--env "CHORUS_ALGO=$algo")
        echo "bench-net: $layout ($((hosts * per_host)) ranks), $algo ..." >&2
        rc=0
        netns_perf 8 "$raw" || rc=$?
        if [ $rc = 77 ]; then
            out "# namespaces: $(grep -m1 '^SKIP' "$raw" || echo SKIP) -- namespace runs skipped"
            netns_ok=0
            break
        fi
        [ -n "$shaping" ] || shaping=$(sed -n 's/.*shaping: //p' "$raw" | head -1)
        [ $rc = 0 ] || out "# $layout $algo: FAILED (exit $rc), see raw/${raw##*/}"
        table "$raw" >"$results/raw/$layout-$algo.table"
        # 8 B x 4^k never lands on 16 MiB: the largest size gets a launch of its own.
        last=$(awk '$1 ~ /^[0-9]+$/ { v = $1 } END { print v }' "$results/raw/$layout-$algo.table")
        if [ $rc = 0 ] && [ "${last:-0}" != "$max_nbytes" ]; then
            raw=$results/raw/$layout-$algo.max.txt
            rc=0
            netns_perf "$max_bytes" "$raw" || rc=$?
            [ $rc = 0 ] || out "# $layout $algo $max_bytes: FAILED (exit $rc), see raw/${raw##*/}"
            table "$raw" | grep -v '^#' >>"$results/raw/$layout-$algo.table" || true
        fi
    done
    if [ $netns_ok = 1 ]; then
        out ""
        out "# $layout: $hosts hosts x $per_host ranks, shaping per host egress: ${shaping:-?}"
        out "# out-of-place time (us); auto/best = auto / min(ring, tree)"
        summarize "$layout" | tee -a "$summary"
    fi
done

# 2. Loopback: the net transport between 2 simulated hosts vs a plain TCP stream.
out ""
out "# loopback, $max_bytes: all_reduce_perf at 2 ranks on 2 simulated hosts (net over lo) vs" \
    "tcp_stream"
port=$((20000 + $$ % 10000))
pids=()
declare -a gbs
for r in 0 1; do
    CHORUS_RANK=$r CHORUS_NRANKS=2 CHORUS_ROOT=127.0.0.1:$port CHORUS_HOSTID=loophost$r \
        CHORUS_SOCKET_IFNAME="=lo" timeout "$run_timeout" \
        "$perf" -b "$max_bytes" -e "$max_bytes" -n "$iters" -w "$warmup" -c 1 \
        >"$results/raw/loopback-allreduce.$r.txt" 2>&1 &
    pids+=($!)
done
lb_rc=0
for p in "${pids[@]}"; do
    wait "$p" || lb_rc=$?
done
busbw=$(table "$results/raw/loopback-allreduce.0.txt" |
    awk '$1 ~ /^[0-9]+$/ { v = $8 } END { print v }')
[ $lb_rc = 0 ] ||
    out "# loopback all_reduce_perf FAILED (exit $lb_rc), see raw/loopback-allreduce.*.txt"
for k in 1 4; do
    "$stream" -b "$max_bytes" -n "$iters" -w "$warmup" --sockets "$k" \
        >"$results/raw/loopback-tcp_stream-$k.txt" 2>&1 || out "# tcp_stream --sockets $k FAILED"
    gbs[k]=$(sed -n 's/^tcp_stream: .*: \([0-9.]*\) GB\/s.*/\1/p' \
        "$results/raw/loopback-tcp_stream-$k.txt")
done
printf -v line '%-34s %10s GB/s' "all_reduce_perf busbw (2 ranks)" "${busbw:--}"
out "$line"
for k in 1 4; do
    ratio=-
    if [ -n "${busbw:-}" ] && [ -n "${gbs[k]:-}" ]; then
        ratio=$(awk -v a="$busbw" -v b="${gbs[k]}" \
            'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    fi
    printf -v line '%-34s %10s GB/s   ratio all-reduce/tcp %s' "tcp_stream ($k socket(s))" \
        "${gbs[k]:--}" "$ratio"
    out "$line"
done
echo "bench-net: summary in $summary, raw outputs in $results/raw/" >&2
