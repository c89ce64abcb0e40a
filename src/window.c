/*
 * window.c: the node-local windows of the direct algorithms (algorithms/direct.c).
 *
 * Made during init, where every rank can map every other's (one host, shm): each rank creates
 * a shm segment of the flags header and two buffers, the names go round the bootstrap, every
 * rank maps every other's, and once all say so each unlinks its own, so a job killed after init
 * leaves nothing in /dev/shm. Where some rank cannot (a small /dev/shm), all of them learn it in
 * the same exchange and the communicator runs without the direct algorithms.
 *
 * Zero-copy (direct.c) needs every rank to open every other's chorusMemAlloc memfds through
 * /proc/<pid>/fd (same user, /proc not hidden): the same exchange carries a probe memfd per rank
 * that every other tries to open, and zero-copy is on only where all could (and none set
 * CHORUS_ZCOPY=0). Peers' regions are mapped on first use and kept, at most ZC_MAX_MAPS per
 * communicator (the least recently used goes first), until destroy; writable, as all-gathers
 * write into peers' chorusMemAlloc outputs (direct.c allgather_push).
 *
 * Cross-memory attach (CHORUS_CMA_MIN; direct.c's all-gather, broadcast and two-shot all-reduce):
 * a rank copies straight between its memory and a peer's, malloc'd or not, with process_vm_readv
 * and process_vm_writev (ranks of one process: by address). That needs the kernel to let every
 * rank read every other (same user; no seccomp or Yama rule against it): the same exchange
 * carries each rank's address of a cookie, every other reads it so (and writes it back: the
 * writes need every rank able to), and it is on only where all could. Where CHORUS_CMA_MIN is
 * unset, every rank also times it against the window's copies once (cma_pays) and it stays on
 * only where the least time over the ranks is the attach's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "debug.h"
#include "memops.h"

#define WINDOW_NAME_BYTES 64
#define WINDOW_TAG 0x77696e /* "win": the name's tag field */
#define ZC_MAX_MAPS 64
/* All-gather pieces from this size go into the window with streaming stores, unless ranks
 * outnumber cores (then a reader often shares the writer's core and caches). A peer then reads
 * them from memory rather than from the writer's cache, and the writer takes no line back from
 * the readers first: 2 ranks, out of place, 1 MiB 37-41 us against 40-46, 4 MiB 142-151 against
 * 154-160, 16 MiB 862-945 against 885-977 (three rounds); 128 KiB 4.9-5.0 against 5.3-5.5
 * (64 KiB pieces), 256 KiB 8.6-9.3 against 10.3-10.6; 64 KiB (32 KiB pieces streamed) even.
 * 4 ranks on 2 cores mixed. From 8 KiB since the AMD VM of 2026-12-07 (the earlier figures are
 * an older AMD VM's), where plain stores ran 3-7x slower in 3 of 6 runs (2 ranks, CHORUS_CMA_MIN=0,
 * all_gather_perf -b 8K -e 128K -f 2 -w 20 -n 300, six alternated pairs: 32 KiB 12-13 us, 64
 * KiB 22-25, Open MPI 6.1-8.5 in the same runs) and streamed pieces in none (32 KiB 3.0-4.3, 64
 * KiB 5.0-6.8), against plain's 1.3-3.6 and 2.4-7.4 in the other runs. 8 KiB all-gathers (4 KiB
 * pieces) stay plain: 0.5-0.9 us, 2.1-5.8 in the slow runs, streamed 1.2-1.7. */
#define STREAM_WIN_NBYTES (8 * 1024)
/* Slotted broadcasts and reduces stream their copies into the slots from this size, unless
 * ranks outnumber cores (direct_win.h direct_copy_in). */
#define STREAM_SLOT_NBYTES (4 * 1024)
/* Broadcasts by cross-memory attach from this size (or CHORUS_CMA_MIN, the larger), and only
 * where the ranks do not outnumber the cores: below it, and oversubscribed, the root running ahead
 * through the window's slots wins. malloc'd buffers with MALLOC_MMAP_MAX_=0, alternated
 * runs: 2 ranks, 16 KiB 1.57-2.46 us against 1.34, 64 KiB 3.7 against 5.4, 256 KiB 11.3 against
 * 21.7; 4 ranks on 2 cores, 16 KiB 5.8 against 2.1, 64 KiB 11.4 against 9.7. Later on the AMD VM
 * (2 ranks, malloc'd, with the window's slots streamed; CHORUS_CMA_MIN unset, 512K and 0, five
 * alternated rounds, medians): 64 KiB 6.2 us by the attach against 4.8 through the window, 128
 * and 256 KiB even (9.1-9.6, 17.3-18.4); from 1 MiB, where the tuner gives the rest to the
 * ring, a library that left the attach off where the setup did (addf773) spread to 2-3x the
 * attach's times (1 MiB 57-143 us against 57-73, 4 MiB 247-673 against 244-324). */
