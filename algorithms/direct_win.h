/*
 * direct_win.h: the window protocol the direct algorithms (direct.c) are written with, kept in
 * direct_win.c: sequence flags and their waits, done flags published in batches, LL words, and
 * zero-copy publishing of a rank's input. Private to algorithms/direct*.c.
 */
#ifndef CHORUS_DIRECT_WIN_H
#define CHORUS_DIRECT_WIN_H

#include <stddef.h>

#include "algo.h"

static inline direct_hdr_t *hdr(const direct_view_t *v, int r)
{
    return (direct_hdr_t *)(void *)v->base[r];
}

static inline char *buf(const direct_view_t *v, int r, uint64_t s)
{
    return v->base[r] + DIRECT_HDR_NBYTES + (size_t)(s & 1) * v->buf_nbytes;
}

/* The slot size for a broadcast or reduce of nbytes (one piece, above DIRECT_LL_NBYTES); 0 when
 * such a call is not slotted (algo.h, direct_slot_size; zero-copy's calls are not either). The
 * same on every rank (it depends on what they agreed). */
static inline size_t direct_slot_nbytes(const direct_view_t *v, size_t nbytes)
{
    return direct_slot_size(nbytes, v->buf_nbytes, v->zc_find != NULL ? v->zc_min_nbytes : 0);
}

/* How many slots of slot bytes the two buffers hold (at most DIRECT_LL_SLOTS). */
static inline uint64_t slot_count(const direct_view_t *v, size_t slot)
{
    size_t k = 2 * v->buf_nbytes / slot;
    return k < DIRECT_LL_SLOTS ? k : DIRECT_LL_SLOTS;
}

/* Rank r's slot of piece s. */
static inline char *slot_of(const direct_view_t *v, int r, uint64_t s, size_t slot)
{
    return v->base[r] + DIRECT_HDR_NBYTES + (size_t)(s % slot_count(v, slot)) * slot;
}

/* A copy into this rank's window with streaming stores or not, timed where the call's plan
 * asks (p->win_copy_ns): the plan weighs the two ways by what they cost the writer (src/enqueue.c
 * run_direct). */
static inline void direct_window_copy(prims_t *p, int stream, void *dst, const void *src,
                                      size_t nbytes)
{
    if (p->win_copy_ns < 0) {
        memops_copy(p->ops, stream, dst, src, nbytes);
        return;
    }
    int64_t t0 = fifo_now_ns();
    memops_copy(p->ops, stream, dst, src, nbytes);
    p->win_copy_ns += fifo_now_ns() - t0;
}

/* A copy into this rank's slot, which a peer read when the slots last came round: with
 * streaming stores, which take no line back from the peer's cache, where the call chose them
 * (p->stream_send: CHORUS_WINDOW_ADAPT, src/enqueue.c run_direct, which says when) and from
 * stream_slot_nbytes. On the AMD VM of 2026-12-07 a slotted 2-rank broadcast's root writing plainly
 * ran 4-7x slower in some runs (64 KiB 25-37 us, 256 KiB 56-116, Open MPI 8 and 21-30 in the same
 * runs) and streamed in none (4.1-5.9 and 16.8-20.8), while in the others the two were even from 8
 * KiB (64 KiB 3.9-6.2 plain, 4.2-5.9 streamed; eight alternated pairs of broadcast_perf -b 8K -e
 * 256K -f 2 -w 20 -n 300 with CHORUS_CMA_MIN=0); at 4 KiB streamed 0.42-0.54 us against 0.35-0.90,
 * at 512 B-2 KiB plain stores won (0.14-0.24 against 0.25-0.34). */
static inline void direct_copy_in(prims_t *p, const direct_view_t *v, void *dst, const void *src,
                                  size_t nbytes)
{
    direct_window_copy(
        p, p->stream_send || (v->stream_slot_nbytes != 0 && nbytes >= v->stream_slot_nbytes), dst,
        src, nbytes);
}

#define OFF_READY(s) (offsetof(direct_hdr_t, ready) + (size_t)((s)&1) * sizeof(fifo_flag_t))
#define OFF_REDUCED offsetof(direct_hdr_t, reduced)
#define OFF_DONE offsetof(direct_hdr_t, done)

