#!/usr/bin/env bash
# check_transports.sh: every connection a Chorus job builds uses the transport its host layout
# calls for: shm between ranks on one host, net between ranks on different hosts.
#
# usage: check_transports.sh (--ranks-per-host R --nranks N | --host-map H0,H1,...) [--keep DIR]
#                            -- COMMAND [ARGS...]
#
# Runs COMMAND (any launcher: mpirun ... hostid_wrap.sh R prog, netns_run.sh ... -- prog) with
# CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT CHORUS_DEBUG_FILE=<tmpdir>/log.%h.%p, then reads the
# line the sending end of every connection prints at INFO, subsystem INIT:
#     conn <label>: rank <S> -> rank <R> via <shm|net>        (label: ring0, tree1, p2p, ...)
# from the log files and from COMMAND's output. The host of rank r is r / R (hostid_wrap.sh and
# netns_run.sh place ranks that way) or the r-th entry of --host-map.
# Passes when COMMAND exits 0, at least one such line appeared, every line's ranks are in range,
# every same-host pair says shm and every cross-host pair says net, and there is at least one
# line of each kind the layout has (net when there are several hosts, shm when a host holds
# several ranks). Prints a summary per label; exits 1 on any mismatch, 77 when COMMAND skipped
# (exit 77), 2 on a usage error. --keep DIR leaves the logs and output in DIR.
set -euo pipefail

usage() {
    sed -n '5,6p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
say() { echo "check_transports: $*"; }

per_host="" nranks="" host_map="" keep=""
while [ $# -gt 0 ]; do
    case $1 in
    --ranks-per-host) per_host=${2:-}; shift 2 ;;
    --nranks) nranks=${2:-}; shift 2 ;;
    --host-map) host_map=${2:-}; shift 2 ;;
    --keep) keep=${2:-}; shift 2 ;;
    --) shift; break ;;
    *) echo "check_transports: unknown argument '$1'" >&2; usage ;;
    esac
done
[ $# -gt 0 ] || { echo "check_transports: no command after --" >&2; usage; }
if [ -n "$host_map" ]; then
    [[ $host_map =~ ^[^,]+(,[^,]+)*$ ]] || { echo "check_transports: bad --host-map" >&2; usage; }
    IFS=, read -r -a hosts <<<"$host_map"
    nranks=${#hosts[@]}
else
    [[ $per_host =~ ^[1-9][0-9]*$ && $nranks =~ ^[1-9][0-9]*$ ]] || {
        echo "check_transports: give --ranks-per-host R and --nranks N, or --host-map" >&2
        usage
    }
    hosts=()
    for ((r = 0; r < nranks; r++)); do
        hosts+=("$((r / per_host))")
    done
fi

if [ -n "$keep" ]; then
    mkdir -p "$keep"
    dir=$keep
    rm -f "$dir"/log.* "$dir/output"
else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/check_transports.XXXXXX")
    trap 'rm -rf "$dir"' EXIT
fi

say "running: $*"
rc=0
CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT CHORUS_DEBUG_FILE="$dir/log.%h.%p" "$@" \
    >"$dir/output" 2>&1 || rc=$?
cat "$dir/output"
if [ $rc = 77 ]; then
    say "SKIP: the command skipped (exit 77)"
    exit 77
fi

# One awk pass over every log file and the output; the verdict is its exit status.
shopt -s nullglob
logs=("$dir"/log.*)
verdict=0
awk -v map="$(
    IFS=,
    echo "${hosts[*]}"
)" -v cmd_rc="$rc" -v nlogs="${#logs[@]}" '
BEGIN {
    me = "check_transports:"
    n = split(map, host, ",")
    for (r = 0; r < n; r++) {
        h[r] = host[r + 1]
        if (!(h[r] in size)) nhosts++
        size[h[r]]++
    }
    for (x in size) if (size[x] > 1) need_shm = 1
    need_net = nhosts > 1
    bad = 0
}
match($0, /conn [^ :]+: rank [0-9]+ -> rank [0-9]+ via [A-Za-z0-9_]+/) {
    split(substr($0, RSTART, RLENGTH), f, " ")
    label = f[2]; sub(/:$/, "", label)
    s = f[4] + 0; d = f[7] + 0; tp = f[9]
    lines++
    sent[s] = 1
    labels[label] = 1
    count[label, tp]++
    kinds[tp]++
    if (s >= n || d >= n) {
        if (bad++ < 20)
            printf "%s MISMATCH %s: rank %d -> rank %d: rank out of range (%d ranks)\n",
                   me, label, s, d, n
        next
    }
    want = h[s] == h[d] ? "shm" : "net"
    if (tp != want) {
        if (bad++ < 20)
            printf "%s MISMATCH %s: rank %d (host %s) -> rank %d (host %s) via %s, expected %s\n",
                   me, label, s, h[s], d, h[d], tp, want
    } else if (want == "shm") {
        ok_shm++
    } else {
        ok_net++
    }
}
END {
    printf "%s layout: %d ranks on %d host(s) (host of each rank: %s); %d log files\n",
           me, n, nhosts, map, nlogs
    for (l in labels) {
        printf "%s   %-8s", me, l
        for (k in kinds) if ((l, k) in count) printf "  %s %d", k, count[l, k]
        printf "\n"
    }
    printf "%s %d conn lines: %d shm (same host), %d net (across hosts), %d mismatches\n",
           me, lines, ok_shm, ok_net, bad
    fail = 0
    if (cmd_rc != 0) {
        print me " FAIL: the command exited " cmd_rc
        fail = 1
    }
    if (lines == 0) {
        print me " FAIL: no \"conn <label>: rank S -> rank R via <shm|net>\" line at INFO/INIT:" \
              " does this build log its connections?"
        fail = 1
    } else {
        if (need_net && !("net" in kinds)) {
            print me " FAIL: the layout spans several hosts but no connection said net"
            fail = 1
        }
        if (need_shm && !("shm" in kinds)) {
            print me " FAIL: a host holds several ranks but no connection said shm"
            fail = 1
        }
    }
    if (bad) {
        print me " FAIL: " bad " connection(s) on the wrong transport"
        fail = 1
    }
    quiet = ""
    for (r = 0; r < n; r++)
        if (!(r in sent))
            quiet = quiet " " r
    if (lines > 0 && n > 1 && quiet != "")
        print me " note: ranks that logged no connection of their own:" quiet
    if (!fail)
        print me " PASS"
    exit fail
}' ${logs[@]+"${logs[@]}"} "$dir/output" || verdict=$?
[ -z "$keep" ] || say "logs and output kept in $dir"
exit $verdict
