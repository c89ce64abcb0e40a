#!/usr/bin/env bash
# netns_run.sh: run a Chorus job on simulated hosts, one Linux network namespace per host.
#
# usage: netns_run.sh --hosts H --ranks-per-host R [--netem "delay 50us rate 1gbit"]
#                     [--shape-fallback] [--timeout S] [--fail-grace S] [--env K=V]...
#                     -- PROGRAM ARGS...
#
# The network: a "switch" namespace holding a bridge, and H host namespaces, each joined to the
# bridge by one veth pair (cveth<h> inside host h, port<h> on the bridge), address
# 10.<a>.<b>.<h+1>/24 on cveth<h>, lo up. With --netem SPEC, `tc qdisc add dev cveth<h> root netem
# SPEC` runs in every host namespace: only the host side egress is shaped, so a message from host
# x to host y sees exactly one netem (one-way latency = the delay) and each host's sending rate is
# limited. Where the kernel has no netem qdisc, --netem is a SKIP unless --shape-fallback is given,
# which applies only the "rate" part with tbf (delay NOT emulated) and says so.
#
# The job: ranks h*R .. h*R+R-1 run in namespace h (`ip netns exec`, each its own session so a
# whole rank can be killed), with CHORUS_RANK, CHORUS_NRANKS, CHORUS_ROOT=<host0 addr>:<port>,
# CHORUS_SOCKET_IFNAME==cveth<h>, CHORUS_HOSTID=<namespace name> (namespaces share hostname and
# boot id, so the host id must be set), NETNS_RUN_HOST=<h>, NETNS_RUN_ADDR=<own addr>,
# NETNS_RUN_HOST0_ADDR=<host0 addr>, then the --env values (which may override any of them). Every
# output line is prefixed "[rank r] ". The script waits for all ranks; after --timeout S (default
# 300) it kills the ranks still running and names them; after a rank fails, the others get
# --fail-grace S (default 30) to finish before they are killed too (a failed peer usually leaves
# them waiting on their own deadline). Exit status: 0 when every rank exited 0, 77 when every rank
# exited 77 (SKIP), 124 on timeout, else 1.
#
# Names carry this script's pid (chorus-<pid>-sw, chorus-<pid>-h<h>), so concurrent runs (ctest
# -j) never share a namespace; the subnet and port are derived from the pid too, though each run's
# namespaces are isolated from every other network anyway. Every namespace (and with it every
# veth, bridge and qdisc) is removed on any exit (trap EXIT INT TERM); namespaces left by a run that
# was SIGKILLed (its pid gone) are swept, with any ranks it left running and its temporary
# directory, at the next start.
# Without the rights to create namespaces (not root, no `ip`), it prints "SKIP: <reason>" and
# exits 77.
set -euo pipefail

usage() {
    sed -n '4,6p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
skip() {
    echo "SKIP: $*"
    exit 77
}
note() { echo "netns_run: $*"; }

hosts="" per_host="" netem="" fallback=0 timeout=300 grace=30
user_env=()
while [ $# -gt 0 ]; do
    case $1 in
    --hosts) hosts=${2:-}; shift 2 ;;
    --ranks-per-host) per_host=${2:-}; shift 2 ;;
    --netem) netem=${2:-}; shift 2 ;;
    --shape-fallback) fallback=1; shift ;;
    --timeout) timeout=${2:-}; shift 2 ;;
    --fail-grace) grace=${2:-}; shift 2 ;;
    --env)
        [[ ${2:-} == ?*=* ]] || { echo "netns_run: --env needs K=V, got '${2:-}'" >&2; usage; }
        user_env+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "netns_run: unknown argument '$1'" >&2; usage ;;
    esac
done
for v in hosts per_host timeout grace; do
    if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
        echo "netns_run: --${v//_/-} must be a positive integer, got '${!v}'" >&2
        usage
    fi
done
[ $# -gt 0 ] || { echo "netns_run: no program after --" >&2; usage; }
prog=("$@")
nranks=$((hosts * per_host))
if [ "$hosts" -gt 250 ]; then
    echo "netns_run: at most 250 hosts" >&2
    exit 2
fi

command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2) to create network namespaces"
command -v setsid >/dev/null 2>&1 || skip "no 'setsid' command (util-linux)"
if [ -n "$netem" ]; then
    command -v tc >/dev/null 2>&1 || skip "--netem given but no 'tc' command (iproute2)"
fi

