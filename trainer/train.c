/*
 * train.c: chorus-train, synchronous data-parallel SGD on Fashion-MNIST with Chorus doing every
 * sync. It reads top to bottom, like llm.c's train_gpt2.c:
 *
 *   1. flags          one --help; every rank parses the same argv
 *   2. MPI and data   ranks from mpirun, the IDX files (every rank reads them)
 *   3. model          init (seed, or seed+rank for --pitfall skip-broadcast), resume, then
 *                     parameters and BN buffers broadcast from rank 0 so all ranks start equal
 *   4. each step      local batch from the sampler, forward (SyncBN sums through ddp), loss over
 *                     the global batch, backward starting bucket all-reduces as layers finish,
 *                     wait for the buckets, optimizer step, every K steps a cross-rank checksum
 *   5. each epoch     test accuracy from all-reduced counts, one table row, metrics, checkpoint
 *   6. the end        the pitfall's summary, `comm:` and `result:` lines
 *
 * Exit status: 0 done, 1 an error (data, checkpoint, communication), 2 bad flags, 3 the checksum
 * found ranks that disagree.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "ddp.h"
#include "nn.h"

#define CLASSES 10
#define EVAL_CHUNK 500

enum { PIT_NONE, PIT_NO_SHARD, PIT_LOCAL_BN, PIT_NO_LR_SCALE, PIT_SKIP_BROADCAST, PIT_DESYNC };
static const char *const pitfall_names[] = {
    "none", "no-shard", "local-bn", "no-lr-scale", "skip-broadcast", "desync-optimizer", NULL};

/* ---- 1. flags ---- */

typedef struct opts {
    int epochs, batch, ref_batch, accum, check_every, sync_bn, overlap, pitfall;
    int nsizes, sizes[CKPT_MAX_SIZES];
    float lr, warmup_epochs;
    float momentum, weight_decay; /* < 0: the optimizer's default */
    const char *lr_scale, *data, *checkpoint, *resume, *metrics, *dump_params;
    opt_kind_t optimizer;
    ddp_backend_t backend;
    uint64_t seed;
    size_t bucket_bytes;
    int64_t max_steps;
    int train_limit, test_limit;
} opts_t;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: mpirun -np N chorus-train [flags]\n"
        "Synchronous data-parallel training of a BatchNorm MLP on Fashion-MNIST, every sync\n"
        "through Chorus (or MPI, the reference). Flags (--flag VALUE or --flag=VALUE):\n"
        "  --epochs N            epochs (5)\n"
        "  --batch N             global batch: samples per micro-step over all ranks (128)\n"
        "  --lr X                base learning rate (0.1)\n"
        "  --lr-scale RULE       none|linear|sqrt: scale lr by batch*accum/--ref-batch (linear)\n"
        "  --ref-batch N         the batch --lr is meant for (128)\n"
        "  --warmup-epochs X     linear warmup, then cosine decay to 0 at the end (0)\n"
        "  --optimizer NAME      sgd|adamw (sgd)\n"
        "  --momentum X          SGD momentum (0.9)\n"
        "  --weight-decay X      (sgd 0, adamw 0.01)\n"
        "  --seed N              weights and data order (1)\n"
        "  --layers LIST         layer sizes, BN+ReLU between (784,256,256,10)\n"
        "  --bucket-bytes N      gradient bucket size, K/M suffix allowed (1M)\n"
        "  --sync-bn             BatchNorm statistics over the global batch (default)\n"
        "  --no-sync-bn          per-rank BatchNorm statistics\n"
        "  --accum K             accumulate K micro-steps per optimizer step; only the K-th\n"
        "                        communicates (1)\n"
        "  --no-overlap          all-reduce gradients after backward, not during it\n"
        "  --check-every K       compare a checksum of parameters and optimizer state across\n"
        "                        ranks every K steps; 0: never (100)\n"
        "  --backend NAME        chorus|mpi: MPI_Allreduce for every sync (chorus)\n"
        "  --steps N             stop after N optimizer steps; the schedule still spans\n"
        "                        --epochs (0: no limit)\n"
        "  --checkpoint FILE     save after every epoch and at the end (atomic)\n"
        "  --resume FILE         go on from a checkpoint, bit-identical to an unbroken run\n"
        "  --metrics FILE        one CSV row per epoch (trainer/plot draws it)\n"
        "  --dump-params FILE    write every parameter as raw float32 at the end\n"
        "  --data DIR            the IDX .gz files (" DATA_DIR_DEFAULT ")\n"
        "  --train-limit N       use the first N training examples only (all)\n"
        "  --test-limit N        use the first N test examples only (all)\n"
        "  --pitfall NAME        show a data-parallel mistake on purpose: no-shard, local-bn,\n"
        "                        no-lr-scale, skip-broadcast, desync-optimizer\n"
        "  --help                this text\n");
}