#define LL_LAG DIRECT_LL_SLOTS
#define LL_WORDS(nbytes) (((nbytes) + 3) / 4)
/* How many pieces ahead a rank that only reads LL pieces prefetches the writer's slot. */
#define LL_PREFETCH 4

/* Rank r's LL slot of piece s of nbytes (up to DIRECT_LL_NBYTES): in ll_small up to
 * DIRECT_LL_SMALL_NBYTES, else in ll (algo.h). Both rings are indexed by the piece number, so a
 * piece's slot is free once its readers are done with the piece DIRECT_LL_SLOTS before it,
 * whichever ring that one used. */
static inline uint64_t *ll_slot(const direct_view_t *v, int r, uint64_t s, size_t nbytes)
{
    direct_hdr_t *h = hdr(v, r);
    return nbytes <= DIRECT_LL_SMALL_NBYTES ? h->ll_small[s % DIRECT_LL_SLOTS]
                                            : h->ll[s % DIRECT_LL_SLOTS];
}
/* All-reduce, all-gather and reduce-scatter pieces up to 2 lines go as tagged lines (all-gather:
 * this rank's piece; reduce-scatter: the others' parts, its own read from its input).
 * 2 ranks, all-reduce, interleaved runs: 8 B 0.41-0.44 us against 0.54-0.56 in a ready flag's
 * payload (the line the reader polls, which the writer also reads for sleepers); 64 B 0.48-0.51
 * against 0.57-0.60 as LL words.
 * Up to 5 lines, as they were, 128 B and 256 B ran 0.47-0.55 and 0.53-0.57 us against 0.61-0.64
 * and 0.59-0.67 through the window buffer on an earlier VM; on the AMD VM of 2026-12-07 (2 ranks,
 * all_reduce_perf -b 64 -e 1024 -f 2 -w 2000 -n 20000, six rounds taking turns with 5 lines)
 * the buffer won: 128 B 0.16-0.24 us against 0.18-0.27, 256 B 0.17-0.26 against 0.24-0.36 (Open
 * MPI about 0.35 there: the row stood at 0.84-1.0 of it); all-gathers of 256 B a rank 0.18-0.22
 * against 0.20-0.25 and reduce-scatters 0.21-0.24 against 0.24-0.30, those of 128 B a rank even
 * (0.17-0.20 against 0.17-0.19, 0.22-0.23 against 0.21-0.22); 4 ranks even (128-256 B about 3.1
 * and 3.3 us both ways, six rounds).
 * 2 ranks, perftests with -n 20000, three rounds alternated: all-gather 8-128 B 0.38-0.40 us
 * against 0.44-0.53 inline or as LL words; reduce-scatter 16-512 B 0.37-0.50 against 0.46-0.64
 * with every part in the lines or through the buffer (earlier VM). */
#define LINES_MAX_NBYTES (2 * DIRECT_LINE_DATA)
_Static_assert(LINES_MAX_NBYTES <= DIRECT_LINES_NBYTES, "a lines piece fits the lines region");

/* A rank that publishes its done flags lazily does so every DONE_BATCH pieces at least (and
 * before any wait that is not over at once; direct_win.c): lazy only where the writers' lag is
 * longer. */
#define DONE_BATCH 16
/* This rank has read everything it reads of piece s: publish it now, or (lazy) batched. */
void direct_piece_done(const direct_view_t *v, uint64_t s, int lazy);
/* Wait until rank r's flag (ready, reduced or done, at offset off in its header) reaches s. */
chorusResult_t direct_wait_flag(prims_t *p, const direct_view_t *v, int r, size_t off, uint64_t s,
                                const char *what);
/* Wait for every other rank's flag, starting after this rank (spreads who waits on whom). */
chorusResult_t direct_wait_all(prims_t *p, const direct_view_t *v, size_t off, uint64_t s,
                               const char *what);
/* Start piece s: wait until every rank has finished reading piece s - lag, whose buffer (lag 2:
 * s % 2), slot (lag: the slot count) or LL slot (lag DIRECT_LL_SLOTS: s % DIRECT_LL_SLOTS)
 * piece s reuses. win: how piece s cuts the buffers (its slot size; v->buf_nbytes where it may
 * use them whole; 0 where it uses none of them): where that differs from the last piece that
 * used them, piece s waits until every rank has finished piece s - 1 (its region may overlap
 * any earlier piece's). A done flag read once covers the pieces it is ahead by: most calls read
 * none. */
