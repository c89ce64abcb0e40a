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
 * window read by all the others; a rank's own part comes from its input), reduce-scatter (part i
 * of every window reduced by rank i), all-to-all (block i of every window copied by rank i).
 *
 * Zero-copy: where a rank's input lies in chorusMemAlloc memory (a memfd every local rank can
 * map) and the call does not overwrite it, the rank publishes where it is (mem_ref_t, in the
 * ready flag's payload) instead of copying it into its buffer, and peers read it in place; the
 * rank then waits, before it returns, until every peer's done flag shows the call's last piece
 * read. Ranks decide this each for itself, so buffers of both kinds mix in one call.
 *
 * Cross-memory attach (direct_view_t.cma_read, cma_write; window.c): where the setup found that
 * process_vm_readv/writev pays, all-gathers, broadcasts and two-shot all-reduces move data
 * between the ranks' own buffers (any memory) in one flag round, no window buffer between
 * (allgather_cma, broadcast_cma, allreduce_cma).
 *
 * The flags, waits, LL words, tagged lines and zero-copy steps these are written with live in
 * direct_win.c.
 *
 * Each result element is computed by one rank in one fixed order (rank order; two-shot: the
 * part's owner first, then the others in rank order) and copied from there, so the result is
 * identical on every rank and the same from run to run. avg reduces as sum and divides last.
 */
#include <stddef.h>
#include <string.h>

#include "debug.h"
#include "direct_win.h"

/* All-reduce piece s (len elements from element off) through the window buffers: one-shot, or
 * two-shot (each rank reduces its part of the piece, then copies every part out). Apart from
 * allreduce, so that a call of tagged lines runs on a smaller stack (srcs, part). */
static __attribute__((noinline)) chorusResult_t
allreduce_piece(prims_t *p, const direct_view_t *v, const coll_args_t *a, uint64_t s, size_t off,
                size_t len, const mem_ref_t *zref, int twoshot, const mem_ref_t *oref)
{
    int n = v->nranks, me = v->rank;
    size_t es = p->esize;
    const char *in = a->sendbuff;
    char *out = (char *)a->recvbuff + off * es;
    char *srcs[DIRECT_MAX_RANKS];
    direct_publish_input(p, v, s, zref, in, off, len);
    CHECK(direct_wait_all(p, v, OFF_READY(s), s, "direct window ready flag"));
    for (int r = 0; r < n; r++)
        CHECK(direct_input_of(v, r, s, zref != NULL ? in + off * es : NULL, len * es, &srcs[r]));
    if (!twoshot) {
        direct_reduce_list(p, out, srcs, n, len);
    } else {
        /* This rank's part: its own input first, then the others' in rank order, into its
         * window buffer (where its own input already is when it copied it there), or with oref
         * straight into its output, where the others read it (the reduced flag says where). */
        char *part[DIRECT_MAX_RANKS];
        size_t poff, plen;
        algo_part(len, n, me, &poff, &plen);
        part[0] = srcs[me] + poff * es;
        for (int r = 0, k = 1; r < n; r++)
            if (r != me)
                part[k++] = srcs[r] + poff * es;
        if (plen > 0)
            direct_reduce_list(p, oref != NULL ? out + poff * es : buf(v, me, s) + poff * es, part,
                               n, plen);
        fifo_flag_t *red = &hdr(v, me)->reduced;
        mem_ref_t at;
        memset(&at, 0, sizeof(at));
        if (oref != NULL) {
            at = *oref;
            at.offset += (off + poff) * es;
            at.addr += (off + poff) * es;
        }
        memcpy(red->payload, &at, sizeof(at));
        fifo_set_flag(red, s);
        for (int k = 0; k < n; k++) {
            int r = (me + k) % n;
            algo_part(len, n, r, &poff, &plen);
            const char *src = buf(v, r, s) + poff * es, *in_place = NULL;
            if (r == me && oref != NULL)
                continue; /* reduced in place */
            if (r != me) {
                CHECK(direct_wait_flag(p, v, r, OFF_REDUCED, s, "direct window reduced flag"));
                CHECK(direct_ref_of(v, r, &hdr(v, r)->reduced, 0, plen * es, &in_place));
            }
            if (plen > 0)
                prims_copy_out(p, out + poff * es, in_place != NULL ? in_place : src, plen * es);
        }
    }
    direct_piece_done(v, s, 0);
    return chorusSuccess;
}

/* 1 (and the refs) when this rank's input and output can both be read in place by its peers:
 * two chorusMemAlloc ranges apart from each other. */
static int expose_both(const direct_view_t *v, const coll_args_t *a, size_t nbytes, mem_ref_t *zref,
                       mem_ref_t *oref)
{
    return direct_zc_expose(v, a->sendbuff, nbytes, a->recvbuff, nbytes, zref) &&
           direct_zc_expose(v, a->recvbuff, nbytes, a->sendbuff, nbytes, oref);
}

/* Copy nbytes from src to dst in pieces of the window's size (glibc's memcpy then writes with
 * `rep movsb` on the AMD VM: lines a peer has read are taken back at no extra cost). */
static void copy_pieces(prims_t *p, const direct_view_t *v, char *dst, const char *src,
                        size_t nbytes)
{
    for (size_t off = 0; off < nbytes; off += v->buf_nbytes)
        p->ops->copy(dst + off, src + off,
                     nbytes - off < v->buf_nbytes ? nbytes - off : v->buf_nbytes);
}

/*
 * All-reduce by push, every rank's output chorusMemAlloc memory and apart from its input, the
 * count a multiple of the ranks (a vote said so; parts all alike): part r of each output is
 * rank r's. Each rank copies part j of its input into rank j's output at its own part's place
 * (the others' parts of an output are free until their owners fill them), reduces its part from
 * its input and what the others put in its output, in rank order, into its output, and copies
 * that into the same place of every other output once its owner has reduced. No rank reads
 * another's input or output, so no owner's next write takes lines back from a peer's cache, and
 * no window buffer is copied in or out: per rank, 2 (n - 1) / n of the data copied and 1 / n
 * reduced, where two-shot through the window copies 1 + (n - 1) / n and reduces 1 / n.
 *   piece s1: ready = where its output lies; then the parts of its input pushed to their owners
 *   piece s2: ready = pushed; reduced = its part reduced (its output's other parts read); done =
 *             its part pushed into every output. It returns when every rank's done is s2.
 */
static chorusResult_t allreduce_push(prims_t *p, const direct_view_t *v, const coll_args_t *a,
                                     const mem_ref_t *oref)
{
    int n = v->nranks, me = v->rank;
    size_t es = p->esize, plen = a->count / (size_t)n, pbytes = plen * es;
    const char *in = a->sendbuff;
    char *out = a->recvbuff, *dst[DIRECT_MAX_RANKS], *srcs[DIRECT_MAX_RANKS];
    uint64_t s1, s2;
    CHECK(direct_piece_begin(p, v, &s1, 2, 0));
    direct_publish_ready(v, s1, oref, 0);
    for (int k = 1; k < n; k++) {
        int r = (me + k) % n;
        CHECK(direct_wait_flag(p, v, r, OFF_READY(s1), s1, "direct window ready flag"));
        CHECK(direct_out_of(v, r, &hdr(v, r)->ready[s1 & 1], (size_t)me * pbytes, pbytes, &dst[r]));
        copy_pieces(p, v, dst[r], in + (size_t)r * pbytes, pbytes);
    }
    CHECK(direct_piece_begin(p, v, &s2, 2, 0));
    direct_slot_ready(v, s2);
    CHECK(direct_wait_all(p, v, OFF_READY(s2), s2, "direct window ready flag"));
    for (int r = 0; r < n; r++)
        srcs[r] = (char *)(r == me ? in : out) + (size_t)r * pbytes;
    direct_reduce_list(p, out + (size_t)me * pbytes, srcs, n, plen);
    fifo_set_flag(&hdr(v, me)->reduced, s2);
    for (int k = 1; k < n; k++) {
        int r = (me + k) % n;
        CHECK(direct_wait_flag(p, v, r, OFF_REDUCED, s2, "direct window reduced flag"));
        copy_pieces(p, v, dst[r], out + (size_t)me * pbytes, pbytes);
    }
    direct_piece_done(v, s2, 0);
    return direct_zc_release(p, v, s2);
}

/*
 * Two-shot all-reduce by cross-memory attach (cma_read and cma_write; any memory; the ranks
 * agreed at setup that it pays): part j of the data is rank j's (algo_part). Each rank publishes
 * where its input and output lie, copies its part of every other input (process_vm_readv) into
 * its window buffer, in slots of 1 / (n - 1) of it, reduces its own input's part and those (its
 * own first, then rank order, as two-shot) into its output, and writes that into every other
 * output (process_vm_writev). It returns once every rank's done flag says it is through (read
 * this rank's input, written its part here). No rank reads what a peer has just written, and no
 * rank writes lines a peer has read but its own output's (the job reads its result there): the
 * window's way took those lines back on every copy in and out. In place is safe: rank j writes
 * part j of rank r's buffer, which only j reads (as r's input), and only after reading it.
 *   piece s: ready = where its input and output lie; done = read from and written to all
 */
static chorusResult_t allreduce_cma(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int n = v->nranks, me = v->rank;
    size_t es = p->esize;
    const char *in = a->sendbuff;
    char *out = a->recvbuff, *srcs[DIRECT_MAX_RANKS];
    uint64_t s, at_in[DIRECT_MAX_RANKS], at_out[DIRECT_MAX_RANKS];
    size_t poff, plen, slot = (v->buf_nbytes / (size_t)(n - 1) & ~(size_t)63) / es;
    CHECK(direct_piece_begin(p, v, &s, 2, v->buf_nbytes));
    mem_ref_t where = {.id = DIRECT_REF_CMA,
                       .addr = (uint64_t)(uintptr_t)in,
                       .ino = (uint64_t)(uintptr_t)out,
                       .span = a->count * es};
    direct_publish_ready(v, s, &where, 0);
    for (int k = 1; k < n; k++) {
        int r = (me + k) % n;
        CHECK(direct_cma_where(p, v, r, s, a->count * es, &where));
        at_in[r] = where.addr;
        at_out[r] = where.ino;
    }
    algo_part(a->count, n, me, &poff, &plen);
    for (size_t c = 0; c < plen; c += slot) {
        size_t clen = plen - c < slot ? plen - c : slot, at = (poff + c) * es;
        srcs[0] = (char *)in + at;
        for (int r = 0, k = 1; r < n; r++) {
            if (r == me)
                continue;
            srcs[k] = buf(v, me, s) + (size_t)(k - 1) * slot * es;
            CHECK(direct_cma_copy(v, r, s, srcs[k], at_in[r] + at, clen * es, 0));
            k++;
        }
        direct_reduce_list(p, out + at, srcs, n, clen);
    }
    for (int k = 1; k < n && plen > 0; k++) {
        int r = (me + k) % n;
        CHECK(direct_cma_copy(v, r, s, out + poff * es, at_out[r] + poff * es, plen * es, 1));
    }
    (*v->cma_reads) += (uint64_t)(n - 1);
    v->cma_writes[CMA_W_ALLREDUCE] += (uint64_t)(n - 1);
    direct_piece_done(v, s, 0);
    return direct_zc_release(p, v, s);
}

/* zc_out (two-shot only): the ranks agreed (direct_zc_vote) that each reduces its part
 * straight into its output and the others copy it from there. Otherwise every input is copied
 * into the window, chorusMemAlloc memory or not (direct_view_t.zc_min_nbytes says why). */
HOT_PATH static chorusResult_t allreduce(prims_t *p, const direct_view_t *v, const coll_args_t *a,
                                         int twoshot, int zc_out)
{
    size_t es = p->esize, nbytes = a->count * es;
    const char *in = a->sendbuff;
    uint64_t s = 0;
    if (!twoshot && a->count != 0 && nbytes <= LINES_MAX_NBYTES) {
        /* One piece as tagged lines, past the cuts below (all of them two-shot's or larger). */
        CHECK(direct_piece_begin(p, v, &s, 2, 0));
        direct_lines_write(v, s, in, nbytes);
        CHECK(direct_lines_reduce_all(p, v, s, 0, a->recvbuff, a->count));
        direct_piece_done(v, s, 0);
        return chorusSuccess;
    }
    size_t per = v->buf_nbytes / es;
    mem_ref_t zref, oref;
    /* The vote's question depends only on what every rank shares (the size, the settings). */
    if (twoshot && !zc_out && v->zc_find != NULL && v->zc_arpush_min_nbytes != 0 &&
        nbytes >= v->zc_arpush_min_nbytes && a->count % (size_t)v->nranks == 0) {
        int mine =
            v->zc_find(a->recvbuff, nbytes, &oref) &&
            ((const char *)a->recvbuff >= in + nbytes || (const char *)a->recvbuff + nbytes <= in);
        int all = 0;
        CHECK(direct_vote(p, v, -1, mine, &all));
        if (all) {
            (*v->zc_arpushed)++;
            return allreduce_push(p, v, a, &oref);
        }
    }
    int zc = twoshot && zc_out && expose_both(v, a, nbytes, &zref, &oref);
    if (twoshot && !zc && v->cma_write != NULL &&
        direct_cma_call(v, nbytes, v->cma_ar_min_nbytes) &&
        v->buf_nbytes / (size_t)(v->nranks - 1) >= 64)
        return allreduce_cma(p, v, a);
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        int lines = !twoshot && len * es <= LINES_MAX_NBYTES;
        CHECK(direct_piece_begin(p, v, &s, 2, lines ? 0 : v->buf_nbytes));
        if (lines) {
            direct_lines_write(v, s, in + off * es, len * es);
            CHECK(direct_lines_reduce_all(p, v, s, 0, (char *)a->recvbuff + off * es, len));
            direct_piece_done(v, s, 0);
            continue;
        }
        CHECK(allreduce_piece(p, v, a, s, off, len, zc ? &zref : NULL, twoshot, zc ? &oref : NULL));
    }
    if (zc)
        CHECK(direct_zc_release(p, v, s));
    return chorusSuccess;
}

/* Broadcast: 1 (and the ref) when the root's input can be read in place by the others (it
 * writes none of it: in place, nothing), from zc_bcast_min_nbytes. */
static int root_exposes(const direct_view_t *v, const coll_args_t *a, size_t nbytes, mem_ref_t *ref)
{
    if (v->zc_bcast_min_nbytes == 0 || nbytes < v->zc_bcast_min_nbytes)
        return 0;
    return direct_zc_expose(v, a->sendbuff, nbytes, a->recvbuff == a->sendbuff ? NULL : a->recvbuff,
                            nbytes, ref);
}

/* Broadcast of one slotted piece (algo.h): the root copies its input into its slot and
 * goes on; the others copy it out and publish their done flags in batches where the slots
 * outnumber them. */
static chorusResult_t broadcast_slotted(prims_t *p, const direct_view_t *v, const coll_args_t *a,
                                        size_t slot)
{
    size_t nbytes = a->count * p->esize;
    uint64_t lag = slot_count(v, slot), s;
    CHECK(direct_piece_begin(p, v, &s, lag, slot));
    if (v->rank == a->root) {
        direct_copy_in(p, v, slot_of(v, v->rank, s, slot), a->sendbuff, nbytes);
        direct_slot_ready(v, s);
        if (a->recvbuff != a->sendbuff)
            p->ops->copy(a->recvbuff, a->sendbuff, nbytes);
        direct_piece_done(v, s, 0);
        return chorusSuccess;
    }
    CHECK(direct_wait_flag(p, v, a->root, OFF_READY(s), s, "direct window ready flag"));
    prims_copy_out(p, a->recvbuff, slot_of(v, a->root, s, slot), nbytes);
    direct_piece_done(v, s, lag > DONE_BATCH);
    return chorusSuccess;
}

/* Broadcast by cross-memory attach (as allgather_cma): the root publishes where its input lies,
 * the others copy it from there into their outputs, and the root waits until they have. Where
 * it can write the others' memory, the root shares the copying: its flag's payload says how many
 * bytes at the end (tail, a 64-byte multiple) it writes itself into each other output, at the
 * address each rank publishes in its own ready flag; a rank copies the rest and returns once the
 * root's done flag says the tail is in. The tail is about 1/n of the data in place, 1/(n+1) out
 * of place, where the root then copies its input into its own output too (2 ranks, out of place,
 * four alternated pairs of broadcast_perf -b 256K -e 16M -f 4 -w 10 -n 60 on the AMD VM of
 * 2026-12-07: 1 MiB 54-68 us against 80-97 with the others reading it all, 16 MiB 2.2-3.2 ms
 * against 2.7-3.2, Open MPI 2.1-2.8; four more of -b 16M -e 16M -n 100: 2.4-2.6 against
 * 2.8-3.5). */
static chorusResult_t broadcast_cma(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int n = v->nranks, me = v->rank, root = a->root;
    size_t nbytes = a->count * p->esize;
    uint64_t s;
    CHECK(direct_piece_begin(p, v, &s, 2, 0));
    if (me == root) {
        mem_ref_t ref;
        int zc = root_exposes(v, a, nbytes, &ref);
        size_t tail = 0;
        if (zc) {
            direct_publish_where(v, s, &ref, a->sendbuff, nbytes);
        } else {
            if (v->cma_write != NULL)
                tail = nbytes / (size_t)(a->recvbuff == a->sendbuff ? n : n + 1) & ~(size_t)63;
            mem_ref_t where = {.id = DIRECT_REF_CMA,
                               .addr = (uint64_t)(uintptr_t)a->sendbuff,
                               .offset = tail,
                               .span = nbytes};
            direct_publish_ready(v, s, &where, 0);
        }
        for (int k = 1; tail != 0 && k < n; k++) {
            int r = (root + k) % n;
            mem_ref_t out;
            CHECK(direct_cma_where(p, v, r, s, nbytes, &out));
            CHECK(direct_cma_copy(v, r, s, (char *)a->sendbuff + (nbytes - tail),
                                  out.addr + (nbytes - tail), tail, 1));
            v->cma_writes[CMA_W_BROADCAST]++;
        }
        direct_piece_done(v, s, 0); /* the others may return: their tails are in */
        if (a->recvbuff != a->sendbuff)
            p->ops->copy(a->recvbuff, a->sendbuff, nbytes);
        return direct_zc_release(p, v, s);
    }
    direct_publish_where(v, s, NULL, a->recvbuff, nbytes); /* where the root may write the tail */
    mem_ref_t where;
    CHECK(direct_ready_ref(p, v, root, s, &where));
    if (where.id == DIRECT_REF_CMA)
        CHECK(direct_cma_span(v, root, &where, nbytes));
    size_t tail = where.id == DIRECT_REF_CMA ? (size_t)where.offset : 0;
    if (tail > nbytes)
        return ERR(chorusInternalError, SUB_COLL,
                   "broadcast: root rank %d said it writes %zu bytes of a %zu-byte broadcast", root,
                   tail, nbytes);
    CHECK(direct_read_where(p, v, root, s, a->recvbuff, nbytes - tail, nbytes));
    if (tail != 0)
        CHECK(direct_wait_flag(p, v, root, OFF_DONE, s, "direct window done flag"));
    direct_piece_done(v, s, 0);
    return chorusSuccess;
}

/* A broadcast's piece of len elements from element off as LL words (up to DIRECT_LL_NBYTES): the
 * root writes them and goes on, up to LL_LAG pieces ahead of the slowest reader; the others copy
 * them out. *s_p: the piece's number. lazy: the readers publish their done flags in batches. */
HOT_PATH static inline chorusResult_t broadcast_ll(prims_t *p, const direct_view_t *v,
                                                   const coll_args_t *a, size_t off, size_t len,
                                                   int lazy, uint64_t *s_p)
{
    size_t es = p->esize;
    const char *in = (const char *)a->sendbuff + off * es;
    char *out = (char *)a->recvbuff + off * es;
    CHECK(direct_piece_begin(p, v, s_p, LL_LAG, 0));
    uint64_t s = *s_p;
    if (v->rank == a->root) {
        direct_ll_write(v, s, in, len * es);
        if (out != in)
            p->ops->copy(out, in, len * es);
        direct_piece_done(v, s, 0);
        return chorusSuccess;
    }
    CHECK(direct_ll_read(p, v, a->root, s, out, len * es));
    /* The root runs ahead: ask for a later piece's words now (one call's latency between the
     * cores hides behind this rank's next calls). */
    fifo_prefetch_read(ll_slot(v, a->root, s + LL_PREFETCH, len * es),
                       LL_WORDS(len * es) * sizeof(uint64_t));
    direct_piece_done(v, s, lazy);
    return chorusSuccess;
}

HOT_PATH static chorusResult_t broadcast(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int me = v->rank, root = a->root;
    size_t es = p->esize, nbytes = a->count * es;
    const char *in = a->sendbuff;
    mem_ref_t zref;
    uint64_t s = 0;
    int lazy = nbytes <= DIRECT_LL_NBYTES && nbytes < v->zc_min_nbytes;
    /* A call of one LL piece goes straight to it, past the cuts below (none applies to it
     * unless zero-copy was set to start that low). */
    if (a->count != 0 && nbytes <= DIRECT_LL_NBYTES &&
        !(me == root && root_exposes(v, a, nbytes, &zref)))
        return broadcast_ll(p, v, a, 0, a->count, lazy, &s);
    if (direct_cma_call(v, nbytes, v->cma_bcast_min_nbytes))
        return broadcast_cma(p, v, a);
    size_t slot = direct_slot_nbytes(v, nbytes);
    if (slot != 0)
        return broadcast_slotted(p, v, a, slot);
    int zc = me == root && root_exposes(v, a, nbytes, &zref);
    size_t per = v->buf_nbytes / es;
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        if (len * es <= DIRECT_LL_NBYTES) {
            CHECK(broadcast_ll(p, v, a, off, len, lazy, &s));
            continue;
        }
        CHECK(direct_piece_begin(p, v, &s, 2, v->buf_nbytes));
        char *out = (char *)a->recvbuff + off * es;
        if (me == root) {
            direct_publish_input(p, v, s, zc ? &zref : NULL, in, off, len);
            if (out != in + off * es)
                prims_copy_out(p, out, in + off * es, len * es);
        } else {
            char *src = NULL;
            CHECK(direct_wait_flag(p, v, root, OFF_READY(s), s, "direct window ready flag"));
            CHECK(direct_input_of(v, root, s, NULL, len * es, &src));
            prims_copy_out(p, out, src, len * es);
        }
        direct_piece_done(v, s, 0);
    }
    if (zc)
        CHECK(direct_zc_release(p, v, s));
    return chorusSuccess;
}

