/*
 * direct.c: collectives inside one host over node-local windows (DESIGN section 5, second
 * contract): every rank owns a window of two buffers that every local rank maps, and three
 * sequence flags in its header. A call is cut into pieces that fit one buffer; piece number s
 * (counted over the communicator's life, the same on every rank) uses buffer s % 2, so writing
 * piece s overlaps nobody's reading of piece s - 1.
 *
 *   one-shot all-reduce, piece s, rank i of n          two-shot all-reduce, piece s
 *
 *   wait done[*] >= s - 2     (buffer s % 2 is free)   wait done[*] >= s - 2
 *   win[i] <- in; ready[i] = s                         win[i] <- in; ready[i] = s
 *   wait ready[*] >= s                                 wait ready[*] >= s
 *   out <- win[0] op win[1] op ... op win[n-1]         win[i].part[i] <- part i of every win,
 *   done[i] = s                                           reduced in rank order; reduced[i] = s
 *                                                      wait reduced[j]; out.part[j] <-
 * win[j].part[j] done[i] = s
 *
 * One-shot costs one flag round and n reads per rank (small pieces); two-shot two rounds and
 * about 2 reads per rank (medium pieces). The other collectives are one round each: broadcast
 * (the root's window read by all), reduce (every window read by the root), all-gather (every
 * window read by all), reduce-scatter (part i of every window reduced by rank i).
 *
 * Zero-copy: where a rank's input lies in chorusMemAlloc memory (a memfd every local rank can
 * map) and the call does not overwrite it, the rank publishes where it is (mem_ref_t, in the
 * ready flag's payload) instead of copying it into its buffer, and peers read it in place; the
 * rank then waits, before it returns, until every peer's done flag shows the call's last piece
 * read. Ranks decide this each for itself, so buffers of both kinds mix in one call.
 *
 * Each result element is computed by one rank in one fixed order (rank order; two-shot: the
 * part's owner first, then the others in rank order) and copied from there, so the result is
 * identical on every rank and the same from run to run. avg reduces as sum and divides last.
 */
#include <stddef.h>
#include <string.h>

#include "algo.h"
#include "debug.h"

static direct_hdr_t *hdr(const direct_view_t *v, int r)
{
    return (direct_hdr_t *)(void *)v->base[r];
}

static char *buf(const direct_view_t *v, int r, uint64_t s)
{
    return v->base[r] + DIRECT_HDR_NBYTES + (size_t)(s & 1) * v->buf_nbytes;
}

#define OFF_READY(s) (offsetof(direct_hdr_t, ready) + (size_t)((s)&1) * sizeof(fifo_flag_t))
#define OFF_REDUCED offsetof(direct_hdr_t, reduced)
#define OFF_DONE offsetof(direct_hdr_t, done)

/*
 * Done flags. A rank that only reads small pieces (broadcast non-root, reduce root) would publish
 * one per call into a line the writer, running ahead, keeps reading: the line crossed between
 * the cores every call (2 ranks, 8 B broadcast: 0.27 us a call; 0.13 with the batches below).
 * So such a rank notes the piece (done->pending) and publishes every DONE_BATCH pieces, and before
 * any wait that is not over at once: a peer that needs its done flag has run ahead of it, so this
 * rank reaches its next wait or batch without that peer (calls are matched on every rank), and a
 * batch smaller than the LL lag lets the writer go on meanwhile. Calls that can be zero-copy
 * (whose writer waits for the done flag before it returns) publish at once.
 */
#define DONE_BATCH 16
_Static_assert(DONE_BATCH < DIRECT_LL_SLOTS, "a done batch is shorter than the LL lag");

static void done_publish(const direct_view_t *v, uint64_t s)
{
    fifo_set_flag(&hdr(v, v->rank)->done, s);
    v->done->published = s;
    v->done->pending = 0;
}

static void done_flush(const direct_view_t *v)
{
    if (v->done->pending != 0)
        done_publish(v, v->done->pending);
}

/* This rank has read everything it reads of piece s: publish it now, or (lazy) batched. */
static void piece_done(const direct_view_t *v, uint64_t s, int lazy)
{
    if (!lazy || s - v->done->published >= DONE_BATCH)
        done_publish(v, s);
    else
        v->done->pending = s;
}