#define CMA_BCAST_MIN_NBYTES (128 * 1024)
/* Two-shot all-reduces by cross-memory attach from this size (or CHORUS_CMA_MIN, the larger),
 * where the ranks do not outnumber the cores (4 ranks on 2 cores, forced two-shot: 16 KiB 16.6
 * us against the window's 8.9, 1-4 MiB even). 2 ranks, Intel VM, against the window's two-shot:
 * 16 KiB 2.5 us against 3.8-4.3, 64 KiB 5.1 against 8.2, 1 MiB 88 against 145 (Open MPI 194).
 * AMD VM of 2026-12-07 (CHORUS_CMA_MIN=16K against 0, five alternated rounds of all_reduce_perf
 * -b 16K -e 256K -f 2, medians): 16 KiB 6.9 us against 3.9, 32 KiB 7.6 against 5.7, 64 KiB 11.1
 * and 11.1, 128 KiB 17.8 against 20.9, 256 KiB 33.4 against 43.0: from 64 KiB, where the two
 * VMs' answers meet. */
#define CMA_ALLREDUCE_MIN_NBYTES (64 * 1024)

/* What each rank tells the others: its window's name and its zero-copy probe. */
typedef struct window_card {
    char name[WINDOW_NAME_BYTES];
    int32_t probe_fd; /* a memfd of this process; -1: zero-copy off on this rank */
    uint32_t pages; /* the window's size in 4 KiB pages (CHORUS_DIRECT_BUFFSIZE may differ) */
    uint64_t cma_addr; /* where this process holds cma_cookie; 0: cross-memory attach off */
    uint64_t cma_cookie;
    uint64_t cma_buf; /* CMA_PAYS_CHUNK of this process's memory cma_pays reads; 0: none */
    uint64_t cma_target; /* CMA_PAYS_CHUNK of it that cma_pays writes */
} window_card_t;

struct zc_map {
    int rank; /* -1: free */
    uint64_t id;
    char *base;
    size_t nbytes;
    uint64_t used; /* comm->zc_clock at the last use */
};

int window_possible(chorusComm_t comm)
{
    if (comm->nranks < 2 || comm->nranks > DIRECT_MAX_RANKS || comm->nhosts != 1)
        return 0;
    const peer_info_t *self = &comm->peers[comm->rank];
    for (int r = 0; r < comm->nranks; r++)
        if (r != comm->rank && !shm_transport.can_connect(self, &comm->peers[r]))
            return 0;
    return 1;
}

static void unmap_all(chorusComm_t comm)
{
    for (int r = 0; comm->win_base != NULL && r < comm->nranks; r++)
        if (comm->win_base[r] != NULL)
            shm_segment_unmap(comm->win_base[r], comm->win_map_nbytes);
    if (comm->win_base != comm->win_base_inline)
        free(comm->win_base);
    comm->win_base = NULL;
    if (comm->win_done_seen != comm->win_done_inline)
        free(comm->win_done_seen);
    comm->win_done_seen = NULL;
    for (int i = 0; comm->zc_maps != NULL && i < ZC_MAX_MAPS; i++)
        if (comm->zc_maps[i].rank >= 0)
            munmap(comm->zc_maps[i].base, comm->zc_maps[i].nbytes);
    free(comm->zc_maps);
    comm->zc_maps = NULL;
}

static int same_process(chorusComm_t comm, int r)
{
    const peer_info_t *p = &comm->peers[r], *me = &comm->peers[comm->rank];
    return p->pid == me->pid && p->machine_hash == me->machine_hash && p->pid_ns == me->pid_ns;
}

/* A pid of rank r means the same process here: same machine, same pid namespace. */
static int pid_visible(chorusComm_t comm, int r)
{
    const peer_info_t *p = &comm->peers[r], *me = &comm->peers[comm->rank];
    return p->machine_hash == me->machine_hash && p->pid_ns == me->pid_ns && p->pid_ns != 0 &&
           p->pid > 0;
}

/* Open rank r's fd through /proc: -1 with errno when this rank may not. */
static int open_peer_fd(chorusComm_t comm, int r, int fd)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)comm->peers[r].pid, fd);
    return open(path, O_RDWR | O_CLOEXEC); /* all-gathers write into peers' outputs */
}

/* direct_view_t.zc_map: rank r's data named by ref, mapped here (cached per region). */
static char *zc_map(void *arg, int r, const mem_ref_t *ref, size_t nbytes)
{
    chorusComm_t comm = arg;
    if (same_process(comm, r))
        return (char *)(uintptr_t)ref->addr;
    struct zc_map *m = NULL, *victim = &comm->zc_maps[0];
    for (int i = 0; i < ZC_MAX_MAPS && m == NULL; i++) {
        struct zc_map *c = &comm->zc_maps[i];
        if (c->rank == r && c->id == ref->id)
            m = c;
        else if (victim->rank >= 0 && (c->rank < 0 || c->used < victim->used))
            victim = c;
    }
    if (m == NULL) {
        int fd = open_peer_fd(comm, r, ref->fd);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_ino != ref->ino) {
            int e = fd < 0 ? errno : 0;
            if (fd >= 0)
                close(fd);
            ERR(chorusSystemError, SUB_COLL,
                "zero-copy: cannot open rank %d's chorusMemAlloc memory (/proc/%d/fd/%d): %s; "
                "CHORUS_ZCOPY=0 turns zero-copy off",
                r, (int)comm->peers[r].pid, ref->fd,
                e ? strerror(e) : "it names another file than the rank's memfd");
            return NULL;
        }
        void *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        int e = errno;
        close(fd);
        if (st.st_size <= 0 || base == MAP_FAILED) {
            ERR(chorusSystemError, SUB_COLL,
                "zero-copy: cannot map rank %d's chorusMemAlloc memory (%lld bytes): %s; "
                "CHORUS_ZCOPY=0 turns zero-copy off",
                r, (long long)st.st_size, st.st_size <= 0 ? "empty" : strerror(e));
            return NULL;
        }
        if (victim->rank >= 0)
            munmap(victim->base, victim->nbytes);
        *victim = (struct zc_map){r, ref->id, base, (size_t)st.st_size, 0};
        m = victim;
    }
    m->used = ++comm->zc_clock;
    if (ref->offset > m->nbytes || nbytes > m->nbytes - ref->offset) {
        ERR(chorusInternalError, SUB_COLL,
            "zero-copy: rank %d's data (offset %llu, %zu bytes) lies outside its region %llu of "
            "%zu bytes",
            r, (unsigned long long)ref->offset, nbytes, (unsigned long long)ref->id, m->nbytes);
        return NULL;
    }
    return m->base + ref->offset;
}