/* Reduce of one slotted piece (algo.h): a non-root copies its input into its slot and
 * goes on; the root reduces its own input with the others' slots in rank order and publishes its
 * done flag in batches where the slots outnumber them. */
static chorusResult_t reduce_slotted(prims_t *p, const direct_view_t *v, const coll_args_t *a,
                                     size_t slot)
{
    int n = v->nranks, me = v->rank;
    size_t nbytes = a->count * p->esize;
    uint64_t lag = slot_count(v, slot), s;
    char *srcs[DIRECT_MAX_RANKS];
    CHECK(direct_piece_begin(p, v, &s, lag, slot));
    if (me != a->root) {
        direct_copy_in(p, v, slot_of(v, me, s, slot), a->sendbuff, nbytes);
        direct_slot_ready(v, s);
        direct_piece_done(v, s, 0);
        return chorusSuccess;
    }
    /* In place, the reduction's first stores would overwrite this rank's input before it is
     * read (unless it comes first): read it from a copy in its slot then. */
    char *own = (char *)a->sendbuff;
    if (a->recvbuff == a->sendbuff && me != 0) {
        own = slot_of(v, me, s, slot);
        p->ops->copy(own, a->sendbuff, nbytes);
    }
    CHECK(direct_wait_all(p, v, OFF_READY(s), s, "direct window ready flag"));
    for (int r = 0; r < n; r++)
        srcs[r] = r == me ? own : slot_of(v, r, s, slot);
    direct_reduce_list(p, a->recvbuff, srcs, n, a->count);
    direct_piece_done(v, s, lag > DONE_BATCH);
    return chorusSuccess;
}