/* Wait until rank r's flag (ready, reduced or done, at offset off in its header) reaches s. */
static chorusResult_t wait_flag(prims_t *p, const direct_view_t *v, int r, size_t off, uint64_t s,
                                const char *what)
{
    fifo_flag_t *f = (fifo_flag_t *)(void *)((char *)hdr(v, r) + off);
    p->wait.peer = r;
    if (__atomic_load_n(&f->value, __ATOMIC_ACQUIRE) < s)
        done_flush(v);
    CHECK(fifo_wait_flag(f, s, &p->wait, "shm", what));
    /* A rank publishes ready for piece s only after finishing piece s - 1 (done included): seeing
     * it spares reading r's done flag later. */
    if (off == OFF_READY(s) && v->done_seen[r] < s - 1)
        v->done_seen[r] = s - 1;
    return chorusSuccess;
}

/* Wait for every other rank's flag, starting after this rank (spreads who waits on whom). */
static chorusResult_t wait_all(prims_t *p, const direct_view_t *v, size_t off, uint64_t s,
                               const char *what)
{
    for (int k = 1; k < v->nranks; k++)
        CHECK(wait_flag(p, v, (v->rank + k) % v->nranks, off, s, what));
    return chorusSuccess;
}

/* Start piece s: wait until every rank has finished reading piece s - lag, whose buffer (lag 2:
 * s % 2) or LL slot (lag DIRECT_LL_SLOTS: s % DIRECT_LL_SLOTS) piece s reuses. A done flag read
 * once covers the pieces it is ahead by: most calls read none. */
static chorusResult_t piece_begin(prims_t *p, const direct_view_t *v, uint64_t *s_p, uint64_t lag)
{
    uint64_t s = ++*v->seq;
    *s_p = s;
    for (int k = 1; s > lag && k < v->nranks; k++) {
        int r = (v->rank + k) % v->nranks;
        if (v->done_seen[r] >= s - lag)
            continue;
        CHECK(wait_flag(p, v, r, OFF_DONE, s - lag, "direct window done flag"));
        v->done_seen[r] = __atomic_load_n(&hdr(v, r)->done.value, __ATOMIC_ACQUIRE);
    }
    return chorusSuccess;
}

/*
 * LL pieces (up to DIRECT_LL_NBYTES): the data goes as 8-byte words, 4 data bytes beside the low
 * 32 bits of the piece number, into the writer's LL slot s % DIRECT_LL_SLOTS. A reader loads
 * every word of the piece in one pass, so their lines cross between cores together, and has the
 * data when each word carries its piece number (no flag to see first, then the data); it passes
 * again until then. The writer sets its ready flag after the words, and a reader that spun too
 * long sleeps on it. Eight slots let a rank that only writes (broadcast root, reduce non-root)
 * run up to 8 pieces ahead.
 */
#define LL_LAG DIRECT_LL_SLOTS
#define LL_PART_WORDS(nbytes) (((nbytes) + 3) / 4)
/* How many pieces ahead a rank that only reads LL pieces prefetches the writer's slot. */
#define LL_PREFETCH 4
/* All-reduce pieces go LL up to 64 bytes (2 lines of words): from 128 a flag then the data in the
 * window buffer is faster (2 ranks, 128 B: 0.61-0.62 us against 0.74-0.75 LL; 64 B: 0.54 LL
 * against 0.60-0.61), since every rank both writes and waits and nothing runs ahead. */
#define LL_ALLREDUCE_NBYTES 64

/* Write nparts parts of part_nbytes each (part k at src + k * stride) as LL words of piece s,
 * part k from word k * LL_PART_WORDS(part_nbytes); then the ready flag. */
