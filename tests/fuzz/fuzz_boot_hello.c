/*
 * fuzz_boot_hello.c: bytes from a stranger, as every first message of the bootstrap.
 *
 * Byte 0 picks how the rest is delivered; the pure checks see the rest every time:
 *   0: only the pure code: the check functions against the format's own rules (as a root hello,
 *      a peer hello, a root reply, a frame header), pending_read through a socketpair, and a
 *      sequence of pending_add/pending_remove against a model of the bounded set;
 *   1: the real root thread (boot_root_start): the bytes arrive as a root hello on a fresh root;
 *      a bad hello must be refused (the connection closed) and the root must still serve a real
 *      job; a good one must be served with exactly the address it gave;
 *   2: the real rendezvous of a rank (boot_init): the bytes are the root's answer (reply, address
 *      table or missing list); init succeeds exactly when the answer is a valid table;
 *   3: the real listener of a rank (its service thread): the bytes are a peer hello and frames.
 * Every mismatch with the format aborts; so do the sanitizers on any bad access.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"

static void check_pure_hellos(const uint8_t *p, size_t n)
{
    if (n >= sizeof(root_hello_t)) {
        root_hello_t h;
        memcpy(&h, p, sizeof(h));
        if ((boot_check_root_hello(&h, FUZZ_SECRET, -1, NULL) == NULL) !=
            fuzz_root_hello_ok(&h, FUZZ_SECRET, -1, NULL))
            fuzz_die("boot_check_root_hello (first rank) disagrees with the format");
        /* A root that has seen FUZZ_NRANKS ranks, some slots taken (byte 56 says which): the
         * slot table is exactly that long, so any index past it is a sanitizer report. */
        int *rank_fd = malloc(sizeof(int) * FUZZ_NRANKS);
        uint8_t taken = n > sizeof(h) ? p[sizeof(h)] : 0;
        for (int r = 0; r < FUZZ_NRANKS; r++)
            rank_fd[r] = (taken >> r) & 1 ? 100 + r : -1;
        if ((boot_check_root_hello(&h, FUZZ_SECRET, FUZZ_NRANKS, rank_fd) == NULL) !=
            fuzz_root_hello_ok(&h, FUZZ_SECRET, FUZZ_NRANKS, rank_fd))
            fuzz_die("boot_check_root_hello (later rank) disagrees with the format");
        free(rank_fd);
    }
    if (n >= sizeof(peer_hello_t)) {
        peer_hello_t h;
        memcpy(&h, p, sizeof(h));
        const int nranks[] = {1, FUZZ_NRANKS, 1 << 20};
        for (int i = 0; i < 3; i++)
            if ((boot_check_peer_hello(&h, FUZZ_SECRET, nranks[i]) == NULL) !=
                fuzz_peer_hello_ok(&h, FUZZ_SECRET, nranks[i]))
                fuzz_die("boot_check_peer_hello (nranks %d) disagrees with the format", nranks[i]);
    }
    if (n >= sizeof(root_reply_t)) {
        root_reply_t r;
        memcpy(&r, p, sizeof(r));
        int ok = r.magic == BOOT_MAGIC && r.nranks == FUZZ_NRANKS;
        if ((boot_check_root_reply(&r, FUZZ_NRANKS) == NULL) != ok)
            fuzz_die("boot_check_root_reply disagrees with the format");
    }
    if (n >= sizeof(frame_hdr_t)) {
        frame_hdr_t f;
        memcpy(&f, p, sizeof(f));
        const uint32_t max[] = {0, 4096, BOOT_MAX_MSG, UINT32_MAX};
        for (int i = 0; i < 4; i++)
            if ((boot_check_frame(&f, max[i]) == NULL) != fuzz_frame_ok(&f, max[i]))
                fuzz_die("boot_check_frame (limit %u) disagrees with the format", max[i]);
    }
}

/* pending_read of a hello of want bytes, the bytes arriving through a socketpair and then EOF. */
static void check_pending_read(const uint8_t *p, size_t n, size_t want)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        fuzz_die("socketpair failed");
    size_t sent = n < 4096 ? n : 4096;
    if (write(sv[1], p, sent) != (ssize_t)sent)
        fuzz_die("socketpair write failed");
    close(sv[1]);
    pending_t pend;
    memset(&pend, 0, sizeof(pend));
    pend.fd = sv[0];
    int rc;
    while ((rc = pending_read(&pend, want)) == 0)
        ;
    int whole = sent >= want;
    if ((rc == 1) != whole || pend.got > want || (whole && memcmp(pend.buf, p, want) != 0))
        fuzz_die("pending_read of %zu bytes from %zu gave %d, got %zu", want, sent, rc, pend.got);
    close(sv[0]);
}