HOT_PATH static chorusResult_t reduce(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int n = v->nranks, me = v->rank, root = a->root;
    size_t es = p->esize, per = v->buf_nbytes / es, nbytes = a->count * es;
    const char *in = a->sendbuff;
    char *srcs[DIRECT_MAX_RANKS];
    mem_ref_t zref;
    size_t slot = direct_slot_nbytes(v, nbytes);
    if (slot != 0)
        return reduce_slotted(p, v, a, slot);
    int zc = direct_zc_expose(v, in, nbytes, me == root ? a->recvbuff : NULL, nbytes, &zref);
    int lazy = me == root && nbytes <= DIRECT_LL_NBYTES && nbytes < v->zc_min_nbytes;
    uint64_t s = 0;
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        if (len * es <= DIRECT_LL_NBYTES) {
            /* A non-root writes and goes on: up to LL_LAG pieces ahead of the root. */
            CHECK(direct_piece_begin(p, v, &s, LL_LAG, 0));
            direct_ll_write(v, s, in + off * es, len * es);
            if (me == root) {
                CHECK(direct_ll_reduce_all(p, v, s, (char *)a->recvbuff + off * es, len));
                for (int r = 0; r < n; r++)
                    if (r != me)
                        fifo_prefetch_read(ll_slot(v, r, s + LL_PREFETCH, len * es),
                                           LL_WORDS(len * es) * sizeof(uint64_t));
            }
            direct_piece_done(v, s, lazy);
            continue;
        }
        CHECK(direct_piece_begin(p, v, &s, 2, v->buf_nbytes));
        direct_publish_input(p, v, s, zc ? &zref : NULL, in, off, len);
        if (me == root) {
            CHECK(direct_wait_all(p, v, OFF_READY(s), s, "direct window ready flag"));
            for (int r = 0; r < n; r++)
                CHECK(direct_input_of(v, r, s, zc ? in + off * es : NULL, len * es, &srcs[r]));
            direct_reduce_list(p, (char *)a->recvbuff + off * es, srcs, n, len);
        }
        direct_piece_done(v, s, 0);
    }
    if (zc)
        CHECK(direct_zc_release(p, v, s));
    return chorusSuccess;
}

