#!/usr/bin/env bash
# test_trainer_app.sh CASE MPIRUN TRAIN CMP: chorus-train end to end, under mpirun.
#
# CASE says what is proved:
#   equal N      N ranks train exactly what 1 rank trains: global batch 128, 10 steps, every
#                parameter within 1e-5 (normwise relative, see test_trainer_app_cmp.c) of 1 rank's
#   mpi          --backend mpi (MPI_Allreduce) trains what Chorus trains, within 1e-5
#   overlap      overlapped bucket all-reduces give the same bits as all-reduces after backward,
#                with many buckets
#   accum        2 ranks x 4 micro-steps of 32 train what 1 rank does with 128 (within 1e-6), and
#                only the last micro-step communicates: one bucket, one all-reduce per step. The
#                model has no BN layer: BN statistics of 32 samples are not those of 128, so with
#                BN the two are different models, not different roundings
#   checksum     a 1-ulp change of one rank's Adam state is caught within --check-every steps,
#                naming the rank and the tensor; the run stops with status 3
#   resume       2 epochs straight == 1 epoch, stop, resume, 1 epoch: parameters and the final
#                checkpoints bitwise; a file that is no checkpoint is refused
#   resume_mid   the same, stopped and resumed in the middle of the first epoch
#   pitfalls     every --pitfall runs and prints its summary
#   baddata      a missing data directory and a truncated file: status 1 and the file's name, no
#                crash
#   flags        --help exits 0; a bad flag exits 2 with one message
#   plot         --metrics writes one CSV row per epoch and trainer/plot makes a PNG of it (SKIP
#                without gnuplot)
# Exits 77 (SKIP) without mpirun or, except for baddata and flags, without the data set.
set -u
case_=${1:?usage: test_trainer_app.sh CASE MPIRUN TRAIN CMP}
mpirun=${2:?} train=${3:?} cmp=${4:?}
data=${CHORUS_TRAIN_DATA:-/usr/share/datasets/fashion-mnist}
limit=${CHORUS_TRAIN_TIMEOUT:-50} # seconds for any one run

# shellcheck source-path=SCRIPTDIR source=support/verdict.sh
. "$(dirname "$0")/support/verdict.sh"

command -v "$mpirun" >/dev/null || skip "mpirun ($mpirun) not found"
case $case_ in
baddata | flags) ;;
*) [ -f "$data/train-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST in $data (Debian package dataset-fashion-mnist)" ;;
esac

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Launcher variables of an enclosing job must not reach the children.
for v in $(env | awk -F= '/^(OMPI_COMM_WORLD|PMI_|PMIX_|OMPI_MCA_orte)/ {print $1}'); do
    unset "$v"
done

# run NAME NRANKS ARGS...: chorus-train on NRANKS ranks; output in $dir/NAME.out, status in $rc.
run() {
    local name=$1 n=$2
    shift 2
    echo "+ mpirun -np $n chorus-train $*"
    timeout -k 5 "$limit" "$mpirun" --oversubscribe --allow-run-as-root -np "$n" "$train" \
        --data "$data" "$@" >"$dir/$name.out" 2>"$dir/$name.err"
    rc=$?
    grep -E '^(result|comm|stopped|pitfall|chorus-train:)' "$dir/$name.out" "$dir/$name.err" |
        sed "s|^$dir/||"
}
ok() { # run that must succeed
    run "$@"
    [ $rc -eq 0 ] || { cat "$dir/$1.err" >&2; fail "$1 exited with $rc"; }
}

small=(--layers "784,64,64,10" --test-limit 500 --check-every 5)
case $case_ in
equal)
    n=${5:?equal needs N}
    ok one 1 "${small[@]}" --batch 128 --steps 10 --dump-params "$dir/one.bin"
    ok many "$n" "${small[@]}" --batch 128 --steps 10 --dump-params "$dir/many.bin"
    grep -q "steps=10 ranks=$n " "$dir/many.out" || fail "the $n-rank run did not take 10 steps"
    "$cmp" "$dir/many.bin" "$dir/one.bin" 1e-5 || fail "$n ranks differ from 1 rank"
    ;;