chorusResult_t direct_piece_begin(prims_t *p, const direct_view_t *v, uint64_t *s_p, uint64_t lag,
                                  size_t win);
/* 1 when a call moving nbytes a rank, from min bytes (v->cma_min_nbytes, or the broadcasts'),
 * reads the peers' memory by cross-memory attach (direct_view_t.cma_read): the same answer on
 * every rank (the size and what they agreed). */
static inline int direct_cma_call(const direct_view_t *v, size_t nbytes, size_t min)
{
    return v->cma_read != NULL && min != 0 && nbytes >= min && nbytes > DIRECT_LL_NBYTES &&
           nbytes > LINES_MAX_NBYTES;
}
/* All-gathers choosing their path at run time (direct_adapt.c): the size class of a call of
 * nbytes a rank, or -1 where the call does not choose (the same on every rank). */
int direct_adapt_class(const direct_view_t *v, size_t nbytes);
/* At a choosing call's start, every rank: take up rank 0's plan where it holds from this call;
 * 1: this call reads by cross-memory attach. */
int direct_adapt_begin(const direct_view_t *v, int k);
/* At its end, every rank (rank 0 times it from t0, fifo_now_ns, and may publish a plan). */
void direct_adapt_end(const direct_view_t *v, int k, int cma, int in_place, int64_t t0);
/* Set this rank's ready flag of slotted piece s (no payload: see above). */
void direct_slot_ready(const direct_view_t *v, uint64_t s);
/* Write nbytes from src as LL words of piece s; then the ready flag. */
void direct_ll_write(const direct_view_t *v, uint64_t s, const char *src, size_t nbytes);
/* Read nbytes of rank r's LL words of piece s into dst: passes over the words until all carry s,
 * then sleeps on r's ready flag (set after them). */
chorusResult_t direct_ll_read(prims_t *p, const direct_view_t *v, int r, uint64_t s, void *dst,
                              size_t nbytes);
/* Write src[0, nbytes) (up to DIRECT_LINES_NBYTES) as piece s's tagged lines (no ready flag:
 * readers wait on the lines; their sleepers are woken). */
void direct_lines_write(const direct_view_t *v, uint64_t s, const char *src, size_t nbytes);
/* Copy bytes [first, first + nbytes) of rank r's tagged lines of piece s into dst: passes over
 * the lines that hold them until all carry s, then waits on the last one's number. */
chorusResult_t direct_lines_read(prims_t *p, const direct_view_t *v, int r, uint64_t s,
                                 size_t first, void *dst, size_t nbytes);
/* out = tagged-line input of rank 0 op rank 1 op ... (rank order), each from byte first;
 * avg's division last. */
chorusResult_t direct_lines_reduce_all(prims_t *p, const direct_view_t *v, uint64_t s, size_t first,
                                       void *out, size_t count);
/* Reduce-scatter as tagged lines (each rank's lines hold the others' parts, part j of writer w at
 * index j - (j > w)): out = part of this rank, reduced in rank order with its own from own. */
chorusResult_t direct_lines_reduce_part(prims_t *p, const direct_view_t *v, uint64_t s,
                                        const void *own, void *out, size_t count);
/* out = LL input of rank 0 op rank 1 op ... (rank order); avg's division last. */
chorusResult_t direct_ll_reduce_all(prims_t *p, const direct_view_t *v, uint64_t s, void *out,
                                    size_t count);
/* Zero-copy: 1 (and *ref) when this rank's input in[0, nbytes) can be read in place by its
 * peers: it lies in a chorusMemAlloc region and this rank writes none of it during the call (out,
 * out_nbytes: what it writes; NULL: nothing). */
int direct_zc_expose(const direct_view_t *v, const void *in, size_t nbytes, const void *out,
                     size_t out_nbytes, mem_ref_t *ref);
/* Publish this rank's input of piece s, len elements from element off of in: in place at ref
 * (zero-copy), or copied into its window buffer (ref NULL). */