/*
 * All-gather by cross-memory attach (from cma_min_nbytes a rank): one piece, no window buffer.
 * Where every rank can write the others' memory (cma_write), each publishes where its output
 * lies, copies its own part, and writes its input into every other output at its place
 * (process_vm_writev); else each publishes where its input lies (a chorusMemAlloc ref where it
 * has one, else its address) and copies each peer's part straight from the peer's memory
 * (cma_read). One copy of each part where the window takes two (in, then out from another
 * core's cache). Every rank then waits until the others are through (done flags). Writing beats
 * reading where the job writes its input between calls, as training does: no peer has read it,
 * so the job's write takes no lines back (Intel VM, 2 ranks, all_gather_perf --rewrite 1, two
 * runs: 256 KiB 11.2-13.1 us against 23.8-25.0 by reading, 1 MiB 51.9-58.5 against 95.1-98.5,
 * Open MPI 113.9-118.7; even from 4 MiB); without rewrites too (1 MiB 29.0-29.3 against 42.0-43.9).
 * 2 ranks, 64 KiB a rank: the two copies of the window path took 5.7 and 5.4 us here (into a
 * window the peer read last, 11.6 GB/s; out of the peer's fresh lines, 12.2), a local copy 1.7.
 */
static chorusResult_t allgather_cma(prims_t *p, const direct_view_t *v, const coll_args_t *a,
                                    int zc, const mem_ref_t *zref)
{
    int n = v->nranks, me = v->rank;
    size_t nbytes = a->count * p->esize;
    const char *in = a->sendbuff;
    char *own = (char *)a->recvbuff + (size_t)me * nbytes;
    uint64_t s;
    CHECK(direct_piece_begin(p, v, &s, 2, 0));
    if (v->cma_write != NULL) {
        mem_ref_t where = {.id = DIRECT_REF_CMA,
                           .addr = (uint64_t)(uintptr_t)a->recvbuff,
                           .span = (size_t)n * nbytes};
        direct_publish_ready(v, s, &where, 0);
        if (own != in)
            prims_copy_out(p, own, in, nbytes);
        for (int k = 1; k < n; k++) {
            int r = (me + k) % n;
            CHECK(direct_cma_where(p, v, r, s, (size_t)n * nbytes, &where));
            CHECK(
                direct_cma_copy(v, r, s, (void *)in, where.addr + (size_t)me * nbytes, nbytes, 1));
            v->cma_writes[CMA_W_ALLGATHER]++;
        }
        direct_piece_done(v, s, 0);
        return direct_zc_release(p, v, s);
    }
    direct_publish_where(v, s, zc ? zref : NULL, in, nbytes);
    for (int k = 0; k < n; k++) {
        int r = (me + k) % n;
        char *dst = (char *)a->recvbuff + (size_t)r * nbytes;
        if (r != me)
            CHECK(direct_read_where(p, v, r, s, dst, nbytes, nbytes));
        else if (dst != in)
            prims_copy_out(p, dst, in, nbytes);
    }
    direct_piece_done(v, s, 0);
    return direct_zc_release(p, v, s);
}