mpi)
    ok one 1 "${small[@]}" --steps 10 --dump-params "$dir/one.bin"
    ok mpi 3 "${small[@]}" --steps 10 --backend mpi --dump-params "$dir/mpi.bin"
    grep -q 'backend=mpi' "$dir/mpi.out" || fail "no backend=mpi in the comm line"
    "$cmp" "$dir/mpi.bin" "$dir/one.bin" 1e-5 || fail "--backend mpi differs from 1 rank"
    ;;
overlap)
    ok on 2 "${small[@]}" --steps 10 --bucket-bytes 16K --dump-params "$dir/on.bin"
    ok off 2 "${small[@]}" --steps 10 --bucket-bytes 16K --no-overlap --dump-params "$dir/off.bin"
    buckets=$(sed -n 's/.*buckets=\([0-9]*\).*/\1/p' "$dir/on.out")
    [ "${buckets:-0}" -gt 4 ] || fail "want more than 4 buckets with 16 KiB, got '$buckets'"
    grep -q "grad_allreduces=$((10 * buckets)) " "$dir/on.out" ||
        fail "want $((10 * buckets)) bucket all-reduces (10 steps x $buckets)"
    "$cmp" "$dir/on.bin" "$dir/off.bin" 0 || fail "overlap changed the result"
    ;;
accum)
    lin=(--layers "784,10" --test-limit 500 --check-every 5 --steps 10)
    ok full 1 "${lin[@]}" --batch 128 --dump-params "$dir/full.bin"
    ok accum 2 "${lin[@]}" --batch 32 --accum 4 --dump-params "$dir/accum.bin"
    grep -q 'buckets=1 ' "$dir/accum.out" || fail "want one bucket"
    grep -q 'grad_allreduces=10 ' "$dir/accum.out" ||
        fail "want exactly 10 gradient all-reduces in 10 steps of 4 micro-steps"
    "$cmp" "$dir/accum.bin" "$dir/full.bin" 1e-6 || fail "4 x 32 differs from 1 x 128"
    ;;
checksum)
    k=4
    run desync 3 "${small[@]}" --steps 40 --optimizer adamw --lr 0.001 --check-every $k \
        --pitfall desync-optimizer
    [ $rc -eq 3 ] || fail "want exit status 3 (divergence), got $rc"
    line=$(grep '^stopped: ' "$dir/desync.out") || fail "no 'stopped:' line"
    [[ $line == *"rank 2 differs from the other ranks"* ]] || fail "rank 2 not named: $line"
    [[ $line == *"layer0.w.adam_v"* ]] || fail "tensor layer0.w.adam_v not named: $line"
    caught=$(sed -n 's/.*after step \([0-9]*\).*/\1/p' <<<"$line")
    from=$(sed -n 's/.*from step \([0-9]*\).*/\1/p' "$dir/desync.out")
    { [ -n "$caught" ] && [ -n "$from" ]; } || fail "cannot read the steps"
    { [ "$caught" -ge "$from" ] && [ $((caught - from)) -lt $k ]; } ||
        fail "changed at step $from, caught at $caught: not within $k steps"
    grep -q '^result:' "$dir/desync.out" && fail "a diverged run printed a result line"
    echo "caught $((caught - from)) steps after the change (--check-every $k)"
    ;;