/* nbytes between this rank's memory at mine and rank r's at addr, with process_vm_readv (write
 * 0) or process_vm_writev (write 1); by address where r is a thread of this process. */
static chorusResult_t cma_move(chorusComm_t comm, int r, void *mine, uint64_t addr, size_t nbytes,
                               int write)
{
    if (same_process(comm, r)) {
        if (write)
            memcpy((void *)(uintptr_t)addr, mine, nbytes);
        else
            memcpy(mine, (const void *)(uintptr_t)addr, nbytes);
        return chorusSuccess;
    }
    for (size_t done = 0; done < nbytes;) {
        struct iovec local = {(char *)mine + done, nbytes - done};
        struct iovec remote = {(void *)(uintptr_t)(addr + done), nbytes - done};
        pid_t pid = (pid_t)comm->peers[r].pid;
        ssize_t got = write ? process_vm_writev(pid, &local, 1, &remote, 1, 0)
                            : process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (got <= 0)
            return ERR(chorusSystemError, SUB_COLL,
                       "rank %d could not %s %zu bytes %s rank %d's memory (pid %d, address "
                       "0x%llx) with %s: %s; set CHORUS_CMA_MIN=0 to copy through the window "
                       "instead",
                       comm->rank, write ? "write" : "read", nbytes - done, write ? "into" : "of",
                       r, (int)comm->peers[r].pid, (unsigned long long)(addr + done),
                       write ? "process_vm_writev" : "process_vm_readv",
                       got < 0 ? strerror(errno) : "none moved");
        done += (size_t)got;
    }
    return chorusSuccess;
}

/* direct_view_t.cma_read: nbytes of rank r's memory at addr into dst. */
static chorusResult_t cma_read(void *arg, int r, void *dst, uint64_t addr, size_t nbytes)
{
    return cma_move(arg, r, dst, addr, nbytes, 0);
}

/* direct_view_t.cma_write: nbytes from src into rank r's memory at addr. */
static chorusResult_t cma_write(void *arg, int r, uint64_t addr, const void *src, size_t nbytes)
{
    return cma_move(arg, r, (void *)(uintptr_t)src, addr, nbytes, 1);
}

/* May this rank read rank r's memory with process_vm_readv? It reads the cookie r's card
 * names. */
static int cma_probe(chorusComm_t comm, int r, const window_card_t *card, int *write_ok)
{
    if (card->cma_addr == 0)
        return 0;
    if (same_process(comm, r))
        return 1;
    if (!pid_visible(comm, r))
        return 0;
    uint64_t got = 0;
    struct iovec local = {&got, sizeof(got)};
    struct iovec remote = {(void *)(uintptr_t)card->cma_addr, sizeof(got)};
    ssize_t n = process_vm_readv((pid_t)comm->peers[r].pid, &local, 1, &remote, 1, 0);
    if (n != (ssize_t)sizeof(got) || got != card->cma_cookie) {
        INFO(SUB_INIT,
             "cross-memory attach off: rank %d cannot read rank %d's memory (pid %d) with "
             "process_vm_readv: %s",
             comm->rank, r, (int)comm->peers[r].pid,
             n < 0 ? strerror(errno) : "it read something else");
        return 0;
    }
    /* And write it: the cookie again, the value it holds (all-gathers, broadcasts' roots and
     * two-shot all-reduces write into the others' outputs, direct.c; every rank must be able
     * to). */
    n = process_vm_writev((pid_t)comm->peers[r].pid, &local, 1, &remote, 1, 0);
    if (n != (ssize_t)sizeof(got)) {
        INFO(SUB_INIT,
             "cross-memory attach: rank %d cannot write rank %d's memory (pid %d) with "
             "process_vm_writev (%s); collectives do not write by cross-memory attach on this "
             "communicator (all-gathers read instead)",
             comm->rank, r, (int)comm->peers[r].pid, n < 0 ? strerror(errno) : "wrote none");
        *write_ok = 0;
    }
    return 1;
}