/* All-gather by push, every rank's output chorusMemAlloc memory (a vote said so): each rank
 * publishes where its output lies, copies its input into every rank's output at its place, and
 * returns once every peer has written into its own (their done flags). No rank reads another's
 * input, so the owner's next write of it takes no line back from a peer's cache (plain stores
 * pay 5-6x for that here: perftests/README.md, "Why: the write that takes the lines back"); the
 * copies into a peer's output go in pieces of the window's size, which glibc's memcpy writes with
 * `rep movsb` on the AMD VM (whole lines, taken back from the peer at no extra cost). */
static chorusResult_t allgather_push(prims_t *p, const direct_view_t *v, const coll_args_t *a,
                                     const mem_ref_t *oref)
{
    int n = v->nranks, me = v->rank;
    size_t nbytes = a->count * p->esize;
    const char *in = a->sendbuff;
    uint64_t s;
    CHECK(direct_piece_begin(p, v, &s, 2, 0));
    direct_publish_ready(v, s, oref, 0);
    for (int k = 1; k <= n; k++) { /* the peers first: they wait for this rank's writes */
        int r = (me + k) % n;
        char *dst = (char *)a->recvbuff + (size_t)me * nbytes;
        if (r != me) {
            CHECK(direct_wait_flag(p, v, r, OFF_READY(s), s, "direct window ready flag"));
            CHECK(direct_out_of(v, r, &hdr(v, r)->ready[s & 1], (size_t)me * nbytes, nbytes, &dst));
            (*v->zc_pushes)++;
        }
        if (dst != in)
            copy_pieces(p, v, dst, in, nbytes);
    }
    direct_piece_done(v, s, 0);
    return direct_zc_release(p, v, s);
}