resume | resume_mid)
    two=("${small[@]}" --epochs 2 --train-limit 2048 --optimizer adamw --lr 0.002)
    ok straight 2 "${two[@]}" --checkpoint "$dir/straight.ck" --dump-params "$dir/straight.bin"
    steps=$(sed -n 's/.* \([0-9]*\) steps per epoch.*/\1/p' "$dir/straight.out")
    [ "$steps" = 16 ] || fail "want 16 steps per epoch, got '$steps'"
    stop=16 # at the end of epoch 1
    [ "$case_" = resume_mid ] && stop=11
    ok first$stop 2 "${two[@]}" --steps $stop --checkpoint "$dir/r$stop.ck"
    ok second$stop 2 "${two[@]}" --resume "$dir/r$stop.ck" --checkpoint "$dir/r$stop.ck" \
        --dump-params "$dir/r$stop.bin"
    "$cmp" "$dir/r$stop.bin" "$dir/straight.bin" 0 || fail "resumed after $stop steps: differs"
    cmp "$dir/r$stop.ck" "$dir/straight.ck" || fail "resumed after $stop: checkpoints differ"
    grep -q "steps=32 " "$dir/second$stop.out" || fail "the resumed run did not end at step 32"
    ls "$dir"/*.tmp.* 2>/dev/null && fail "a temporary checkpoint file was left behind"
    [ "$case_" = resume_mid ] && { echo "PASS: $case_"; exit 0; }
    echo garbage >"$dir/bad.ck"
    run bad 2 "${two[@]}" --resume "$dir/bad.ck"
    { [ $rc -eq 1 ] && grep -q 'bad.ck: not a chorus-train checkpoint' "$dir/bad.err"; } ||
        fail "a bad checkpoint: want status 1 and a message, got $rc"
    ;;
pitfalls)
    p=("${small[@]}" --steps 20)
    for pit in no-shard local-bn no-lr-scale; do
        ok $pit 2 "${p[@]}" --batch 256 --pitfall $pit
        grep -q "^pitfall $pit: " "$dir/$pit.out" || fail "no summary for $pit"
    done
    grep -q 'covered 4.3% of the training set' "$dir/no-shard.out" || fail "no-shard: coverage"
    grep -q 'trained with lr 0.1 where --lr-scale linear asks for 0.2' "$dir/no-lr-scale.out" ||
        fail "no-lr-scale: the two learning rates"
    run skip 2 "${p[@]}" --pitfall skip-broadcast
    { [ $rc -eq 3 ] && grep -q 'rank 1 differs from rank 0, found by the checksum before the first' \
        "$dir/skip.out"; } || fail "skip-broadcast: want status 3 and a mismatch before step 1"
    ;;
baddata)
    run missing 2 --data "$dir/nowhere"
    [ $rc -eq 1 ] || fail "missing data: want status 1, got $rc"
    grep -q "$dir/nowhere/train-images-idx3-ubyte.gz: cannot open" "$dir/missing.err" ||
        fail "missing data: the message does not name the file"
    mkdir "$dir/cut"
    printf '\037\213' >"$dir/cut/train-images-idx3-ubyte.gz" # a gzip header and nothing else
    run cut 2 --data "$dir/cut"
    { [ $rc -eq 1 ] && grep -q "$dir/cut/train-images-idx3-ubyte.gz" "$dir/cut.err"; } ||
        fail "truncated data: want status 1 and the file's name, got $rc"
    ;;
plot)
    plot=$(dirname "$0")/../trainer/plot
    command -v gnuplot >/dev/null || skip "gnuplot not found (Debian gnuplot-nox)"
    ok metrics 2 "${small[@]}" --epochs 3 --train-limit 1024 --metrics "$dir/m.csv"
    [ "$(wc -l <"$dir/m.csv")" = 4 ] || fail "want a header and 3 rows in the CSV"
    "$plot" "$dir/m.csv" "$dir/m.png" || fail "trainer/plot failed"
    [ "$(head -c 4 "$dir/m.png" | od -An -c | tr -d ' ')" = '211PNG' ] || fail "not a PNG"
    ;;
flags)
    run help 1 --help
    { [ $rc -eq 0 ] && grep -q -- '--bucket-bytes' "$dir/help.out"; } || fail "--help"
    run bad 2 --optimizer sgdd
    [ $rc -eq 2 ] || fail "a bad flag: want status 2, got $rc"
    [ "$(grep -c 'want one of sgd adamw' "$dir/bad.err")" = 1 ] || fail "want one message"
    ;;
*)
    fail "unknown case '$case_'"
    ;;
esac
echo "PASS: $case_"