/* Every rank's bits: those every rank set (a collective over the bootstrap). */
static chorusResult_t all_agree(chorusComm_t comm, int bits, int *all_p)
{
    int32_t *v = calloc((size_t)comm->nranks, sizeof(int32_t));
    if (v == NULL)
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    v[comm->rank] = bits;
    chorusResult_t res = boot_allgather(comm->boot, v, sizeof(int32_t));
    int all = ~0;
    for (int r = 0; r < comm->nranks; r++)
        all &= v[r];
    free(v);
    *all_p = all;
    return res;
}

/* The timing's piece: 64 KiB, what the window's all-gather moves in one slot; its rounds: the
 * first only warms (a rank's first read of a page by process_vm_readv cost 90-500 us a piece
 * here against 5-11 later, and the first copy after a bootstrap exchange 60-80 against 3). */
#define CMA_PAYS_CHUNK (64 * 1024)
#define CMA_PAYS_ROUNDS 9
/* The window is kept only where its least is below this percentage of the attach's: it moves the
 * data three times where the attach moves it twice, which weighs more in calls larger than the
 * piece timed. With the run-time choice on, this decides only the all-gathers below 64 KiB a
 * rank (algo.h DIRECT_ADAPT_TIMED_CLASSES); where the ranks outnumber the cores, all of them. On
 * the AMD VM of 2026-12-07 (2 ranks, 8 setups) the window timed faster in 4, by less than 15% in
 * 2 of them; where the attach was chosen, the 256 KiB all-gather ran 15.0-20.3 us against Open
 * MPI's 16.7-20.5 in the same runs; where a window less than 15% faster was, 21.0 and 22.3
 * against 16.9 and 17.6. */
#define CMA_PAYS_WIN_PCT 85
/* Broadcasts and two-shot all-reduces by cross-memory attach (CMA_BCAST_MIN_NBYTES,
 * CMA_ALLREDUCE_MIN_NBYTES) unless the window's piece timed at most this percent of the kernel's
 * way's: the timing is an all-gather's, and those two split their copies between the ranks where
 * the window has one rank's copy wait for another's. On the AMD VM of 2026-12-07, 2 ranks, with
 * CHORUS_CMA_MIN=16K (on, untimed) against 0 (off), five or six alternated rounds, medians:
 * broadcast 1 MiB 64 us against 80 (least ratio to Open MPI 1.31 against 0.65), 4 MiB 254
 * against 357; all-reduce 128 KiB 17.8 against 20.9, 256 KiB 33.4 against 43.0, 2 MiB 265
 * against 332; in those minutes the setup found the window 22-27% faster in two runs of three.
 * Four rounds later the same day: broadcast 256 KiB 16.0 against 20.4, all-reduce 256 KiB 31.1
 * against 43.4, 1 MiB 120 against 162 (Open MPI over Chorus 1.37 against 1.02), while the
 * timing as it is now (cma_pays: page-aligned buffers, the attach's writes) found the window
 * 1.4-2.2x faster in 20 setups of 20 (0.46-0.72 of the attach's time): it was 50 until then. */
#define CMA_BEARABLE_WIN_PCT 35

/* The rank whose memory this rank times cross-memory attach on: the next one in another process
 * (-1: none, all are threads of this one). */
static int cma_peer(chorusComm_t comm)
{
    for (int k = 1; k < comm->nranks; k++)
        if (!same_process(comm, (comm->rank + k) % comm->nranks))
            return (comm->rank + k) % comm->nranks;
    return -1;
}

/* Does an all-gather's piece cost a rank less by cross-memory attach than through the window?
 * Each way is timed as direct.c runs it, on a 64 KiB piece. The window's: the rank's input into
 * its own output and into its window (copy_dup, streaming where direct.c streams: 64 KiB is
 * past STREAM_WIN_NBYTES), over lines a peer read the round before, then a peer's fresh window
 * piece copied out. Cross-memory attach's: the input into the output, then the input written
 * into the peer's memory (cma_target) by process_vm_writev where every rank may write (write),
 * as all-gathers do, else the peer's fresh input read by process_vm_readv. Every rank runs the
 * rounds (all_agree: no owner writes before every reader is done, and no rank reads before every
 * owner wrote); each owner writes its input (cma_buf) again first, as a job does between calls.
 * Each rank's least of each way over the rounds after the first goes to INFO and to the others;
 * *pays_p, alike on every rank: 1 where the window's least over the ranks that timed is not
 * below CMA_PAYS_WIN_PCT of the kernel's way's, or where none timed (timed 0, no peer, no
 * memory); 0 where some rank could not read or write (and *usable_p 0). *bearable_p the same with
 * CMA_BEARABLE_WIN_PCT. Every rank calls it, or none (the rounds are exchanges). bufs: 3 x
 * CMA_PAYS_CHUNK of this rank's page-aligned memory (an output, a copy's target, and the piece
 * the peer writes).
 *
 * Measured where it was added (AMD EPYC VM, kernel with page-table isolation), 2 and 4 ranks:
 * 64 KiB by process_vm_readv 7.3-15 us, against 0.8-2.4 by memcpy plus 0.7-1.5 in cache; the
 * 2-rank all-gather of 8 MiB took 437-530 us by cross-memory attach against 284-288 through the
 * window (Open MPI 373-462). On an Intel VM (2026-12-07, Xeon with AVX-512, KVM) the window's
 * write over lines a peer had just read cost 5.5-8 us a 64 KiB piece against 1.1 for a private
 * one (take_back), which the timing before this one left out (it timed the writer's copy in
 * cache): it chose the window, and the 2-rank all-gather of 128 KiB took 13.6 us through it
 * against 4.8 by cross-memory attach (Open MPI 5.5). */