/* All-gather through the window buffers, in pieces of one buffer (zc: this rank's input is
 * read in place, at zref). */
HOT_PATH static chorusResult_t allgather_win(prims_t *p, const direct_view_t *v,
                                             const coll_args_t *a, int zc, const mem_ref_t *zref)
{
    int n = v->nranks, me = v->rank;
    size_t es = p->esize, per = v->buf_nbytes / es;
    const char *in = a->sendbuff;
    uint64_t s = 0;
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        int lines = len * es <= LINES_MAX_NBYTES;
        CHECK(direct_piece_begin(p, v, &s, 2, lines ? 0 : v->buf_nbytes));
        if (lines) {
            direct_lines_write(v, s, in + off * es, len * es);
            for (int k = 0; k < n; k++) {
                int r = (me + k) % n;
                char *dst = (char *)a->recvbuff + ((size_t)r * a->count + off) * es;
                if (r == me) {
                    if (dst != in + off * es)
                        memcpy(dst, in + off * es, len * es);
                } else {
                    CHECK(direct_lines_read(p, v, r, s, 0, dst, len * es));
                }
            }
            direct_piece_done(v, s, 0);
            continue;
        }
        /* Out of place, a streamed piece goes into the output and the window from one read of
         * the input (copy_dup): 2 ranks, all_gather_perf -b 128K -e 4M -f 2 -w 50 -n 500, three
         * rounds, 1 MiB 27.7-28.9 us against 36.1-40.1, 4 MiB 116-124 against 141-148. */
        char *own = (char *)a->recvbuff + ((size_t)me * a->count + off) * es;
        int own_done = 0;
        if (!zc && v->stream_win_nbytes != 0 && len * es >= v->stream_win_nbytes) {
            if (p->ops->copy_dup != NULL && !p->stream_out && own != in + off * es) {
                p->ops->copy_dup(own, buf(v, me, s), in + off * es, len * es);
                own_done = 1;
            } else {
                p->ops->copy_out(buf(v, me, s), in + off * es, len * es);
            }
            direct_publish_ready(v, s, NULL, off * es);
        } else {
            direct_publish_input(p, v, s, zc ? zref : NULL, in, off, len);
        }
        for (int k = own_done; k < n; k++) {
            int r = (me + k) % n;
            char *src = NULL;
            if (r != me)
                CHECK(direct_wait_flag(p, v, r, OFF_READY(s), s, "direct window ready flag"));
            /* This rank's own part from its input, not from its window: in place that is
             * the output itself (no copy; 2 ranks, 16 MiB: 502-521 us against 669-672), and
             * its lines are the ones this rank just read. */
            CHECK(direct_input_of(v, r, s, in + off * es, len * es, &src));
            char *dst = (char *)a->recvbuff + ((size_t)r * a->count + off) * es;
            if (dst != src)
                prims_copy_out(p, dst, src, len * es);
        }
        direct_piece_done(v, s, 0);
    }
    if (zc)
        CHECK(direct_zc_release(p, v, s));
    return chorusSuccess;
}