static void ll_write(const direct_view_t *v, uint64_t s, const char *src, int nparts,
                     size_t part_nbytes, size_t stride)
{
    uint64_t *w = hdr(v, v->rank)->ll[s % DIRECT_LL_SLOTS];
    uint64_t tag = (uint64_t)(uint32_t)s << 32;
    size_t pw = LL_PART_WORDS(part_nbytes), full = part_nbytes / 4;
    for (int k = 0; k < nparts; k++, w += pw) {
        const char *b = src + (size_t)k * stride;
        for (size_t i = 0; i < full; i++) {
            uint32_t d;
            memcpy(&d, b + 4 * i, 4);
            __atomic_store_n(&w[i], tag | d, __ATOMIC_RELAXED);
        }
        if (full < pw) { /* a part word: 1 to 3 bytes */
            uint32_t d = 0;
            memcpy(&d, b + 4 * full, part_nbytes - 4 * full);
            __atomic_store_n(&w[full], tag | d, __ATOMIC_RELAXED);
        }
    }
    /* The whole slot is written when it was last 2^31 pieces ago or more: every word then
     * carries a number within 2^31 of s, so no stale one matches s in 32 bits. */
    uint64_t *slot = hdr(v, v->rank)->ll[s % DIRECT_LL_SLOTS];
    uint64_t *fresh = &hdr(v, v->rank)->ll_fresh[s % DIRECT_LL_SLOTS];
    if (s - *fresh >= (uint64_t)1 << 31) {
        for (uint64_t *x = slot + pw * (size_t)nparts; x < slot + DIRECT_LL_WORDS; x++)
            __atomic_store_n(x, tag, __ATOMIC_RELAXED);
        *fresh = s;
    }
    fifo_set_flag(&hdr(v, v->rank)->ready[s & 1], s);
    /* The next piece's slot was last read by the peers: have it back before writing it (the
     * stores would otherwise stall this rank's next locked instruction; 8 B broadcast root). */
    fifo_prefetch_write(hdr(v, v->rank)->ll[(s + 1) % DIRECT_LL_SLOTS],
                        pw * (size_t)nparts * sizeof(uint64_t));
}

/* Read nbytes of rank r's LL words of piece s, from word first, into dst: passes over the words
 * until all carry s, then sleeps on r's ready flag (set after them). */
static chorusResult_t ll_read(prims_t *p, const direct_view_t *v, int r, uint64_t s, size_t first,
                              void *dst, size_t nbytes)
{
    const uint64_t *w = hdr(v, r)->ll[s % DIRECT_LL_SLOTS] + first;
    uint32_t tag = (uint32_t)s;
    unsigned char *b = dst;
    size_t full = nbytes / 4, nw = LL_PART_WORDS(nbytes);
    int64_t polls = 0;
    int flagged = 0;
    for (;;) {
        /* One pass over every word (their lines load together); again until all carry s. */
        uint32_t bad = 0;
        for (size_t i = 0; i < nw; i++) {
            uint64_t x = __atomic_load_n(&w[i], __ATOMIC_RELAXED);
            bad |= (uint32_t)(x >> 32) ^ tag;
            uint32_t d = (uint32_t)x;
            if (i < full)
                memcpy(b + 4 * i, &d, 4);
            else
                memcpy(b + 4 * i, &d, nbytes - 4 * i);
        }
        if (bad == 0)
            return chorusSuccess;
        if (flagged)
            return ERR(chorusInternalError, SUB_COLL,
                       "rank %d published piece %llu but some of its LL words carry another "
                       "piece",
                       r, (unsigned long long)s);
        if (polls == 0)
            done_flush(v);
        if (++polls < p->wait.spin) {
            fifo_cpu_relax();
            continue;
        }
        CHECK(wait_flag(p, v, r, OFF_READY(s), s, "direct window ready flag (LL)"));
        flagged = 1;
    }
}

/* out = LL input of rank 0 op rank 1 op ... (rank order), each read from word first; avg's
 * division last. */
static chorusResult_t ll_reduce_all(prims_t *p, const direct_view_t *v, uint64_t s, size_t first,
                                    void *out, size_t count)
{
    _Alignas(64) unsigned char tmp[DIRECT_LL_NBYTES];
    CHECK(ll_read(p, v, 0, s, first, out, count * p->esize));
    for (int r = 1; r < v->nranks; r++) {
        CHECK(ll_read(p, v, r, s, first, tmp, count * p->esize));
        p->ops->reduce(out, out, tmp, count, p->dtype, p->op);
    }
    if (p->divisor)
        p->ops->divide(out, out, count, p->dtype, p->divisor);
    return chorusSuccess;
}

_Static_assert(sizeof(mem_ref_t) <= sizeof(((fifo_flag_t *)0)->payload),
               "a mem_ref_t rides in a ready flag's payload");

/* Zero-copy: 1 (and *ref) when this rank's input in[0, nbytes) can be read in place by its
 * peers: it lies in a chorusMemAlloc region and this rank writes none of it during the call (out,
 * out_nbytes: what it writes; NULL: nothing). */