static chorusResult_t cma_pays(chorusComm_t comm, const window_card_t *cards, char *cma_buf,
                               char *bufs, size_t map_nbytes, int timed, int write, int *pays_p,
                               int *bearable_p, int *usable_p)
{
    int me = comm->rank, r = cma_peer(comm);
    *pays_p = *bearable_p = *usable_p = 1;
    if (map_nbytes < DIRECT_HDR_NBYTES + CMA_PAYS_CHUNK)
        return chorusSuccess; /* every rank alike: the windows are all this size */
    timed = timed && r >= 0 && cma_buf != NULL && cards[r].cma_buf != 0;
    char *mine = comm->win_base[me] + map_nbytes - CMA_PAYS_CHUNK;
    const char *win = timed ? comm->win_base[r] + map_nbytes - CMA_PAYS_CHUNK : NULL;
    char *out = bufs, *scratch = bufs != NULL ? bufs + CMA_PAYS_CHUNK : NULL;
    int stream = !comm->over && CMA_PAYS_CHUNK >= STREAM_WIN_NBYTES;
    int64_t win_ns = INT64_MAX, cma_ns = INT64_MAX;
    int failed = 0;
    for (int round = 0; round < CMA_PAYS_ROUNDS; round++) {
        int ignored;
        CHECK(all_agree(comm, 1, &ignored));
        int64_t t0 = 0, t1 = 0;
        if (cma_buf != NULL && out != NULL) {
            memset(cma_buf, round + 1, CMA_PAYS_CHUNK);
            t0 = fifo_now_ns();
            if (stream) {
                host_memops.copy_dup(out, mine, cma_buf, CMA_PAYS_CHUNK);
            } else {
                memcpy(out, cma_buf, CMA_PAYS_CHUNK);
                memcpy(mine, cma_buf, CMA_PAYS_CHUNK);
            }
            t1 = fifo_now_ns();
        } else {
            memset(mine, round + 1, CMA_PAYS_CHUNK);
        }
        CHECK(all_agree(comm, 1, &ignored));
        if (!timed)
            continue;
        int64_t t2 = fifo_now_ns();
        host_memops.copy(scratch, win, CMA_PAYS_CHUNK);
        __asm__ volatile("" : : "r"(scratch) : "memory");
        int64_t t3 = fifo_now_ns();
        host_memops.copy(out, cma_buf, CMA_PAYS_CHUNK);
        __asm__ volatile("" : : "r"(out) : "memory");
        struct iovec local = {write ? cma_buf : scratch, CMA_PAYS_CHUNK};
        struct iovec remote = {(void *)(uintptr_t)(write ? cards[r].cma_target : cards[r].cma_buf),
                               CMA_PAYS_CHUNK};
        if ((write ? process_vm_writev : process_vm_readv)((pid_t)comm->peers[r].pid, &local, 1,
                                                           &remote, 1, 0) != CMA_PAYS_CHUNK) {
            INFO(SUB_INIT, "cross-memory attach off: rank %d's timed %s of rank %d failed: %s", me,
                 write ? "write" : "read", r, strerror(errno));
            failed = 1;
            timed = 0;
            continue;
        }
        int64_t t4 = fifo_now_ns();
        if (round == 0)
            continue;
        win_ns = (t1 - t0) + (t3 - t2) < win_ns ? (t1 - t0) + (t3 - t2) : win_ns;
        cma_ns = t4 - t3 < cma_ns ? t4 - t3 : cma_ns;
    }
    if (timed)
        INFO(SUB_INIT,
             "cross-memory attach timed: a 64 KiB piece of an all-gather cost rank %d %.2f us by "
             "%s rank %d's memory, against %.2f us through the windows (least of %d rounds)",
             me, cma_ns / 1e3, write ? "process_vm_writev into" : "process_vm_readv of", r,
             win_ns / 1e3, CMA_PAYS_ROUNDS - 1);
    /* The least over every rank's rounds decides, alike everywhere: something else running
     * only slows a round, and on a 2-core machine it may run through all of one rank's (its
     * least by cross-memory attach 16-28 us against 5-10 on the other, its own 64 KiB memcpy
     * 15 us against 1.2, in about 1 run of 4 here). */
    int64_t *t = calloc((size_t)comm->nranks * 2, sizeof(int64_t));
    if (t == NULL)
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    t[2 * me] = failed ? -2 : timed ? cma_ns : -1;
    t[2 * me + 1] = timed ? win_ns : -1;
    chorusResult_t res = boot_allgather(comm->boot, t, 2 * sizeof(int64_t));
    int64_t cma_least = INT64_MAX, win_least = INT64_MAX;
    for (int q = 0; q < comm->nranks && res == chorusSuccess; q++) {
        if (t[2 * q] == -2)
            *pays_p = *bearable_p = *usable_p = 0;
        if (t[2 * q] >= 0) {
            cma_least = t[2 * q] < cma_least ? t[2 * q] : cma_least;
            win_least = t[2 * q + 1] < win_least ? t[2 * q + 1] : win_least;
        }
    }
    free(t);
    /* Every reader is done (it answered): the piece goes back to zero, as calls first find it. */
    memset(mine, 0, CMA_PAYS_CHUNK);
    if (comm->params.cma_timed_pct > 0 && cma_least != INT64_MAX) /* tests: made up */
        win_least = cma_least * comm->params.cma_timed_pct / 100;
    if (*pays_p && cma_least != INT64_MAX) { /* some rank timed both ways */
        *pays_p = win_least * 100 >= cma_least * CMA_PAYS_WIN_PCT;
        *bearable_p = win_least * 100 >= cma_least * CMA_BEARABLE_WIN_PCT;
    }
    if (me == 0 && cma_least != INT64_MAX)
        INFO(SUB_INIT,
             "cross-memory attach against the windows, the least over every rank's rounds: %.2f "
             "us against %.2f a 64 KiB piece",
             cma_least / 1e3, win_least / 1e3);
    return res;
}

