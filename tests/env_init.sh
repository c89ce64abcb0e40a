#!/usr/bin/env bash
# env_init.sh: drives test_env_init, one process per rank, no MPI (ctest entry env_init).
#
# Proves chorusCommInitEnv: 3 ranks joined by CHORUS_RANK/CHORUS_NRANKS/CHORUS_ROOT=127.0.0.1:PORT
# (started in reverse order); the same with torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and
# with a shared CHORUS_SECRET; rank 0 (the root) started only after the others are already
# trying to join, and a non-root rank started after the root. Each rank checks its rank, size,
# an all-reduce and an all-gather. Then malformed or missing variables, each refused with
# chorusInvalidArgument naming the variable. Every process runs under `timeout`; the driver
# waits for all of them and fails if any fails.
#
# usage: env_init.sh PATH/TO/test_env_init
set -u
exe=$1
n=3
unset CHORUS_RANK CHORUS_NRANKS CHORUS_ROOT CHORUS_SECRET RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0

# A port nobody listens on now, below the kernel's ephemeral range (as harness_free_port): a port
# from that range can be taken by an outgoing connection of a test running beside this one
# before rank 0 listens on it (CI once: "cannot listen on 127.0.0.1:43557").
free_port() {
    local lo=32768 hi p
    read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
    local py='import random, socket, sys
lo = int(sys.argv[1])
for _ in range(64):
    p = random.randrange(10000, lo)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    s.close()
    print(p)
    break'
    p=$(python3 -c "$py" "$lo" 2>/dev/null)
    echo "${p:-$((10000 + ($$ + RANDOM) % (lo - 10000)))}"
}

# start NAME RANK VAR=VALUE...: one rank in the background, output in $dir/NAME.RANK
declare -A pid
start() {
    local name=$1 r=$2
    shift 2
    env "$@" timeout 60 "$exe" run >"$dir/$name.$r" 2>&1 &
    pid[$name.$r]=$!
}

# wait_joining NAME RANK: wait (deadline 30 s) until that rank has printed "joining", i.e. it is
# about to call chorusCommInitEnv. A condition with a deadline, not a sleep to synchronize.
wait_joining() {
    local f=$dir/$1.$2
    for ((i = 0; i < 300; i++)); do
        grep -q "joining" "$f" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "FAIL $1: rank $2 did not start within 30 s"
    status=1
    return 1
}

# finish NAME WHAT: wait for every rank of job NAME, check each passed.
finish() {
    local name=$1 what=$2 ok=1
    for ((r = 0; r < n; r++)); do
        if ! wait "${pid[$name.$r]}"; then
            echo "---- $name rank $r (exit status nonzero):"
            cat "$dir/$name.$r"
            ok=0
        elif ! grep -q "^PASS rank $r of $n" "$dir/$name.$r"; then
            echo "---- $name rank $r (no PASS line):"
            cat "$dir/$name.$r"
            ok=0
        fi
    done
    if [ $ok = 1 ]; then
        echo "PASS $what"
    else
        echo "FAIL $what"
        status=1
    fi
}

chorus_vars() { # RANK PORT
    echo CHORUS_RANK="$1" CHORUS_NRANKS=$n CHORUS_ROOT="127.0.0.1:$2"
}
torch_vars() {
    echo RANK="$1" WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT="$2"
}

# 1. CHORUS_* variables, ranks started in reverse order.
port=$(free_port)
for ((r = n - 1; r >= 0; r--)); do
    start chorus $r $(chorus_vars $r "$port")
done
finish chorus "$n ranks joined by CHORUS_RANK/CHORUS_NRANKS/CHORUS_ROOT (port $port)"

# 2. torchrun's variables.
port=$(free_port)
for ((r = n - 1; r >= 0; r--)); do
    start torch $r $(torch_vars $r "$port")
done
finish torch "$n ranks joined by RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (port $port)"

# 3. A shared CHORUS_SECRET instead of the derived one.
port=$(free_port)
for ((r = 0; r < n; r++)); do
    start secret $r $(chorus_vars $r "$port") CHORUS_SECRET=5eed0fc0ffee
done
finish secret "$n ranks with a shared CHORUS_SECRET"

# 4. The root last: ranks 1 and 2 are already joining (connecting to a port nobody listens on
#    yet) when rank 0 starts. The sleep only makes rank 0 later still; nothing waits on it.
port=$(free_port)
start lateroot 1 $(chorus_vars 1 "$port")
start lateroot 2 $(torch_vars 2 "$port")
wait_joining lateroot 1 && wait_joining lateroot 2
sleep 1
start lateroot 0 $(chorus_vars 0 "$port")
finish lateroot "rank 0 started last, after ranks 1 and 2 were already joining"