static int zc_expose(const direct_view_t *v, const void *in, size_t nbytes, const void *out,
                     size_t out_nbytes, mem_ref_t *ref)
{
    if (v->zc_find == NULL || nbytes == 0 || nbytes < v->zc_min_nbytes)
        return 0;
    const char *i = in, *o = out;
    if (o != NULL && i < o + out_nbytes && o < i + nbytes)
        return 0;
    return v->zc_find(in, nbytes, ref);
}

/* Publish this rank's input of piece s: in its window buffer (ref NULL) or in place at ref's
 * data + off bytes. */
static void publish_ready(const direct_view_t *v, uint64_t s, const mem_ref_t *ref, size_t off)
{
    fifo_flag_t *f = &hdr(v, v->rank)->ready[s & 1];
    mem_ref_t r;
    memset(&r, 0, sizeof(r));
    if (ref != NULL) {
        r = *ref;
        r.offset += off;
        r.addr += off;
    }
    memcpy(f->payload, &r, sizeof(r));
    fifo_set_flag(f, s);
}

/* Publish this rank's input of piece s, len elements from element off of in: in place at ref
 * (zero-copy), or copied into its window buffer (ref NULL). */
static void publish_input(prims_t *p, const direct_view_t *v, uint64_t s, const mem_ref_t *ref,
                          const char *in, size_t off, size_t len)
{
    if (ref == NULL)
        p->ops->copy(buf(v, v->rank, s), in + off * p->esize, len * p->esize);
    publish_ready(v, s, ref, off * p->esize);
}

/* Rank r's input of piece s, nbytes, once its ready flag is seen: its window buffer, or its own
 * memory read in place (this rank's: mine, when it exposed it). */
static chorusResult_t input_of(const direct_view_t *v, int r, uint64_t s, const char *mine,
                               size_t nbytes, char **src)
{
    if (r == v->rank) {
        *src = mine != NULL ? (char *)mine : buf(v, r, s);
        return chorusSuccess;
    }
    mem_ref_t ref;
    memcpy(&ref, hdr(v, r)->ready[s & 1].payload, sizeof(ref));
    if (ref.id == 0) {
        *src = buf(v, r, s);
        return chorusSuccess;
    }
    if (v->zc_map == NULL)
        return ERR(chorusInternalError, SUB_COLL,
                   "rank %d published its input in place, but this rank has zero-copy off", r);
    *src = (char *)v->zc_map(v->zc_arg, r, &ref, nbytes);
    if (*src == NULL)
        return chorusSystemError;
    (*v->zc_reads)++;
    return chorusSuccess;
}

/* Zero-copy, at the end of a call: peers read this rank's memory until their done flags reach
 * s, the call's last piece; the caller may change it once this returns. */
static chorusResult_t zc_release(prims_t *p, const direct_view_t *v, uint64_t s)
{
    for (int k = 1; k < v->nranks; k++) {
        int r = (v->rank + k) % v->nranks;
        if (v->done_seen[r] >= s)
            continue;
        CHECK(wait_flag(p, v, r, OFF_DONE, s, "direct window done flag (reading in place)"));
        v->done_seen[r] = __atomic_load_n(&hdr(v, r)->done.value, __ATOMIC_ACQUIRE);
    }
    return chorusSuccess;
}

/* dst = src[0] op src[1] op ... in the given order; avg's division when final. */
static void reduce_list(prims_t *p, void *dst, char *const *src, int nsrc, size_t count)
{
    if (nsrc == 1)
        p->ops->copy(dst, src[0], count * p->esize);
    else
        p->ops->reduce(dst, src[0], src[1], count, p->dtype, p->op);
    for (int k = 2; k < nsrc; k++)
        p->ops->reduce(dst, dst, src[k], count, p->dtype, p->op);
    if (p->divisor)
        p->ops->divide(dst, dst, count, p->dtype, p->divisor);
}