/* The windows could not be made on some rank, or differ in size (differ): every rank stops
 * using the direct algorithms on this communicator (they all learn it in the same exchange, so
 * the tuner stays agreed). why: this rank's reason, if it saw one. */
static void disable(chorusComm_t comm, const char *why, int differ)
{
    unmap_all(comm);
    comm->tuner.topo.direct = 0;
    memset(comm->tune_cache, 0, sizeof(comm->tune_cache));
    if (comm->rank == 0 && differ)
        WARN(SUB_INIT,
             "direct algorithms off on this communicator: %s; one-shot and two-shot calls run the "
             "ring instead",
             why);
    else if (comm->rank == 0)
        WARN(SUB_INIT,
             "direct algorithms off on this communicator: a rank could not make or map its "
             "node-local window (2 x %lld bytes, CHORUS_DIRECT_BUFFSIZE)%s%s; one-shot and "
             "two-shot calls run the ring instead (give /dev/shm more room or lower "
             "CHORUS_DIRECT_BUFFSIZE)",
             (long long)comm->params.direct_buffsize, why[0] ? ": " : "", why);
}

static __attribute__((noinline)) chorusResult_t window_map(chorusComm_t comm);

HOT_PATH chorusResult_t window_connect(chorusComm_t comm)
{
    if (comm->win_base != NULL || !comm->tuner.topo.direct)
        return chorusSuccess;
    return window_map(comm);
}