# Sweep namespaces of earlier runs that died without cleaning up (their pid no longer exists).
for f in /run/netns/chorus-*; do
    [ -e "$f" ] || continue
    name=${f##*/}
    owner=${name#chorus-}
    owner=${owner%%[!0-9]*}
    if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
        for p in $(ip netns pids "$name" 2>/dev/null || true); do
            kill -KILL "$p" 2>/dev/null || true # ranks orphaned by that run
        done
        ip netns del "$name" 2>/dev/null || true
    fi
done
for d in "${TMPDIR:-/tmp}"/netns_run.*.*; do
    owner=${d##*/netns_run.}
    owner=${owner%%.*}
    if [ -d "$d" ] && [[ $owner =~ ^[0-9]+$ ]] && ! kill -0 "$owner" 2>/dev/null; then
        rm -rf "$d"
    fi
done

prefix=chorus-$$
if compgen -G "/run/netns/$prefix-*" >/dev/null; then
    prefix=chorus-$$x$RANDOM # a leftover of an earlier process with our pid
fi
sw=$prefix-sw
subnet=10.$((($$ / 250) % 250 + 1)).$(($$ % 250 + 1))
port=$((20000 + $$ % 10000))
dir=$(mktemp -d "${TMPDIR:-/tmp}/netns_run.$$.XXXXXX")
made=() # namespaces created so far, removed in reverse order

# Kill every rank still running (whole session: the program and anything it forked).
kill_ranks() { # SIGNAL
    local r p
    for ((r = 0; r < nranks; r++)); do
        [ -e "$dir/rc.$r" ] && continue
        p=$(cat "$dir/pid.$r" 2>/dev/null || true)
        [ -n "$p" ] || continue
        kill "-$1" -- "-$p" 2>/dev/null || kill "-$1" "$p" 2>/dev/null || true
    done
}

# True when every rank has exited; RUNNING lists those that have not.
all_done() {
    local r
    running=()
    for ((r = 0; r < nranks; r++)); do
        [ -e "$dir/rc.$r" ] || running+=("$r")
    done
    [ ${#running[@]} -eq 0 ]
}

# Wait up to S seconds (a deadline, polling the exit files) for every rank to exit.
wait_ranks() { # S
    local deadline=$((SECONDS + $1))
    while ! all_done && [ $SECONDS -lt $deadline ]; do
        sleep 0.1
    done
    all_done
}

# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    set +e
    kill_ranks KILL
    local i p deadline=$((SECONDS + 5))
    for ((i = 0; i < nranks; i++)); do # SIGKILLed ranks exit at once; bound the wait anyway
        p=$(cat "$dir/pid.$i" 2>/dev/null || true)
        while [ -n "$p" ] && kill -0 "$p" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
            sleep 0.05
        done
    done
    for ((i = ${#made[@]} - 1; i >= 0; i--)); do
        ip netns del "${made[i]}" 2>/dev/null || note "warning: could not remove ${made[i]}"
    done
    rm -rf "$dir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The switch: a namespace with a bridge. A failure here means we may not create namespaces.
if ! err=$(ip netns add "$sw" 2>&1); then
    skip "cannot create a network namespace (uid $(id -u)): ${err:-ip netns add failed}"
fi
made+=("$sw")
ip -n "$sw" link set lo up
if ! err=$(ip -n "$sw" link add br0 type bridge 2>&1); then
    skip "cannot create a bridge in a namespace: $err"
fi
ip -n "$sw" link set br0 up

ns_of=() addr_of=()
for ((h = 0; h < hosts; h++)); do
    ns=$prefix-h$h
    ifname=cveth$h
    ip netns add "$ns"
    made+=("$ns")
    ip -n "$ns" link set lo up
    if ! err=$(ip -n "$sw" link add "port$h" type veth peer name "$ifname" netns "$ns" 2>&1); then
        skip "cannot create a veth pair: $err"
    fi
    ip -n "$sw" link set "port$h" master br0
    ip -n "$sw" link set "port$h" up
    ip -n "$ns" addr add "$subnet.$((h + 1))/24" dev "$ifname"
    ip -n "$ns" link set "$ifname" up
    ns_of[h]=$ns
    addr_of[h]=$subnet.$((h + 1))
done

shaping="none"
if [ -n "$netem" ]; then
    read -r -a netem_words <<<"$netem"
    if err=$(ip netns exec "${ns_of[0]}" tc qdisc add dev cveth0 root netem \
        "${netem_words[@]}" 2>&1); then
        shaping="netem $netem"
        for ((h = 1; h < hosts; h++)); do
            ip netns exec "${ns_of[h]}" tc qdisc add dev "cveth$h" root netem "${netem_words[@]}"
        done
    elif [[ $err == *"qdisc kind is unknown"* ]] && [ $fallback = 1 ]; then
        rate=""
        for ((i = 0; i < ${#netem_words[@]}; i++)); do
            [ "${netem_words[i]}" = rate ] && rate=${netem_words[i + 1]:-}
        done
        if [ -n "$rate" ]; then
            # burst must hold a whole GSO packet (64 KiB on veth) or tbf drops it.
            for ((h = 0; h < hosts; h++)); do
                ip netns exec "${ns_of[h]}" tc qdisc add dev "cveth$h" root tbf rate "$rate" \
                    burst 256kb latency 50ms
            done
            shaping="tbf rate $rate (this kernel has no netem: '$netem' asked, delay NOT emulated)"
        else
            shaping="none (this kernel has no netem: '$netem' asked, nothing emulated)"
        fi
    elif [[ $err == *"qdisc kind is unknown"* ]]; then
        skip "this kernel has no netem qdisc (tc: $err); --shape-fallback applies the rate with tbf"
    else
        echo "netns_run: tc qdisc add ... netem $netem failed: $err" >&2
        exit 2
    fi
fi

# Links up (carrier on both ends) before any rank starts: a condition with a deadline.
deadline=$((SECONDS + 10))
for ((h = 0; h < hosts; h++)); do
    until [[ $(ip -n "${ns_of[h]}" link show "cveth$h") == *LOWER_UP* ]]; do
        if [ $SECONDS -ge $deadline ]; then
            echo "netns_run: cveth$h in ${ns_of[h]} did not come up within 10 s" >&2
            exit 2
        fi
        sleep 0.05
    done
done

root=${addr_of[0]}:$port
note "$hosts hosts x $per_host ranks, namespaces $prefix-{sw,h0..h$((hosts - 1))}," \
    "subnet $subnet.0/24, CHORUS_ROOT=$root, shaping: $shaping"
note "program: ${prog[*]}"

start=$SECONDS
seds=()
for ((h = 0; h < hosts; h++)); do
    for ((i = 0; i < per_host; i++)); do
        r=$((h * per_host + i))
        {
            rc=0
            (
                echo "$BASHPID" >"$dir/pid.$r"
                exec setsid ip netns exec "${ns_of[h]}" env \
                    -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMI_SIZE -u PMI_RANK \
                    -u PMIX_RANK -u MV2_COMM_WORLD_SIZE \
                    CHORUS_RANK="$r" CHORUS_NRANKS="$nranks" CHORUS_ROOT="$root" \
                    CHORUS_SOCKET_IFNAME="=cveth$h" CHORUS_HOSTID="${ns_of[h]}" \
                    NETNS_RUN_HOST="$h" NETNS_RUN_ADDR="${addr_of[h]}" \
                    NETNS_RUN_HOST0_ADDR="${addr_of[0]}" \
                    ${user_env[@]+"${user_env[@]}"} "${prog[@]}"
            ) </dev/null 2>&1 || rc=$?
            echo "$rc" >"$dir/rc.$r.tmp" && mv "$dir/rc.$r.tmp" "$dir/rc.$r"
        } 2>/dev/null | sed -u "s/^/[rank $r] /" & # 2>/dev/null: bash's own "Killed" notes

        seds+=($!)
    done
done

# Wait: all ranks done, or the timeout, or the grace after the first failure.
deadline=$((start + timeout))
fail_deadline=""
timed_out=0
while ! all_done; do
    if [ $SECONDS -ge $deadline ]; then
        timed_out=1
        break
    fi
    if [ -z "$fail_deadline" ]; then
        for ((r = 0; r < nranks; r++)); do
            if [ -e "$dir/rc.$r" ] && [ "$(cat "$dir/rc.$r")" != 0 ]; then
                fail_deadline=$((SECONDS + grace))
                break
            fi
        done
    elif [ $SECONDS -ge "$fail_deadline" ]; then
        break
    fi
    sleep 0.1
done
still=("${running[@]+"${running[@]}"}")
if [ ${#still[@]} -gt 0 ]; then
    if [ $timed_out = 1 ]; then
        note "TIMEOUT after ${timeout} s: ranks still running: ${still[*]}; killing them"
    else
        note "a rank failed and ranks ${still[*]} were still running ${grace} s later; killing them"
    fi
    kill_ranks TERM
    wait_ranks 5 || kill_ranks KILL
    wait_ranks 5 || true
fi
# The output filters end when their rank's last writer does; bound that wait too.
deadline=$((SECONDS + 5))
for p in "${seds[@]}"; do
    while kill -0 "$p" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.05
    done
    kill "$p" 2>/dev/null || true
done
wait 2>/dev/null || true

bad=() n77=0
for ((r = 0; r < nranks; r++)); do
    rc=$(cat "$dir/rc.$r" 2>/dev/null || echo "never exited")
    [ "$rc" = 77 ] && n77=$((n77 + 1))
    if [ "$rc" != 0 ]; then
        if [[ $rc =~ ^[0-9]+$ ]] && [ "$rc" -gt 128 ]; then
            rc="$rc (signal $((rc - 128)))"
        fi
        bad+=("rank $r: $rc")
    fi
done
elapsed=$((SECONDS - start))
if [ $timed_out = 1 ]; then
    note "FAIL: timeout (${timeout} s); exit statuses: ${bad[*]+"${bad[*]}"}"
    exit 124
elif [ $n77 = $nranks ]; then
    note "SKIP: every rank exited 77"
    exit 77
elif [ ${#bad[@]} -gt 0 ]; then
    printf -v list '%s; ' "${bad[@]}"
    note "FAIL: ${#bad[@]} of $nranks ranks failed after ${elapsed} s: ${list%; }"
    exit 1
fi
note "PASS: all $nranks ranks exited 0 after ${elapsed} s"
exit 0
