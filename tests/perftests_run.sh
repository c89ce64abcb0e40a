#!/usr/bin/env bash
# perftests_run.sh MODE NRANKS MPIRUN EXE [ARGS...]: run a *_perf benchmark and judge its output.
#
# MODE mpi: MPIRUN --oversubscribe --allow-run-as-root -np NRANKS EXE ARGS (init by MPI).
# MODE env: NRANKS background processes of EXE ARGS with CHORUS_RANK=r, CHORUS_NRANKS=NRANKS and
#   CHORUS_ROOT=127.0.0.1:PORT, PORT one no socket on this host uses (MPIRUN is ignored, pass -).
# Fails when a process exits non-zero, when the table has no rows, when a #wrong column is not 0,
# or when the summary is not "# Out of bounds values : 0 OK". With --compare mpi (unless the
# banner says it was ignored), also when the mpi(us) mpibusbw ratio columns are missing, when a
# row of a dtype MPI has (all but half and bfloat16) has no MPI numbers or one of half/bfloat16
# has, or when the two MPI summary lines are missing. --compare gloo: the same of the gloo(us)
# gloobusbw ratio columns (Gloo lacks half, bfloat16, uint32, avg and calls of no element) and the
# Gloo summary lines; a build without Gloo, whose banner says so, exits 77 (SKIP). Timings are
# never judged.
# CHORUS_PERF_JSON_ROWS=N: also write -J and check it with perftests_json_check.py: valid JSON,
#   N rows, the same rows as the table, the MPI fields as --compare says; CHORUS_PERF_JSON_ENV=
#   "NAME=VALUE ..." (NAME= : unset) checks the recorded environment; CHORUS_PERF_JSON_OUT=FILE keeps
#   the file there (default: a temporary one).
# Exits 77 (SKIP) without mpirun (MODE mpi), or without python3 when a JSON check is asked for.
# CHORUS_PERF_TIMEOUT (seconds, default 540) bounds every process.
set -u
mode=${1:?usage: perftests_run.sh MODE NRANKS MPIRUN EXE [ARGS...]}
n=${2:?} mpirun=${3:?} exe=${4:?}
shift 4
limit=${CHORUS_PERF_TIMEOUT:-540}

# shellcheck source-path=SCRIPTDIR source=support/verdict.sh
. "$(dirname "$0")/support/verdict.sh"

json_rows=${CHORUS_PERF_JSON_ROWS:-}
if [ -n "$json_rows" ]; then
    command -v python3 >/dev/null || skip "python3 not found (needed to check the -J file)"
fi
compare=0 peer=mpi
case " $* " in
*" --compare mpi "* | *" --compare=mpi "* | *" -M mpi "* | *" -Mmpi "*) compare=1 ;;
*" --compare gloo "* | *" --compare=gloo "* | *" -M gloo "* | *" -Mgloo "*) compare=1 peer=gloo ;;
esac

dir=$(mktemp -d)
json=${CHORUS_PERF_JSON_OUT:-$dir/run.json}
if [ -n "$json_rows" ]; then
    rm -f "$json"
    set -- "$@" -J "$json"
fi
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -9 "$p" 2>/dev/null
    done
    rm -rf "$dir"
}
trap cleanup EXIT

# A TCP port in 20000-32767 that no socket (any state, v4 or v6) on this host has as local port.
free_port() {
    local used port try
    used=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk 'NR > 1 {split($2, a, ":"); print a[2]}')
    for ((try = 0; try < 100; try++)); do
        port=$((20000 + (RANDOM + $$ + try * 97) % 12768))
        if ! grep -qix "$(printf '%04X' "$port")" <<<"$used"; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

# Launcher variables of an enclosing job must not reach the children.
unset CHORUS_PERF_INIT CHORUS_RANK CHORUS_NRANKS CHORUS_ROOT RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
for v in $(env | awk -F= '/^(OMPI_COMM_WORLD|PMI_|PMIX_RANK|MV2_COMM_WORLD)/ {print $1}'); do
    unset "$v"
done

status=0
case $mode in
mpi)
    command -v "$mpirun" >/dev/null || skip "mpirun ($mpirun) not found"
    echo "+ $mpirun --oversubscribe --allow-run-as-root -np $n $exe $*"
    timeout -k 10 "$limit" "$mpirun" --oversubscribe --allow-run-as-root -np "$n" "$exe" "$@" \
        >"$dir/out.0" 2>"$dir/err"
    rc=$?
    cat "$dir/out.0"
    cat "$dir/err" >&2
    [ $rc -eq 0 ] || { echo "mpirun exited with $rc" >&2; status=1; }
    ;;