/* pending_add / pending_remove against a model: at most BOOT_MAX_PENDING, the oldest evicted. */
static void check_pending_set(const uint8_t *p, size_t n)
{
    pending_set_t s;
    memset(&s, 0, sizeof(s));
    sock_addr_t from;
    memset(&from, 0, sizeof(from));
    int model_n = 0, model_evicted = 0;
    for (size_t i = 0; i < n && i < 700; i++) {
        if (p[i] < 0xc0) {
            int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                fuzz_die("open /dev/null failed");
            if (model_n == BOOT_MAX_PENDING)
                model_evicted++;
            else
                model_n++;
            pending_add(&s, fd, &from);
        } else if (s.n > 0) {
            pending_remove(&s, p[i] % s.n, 1);
            model_n--;
        }
        if (s.n != model_n || s.evicted != model_evicted)
            fuzz_die("pending set holds %d (evicted %d), the model %d (%d)", s.n, s.evicted,
                     model_n, model_evicted);
    }
    pending_free(&s);
}

static root_hello_t good_root_hello(int rank, int nranks)
{
    root_hello_t h;
    memset(&h, 0, sizeof(h));
    h.magic = BOOT_MAGIC;
    h.secret = FUZZ_SECRET;
    h.rank = rank;
    h.nranks = nranks;
    h.listen.sin.sin_family = AF_INET;
    h.listen.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    h.listen.sin.sin_port = htons((uint16_t)(1000 + rank));
    return h;
}

/* Read a root's answer on fd: an OK reply for nranks and the table; 1 when entry `rank` is want. */
static int got_table(int fd, int nranks, int rank, sock_addr_t want)
{
    root_reply_t r;
    sock_addr_t *table = malloc(sizeof(sock_addr_t) * nranks);
    int ok = fuzz_recv(fd, &r, sizeof(r), 5000) && r.magic == BOOT_MAGIC && r.nranks == nranks &&
             r.status == ROOT_REPLY_OK &&
             fuzz_recv(fd, table, sizeof(sock_addr_t) * nranks, 5000) &&
             memcmp(&table[rank], &want, sizeof(want)) == 0;
    free(table);
    return ok;
}

/* A root given a valid hello for more ranks than come: at its deadline it must tell the one that
 * came who is missing (every other rank, the first ROOT_MISSING_MAX of them), then hang up. */
static void expect_missing(int fd, const root_hello_t *h, size_t n)
{
    root_reply_t r;
    root_missing_t m;
    /* Bytes past the hello may make the root's close a reset; a root that had not read the hello
     * by its deadline (a loaded machine) just hangs up. */
    if (n == sizeof(*h) && fuzz_recv(fd, &r, sizeof(r), 5000)) {
        if (r.magic != BOOT_MAGIC || r.nranks != h->nranks || r.status != ROOT_REPLY_MISSING ||
            !fuzz_recv(fd, &m, sizeof(m), 5000) || m.nmissing != h->nranks - 1)
            fuzz_die("rank %d of %d alone: no missing list from the root at its deadline", h->rank,
                     h->nranks);
        for (int i = 0, want = 0; i < ROOT_MISSING_MAX && i < m.nmissing; i++, want++) {
            want += want == h->rank;
            if (m.ranks[i] != want)
                fuzz_die("missing list entry %d is rank %d, want %d", i, m.ranks[i], want);
        }
    }
    if (!fuzz_wait_hangup(fd, 5000))
        fuzz_die("the root did not hang up after its deadline");
}

/* Wait until the root thread has closed its listener, the last thing it does: no root outlives
 * its input (a thread still freeing its state when the input ends looks like a leak). */
static void wait_root_gone(const sock_addr_t *root)
{
    for (int i = 0; i < 5000; i++) {
        int fd = fuzz_connect(root);
        if (fd < 0)
            return;
        close(fd);
        usleep(1000);
    }
    fuzz_die("the root still listens 5 s after its job ended");
}