/* Every rank parses the same argv: only rank 0 says what is wrong with it. */
static int flag_rank;

static int flag_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (flag_rank == 0) {
        fprintf(stderr, "chorus-train: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, " (see --help)\n");
    }
    va_end(ap);
    return -1;
}

/* One row per flag. kind: i int, l int64, u uint64, f float, z bytes (K/M/G suffix), s string,
 * c choice (index into choices), y layer list, 1/0 set an int, h help. */
typedef struct flag {
    const char *name;
    char kind;
    void *dst;
    double lo, hi;
    const char *const *choices;
} flag_t;

static int parse_layers(const char *s, opts_t *o)
{
    o->nsizes = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 65536 || o->nsizes == CKPT_MAX_SIZES ||
            (*end != ',' && *end != '\0'))
            return -1;
        o->sizes[o->nsizes++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return o->nsizes >= 2 && o->sizes[0] == 784 && o->sizes[o->nsizes - 1] == CLASSES ? 0 : -1;
}

static int parse_value(const flag_t *f, const char *val, opts_t *o)
{
    if (f->kind == 's') {
        *(const char **)f->dst = val;
        return 0;
    }
    if (f->kind == 'y')
        return parse_layers(val, o) == 0
                   ? 0
                   : flag_error("--layers %s: want 2 to %d sizes like 784,256,256,10 (first 784, "
                                "the pixels; last 10, the classes)",
                                val, CKPT_MAX_SIZES);
    if (f->kind == 'c') {
        char all[128] = "";
        for (int i = 0; f->choices[i]; i++) {
            if (strcmp(val, f->choices[i]) == 0) {
                *(int *)f->dst = i;
                return 0;
            }
            snprintf(all + strlen(all), sizeof(all) - strlen(all), " %s", f->choices[i]);
        }
        return flag_error("--%s %s: want one of%s", f->name, val, all);
    }
    char *end;
    double x = strtod(val, &end);
    if (f->kind == 'z' && end != val && (*end == 'K' || *end == 'M' || *end == 'G'))
        x *= *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : 1073741824.0, end++;
    if (end == val || *end != '\0' || !(x >= f->lo && x <= f->hi) ||
        (f->kind != 'f' && x != floor(x)))
        return flag_error("--%s %s: want %s in [%g, %g]", f->name, val,
                          f->kind == 'f' ? "a number" : "an integer", f->lo, f->hi);
    if (f->kind == 'i')
        *(int *)f->dst = (int)x;
    else if (f->kind == 'l')
        *(int64_t *)f->dst = (int64_t)x;
    else if (f->kind == 'u')
        *(uint64_t *)f->dst = (uint64_t)x;
    else if (f->kind == 'z')
        *(size_t *)f->dst = (size_t)x;
    else
        *(float *)f->dst = (float)x;
    return 0;
}