HOT_PATH static chorusResult_t allgather(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int n = v->nranks;
    size_t nbytes = a->count * p->esize;
    const char *in = a->sendbuff;
    mem_ref_t zref;
    /* The vote's question depends only on what every rank shares (the size, the settings). */
    if (v->zc_find != NULL && v->zc_push_min_nbytes != 0 &&
        nbytes * (size_t)n >= v->zc_push_min_nbytes && nbytes > LINES_MAX_NBYTES) {
        int all = 0;
        CHECK(direct_vote(p, v, -1, v->zc_find(a->recvbuff, nbytes * (size_t)n, &zref), &all));
        if (all)
            return allgather_push(p, v, a, &zref);
    }
    int zc = direct_zc_expose(v, in, nbytes, a->recvbuff, nbytes * (size_t)n, &zref);
    int k = direct_adapt_class(v, nbytes);
    if (k < 0)
        return direct_cma_call(v, nbytes, v->cma_min_nbytes) ? allgather_cma(p, v, a, zc, &zref)
                                                             : allgather_win(p, v, a, zc, &zref);
    int cma = direct_adapt_begin(v, k);
    int64_t t0 = v->rank == 0 ? fifo_now_ns() : 0;
    CHECK(cma ? allgather_cma(p, v, a, zc, &zref) : allgather_win(p, v, a, zc, &zref));
    direct_adapt_end(v, k, cma, in == (const char *)a->recvbuff + (size_t)v->rank * nbytes, t0);
    return chorusSuccess;
}

/* Reduce-scatter: 1 (and the ref) when this rank's whole input can be read in place by the
 * others (its output apart from it). */
static int rs_exposes(const direct_view_t *v, const coll_args_t *a, size_t es, mem_ref_t *ref)
{
    return direct_zc_expose(v, a->sendbuff, a->count * (size_t)v->nranks * es, a->recvbuff,
                            a->count * es, ref);
}

HOT_PATH static chorusResult_t reducescatter(prims_t *p, const direct_view_t *v,
                                             const coll_args_t *a)
{
    int n = v->nranks, me = v->rank;
    size_t es = p->esize, per = v->buf_nbytes / es / (size_t)n;
    const char *in = a->sendbuff;
    char *srcs[DIRECT_MAX_RANKS];
    mem_ref_t zref;
    int zc = rs_exposes(v, a, es, &zref);
    int own_in_place = (const char *)a->recvbuff == in + (size_t)me * a->count * es;
    if (per == 0)
        return ERR(chorusInternalError, SUB_COLL,
                   "direct reduce-scatter: a window of %zu bytes holds no element for %d ranks",
                   v->buf_nbytes, n);
    uint64_t s = 0;
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per;
        int lines = (size_t)(n - 1) * len * es <= LINES_MAX_NBYTES;
        CHECK(direct_piece_begin(p, v, &s, 2, lines ? 0 : v->buf_nbytes));
        if (lines) {
            /* The parts of the others only, in rank order; rank i reduces part i with its own
             * from its input. */
            _Alignas(64) char tmp[LINES_MAX_NBYTES];
            for (int r = 0, k = 0; r < n; r++)
                if (r != me)
                    memcpy(tmp + (size_t)k++ * len * es,
                           (const char *)a->sendbuff + ((size_t)r * a->count + off) * es, len * es);
            direct_lines_write(v, s, tmp, (size_t)(n - 1) * len * es);
            CHECK(direct_lines_reduce_part(
                p, v, s, (const char *)a->sendbuff + ((size_t)me * a->count + off) * es,
                (char *)a->recvbuff + off * es, len));
            direct_piece_done(v, s, 0);
            continue;
        }
        /* Part r of this rank's input lands at r * len in its buffer (its own part is read from
         * its input, unless the output is that part: in place); zero-copy: the others read part
         * r, piece s, in place (the ready flag names the input's start). Streamed where the
         * call's plan says so (direct_copy_in). */
        for (int r = 0; !zc && r < n; r++)
            if (r != me || own_in_place)
                direct_window_copy(p, p->stream_send, buf(v, me, s) + (size_t)r * len * es,
                                   in + ((size_t)r * a->count + off) * es, len * es);
        direct_publish_ready(v, s, zc ? &zref : NULL, 0);
        CHECK(direct_wait_all(p, v, OFF_READY(s), s, "direct window ready flag"));
        size_t mine = ((size_t)me * a->count + off) * es;
        for (int r = 0; r < n; r++) {
            const char *src = NULL;
            if (r == me && !own_in_place)
                src = in + mine;
            else if (r != me)
                CHECK(direct_ref_of(v, r, &hdr(v, r)->ready[s & 1], mine, len * es, &src));
            srcs[r] = src != NULL ? (char *)src : buf(v, r, s) + (size_t)me * len * es;
        }
        direct_reduce_list(p, (char *)a->recvbuff + off * es, srcs, n, len);
        direct_piece_done(v, s, 0);
    }
    if (zc)
        CHECK(direct_zc_release(p, v, s));
    return chorusSuccess;
}