static chorusResult_t allreduce(prims_t *p, const direct_view_t *v, const coll_args_t *a,
                                int twoshot)
{
    int n = v->nranks, me = v->rank;
    size_t es = p->esize, per = v->buf_nbytes / es, nbytes = a->count * es;
    const char *in = a->sendbuff;
    char *srcs[DIRECT_MAX_RANKS];
    mem_ref_t zref;
    int zc = zc_expose(v, in, nbytes, a->recvbuff, nbytes, &zref);
    uint64_t s = 0;
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        int inline_ = len * es <= sizeof(hdr(v, me)->ready[0].payload);
        int ll = !inline_ && len * es <= LL_ALLREDUCE_NBYTES;
        CHECK(piece_begin(p, v, &s, ll ? LL_LAG : 2));
        char *out = (char *)a->recvbuff + off * es;
        if (ll) {
            ll_write(v, s, in + off * es, 1, len * es, 0);
            CHECK(ll_reduce_all(p, v, s, 0, out, len));
            piece_done(v, s, 0);
            continue;
        }
        if (inline_) {
            /* Small: the data rides in the ready flag's cache line. */
            fifo_flag_t *mine = &hdr(v, me)->ready[s & 1];
            memcpy(mine->payload, in + off * es, len * es);
            fifo_set_flag(mine, s);
            CHECK(wait_all(p, v, OFF_READY(s), s, "direct window ready flag"));
            for (int r = 0; r < n; r++)
                srcs[r] = (char *)hdr(v, r)->ready[s & 1].payload;
            reduce_list(p, out, srcs, n, len);
            piece_done(v, s, 0);
            continue;
        }
        publish_input(p, v, s, zc ? &zref : NULL, in, off, len);
        CHECK(wait_all(p, v, OFF_READY(s), s, "direct window ready flag"));
        for (int r = 0; r < n; r++)
            CHECK(input_of(v, r, s, zc ? in + off * es : NULL, len * es, &srcs[r]));
        if (!twoshot) {
            reduce_list(p, out, srcs, n, len);
        } else {
            /* This rank's part: its own input first, then the others' in rank order, into its
             * window buffer (where its own input already is when it copied it there). */
            char *part[DIRECT_MAX_RANKS];
            size_t poff, plen;
            algo_part(len, n, me, &poff, &plen);
            part[0] = srcs[me] + poff * es;
            for (int r = 0, k = 1; r < n; r++)
                if (r != me)
                    part[k++] = srcs[r] + poff * es;
            if (plen > 0)
                reduce_list(p, buf(v, me, s) + poff * es, part, n, plen);
            fifo_set_flag(&hdr(v, me)->reduced, s);
            for (int k = 0; k < n; k++) {
                int r = (me + k) % n;
                algo_part(len, n, r, &poff, &plen);
                if (r != me)
                    CHECK(wait_flag(p, v, r, OFF_REDUCED, s, "direct window reduced flag"));
                if (plen > 0)
                    p->ops->copy(out + poff * es, buf(v, r, s) + poff * es, plen * es);
            }
        }
        piece_done(v, s, 0);
    }
    if (zc)
        CHECK(zc_release(p, v, s));
    return chorusSuccess;
}

static chorusResult_t broadcast(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int me = v->rank, root = a->root;
    size_t es = p->esize, per = v->buf_nbytes / es, nbytes = a->count * es;
    const char *in = a->sendbuff;
    mem_ref_t zref;
    int zc = me == root && zc_expose(v, in, nbytes, a->recvbuff == a->sendbuff ? NULL : a->recvbuff,
                                     nbytes, &zref);
    int lazy = nbytes <= DIRECT_LL_NBYTES && nbytes < v->zc_min_nbytes;
    uint64_t s = 0;
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        int ll = len * es <= DIRECT_LL_NBYTES;
        CHECK(piece_begin(p, v, &s, ll ? LL_LAG : 2));
        char *out = (char *)a->recvbuff + off * es;
        if (ll) {
            /* The root writes and goes on: up to LL_LAG pieces ahead of the slowest reader. */
            if (me == root) {
                ll_write(v, s, in + off * es, 1, len * es, 0);
                if (out != in + off * es)
                    p->ops->copy(out, in + off * es, len * es);
            } else {
                CHECK(ll_read(p, v, root, s, 0, out, len * es));
                /* The root runs ahead: ask for a later piece's words now (one call's latency
                 * between the cores hides behind this rank's next calls). */
                fifo_prefetch_read(hdr(v, root)->ll[(s + LL_PREFETCH) % DIRECT_LL_SLOTS],
                                   LL_PART_WORDS(len * es) * sizeof(uint64_t));
                piece_done(v, s, lazy);
                continue;
            }
        } else if (me == root) {
            publish_input(p, v, s, zc ? &zref : NULL, in, off, len);
            if (out != in + off * es)
                p->ops->copy(out, in + off * es, len * es);
        } else {
            char *src = NULL;
            CHECK(wait_flag(p, v, root, OFF_READY(s), s, "direct window ready flag"));
            CHECK(input_of(v, root, s, NULL, len * es, &src));
            p->ops->copy(out, src, len * es);
        }
        piece_done(v, s, 0);
    }
    if (zc)
        CHECK(zc_release(p, v, s));
    return chorusSuccess;
}