/* Returns 0 to train, 1 after --help, -1 on a bad flag (said on stderr by rank 0). */
static int parse_opts(int argc, char **argv, opts_t *o)
{
    static const char *const scales[] = {"none", "linear", "sqrt", NULL};
    static const char *const optimizers[] = {"sgd", "adamw", NULL};
    static const char *const backends[] = {"chorus", "mpi", NULL};
    *o = (opts_t){.epochs = 5,
                  .batch = 128,
                  .ref_batch = 128,
                  .accum = 1,
                  .check_every = 100,
                  .sync_bn = 1,
                  .overlap = 1,
                  .lr = 0.1f,
                  .momentum = -1,
                  .weight_decay = -1,
                  .data = DATA_DIR_DEFAULT,
                  .seed = 1,
                  .bucket_bytes = 1 << 20,
                  .train_limit = INT_MAX,
                  .test_limit = INT_MAX};
    parse_layers("784,256,256,10", o);
    int scale = 1, optimizer = 0, backend = 0;
    const flag_t flags[] = {
        {"epochs", 'i', &o->epochs, 1, 1e5, NULL},
        {"batch", 'i', &o->batch, 1, 1 << 20, NULL},
        {"lr", 'f', &o->lr, 0, 1e6, NULL},
        {"lr-scale", 'c', &scale, 0, 0, scales},
        {"ref-batch", 'i', &o->ref_batch, 1, 1 << 30, NULL},
        {"warmup-epochs", 'f', &o->warmup_epochs, 0, 1e5, NULL},
        {"optimizer", 'c', &optimizer, 0, 0, optimizers},
        {"momentum", 'f', &o->momentum, 0, 1, NULL},
        {"weight-decay", 'f', &o->weight_decay, 0, 1e3, NULL},
        {"seed", 'u', &o->seed, 0, 1e15, NULL},
        {"layers", 'y', NULL, 0, 0, NULL},
        {"bucket-bytes", 'z', &o->bucket_bytes, 4, 1073741824.0, NULL},
        {"sync-bn", '1', &o->sync_bn, 0, 0, NULL},
        {"no-sync-bn", '0', &o->sync_bn, 0, 0, NULL},
        {"accum", 'i', &o->accum, 1, 1 << 20, NULL},
        {"no-overlap", '0', &o->overlap, 0, 0, NULL},
        {"check-every", 'i', &o->check_every, 0, 1e9, NULL},
        {"backend", 'c', &backend, 0, 0, backends},
        {"steps", 'l', &o->max_steps, 0, 1e15, NULL},
        {"checkpoint", 's', &o->checkpoint, 0, 0, NULL},
        {"resume", 's', &o->resume, 0, 0, NULL},
        {"metrics", 's', &o->metrics, 0, 0, NULL},
        {"dump-params", 's', &o->dump_params, 0, 0, NULL},
        {"data", 's', &o->data, 0, 0, NULL},
        {"train-limit", 'i', &o->train_limit, 1, INT_MAX, NULL},
        {"test-limit", 'i', &o->test_limit, 1, INT_MAX, NULL},
        {"pitfall", 'c', &o->pitfall, 0, 0, pitfall_names},
        {"help", 'h', NULL, 0, 0, NULL},
    };
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '=');
        if (strncmp(arg, "--", 2) != 0)
            return flag_error("unexpected argument %s", arg);
        size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        const flag_t *f = NULL;
        for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]) && f == NULL; k++)
            if (strlen(flags[k].name) == len && strncmp(arg + 2, flags[k].name, len) == 0)
                f = &flags[k];
        if (f == NULL)
            return flag_error("%s: unknown flag", arg);
        if (f->kind == 'h') {
            if (flag_rank == 0)
                usage(stdout);
            return 1;
        }
        if (f->kind == '0' || f->kind == '1') {
            *(int *)f->dst = f->kind == '1';
            continue;
        }
        const char *val = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (val == NULL)
            return flag_error("--%s needs a value", f->name);
        if (parse_value(f, val, o) != 0)
            return -1;
    }
    o->lr_scale = scales[scale];
    o->optimizer = optimizer == 0 ? OPT_SGD : OPT_ADAMW;
    o->backend = backend == 0 ? DDP_CHORUS : DDP_MPI;
    return 0;
}

/* ---- helpers of the loop below ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every rank learns whether any failed; the lowest failing rank says why (once, not N times). */
static int any_failed(int bad, const char *err, int rank)
{
    int mine = bad ? rank : INT_MAX, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == rank)
        fprintf(stderr, "chorus-train: %s\n", err);
    return first != INT_MAX;
}

/* mpirun gives ranks a pseudo-terminal even when its own output goes to a file: under a
 * launcher, ask about the launcher's stdout instead (our parent's, on a local launch). */
static int stdout_is_terminal(void)
{
    if (!isatty(STDOUT_FILENO))
        return 0;
    if (getenv("OMPI_COMM_WORLD_SIZE") == NULL && getenv("PMI_RANK") == NULL)
        return 1;
    char link[64], target[256];
    snprintf(link, sizeof(link), "/proc/%ld/fd/1", (long)getppid());
    ssize_t k = readlink(link, target, sizeof(target) - 1);
    if (k <= 0)
        return 0;
    target[k] = '\0';
    return strncmp(target, "/dev/pts/", 9) == 0 || strncmp(target, "/dev/tty", 8) == 0;
}

static void progress(int epoch, int epochs, int step, int steps, double loss)
{
    char bar[31];
    int full = (int)(30.0 * step / steps);
    for (int i = 0; i < 30; i++)
        bar[i] = i < full ? '#' : '.';
    bar[30] = '\0';
    printf("\r  epoch %d/%d [%s] %d/%d loss %.4f", epoch, epochs, bar, step, steps, loss);
    fflush(stdout);
}