static void drive_root(const uint8_t *p, size_t n)
{
    root_hello_t h;
    memset(&h, 0, sizeof(h));
    if (n >= sizeof(h))
        memcpy(&h, p, sizeof(h));
    int good = n >= sizeof(h) && fuzz_root_hello_ok(&h, FUZZ_SECRET, -1, NULL);
    /* More ranks than this drives to completion: a short deadline, so no root outlives the input.
     */
    int alone = good && h.nranks > 8;
    sock_addr_t lo;
    memset(&lo, 0, sizeof(lo));
    lo.sin.sin_family = AF_INET;
    lo.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    boot_id_t id;
    if (boot_root_start(&lo, FUZZ_SECRET, alone ? 200 : 2000, &id) != chorusSuccess)
        fuzz_die("boot_root_start failed");
    int fd = fuzz_connect(&id.root);
    if (fd < 0)
        fuzz_die("cannot connect to the root");
    fuzz_send(fd, p, n);
    shutdown(fd, SHUT_WR);
    if (!good) {
        if (!fuzz_wait_hangup(fd, 5000))
            fuzz_die("the root kept a connection whose hello is bad or short (%zu bytes)", n);
        close(fd);
        /* It still serves the real job, and only it: a table of one. */
        root_hello_t g = good_root_hello(0, 1);
        int c = fuzz_connect(&id.root);
        if (c < 0)
            fuzz_die("the root stopped listening after refusing a stranger");
        fuzz_send(c, &g, sizeof(g));
        if (!got_table(c, 1, 0, g.listen))
            fuzz_die("the root did not serve a real rank after refusing a stranger");
        close(c);
        wait_root_gone(&id.root);
        return;
    }
    if (alone) {
        expect_missing(fd, &h, n);
        close(fd);
        wait_root_gone(&id.root);
        return;
    }
    int fds[8];
    for (int r = 0; r < h.nranks; r++) {
        if (r == h.rank)
            continue;
        root_hello_t g = good_root_hello(r, h.nranks);
        fds[r] = fuzz_connect(&id.root);
        if (fds[r] < 0)
            fuzz_die("cannot connect to the root");
        fuzz_send(fds[r], &g, sizeof(g));
    }
    for (int r = 0; r < h.nranks; r++) {
        if (r == h.rank)
            continue;
        root_hello_t g = good_root_hello(r, h.nranks);
        if (!got_table(fds[r], h.nranks, r, g.listen))
            fuzz_die("rank %d of %d did not get its own address back", r, h.nranks);
        /* The root closes every rank's connection as it ends: none outlives the input. */
        if (!fuzz_wait_hangup(fds[r], 5000))
            fuzz_die("the root kept rank %d's connection after serving the table", r);
        close(fds[r]);
    }
    /* Bytes past the hello stay unread, and the root's close may reset: check the exact case. */
    if (n == sizeof(h) && !got_table(fd, h.nranks, h.rank, h.listen))
        fuzz_die("the fuzzed rank %d did not get its own address back", h.rank);
    close(fd);
    wait_root_gone(&id.root);
}

static void drive_rendezvous(const uint8_t *p, size_t n)
{
    root_reply_t r;
    memset(&r, 0, sizeof(r));
    if (n >= sizeof(r))
        memcpy(&r, p, sizeof(r));
    int want = n >= sizeof(r) + sizeof(sock_addr_t) * FUZZ_NRANKS && r.magic == BOOT_MAGIC &&
               r.nranks == FUZZ_NRANKS && r.status == ROOT_REPLY_OK;
    chorusResult_t res;
    boot_t *b = fuzz_boot_start(p, n, &res, NULL);
    if ((res == chorusSuccess) != want)
        fuzz_die("init %s on a root answer of %zu bytes that is %s", res ? "failed" : "succeeded",
                 n, want ? "a valid table" : "not a valid table");
    boot_close(b);
}

static void drive_listener(const uint8_t *p, size_t n)
{
    chorusResult_t res;
    sock_addr_t listen;
    boot_t *b = fuzz_boot_start(NULL, 0, &res, &listen);
    if (b == NULL)
        fuzz_die("init against a valid fake root failed");
    fuzz_listener_check(b, &listen, p, n);
    boot_close(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    if (size == 0)
        return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    check_pure_hellos(p, n);
    switch (data[0] % 4) {
    case 0:
        check_pending_read(p, n, sizeof(root_hello_t));
        check_pending_read(p, n, sizeof(peer_hello_t));
        check_pending_set(p, n);
        break;
    case 1:
        drive_root(p, n);
        break;
    case 2:
        drive_rendezvous(p, n);
        break;
    default:
        drive_listener(p, n);
        break;
    }
    return 0;
}