/*
 * All-to-all: block r of this rank's input goes to rank r, block r of its output comes from rank
 * r (each block count elements; the blocks cut into pieces as the reduce-scatter's parts). The
 * same round as reduce-scatter without the reduction: tagged lines where the others' blocks fit
 * them (rank w's lines hold block j at index j - (j > w)), else each rank's blocks in its buffer
 * (zero-copy: read in place from its chorusMemAlloc input). In place, a rank's blocks are in its
 * lines or buffer before it overwrites them, and its own block stays where it is.
 */
static chorusResult_t alltoall(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    int n = v->nranks, me = v->rank;
    size_t es = p->esize, per = v->buf_nbytes / es / (size_t)n, total = a->count * (size_t)n * es;
    const char *in = a->sendbuff;
    char *out = a->recvbuff;
    mem_ref_t zref;
    int zc = direct_zc_expose(v, in, total, out, total, &zref);
    if (per == 0)
        return ERR(chorusInternalError, SUB_COLL,
                   "direct all-to-all: a window of %zu bytes holds no element for %d ranks",
                   v->buf_nbytes, n);
    uint64_t s = 0;
    for (size_t off = 0; off < a->count; off += per) {
        size_t len = a->count - off < per ? a->count - off : per, nbytes = len * es;
        size_t mine = ((size_t)me * a->count + off) * es;
        int lines = (size_t)(n - 1) * nbytes <= LINES_MAX_NBYTES;
        CHECK(direct_piece_begin(p, v, &s, 2, lines ? 0 : v->buf_nbytes));
        if (lines) {
            _Alignas(64) char tmp[LINES_MAX_NBYTES];
            for (int r = 0, k = 0; r < n; r++)
                if (r != me)
                    memcpy(tmp + (size_t)k++ * nbytes, in + ((size_t)r * a->count + off) * es,
                           nbytes);
            direct_lines_write(v, s, tmp, (size_t)(n - 1) * nbytes);
        } else {
            for (int r = 0; !zc && r < n; r++)
                if (r != me)
                    p->ops->copy(buf(v, me, s) + (size_t)r * nbytes,
                                 in + ((size_t)r * a->count + off) * es, nbytes);
            direct_publish_ready(v, s, zc ? &zref : NULL, 0);
        }
        if (out + mine != in + mine)
            memcpy(out + mine, in + mine, nbytes);
        for (int k = 1; k < n; k++) {
            int r = (me + k) % n;
            char *dst = out + ((size_t)r * a->count + off) * es;
            if (lines) {
                CHECK(direct_lines_read(p, v, r, s, (size_t)(me - (me > r)) * nbytes, dst, nbytes));
                continue;
            }
            const char *src = NULL;
            CHECK(direct_wait_flag(p, v, r, OFF_READY(s), s, "direct window ready flag"));
            CHECK(direct_ref_of(v, r, &hdr(v, r)->ready[s & 1], mine, nbytes, &src));
            prims_copy_out(p, dst, src != NULL ? src : buf(v, r, s) + (size_t)me * nbytes, nbytes);
        }
        direct_piece_done(v, s, 0);
    }
    if (zc)
        CHECK(direct_zc_release(p, v, s));
    return chorusSuccess;
}

HOT_PATH chorusResult_t direct_program(prims_t *p, const direct_view_t *v, const coll_args_t *a,
                                       int twoshot)
{
    if (v->nranks > DIRECT_MAX_RANKS)
        return ERR(chorusInternalError, SUB_COLL, "direct algorithm for %d ranks (at most %d)",
                   v->nranks, DIRECT_MAX_RANKS);
    chorusResult_t res;
    switch (a->kind) {
    case COLL_ALLREDUCE:
        res = allreduce(p, v, a, twoshot, 0);
        break;
    case COLL_BROADCAST:
        res = broadcast(p, v, a);
        break;
    case COLL_REDUCE:
        res = reduce(p, v, a);
        break;
    case COLL_ALLGATHER:
        res = allgather(p, v, a);
        break;
    case COLL_REDUCESCATTER:
        res = reducescatter(p, v, a);
        break;
    case COLL_ALLTOALL:
        res = alltoall(p, v, a);
        break;
    default:
        return ERR(chorusInternalError, SUB_COLL, "no direct program for collective kind %d",
                   (int)a->kind);
    }
    /* Leaving with an error (an abort, a timeout): no peer may copy into or out of this rank's
     * buffers by cross-memory attach once it returns. */
    if (res != chorusSuccess && v->cma_read != NULL)
        direct_cma_close(v, *v->seq);
    return res;
}

chorusResult_t direct_zc_vote(prims_t *p, const direct_view_t *v, const coll_args_t *a, int *won_p)
{
    mem_ref_t zref, oref;
    size_t nbytes = a->count * p->esize;
    if (a->kind == COLL_BROADCAST) /* only the root's input matters: the root decides */
        return direct_vote(p, v, a->root, v->rank == a->root && root_exposes(v, a, nbytes, &zref),
                           won_p);
    int mine = a->kind == COLL_ALLREDUCE       ? expose_both(v, a, nbytes, &zref, &oref)
               : a->kind == COLL_REDUCESCATTER ? rs_exposes(v, a, p->esize, &zref)
                                               : 0;
    return direct_vote(p, v, -1, mine, won_p);
}

chorusResult_t direct_allreduce_zc(prims_t *p, const direct_view_t *v, const coll_args_t *a)
{
    if (v->nranks > DIRECT_MAX_RANKS || a->kind != COLL_ALLREDUCE)
        return ERR(chorusInternalError, SUB_COLL,
                   "direct zero-copy all-reduce for %d ranks (at most %d), collective kind %d",
                   v->nranks, DIRECT_MAX_RANKS, (int)a->kind);
    return allreduce(p, v, a, 1, 1);
}