static void gather(const dataset_t *ds, const int *idx, int n, float *x, uint8_t *y)
{
    for (int i = 0; i < n; i++) {
        memcpy(x + (size_t)i * ds->dim, ds->x + (size_t)idx[i] * ds->dim, sizeof(float) * ds->dim);
        y[i] = ds->y[idx[i]];
    }
}

/* Test loss and accuracy: rank r evaluates its contiguous shard with the running statistics;
 * the integer counts and the loss sum are all-reduced. */
static void evaluate(model_t *m, const dataset_t *ds, ddp_t *d, float *logits, double *loss,
                     double *acc)
{
    int lo = (int)((int64_t)ds->n * d->rank / d->nranks);
    int hi = (int)((int64_t)ds->n * (d->rank + 1) / d->nranks);
    int64_t counts[2] = {0, hi - lo}; /* correct, seen */
    double lsum = 0.0;
    for (int i = lo; i < hi; i += EVAL_CHUNK) {
        int b = hi - i < EVAL_CHUNK ? hi - i : EVAL_CHUNK, right = 0;
        model_forward(m, ds->x + (size_t)i * ds->dim, b, 0, NULL, NULL, logits);
        lsum += model_loss(logits, ds->y + i, b, CLASSES, 1.0f, NULL, &right);
        counts[0] += right;
    }
    ddp_allreduce(d, counts, 2, chorusInt64, chorusSum);
    ddp_allreduce(d, &lsum, 1, chorusFloat64, chorusSum);
    *acc = (double)counts[0] / (double)counts[1];
    *loss = lsum / (double)counts[1];
}

static int write_floats(const char *path, const float *x, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f != NULL && fwrite(x, sizeof(float), n, f) == n;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "chorus-train: --dump-params %s: cannot write: %m\n", path);
    return ok ? 0 : -1;
}