/* window_connect's first time: make, map and agree on the windows. */
static chorusResult_t window_map(chorusComm_t comm)
{
    chorusResult_t res = chorusSuccess;
    int n = comm->nranks, me = comm->rank, all = 0, differ = 0, cma_pays_all = 1;
    int cma_bearable = 1; /* broadcasts and two-shot all-reduces may use it (cma_pays) */
    int cma_write_ok = 1; /* this rank can write every peer's memory (cma_probe) */
    size_t bufsz = ((size_t)comm->params.direct_buffsize + 4095) & ~(size_t)4095;
    size_t map_nbytes = DIRECT_HDR_NBYTES + 2 * bufsz;
    char name[WINDOW_NAME_BYTES], why[768] = "";
    /* Cross-memory attach is timed (cma_pays) unless CHORUS_CMA_MIN was set, or every rank is a
     * thread of this process (then it is a memcpy by address: no timing, no rounds). */
    int timed = params_raw("CHORUS_CMA_MIN") == NULL && cma_peer(comm) >= 0;
    char *cma_buf = NULL, *scratch = NULL;
    window_card_t *cards = calloc((size_t)n, sizeof(window_card_t));
    memset(comm->win_base_inline, 0, sizeof(comm->win_base_inline));
    memset(comm->win_done_inline, 0, sizeof(comm->win_done_inline));
    comm->win_base =
        n <= WIN_INLINE_RANKS ? comm->win_base_inline : calloc((size_t)n, sizeof(char *));
    comm->win_map_nbytes = map_nbytes;
    if (cards == NULL || comm->win_base == NULL) {
        free(cards);
        if (comm->win_base != comm->win_base_inline)
            free(comm->win_base);
        comm->win_base = NULL;
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    }
    /* A window that does not fit is not this call's failure: the ring runs instead. */
    int quiet = debug_set_quiet_errors(1);
    shm_segment_name(name, sizeof(name), me, me, WINDOW_TAG);
    void *mine = NULL;
    int made = shm_segment_map(name, map_nbytes, 1, me, 1, &mine) == chorusSuccess;
    if (!made)
        snprintf(why, sizeof(why), "rank %d: %s", me, debug_last_error());
    comm->win_base[me] = made ? mine : NULL;
    if (made)
        memcpy(cards[me].name, name, WINDOW_NAME_BYTES);
    cards[me].pages = (uint32_t)(map_nbytes / 4096);
    int probe = comm->params.zcopy ? memfd_create("chorus-probe", MFD_CLOEXEC) : -1;
    cards[me].probe_fd = probe;
    if (comm->params.cma_min > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        comm->cma_cookie =
            ((uint64_t)ts.tv_nsec << 32 ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)comm) | 1;
        cards[me].cma_addr = (uint64_t)(uintptr_t)&comm->cma_cookie;
        cards[me].cma_cookie = comm->cma_cookie;
        /* Page-aligned, like the windows: from malloc, the 3-piece scratch lay 16 bytes past a
         * page or anywhere in the heap, as glibc's mmap threshold had it (MALLOC_MMAP_MAX_=0),
         * and memcpy's speed out of the window with it (host_memops.c, copy_skewed). */
        void *a = NULL, *b = NULL;
        if (timed && (posix_memalign(&a, 4096, CMA_PAYS_CHUNK) != 0 ||
                      posix_memalign(&b, 4096, 3 * CMA_PAYS_CHUNK) != 0)) {
            free(a);
            a = b = NULL;
        }
        cma_buf = a;
        scratch = b;
        if (cma_buf != NULL) {
            memset(cma_buf, 1, CMA_PAYS_CHUNK);
            memset(scratch, 0, 3 * CMA_PAYS_CHUNK);
            cards[me].cma_buf = (uint64_t)(uintptr_t)cma_buf;
            cards[me].cma_target = (uint64_t)(uintptr_t)(scratch + 2 * CMA_PAYS_CHUNK);
        }
    }
    CHECK_GOTO(boot_allgather(comm->boot, cards, sizeof(window_card_t)), res, out);
    int mapped = made, zc_ok = probe >= 0, cma_ok = cards[me].cma_addr != 0;
    for (int r = 0; r < n; r++) {
        char *peer_name = cards[r].name;
        peer_name[WINDOW_NAME_BYTES - 1] = '\0';
        if (r == me)
            continue;
        cma_ok = cma_ok && cma_probe(comm, r, &cards[r], &cma_write_ok);
        if (zc_ok && !same_process(comm, r)) {
            /* Another pid namespace (containers sharing /dev/shm): its pids mean nothing here. */
            int fd = cards[r].probe_fd >= 0 && pid_visible(comm, r)
                         ? open_peer_fd(comm, r, cards[r].probe_fd)
                         : -1;
            if (fd < 0 && cards[r].probe_fd >= 0)
                INFO(SUB_INIT,
                     "zero-copy off: rank %d cannot open rank %d's memfd through /proc/%d/fd: %s",
                     me, r, (int)comm->peers[r].pid,
                     pid_visible(comm, r) ? strerror(errno) : "another pid namespace");
            zc_ok = fd >= 0;
            if (fd >= 0)
                close(fd);
        }
        if (peer_name[0] == '\0' || !mapped)
            continue;
        if (cards[r].pages != cards[me].pages) {
            /* Mapped at this rank's size, a smaller window's end would be a SIGBUS. */
            snprintf(why, sizeof(why),
                     "rank %d's window is %llu bytes where rank %d's is %zu: the ranks run with "
                     "different CHORUS_DIRECT_BUFFSIZE (set it alike on every rank)",
                     r, (unsigned long long)cards[r].pages * 4096, me, map_nbytes);
            mapped = 0;
            differ = 1;
            continue;
        }
        void *map = NULL;
        if (shm_segment_map(peer_name, map_nbytes, 0, r, 1, &map) != chorusSuccess) {
            if (why[0] == '\0')
                snprintf(why, sizeof(why), "rank %d: %s", me, debug_last_error());
            mapped = 0;
            continue;
        }
        comm->win_base[r] = map;
    }
    /* Every peer's window has had each page read once here (shm_segment_map). */
    /* Instead of a barrier: once every rank has answered, every window is mapped (or none is
     * used), every probe opened; the names and probes can go. */
    CHECK_GOTO(all_agree(comm, mapped | zc_ok << 1 | cma_ok << 2 | cma_write_ok << 3, &all), res,
               out);
    for (int r = 0; r < n && (all & 1); r++)
        all &= cards[r].name[0] != '\0' ? ~0 : ~1;
    if (all & 1) {
        /* And each owner writes its window again once its peers have read it (the owner's first
         * write to a page a peer has read cost 5 us too: the root's calls 97 and 113), then
         * waits until every owner has (no peer reads a window being written). */
        memset(comm->win_base[me], 0, map_nbytes);
        int ignored;
        CHECK_GOTO(all_agree(comm, 1, &ignored), res, out);
        /* Time the kernel's copy against the window's, unless this rank was told
         * CHORUS_CMA_MIN (it then votes yes untimed). */
        int any = 0; /* does some rank time it? (every rank alike: the cards are every rank's) */
        for (int r = 0; r < n; r++)
            any |= cards[r].cma_buf != 0;
        if ((all & 4) && any) {
            int pays, bearable, usable;
            CHECK_GOTO(cma_pays(comm, cards, cma_buf, scratch, map_nbytes, timed, (all & 8) != 0,
                                &pays, &bearable, &usable),
                       res, out);
            cma_bearable = bearable;
            if (!pays) {
                cma_pays_all = 0;
                /* Nothing uses it (a rank's timed read or write failed: nothing may). */
                if (!usable || (comm->cma_adapt == 0 && (!bearable || comm->over)))
                    all &= ~4;
                if (me == 0)
                    INFO(SUB_INIT,
                         "cross-memory attach %s on this communicator: the window's copies "
                         "timed more than %d%% faster, or a rank could not read (CHORUS_CMA_MIN "
                         "set on every rank skips the timing); broadcasts and two-shot "
                         "all-reduces %s",
                         !comm->cma_adapt || !usable
                             ? "off"
                             : "off for all-gathers below 64 KiB a rank for now (larger ones "
                               "start on it; all try it at run time)",
                         100 - CMA_PAYS_WIN_PCT,
                         bearable ? "use it still (the window not twice as fast)" : "do not");
            } else if (me == 0) {
                INFO(SUB_INIT,
                     "cross-memory attach pays on this communicator: the window's copies timed no "
                     "more than %d%% faster",
                     100 - CMA_PAYS_WIN_PCT);
            }
        }
    }