env)
    for attempt in 1 2 3; do
        port=$(free_port) || fail "no free port found"
        echo "+ CHORUS_RANK=0..$((n - 1)) CHORUS_NRANKS=$n CHORUS_ROOT=127.0.0.1:$port $exe $*"
        pids=()
        declare -A live=()
        for ((r = 0; r < n; r++)); do
            env CHORUS_RANK=$r CHORUS_NRANKS="$n" CHORUS_ROOT=127.0.0.1:$port \
                timeout -k 10 "$limit" "$exe" "$@" >"$dir/out.$r" 2>"$dir/err.$r" &
            pids[r]=$!
            live[$!]=$r
        done
        # Reap ranks as they end; the first failure stops the others, which would otherwise wait
        # for the dead rank until CHORUS_TIMEOUT_MS.
        status=0
        while [ ${#live[@]} -gt 0 ]; do
            done_pid=
            wait -n -p done_pid "${!live[@]}"
            rc=$?
            [ -n "$done_pid" ] || break
            r=${live[$done_pid]}
            unset "live[$done_pid]"
            [ $rc -eq 0 ] && continue
            if [ $status -eq 0 ]; then
                echo "rank $r exited with $rc; stopping the others" >&2
                [ ${#live[@]} -gt 0 ] && kill "${!live[@]}" 2>/dev/null
            fi
            status=1
        done
        pids=()
        # Another process may take the port between the choice and the bind: try another one.
        if [ $status -ne 0 ] && grep -qi "address already in use" "$dir"/err.*; then
            echo "port $port was taken; retrying" >&2
            continue
        fi
        break
    done
    cat "$dir/out.0"
    for ((r = 0; r < n; r++)); do
        [ -s "$dir/err.$r" ] && sed "s/^/[rank $r] /" "$dir/err.$r" >&2
    done
    ;;
*)
    fail "unknown mode '$mode' (mpi or env)"
    ;;
esac

# Table rows: size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong ...
rows=$(awk '!/^#/ && $1 ~ /^[0-9]+$/ && NF >= 13' "$dir/out.0" | wc -l)
bad=$(awk '!/^#/ && $1 ~ /^[0-9]+$/ && NF >= 13 && (($9 != "N/A" && $9 != 0) || ($13 != "N/A" && $13 != 0))' \
    "$dir/out.0")
[ "$rows" -gt 0 ] || { echo "no table rows in the output" >&2; status=1; }
[ -z "$bad" ] || { printf 'rows with wrong elements:\n%s\n' "$bad" >&2; status=1; }
grep -q '^# Out of bounds values : 0 OK' "$dir/out.0" || { echo "summary is not '0 OK'" >&2; status=1; }
if [ $peer = gloo ] && grep -q '^# --compare gloo ignored: this build found no Gloo' "$dir/out.0"; then
    skip "perftests built without Gloo (scripts/deps.sh installs libgloo-dev; re-run cmake)"
fi
# --compare mpi|gloo: the columns by their header names, per row numbers where the peer has the
# call and N/A where it has not (MPI: half, bfloat16; Gloo: those, uint32, avg and empty calls),
# and the summary lines.
if [ $compare = 1 ] && ! grep -q "^# --compare $peer ignored" "$dir/out.0"; then
    Peer=$([ $peer = gloo ] && echo Gloo || echo MPI)
    cmp_err=$(awk -v p="$peer" '
        /^#[ ]+size[ ]+count/ {
            for (k = 2; k <= NF; k++) col[$k] = k - 1 # rows have no leading "#"
            if (!((p "(us)") in col) || !((p "busbw") in col) || !("ratio" in col)) {
                print "header has no " p "(us) " p "busbw ratio columns: " $0
                exit
            }
            next
        }
        !/^#/ && $1 ~ /^[0-9]+$/ && NF >= 13 {
            if (!((p "(us)") in col)) { print "a row before the header"; exit }
            t = $(col[p "(us)"]); b = $(col[p "busbw"]); r = $(col["ratio"])
            none = $3 == "half" || $3 == "bfloat16" ||
                (p == "gloo" && ($3 == "uint32" || $4 == "avg" || $2 == 0))
            num = t ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && r ~ /^[0-9.]+$/
            if (none && (t != "N/A" || b != "N/A" || r != "N/A"))
                print p " numbers for " $3 " (no such datatype there): " $0
            else if (!none && !num)
                print "no " p " numbers: " $0
        }' "$dir/out.0")
    [ -z "$cmp_err" ] || { printf -- '--compare %s: %s\n' "$peer" "$cmp_err" >&2; status=1; }
    grep -q "^# Avg $Peer bus bandwidth: " "$dir/out.0" ||
        grep -q "^# $Peer/Chorus time ratio: no row" "$dir/out.0" ||
        { echo "--compare $peer printed no '# Avg $Peer bus bandwidth' line" >&2; status=1; }
    grep -q "^# $Peer/Chorus time ratio: " "$dir/out.0" ||
        { echo "--compare $peer printed no '# $Peer/Chorus time ratio' line" >&2; status=1; }
fi
if [ -n "$json_rows" ]; then
    check=(python3 "$(dirname "$0")/perftests_json_check.py" "$json" --rows "$json_rows"
        --table "$dir/out.0" --nranks "$n")
    if [ $compare = 1 ] && ! grep -q "^# --compare $peer ignored" "$dir/out.0"; then
        check+=(--compare "$peer")
    fi
    for spec in ${CHORUS_PERF_JSON_ENV:-}; do # NAME=VALUE pairs, space-separated
        check+=(--env "$spec")
    done
    echo "+ ${check[*]}"
    "${check[@]}" || status=1
fi
[ $status -eq 0 ] && echo "PASS: $rows rows" || echo "FAIL" >&2
exit $status