/* Largest |max - min| across ranks over the BN running statistics (collective). */
static double buffer_spread(ddp_t *d, const model_t *m)
{
    size_t n = m->nbuffers;
    float *hi = malloc(sizeof(float) * (n ? n : 1)), *lo = malloc(sizeof(float) * (n ? n : 1));
    double spread = 0.0;
    if (hi == NULL || lo == NULL) {
        fprintf(stderr, "chorus-train: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memcpy(hi, m->buffers, sizeof(float) * n);
    memcpy(lo, m->buffers, sizeof(float) * n);
    ddp_allreduce(d, hi, n, chorusFloat32, chorusMax);
    ddp_allreduce(d, lo, n, chorusFloat32, chorusMin);
    for (size_t i = 0; i < n; i++)
        spread = fmax(spread, (double)hi[i] - lo[i]);
    free(hi);
    free(lo);
    return spread;
}

/* ---- 2 to 6: the program ---- */

int main(int argc, char **argv)
{
    opts_t o;
    int rank, nranks;
    char err[2048] = "", checkmsg[1024] = "";

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    flag_rank = rank;
    int rc = parse_opts(argc, argv, &o);
    if (rc == 0 && o.batch < nranks)
        rc = flag_error("--batch %d is smaller than the %d ranks", o.batch, nranks);
    if (rc != 0) {
        MPI_Finalize();
        return rc > 0 ? 0 : 2;
    }
    /* One rank per core: OpenBLAS threads would fight the other ranks (and Chorus) for cores. */
    if (getenv("OPENBLAS_NUM_THREADS") == NULL)
        openblas_set_num_threads(1);

    /* 2. data: every rank reads the files; the sampler decides who uses which example */
    dataset_t train = {0}, test = {0};
    int bad = data_load(o.data, "train", &train, err, sizeof(err)) != 0 ||
              data_load(o.data, "t10k", &test, err, sizeof(err)) != 0;
    if (any_failed(bad, err, rank)) {
        rc = 1;
        goto out_data;
    }
    train.n = train.n < o.train_limit ? train.n : o.train_limit;
    test.n = test.n < o.test_limit ? test.n : o.test_limit;

    ddp_t ddp;
    if (ddp_init(&ddp, o.backend, o.overlap) != 0) {
        rc = 1;
        goto out_data;
    }

    /* 3. model and optimizer. Every rank makes its own; rank 0's wins through the broadcast. */
    const int gb = o.batch, accum = o.accum;
    const int lb = sampler_local_batch(gb, nranks, rank);
    const int lb_max = sampler_local_batch(gb, nranks, 0);
    model_t model;
    optim_t opt;
    int pit = o.pitfall;
    uint64_t init_seed = o.seed + (pit == PIT_SKIP_BROADCAST ? (uint64_t)rank : 0);
    if (model_init(&model, o.sizes, o.nsizes, lb_max > EVAL_CHUNK ? lb_max : EVAL_CHUNK,
                   init_seed) != 0 ||
        optim_init(&opt, o.optimizer, model.nparams) != 0 ||
        ddp_buckets(&ddp, &model, o.bucket_bytes) != 0) {
        fprintf(stderr, "chorus-train: rank %d: out of memory for the model\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (o.momentum >= 0)
        opt.momentum = o.momentum;
    if (o.weight_decay >= 0)
        opt.weight_decay = o.weight_decay;
    ckpt_meta_t meta = {
        .seed = o.seed, .batch = gb, .accum = accum, .epochs = o.epochs, .nsizes = o.nsizes};
    memcpy(meta.sizes, o.sizes, sizeof(meta.sizes));
    if (o.resume) { /* rank 0 reads; the broadcasts below carry it to the others */
        ckpt_meta_t want = meta;
        bad = 0;
        if (rank == 0 && ckpt_load(o.resume, &meta, &model, &opt, err, sizeof(err)) != 0)
            bad = 1;
        else if (rank == 0 && (meta.seed != want.seed || meta.batch != want.batch ||
                               meta.accum != want.accum || meta.epochs != want.epochs)) {
            snprintf(err, sizeof(err),
                     "%s: written by a run with --seed %llu --batch %d --accum %d --epochs %d; "
                     "resume with the same values (they decide the data order and schedule)",
                     o.resume, (unsigned long long)meta.seed, meta.batch, meta.accum, meta.epochs);
            bad = 1;
        }
        if (any_failed(bad, err, rank)) {
            rc = 1;
            goto out_model;
        }
        ddp_broadcast(&ddp, &meta, sizeof(meta), chorusUint8, 0);
        ddp_broadcast(&ddp, &opt.t, 1, chorusInt64, 0);
        ddp_broadcast(&ddp, opt.m, opt.n, chorusFloat32, 0);
        if (opt.v)
            ddp_broadcast(&ddp, opt.v, opt.n, chorusFloat32, 0);
    }
    if (pit != PIT_SKIP_BROADCAST) {
        ddp_broadcast(&ddp, model.params, model.nparams, chorusFloat32, 0);
        ddp_broadcast(&ddp, model.buffers, model.nbuffers, chorusFloat32, 0);
    }

    /* The schedule, in optimizer steps. A step takes accum micro-steps of the global batch. */
    const int micro_steps = sampler_steps(train.n, gb);
    const int steps_per_epoch = micro_steps / accum;
    if (steps_per_epoch < 1) {
        if (rank == 0)
            fprintf(stderr, "chorus-train: --accum %d needs %d micro-steps, an epoch has %d\n",
                    accum, accum, micro_steps);
        rc = 2;
        goto out_model;
    }
    const int64_t total_steps = (int64_t)o.epochs * steps_per_epoch;
    const int64_t warmup_steps = (int64_t)llround(o.warmup_epochs * steps_per_epoch);
    const float scaled_lr = lr_scaled(o.lr, o.lr_scale, gb * accum, o.ref_batch);
    const float base_lr = pit == PIT_NO_LR_SCALE ? o.lr : scaled_lr;
    const int local_bn = !o.sync_bn || pit == PIT_LOCAL_BN;
    allreduce_fn_t bn_sync = local_bn ? NULL : ddp_bn_allreduce;
    const int check_every = o.check_every;
    /* desync-optimizer: from this step on, the last rank's optimizer state is 1 ulp off */
    const int64_t desync_step = check_every > 0 ? check_every / 2 + 1 : 10;
    const int tty = rank == 0 && stdout_is_terminal();
    if (rank == 0) {
        printf("chorus-train: %d rank%s, backend %s, layers", nranks, nranks > 1 ? "s" : "",
               o.backend == DDP_MPI ? "mpi" : "chorus");
        for (int i = 0; i < o.nsizes; i++)
            printf("%c%d", i ? '-' : ' ', o.sizes[i]);
        printf(" (%zu parameters, %d bucket%s), %s BN\n", model.nparams, ddp.nbuckets,
               ddp.nbuckets > 1 ? "s" : "", local_bn ? "per-rank" : "synchronized");
        printf("  %d training examples, global batch %d (%d..%d per rank) x accum %d, %d steps per"
               " epoch, %d epochs\n",
               train.n, gb, sampler_local_batch(gb, nranks, nranks - 1), lb_max, accum,
               steps_per_epoch, o.epochs);
        printf("  %s, lr %g (%s scaling of %g), warmup %lld steps, cosine to step %lld%s\n",
               o.optimizer == OPT_SGD ? "sgd" : "adamw", base_lr, o.lr_scale, o.lr,
               (long long)warmup_steps, (long long)total_steps, o.overlap ? "" : ", no overlap");
        if (pit != PIT_NONE)
            printf("  pitfall on purpose: %s\n", pitfall_names[pit]);
        if (o.resume)
            printf("  resumed from %s at epoch %lld, step %lld\n", o.resume,
                   (long long)meta.epoch + 1, (long long)meta.step);
    }

    /* Buffers of the loop. */
    int *perm = malloc(sizeof(int) * (size_t)micro_steps * gb);
    int *idx = malloc(sizeof(int) * gb);
    float *xb = malloc(sizeof(float) * (size_t)lb_max * train.dim);
    uint8_t *yb = malloc((size_t)lb_max);
    float *logits = malloc(sizeof(float) * (size_t)model.max_batch * CLASSES);
    float *dlogits = malloc(sizeof(float) * (size_t)lb_max * CLASSES);
    uint8_t *seen = calloc((size_t)train.n, 1); /* --pitfall no-shard: which examples were used */
    if (!perm || !idx || !xb || !yb || !logits || !dlogits || !seen) {
        fprintf(stderr, "chorus-train: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    FILE *metrics = NULL;
    if (rank == 0 && o.metrics) {
        metrics = fopen(o.metrics, o.resume ? "a" : "w");
        if (metrics == NULL)
            fprintf(stderr, "chorus-train: --metrics %s: %m (going on without)\n", o.metrics);
        else if (fseek(metrics, 0, SEEK_END) == 0 && ftell(metrics) == 0)
            fprintf(metrics, "epoch,step,lr,train_loss,train_acc,test_loss,test_acc,"
                             "samples_per_s,comm_share,epoch_s\n");
    }

    /* A start that is not equal everywhere (skip-broadcast) is caught before the first step. */
    int diverged =
        check_every > 0 && ddp_check(&ddp, &model, &opt, !local_bn, checkmsg, sizeof(checkmsg));
    const int start_epoch = (int)meta.epoch, start_step = (int)meta.step;
    int64_t gstep = meta.global_step, diverged_at = -1; /* -1: before the first step */
    int64_t run_steps = 0;
    double run_time = 0.0, run_wait = 0.0; /* this rank's, in the steps of this run */
    double run_time_max = 0.0, grad_wait0 = ddp.grad_wait_s, bn_wait0 = ddp.bn_wait_s;
    double test_loss = NAN, test_acc = NAN, coverage = 1.0;
    int epochs_run = 0, epoch_reached = start_epoch;
    float lr = 0.0f;
    if (rank == 0)
        printf("%-7s %10s %9s %9s %8s %10s %9s %8s\n", "epoch", "train_loss", "train_acc",
               "test_loss", "test_acc", "samples/s", "comm_wait", "time_s");

    /* 4 and 5: epochs of steps */
    for (int epoch = start_epoch; epoch < o.epochs && !diverged; epoch++) {
        if (o.max_steps > 0 && gstep >= o.max_steps)
            break;
        sampler_permute(train.n, gb, o.seed, epoch, perm);
        double loss_sum = 0.0, t_train = 0.0, t_wait = 0.0;
        int64_t correct = 0, samples = 0;
        int step = epoch == start_epoch ? start_step : 0, first_step = step;
        double last_draw = 0.0;
        for (; step < steps_per_epoch; step++) {
            if (o.max_steps > 0 && gstep >= o.max_steps)
                break;
            double t0 = now_s(), w0 = ddp.grad_wait_s + ddp.bn_wait_s;
            model_zero_grad(&model);
            for (int micro = 0; micro < accum; micro++) {
                int s = step * accum + micro, right = 0;
                if (pit == PIT_NO_SHARD) /* the 1-rank batch's first lb samples, on every rank */
                    sampler_batch(perm, gb, 1, 0, s, idx);
                else
                    sampler_batch(perm, gb, nranks, rank, s, idx);
                gather(&train, idx, lb, xb, yb);
                for (int i = 0; i < lb; i++)
                    seen[idx[i]] = 1;
                model_forward(&model, xb, lb, 1, bn_sync, &ddp, logits);
                /* d(sum of losses)/(global batch x accum): the SUM all-reduce gives the mean */
                loss_sum += model_loss(logits, yb, lb, CLASSES, (float)gb * accum, dlogits, &right);
                correct += right;
                samples += lb;
                int last = micro == accum - 1; /* only the last micro-step communicates */
                if (last)
                    ddp_grads_begin(&ddp);
                model_backward(&model, xb, dlogits, lb, bn_sync, &ddp,
                               last && o.overlap ? ddp_on_layer_done : NULL, &ddp);
            }
            ddp_grads_finish(&ddp); /* every bucket summed: the gradients of the global batch */
            lr = lr_at(base_lr, gstep, warmup_steps, total_steps);
            optim_step(&opt, model.params, model.grads, lr);
            gstep++;
            if (pit == PIT_DESYNC && rank == nranks - 1 && gstep >= desync_step) {
                float *state = opt.v ? opt.v : opt.m; /* layer 0's first weight */
                state[0] = nextafterf(state[0], INFINITY);
            }
            double t1 = now_s();
            t_train += t1 - t0;
            t_wait += ddp.grad_wait_s + ddp.bn_wait_s - w0;
            if (check_every > 0 && gstep % check_every == 0 &&
                ddp_check(&ddp, &model, &opt, !local_bn, checkmsg, sizeof(checkmsg))) {
                diverged = 1, diverged_at = gstep;
                break;
            }
            if (tty && (t1 - last_draw > 0.1 || step + 1 == steps_per_epoch)) {
                progress(epoch + 1, o.epochs, step + 1, steps_per_epoch,
                         loss_sum / (double)samples);
                last_draw = t1;
            }
        }
        if (tty)
            printf("\r\033[K");
        if (step == first_step || diverged)
            break;

        /* end of the epoch (or of --steps): global train stats, test accuracy, one row */
        double stats[3] = {loss_sum, (double)correct, (double)samples};
        ddp_allreduce(&ddp, stats, 3, chorusFloat64, chorusSum);
        evaluate(&model, &test, &ddp, logits, &test_loss, &test_acc);
        if (pit == PIT_NO_SHARD) {
            ddp_allreduce(&ddp, seen, (size_t)train.n, chorusUint8, chorusMax);
            int64_t distinct = 0;
            for (int i = 0; i < train.n; i++)
                distinct += seen[i], seen[i] = 0;
            coverage = (double)distinct / train.n;
        }
        /* Throughput from the slowest rank's time; the waiting share averaged over ranks. */
        double t_max = t_train, share = t_train > 0 ? t_wait / t_train : 0.0;
        ddp_allreduce(&ddp, &t_max, 1, chorusFloat64, chorusMax);
        ddp_allreduce(&ddp, &share, 1, chorusFloat64, chorusSum);
        share /= nranks;
        double sps = (double)(step - first_step) * gb * accum / t_max;
        run_steps += step - first_step;
        run_time += t_train;
        run_wait += t_wait;
        run_time_max += t_max;
        epochs_run++;
        epoch_reached = epoch + 1;
        if (rank == 0) {
            char label[32];
            snprintf(label, sizeof(label), "%d%s", epoch + 1, step < steps_per_epoch ? "*" : "");
            printf("%-7s %10.4f %9.4f %9.4f %8.4f %10.0f %8.1f%% %8.1f\n", label,
                   stats[0] / stats[2], stats[1] / stats[2], test_loss, test_acc, sps,
                   100.0 * share, t_max);
            fflush(stdout);
            if (metrics) {
                fprintf(metrics, "%d,%lld,%g,%.6f,%.6f,%.6f,%.6f,%.1f,%.4f,%.3f\n", epoch + 1,
                        (long long)gstep, lr, stats[0] / stats[2], stats[1] / stats[2], test_loss,
                        test_acc, sps, share, t_max);
                fflush(metrics);
            }
        }
        if (o.checkpoint) { /* rank 0 writes; every rank learns whether it worked */
            meta.epoch = step < steps_per_epoch ? epoch : epoch + 1;
            meta.step = step < steps_per_epoch ? step : 0;
            meta.global_step = gstep;
            bad = rank == 0 && ckpt_save(o.checkpoint, &meta, &model, &opt, err, sizeof(err));
            if (any_failed(bad, err, rank)) {
                rc = 1;
                goto out_loop;
            }
        }
    }

    /* 6. the end: what a pitfall did, the communication counters, the result line */
    if (epochs_run == 0 && !diverged) /* nothing left to train (resumed at the end) */
        evaluate(&model, &test, &ddp, logits, &test_loss, &test_acc);
    double spread = pit == PIT_LOCAL_BN ? buffer_spread(&ddp, &model) : 0.0;
    if (!diverged && check_every > 0 && (pit == PIT_SKIP_BROADCAST || pit == PIT_DESYNC)) {
        diverged = ddp_check(&ddp, &model, &opt, !local_bn, checkmsg, sizeof(checkmsg));
        diverged_at = gstep;
    }
    if (diverged && rank == 0 && diverged_at < 0)
        printf("stopped: %s, found by the checksum before the first step\n", checkmsg);
    else if (diverged && rank == 0)
        printf("stopped: %s, found by the checksum after step %lld\n", checkmsg,
               (long long)diverged_at);
    if (rank == 0 && pit != PIT_NONE) {
        printf("pitfall %s: ", pitfall_names[pit]);
        if (pit == PIT_NO_SHARD)
            printf("every rank trained on the same %d samples per step, so an epoch covered %.1f%%"
                   " of the training set and %d ranks did the work of one; test_acc %.4f (run "
                   "without --pitfall to compare)\n",
                   lb, 100.0 * coverage, nranks, test_acc);
        else if (pit == PIT_LOCAL_BN)
            printf("each rank normalised with the statistics of its own %d samples instead of the"
                   " global %d; the ranks' BN running statistics now differ by up to %.3g, so each"
                   " rank's model predicts differently; test_acc %.4f (run without --pitfall to "
                   "compare)\n",
                   lb, gb, spread, test_acc);
        else if (pit == PIT_NO_LR_SCALE)
            printf("trained with lr %g where --lr-scale %s asks for %g at global batch %d (--ref-"
                   "batch %d)%s; test_acc %.4f (run without --pitfall to compare)\n",
                   o.lr, o.lr_scale, scaled_lr, gb * accum, o.ref_batch,
                   scaled_lr == o.lr ? ": the same here, raise --batch to see a difference" : "",
                   test_acc);
        else if (pit == PIT_SKIP_BROADCAST)
            printf("ranks started from different weights (seed + rank) and averaged gradients "
                   "cannot make them equal: %s\n",
                   diverged ? "the checksum caught it (above)"
                            : "--check-every 0 let it train unnoticed");
        else if (pit == PIT_DESYNC)
            printf("rank %d nudged its %s state by 1 ulp after every step from step %lld: %s\n",
                   nranks - 1, o.optimizer == OPT_SGD ? "momentum" : "Adam", (long long)desync_step,
                   nranks < 2 ? "with one rank there is nobody to disagree with"
                   : diverged ? "the checksum caught it (above)"
                              : "no checksum ran (--check-every 0) or training ended before");
    }
    if (rank == 0 && o.dump_params)
        rc = write_floats(o.dump_params, model.params, model.nparams) ? 1 : rc;
    /* Shares of step time spent waiting: all, for gradient buckets, in SyncBN; rank average. */
    double shares[3] = {run_wait, ddp.grad_wait_s - grad_wait0, ddp.bn_wait_s - bn_wait0};
    for (int i = 0; i < 3; i++)
        shares[i] = run_time > 0 ? shares[i] / run_time / nranks : 0.0;
    ddp_allreduce(&ddp, shares, 3, chorusFloat64, chorusSum);
    if (rank == 0) {
        printf("comm: backend=%s overlap=%s buckets=%d bucket_bytes=%zu grad_allreduces=%lld "
               "wait_share=%.1f%% (gradients %.1f%%, syncbn %.1f%%)\n",
               o.backend == DDP_MPI ? "mpi" : "chorus",
               o.overlap && o.backend != DDP_MPI ? "on" : "off", ddp.nbuckets, o.bucket_bytes,
               (long long)ddp.grad_allreduces, 100.0 * shares[0], 100.0 * shares[1],
               100.0 * shares[2]);
        if (!diverged)
            printf("result: test_acc=%.4f test_loss=%.4f epochs=%d steps=%lld ranks=%d "
                   "samples_per_s=%.0f\n",
                   test_acc, test_loss, epoch_reached, (long long)gstep, nranks,
                   run_time_max > 0 ? (double)run_steps * gb * accum / run_time_max : 0.0);
    }
    if (diverged)
        rc = 3;

out_loop:
    if (metrics)
        fclose(metrics);
    free(perm);
    free(idx);
    free(xb);
    free(yb);
    free(logits);
    free(dlogits);
    free(seen);
out_model:
    optim_free(&opt);
    model_free(&model);
    ddp_free(&ddp);
out_data:
    data_free(&train);
    data_free(&test);
    MPI_Finalize();
    return rc == 0 ? 0 : rc < 0 ? 2 : rc;
}