static chorusResult_t reduce(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int n = v->nranks, me = v->rank, root = a->root;
    size_t es = p->esize, per = v->buf_nbytes / es, nbytes = a->count * es;
    const char *in = a->sendbuff;
    char *srcs[DIRECT_MAX_RANKS];
    mem_ref_t zref;
    int zc = zc_expose(v, in, nbytes, me == root ? a->recvbuff : NULL, nbytes, &zref);
    int lazy = me == root && nbytes <= DIRECT_LL_NBYTES && nbytes < v->zc_min_nbytes;
    uint64_t s = 0;
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        if (len * es <= DIRECT_LL_NBYTES) {
            /* A non-root writes and goes on: up to LL_LAG pieces ahead of the root. */
            CHECK(piece_begin(p, v, &s, LL_LAG));
            ll_write(v, s, in + off * es, 1, len * es, 0);
            if (me == root) {
                CHECK(ll_reduce_all(p, v, s, 0, (char *)a->recvbuff + off * es, len));
                for (int r = 0; r < n; r++)
                    if (r != me)
                        fifo_prefetch_read(hdr(v, r)->ll[(s + LL_PREFETCH) % DIRECT_LL_SLOTS],
                                           LL_PART_WORDS(len * es) * sizeof(uint64_t));
            }
            piece_done(v, s, lazy);
            continue;
        }
        CHECK(piece_begin(p, v, &s, 2));
        publish_input(p, v, s, zc ? &zref : NULL, in, off, len);
        if (me == root) {
            CHECK(wait_all(p, v, OFF_READY(s), s, "direct window ready flag"));
            for (int r = 0; r < n; r++)
                CHECK(input_of(v, r, s, zc ? in + off * es : NULL, len * es, &srcs[r]));
            reduce_list(p, (char *)a->recvbuff + off * es, srcs, n, len);
        }
        piece_done(v, s, 0);
    }
    if (zc)
        CHECK(zc_release(p, v, s));
    return chorusSuccess;
}

static chorusResult_t allgather(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int n = v->nranks, me = v->rank;
    size_t es = p->esize, per = v->buf_nbytes / es, nbytes = a->count * es;
    const char *in = a->sendbuff;
    mem_ref_t zref;
    int zc = zc_expose(v, in, nbytes, a->recvbuff, nbytes * (size_t)n, &zref);
    uint64_t s = 0;
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        int inline_ = len * es <= sizeof(hdr(v, me)->ready[0].payload);
        int ll = !inline_ && len * es <= DIRECT_LL_NBYTES;
        CHECK(piece_begin(p, v, &s, ll ? LL_LAG : 2));
        if (ll) {
            ll_write(v, s, in + off * es, 1, len * es, 0);
            for (int k = 0; k < n; k++) {
                int r = (me + k) % n;
                char *dst = (char *)a->recvbuff + ((size_t)r * a->count + off) * es;
                if (r == me) {
                    if (dst != in + off * es)
                        memcpy(dst, in + off * es, len * es);
                } else {
                    CHECK(ll_read(p, v, r, s, 0, dst, len * es));
                }
            }
            piece_done(v, s, 0);
            continue;
        }
        if (inline_) {
            /* Small: the data rides in the ready flag's cache line. */
            fifo_flag_t *mine = &hdr(v, me)->ready[s & 1];
            memcpy(mine->payload, in + off * es, len * es);
            fifo_set_flag(mine, s);
            for (int k = 0; k < n; k++) {
                int r = (me + k) % n;
                if (r != me)
                    CHECK(wait_flag(p, v, r, OFF_READY(s), s, "direct window ready flag"));
                memcpy((char *)a->recvbuff + ((size_t)r * a->count + off) * es,
                       hdr(v, r)->ready[s & 1].payload, len * es);
            }
            piece_done(v, s, 0);
            continue;
        }
        publish_input(p, v, s, zc ? &zref : NULL, in, off, len);
        for (int k = 0; k < n; k++) {
            int r = (me + k) % n;
            char *src = NULL;
            if (r != me)
                CHECK(wait_flag(p, v, r, OFF_READY(s), s, "direct window ready flag"));
            CHECK(input_of(v, r, s, zc ? in + off * es : NULL, len * es, &src));
            char *dst = (char *)a->recvbuff + ((size_t)r * a->count + off) * es;
            if (dst != src)
                p->ops->copy(dst, src, len * es);
        }
        piece_done(v, s, 0);
    }
    if (zc)
        CHECK(zc_release(p, v, s));
    return chorusSuccess;
}