out:
    debug_set_quiet_errors(quiet);
    if (made)
        shm_unlink(name);
    if (probe >= 0)
        close(probe);
    free(cards);
    free(cma_buf);
    free(scratch);
    if (res != chorusSuccess) {
        unmap_all(comm);
        return res;
    }
    if (!(all & 1)) {
        disable(comm, why, differ);
        return chorusSuccess;
    }
    comm->win_done_seen =
        n <= WIN_INLINE_RANKS ? comm->win_done_inline : calloc((size_t)n, sizeof(uint64_t));
    if ((all & 2) && comm->win_done_seen != NULL) {
        comm->zc_maps = calloc(ZC_MAX_MAPS, sizeof(struct zc_map));
        for (int i = 0; comm->zc_maps != NULL && i < ZC_MAX_MAPS; i++)
            comm->zc_maps[i].rank = -1;
    }
    if (comm->win_done_seen == NULL || ((all & 2) && comm->zc_maps == NULL)) {
        unmap_all(comm);
        return ERR(chorusSystemError, SUB_INIT, "out of memory");
    }
    comm->win_view = (direct_view_t){
        n,
        me,
        comm->win_base,
        bufsz,
        &comm->win_seq,
        comm->win_done_seen,
        &comm->win_done,
        (all & 2) ? mem_find_region : NULL,
        (all & 2) ? zc_map : NULL,
        comm,
        (size_t)comm->params.zcopy_min,
        (size_t)comm->zc_broadcast_min,
        &comm->zc_reads,
        (size_t)comm->zc_allgather_min,
        &comm->zc_pushes,
        n <= DIRECT_GATE_MAX_RANKS && comm->params.wait_gate ? &comm->win_gate : NULL,
        comm->over ? 0 : STREAM_WIN_NBYTES,
        &comm->win_slot,
        (all & 4) ? cma_read : NULL,
        cma_pays_all ? (size_t)comm->params.cma_min : 0,
        comm->over || comm->params.cma_min == 0 || !cma_bearable ? 0
        : comm->params.cma_min > CMA_BCAST_MIN_NBYTES            ? (size_t)comm->params.cma_min
                                                                 : CMA_BCAST_MIN_NBYTES,
        &comm->cma_reads,
        (all & 4) && comm->cma_adapt ? &comm->cma_plan : NULL,
        (size_t)comm->zc_arpush_min,
        &comm->zc_allreduce_pushed,
        (all & 4) && (all & 8) ? cma_write : NULL,
        comm->cma_writes,
        comm->over || comm->params.cma_min == 0 || !cma_bearable ? 0
        : comm->params.cma_min > CMA_ALLREDUCE_MIN_NBYTES        ? (size_t)comm->params.cma_min
                                                                 : CMA_ALLREDUCE_MIN_NBYTES,
        comm->over ? 0 : STREAM_SLOT_NBYTES};
    if (comm->win_view.cma_adapt != NULL)
        direct_adapt_init(&comm->cma_plan, cma_pays_all ? 2 : 1, comm->cma_adapt == 2);
    /* From here the tuner prices one-shot broadcasts by cross-memory attach where they run so
     * (alike on every rank: each input above is every rank's). */
    comm->tuner.topo.direct_cma_bcast_min =
        comm->win_view.cma_read != NULL ? comm->win_view.cma_bcast_min_nbytes : 0;
    memset(comm->tune_cache, 0, sizeof(comm->tune_cache));
    /* Balance only where this window's ranks are all the machine's, and they outnumber its
     * cores (direct_win.c). */
    if (comm->win_view.gate != NULL)
        direct_gate_init(&comm->win_gate, &comm->win_view,
                         comm->params.wait_balance && comm->over && comm->machine_ranks == n);
    INFO(SUB_INIT,
         "direct windows: %d ranks x 2 buffers of %zu bytes; zero-copy %s; cross-memory attach %s",
         n, bufsz, (all & 2) ? "on" : "off",
         comm->win_view.cma_adapt != NULL ? "chosen at run time (all-gathers)"
         : (all & 4)                      ? "on"
                                          : "off");
    return chorusSuccess;
}

void window_close(chorusComm_t comm)
{
    unmap_all(comm);
}