void direct_publish_input(prims_t *p, const direct_view_t *v, uint64_t s, const mem_ref_t *ref,
                          const char *in, size_t off, size_t len);
/* Rank r's input of piece s, nbytes, once its ready flag is seen: its window buffer, or its own
 * memory read in place (this rank's: mine, when it exposed it). */
chorusResult_t direct_input_of(const direct_view_t *v, int r, uint64_t s, const char *mine,
                               size_t nbytes, char **src);
/* Cross-memory attach: publish where this rank's memory for piece s lies (ref: a chorusMemAlloc
 * region; NULL: span bytes at in, read or written by cross-memory attach). */
void direct_publish_where(const direct_view_t *v, uint64_t s, const mem_ref_t *ref, const void *in,
                          size_t span);
/* Rank r's ready flag of piece s seen, the mem_ref_t in its payload into *ref (where r's
 * memory lies: direct_publish_where, direct_publish_ready). */
chorusResult_t direct_ready_ref(prims_t *p, const direct_view_t *v, int r, uint64_t s,
                                mem_ref_t *ref);
/* Copy the first nbytes of rank r's input of piece s (published by direct_publish_where) into dst
 * once its ready flag is seen; span: the bytes this rank's call has there (direct_cma_span). */
chorusResult_t direct_read_where(prims_t *p, const direct_view_t *v, int r, uint64_t s, void *dst,
                                 size_t nbytes, size_t span);
/* Cross-memory attach: an error unless rank r's ref (from its ready flag) names memory by
 * address (DIRECT_REF_CMA) with the span this rank's call has there (mem_ref_t). */
chorusResult_t direct_cma_span(const direct_view_t *v, int r, const mem_ref_t *ref, size_t span);
/* Rank r's ready flag of piece s seen, its ref into *ref, checked by direct_cma_span. */
chorusResult_t direct_cma_where(prims_t *p, const direct_view_t *v, int r, uint64_t s, size_t span,
                                mem_ref_t *ref);
/* Every rank's answer (mine: this rank's) in one flag round, or rank decides' alone (decides >=
 * 0: the others wait only for its flag); *all_p 1 when all said yes (or it did). */
chorusResult_t direct_vote(prims_t *p, const direct_view_t *v, int decides, int mine, int *all_p);
/* Zero-copy, at the end of a call: peers read this rank's memory until their done flags reach
 * s, the call's last piece; the caller may change it once this returns. */
chorusResult_t direct_zc_release(prims_t *p, const direct_view_t *v, uint64_t s);
/* Rank r's memory named by the ref in the payload of its flag f (id 0: none), nbytes of it from
 * skip bytes on: NULL in *src when there is none; an error when it cannot be mapped. */
chorusResult_t direct_ref_of(const direct_view_t *v, int r, const fifo_flag_t *f, size_t skip,
                             size_t nbytes, const char **src);
/* Rank r's output named by the ref in the payload of its flag f, nbytes of it from skip bytes
 * on, mapped writable here (all-gather and all-reduce push); an error when there is none or it
 * cannot be mapped. */
chorusResult_t direct_out_of(const direct_view_t *v, int r, const fifo_flag_t *f, size_t skip,
                             size_t nbytes, char **dst);
/* Set this rank's ready flag of piece s, its payload naming ref's data + off bytes (ref NULL:
 * nothing in place; the data is in the window buffer). */
void direct_publish_ready(const direct_view_t *v, uint64_t s, const mem_ref_t *ref, size_t off);
/* dst = src[0] op src[1] op ... in the given order; avg's division when final. */
void direct_reduce_list(prims_t *p, void *dst, char *const *src, int nsrc, size_t count);
/* Copy nbytes by cross-memory attach between this rank's memory at mine and rank r's at addr
 * (write: into r's) for piece s; an error where r has left piece s (direct_cma_close). */
chorusResult_t direct_cma_copy(const direct_view_t *v, int r, uint64_t s, void *mine, uint64_t addr,
                               size_t nbytes, int write);
/* This rank leaves piece s with an error: from now no peer copies into or out of its memory for
 * it, and the copies under way end first (waited for at most DIRECT_CMA_CLOSE_NS). */
void direct_cma_close(const direct_view_t *v, uint64_t s);

#endif /* CHORUS_DIRECT_WIN_H */
