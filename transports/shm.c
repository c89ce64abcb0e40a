/*
 * shm.c: the shared-memory transport for ranks on one host.
 *
 * The receiver owns the FIFO: a POSIX shm segment (control block + slots) created O_EXCL with mode
 * 0600, so only this user's processes can map it. The sender maps it by name and writes slots in
 * place. The receiver unlinks the name as soon as the sender has said it mapped the segment, so a
 * crash from then on leaves nothing in /dev/shm; the memory lives until both sides unmap it.
 */
#define _GNU_SOURCE
#include "transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "debug.h"

typedef struct shm_handle {
    char name[64];
    uint64_t map_nbytes;
    uint64_t slot_nbytes; /* the FIFO's shape, not just its bytes: STEPS x slot must both match */
    uint32_t steps;
    uint32_t reserved;
} shm_handle_t;
_Static_assert(sizeof(shm_handle_t) <= TRANSPORT_HANDLE_BYTES, "shm handle too large");

static int shm_can_connect(const peer_info_t *self, const peer_info_t *peer)
{
    return self->hostid_hash == peer->hostid_hash &&
           strncmp(self->hostid, peer->hostid, PEER_HOSTID_BYTES) == 0;
}

static size_t shm_map_nbytes(const conn_setup_t *s)
{
    return sizeof(fifo_ctrl_t) + s->slot_nbytes * (size_t)s->steps;
}

static void shm_bind(transport_res_t *res, const conn_setup_t *s, conn_t *conn)
{
    conn->ctrl = res->map;
    conn->slots = (char *)res->map + sizeof(fifo_ctrl_t);
    conn->slot_nbytes = s->slot_nbytes;
    conn->steps = s->steps;
    conn->step = 0;
    conn->peer = s->peer->rank;
    conn->transport = "shm";
}

static chorusResult_t shm_map(const char *name, size_t nbytes, int create, void **map_p)
{
    int fd = shm_open(name, create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
    if (fd < 0)
        return ERR(chorusSystemError, SUB_SHM,
                   "shm_open(%s) failed: %s (is /dev/shm mounted "
                   "and writable?)",
                   name, strerror(errno));
    if (create && ftruncate(fd, (off_t)nbytes) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return ERR(chorusSystemError, SUB_SHM,
                   "ftruncate(%s, %zu) failed: %s (is /dev/shm "
                   "full?)",
                   name, nbytes, strerror(e));
    }
    void *map = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        if (create)
            shm_unlink(name);
        return ERR(chorusSystemError, SUB_SHM, "mmap of %s (%zu bytes) failed: %s", name, nbytes,
                   strerror(e));
    }
    if (create) {
        /* Touch the pages now (ftruncate gives zeros): no page faults in the first collective. */
        memset(map, 0, nbytes);
    }
    *map_p = map;
    return chorusSuccess;
}

static chorusResult_t shm_setup(const conn_setup_t *s, transport_res_t *res, conn_t *conn,
                                transport_handle_t *handle_p)
{
    memset(res, 0, sizeof(*res));
    memset(handle_p, 0, sizeof(*handle_p));
    if (s->dir == CONN_SEND)
        return chorusSuccess; /* the sender owns nothing; it maps the receiver's segment */
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
        rnd = (uint32_t)fifo_now_ns();
    snprintf(res->name, sizeof(res->name), "/chorus-%d-%08x-%d-%d-%d", (int)getpid(), rnd,
             s->peer->rank, s->self->rank, s->tag);
    res->map_nbytes = shm_map_nbytes(s);
    CHECK(shm_map(res->name, res->map_nbytes, 1, &res->map));
    shm_bind(res, s, conn);
    shm_handle_t h;
    memset(&h, 0, sizeof(h));
    snprintf(h.name, sizeof(h.name), "%s", res->name);
    h.map_nbytes = res->map_nbytes;
    h.slot_nbytes = s->slot_nbytes;
    h.steps = (uint32_t)s->steps;
    memcpy(handle_p->bytes, &h, sizeof(h));
    TRACE(SUB_SHM, "created %s (%zu bytes) for recv from rank %d", res->name, res->map_nbytes,
          s->peer->rank);
    return chorusSuccess;
}

static chorusResult_t shm_connect(const conn_setup_t *s, const transport_handle_t *peer_handle,
                                  transport_res_t *res, conn_t *conn)
{
    if (s->dir == CONN_RECV) {
        /* The sender has mapped the segment: drop the name now. */
        if (shm_unlink(res->name) != 0)
            WARN(SUB_SHM, "shm_unlink(%s) failed: %s", res->name, strerror(errno));
        res->unlinked = 1;
        return chorusSuccess;
    }
    shm_handle_t h;
    memcpy(&h, peer_handle->bytes, sizeof(h));
    h.name[sizeof(h.name) - 1] = '\0';
    /* Equal bytes are not enough: 8 x 512K and 4 x 1M map the same size, but the two ends
     * would index slots by step % steps differently and hand over stale slots silently. */
    if (h.map_nbytes != shm_map_nbytes(s) || h.slot_nbytes != s->slot_nbytes ||
        h.steps != (uint32_t)s->steps)
        return ERR(chorusInvalidUsage, SUB_SHM,
                   "rank %d offers a FIFO of %u x %llu bytes where %d x %zu were expected: the "
                   "ranks run with different CHORUS_BUFFSIZE, CHORUS_P2P_BUFFSIZE or CHORUS_STEPS",
                   s->peer->rank, h.steps, (unsigned long long)h.slot_nbytes, s->steps,
                   s->slot_nbytes);
    snprintf(res->name, sizeof(res->name), "%s", h.name);
    res->map_nbytes = h.map_nbytes;
    CHECK(shm_map(res->name, res->map_nbytes, 0, &res->map));
    res->unlinked = 1; /* the owner unlinks */
    shm_bind(res, s, conn);
    return chorusSuccess;
}

static void shm_close(transport_res_t *res, conn_t *conn)
{
    if (res->map != NULL && !res->unlinked && shm_unlink(res->name) != 0 && errno != ENOENT)
        WARN(SUB_SHM, "shm_unlink(%s) failed: %s", res->name, strerror(errno));
    if (res->map != NULL && munmap(res->map, res->map_nbytes) != 0)
        WARN(SUB_SHM, "munmap of %s failed: %s", res->name, strerror(errno));
    res->map = NULL;
    memset(conn, 0, sizeof(*conn));
}

const transport_ops_t shm_transport = {
    .name = "shm",
    .can_connect = shm_can_connect,
    .setup = shm_setup,
    .connect = shm_connect,
    .close = shm_close,
};