static chorusResult_t reducescatter(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int n = v->nranks, me = v->rank;
    size_t es = p->esize, per = v->buf_nbytes / es / (size_t)n;
    char *srcs[DIRECT_MAX_RANKS];
    if (per == 0)
        return ERR(chorusInternalError, SUB_COLL,
                   "direct reduce-scatter: a window of %zu bytes holds no element for %d ranks",
                   v->buf_nbytes, n);
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        uint64_t s;
        int inline_ = (size_t)n * len * es <= sizeof(hdr(v, me)->ready[0].payload);
        int ll = !inline_ && (size_t)n * LL_PART_WORDS(len * es) <= DIRECT_LL_WORDS;
        CHECK(piece_begin(p, v, &s, ll ? LL_LAG : 2));
        if (ll) {
            /* Part r of this rank's input at word r * LL_PART_WORDS; rank i reduces part i. */
            ll_write(v, s, (const char *)a->sendbuff + off * es, n, len * es, a->count * es);
            CHECK(ll_reduce_all(p, v, s, (size_t)me * LL_PART_WORDS(len * es),
                                (char *)a->recvbuff + off * es, len));
            piece_done(v, s, 0);
            continue;
        }
        if (inline_) {
            /* Small: all n parts ride in the ready flag's cache line, part r at r * len. */
            fifo_flag_t *mine = &hdr(v, me)->ready[s & 1];
            for (int r = 0; r < n; r++)
                memcpy(mine->payload + (size_t)r * len * es,
                       (const char *)a->sendbuff + ((size_t)r * a->count + off) * es, len * es);
            fifo_set_flag(mine, s);
            CHECK(wait_all(p, v, OFF_READY(s), s, "direct window ready flag"));
            for (int r = 0; r < n; r++)
                srcs[r] = (char *)hdr(v, r)->ready[s & 1].payload + (size_t)me * len * es;
            reduce_list(p, (char *)a->recvbuff + off * es, srcs, n, len);
            piece_done(v, s, 0);
            continue;
        }
        /* Part r of this rank's input lands at r * len in its buffer. */
        for (int r = 0; r < n; r++)
            p->ops->copy(buf(v, me, s) + (size_t)r * len * es,
                         (const char *)a->sendbuff + ((size_t)r * a->count + off) * es, len * es);
        fifo_set_flag(&hdr(v, me)->ready[s & 1], s);
        CHECK(wait_all(p, v, OFF_READY(s), s, "direct window ready flag"));
        for (int r = 0; r < n; r++)
            srcs[r] = buf(v, r, s) + (size_t)me * len * es;
        reduce_list(p, (char *)a->recvbuff + off * es, srcs, n, len);
        piece_done(v, s, 0);
    }
    return chorusSuccess;
}

chorusResult_t direct_program(prims_t *p, const direct_view_t *v, const coll_args_t *a, int twoshot)
{
    if (v->nranks > DIRECT_MAX_RANKS)
        return ERR(chorusInternalError, SUB_COLL, "direct algorithm for %d ranks (at most %d)",
                   v->nranks, DIRECT_MAX_RANKS);
    switch (a->kind) {
    case COLL_ALLREDUCE:
        return allreduce(p, v, a, twoshot);
    case COLL_BROADCAST:
        return broadcast(p, v, a);
    case COLL_REDUCE:
        return reduce(p, v, a);
    case COLL_ALLGATHER:
        return allgather(p, v, a);
    case COLL_REDUCESCATTER:
        return reducescatter(p, v, a);
    default:
        return ERR(chorusInternalError, SUB_COLL, "no direct program for collective kind %d",
                   (int)a->kind);
    }
}