# 5. A non-root rank last: the root and rank 1 wait for it.
port=$(free_port)
start late2 0 $(torch_vars 0 "$port")
start late2 1 $(torch_vars 1 "$port")
wait_joining late2 0 && wait_joining late2 1
sleep 1
start late2 2 $(torch_vars 2 "$port")
finish late2 "rank 2 started last, after the root and rank 1 were already joining"

# 6. Missing and malformed variables: refused with chorusInvalidArgument naming the variable.
port=$(free_port)
root="127.0.0.1:$port"
bad() { # WORD VAR=VALUE...
    local word=$1
    shift
    local out
    out=$(env "$@" timeout 20 "$exe" bad "$word" 2>&1)
    if [ $? -eq 0 ]; then
        echo "PASS [${*:-nothing set}] -> chorusInvalidArgument naming $word"
    else
        echo "FAIL [$*]: $out"
        status=1
    fi
}
bad CHORUS_RANK CHORUS_RANK=x CHORUS_NRANKS=3 CHORUS_ROOT="$root"
bad CHORUS_RANK CHORUS_RANK=-1 CHORUS_NRANKS=3 CHORUS_ROOT="$root"
bad CHORUS_RANK CHORUS_RANK=3 CHORUS_NRANKS=3 CHORUS_ROOT="$root"
bad CHORUS_NRANKS CHORUS_RANK=0 CHORUS_NRANKS=0 CHORUS_ROOT="$root"
bad CHORUS_NRANKS CHORUS_RANK=0 CHORUS_NRANKS=two CHORUS_ROOT="$root"
bad CHORUS_ROOT CHORUS_RANK=0 CHORUS_NRANKS=2
bad CHORUS_ROOT CHORUS_RANK=0 CHORUS_NRANKS=2 CHORUS_ROOT=127.0.0.1
bad CHORUS_ROOT CHORUS_RANK=0 CHORUS_NRANKS=2 CHORUS_ROOT=127.0.0.1:70000
bad CHORUS_SECRET CHORUS_RANK=0 CHORUS_NRANKS=1 CHORUS_ROOT="$root" CHORUS_SECRET=xyz
bad RANK RANK=x WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
bad RANK RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
bad WORLD_SIZE RANK=0 WORLD_SIZE=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
bad MASTER_PORT RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=abc
bad MASTER_PORT RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=0
bad MASTER_ADDR RANK=0 WORLD_SIZE=2 MASTER_PORT="$port"
bad CHORUS_RANK # nothing set: the message lists what to set

# 7. Ranks given different CHORUS_NRANKS (one CHORUS_SECRET: without it the secret is derived
# from the rank count too, and the odd rank is refused as a stranger): the one the root's count
# does not match fails at once, told the root's count (it waited for its deadline, or found the
# root gone, with no count named); the root's own rank fails at once too, told which rank gave
# another count (it waited for its deadline, then named that rank as never joined).
port=$(free_port)
root="127.0.0.1:$port"
env CHORUS_RANK=0 CHORUS_NRANKS=2 CHORUS_ROOT="$root" CHORUS_TIMEOUT_MS=20000 CHORUS_SECRET=5ec2e7 \
    timeout 30 "$exe" expect 5 10 "rank 1 passed another nranks" >"$dir/nranks0.out" 2>&1 &
pid0=$!
sleep 1
out1=$(env CHORUS_RANK=1 CHORUS_NRANKS=3 CHORUS_ROOT="$root" CHORUS_TIMEOUT_MS=4000 CHORUS_SECRET=5ec2e7 \
    timeout 30 "$exe" expect 5 3 "answered for 2 ranks where this rank expects 3" 2>&1)
rc1=$?
wait $pid0
rc0=$?
if [ $rc1 -eq 0 ] && [ $rc0 -eq 0 ]; then
    echo "PASS CHORUS_NRANKS 2 and 3: the odd rank told the root's count at once, the root's rank told the odd one's"
else
    echo "FAIL CHORUS_NRANKS 2 and 3 (rank 1 exit $rc1, rank 0 exit $rc0): $out1 / rank 0: \
$(cat "$dir/nranks0.out")"
    status=1
fi

if [ $status -eq 0 ]; then
    echo "PASS env_init"
else
    echo "FAIL env_init"
fi
exit $status
