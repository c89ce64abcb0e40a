/*
 * shm.c: the shared-memory transport for ranks on one host.
 *
 * The receiver owns the FIFO: a POSIX shm segment (control block + slots) created O_EXCL with mode
 * 0600, so only this user's processes can map it. The sender maps it by name and writes slots in
 * place. The receiver unlinks the name as soon as the sender has said it mapped the segment, so a
 * crash from then on leaves nothing in /dev/shm; the memory lives until both sides unmap it.
 *
 * Two things guard /dev/shm itself:
 *  - The segment's pages are allocated (posix_fallocate) before it is mapped. ftruncate on a full
 *    tmpfs succeeds, and the first touch of a page it cannot back is a SIGBUS; fallocate says
 *    ENOSPC instead, which becomes an error naming /dev/shm, the bytes needed and the bytes free.
 *  - A process killed between setup and connect leaves its segment's name behind. The first
 *    segment a process creates sweeps such leftovers: /dev/shm/chorus-<pid>-* of this user whose
 *    <pid> is gone.
 */
#define _GNU_SOURCE
#include "transport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "debug.h"

/* Where glibc's shm_open puts its names on Linux. */
#define SHM_DIR "/dev/shm"
#define SHM_PREFIX "chorus-"

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
    conn->head_seen = 0;
    conn->peer = s->peer->rank;
    conn->transport = "shm";
}

/* The <pid> of a name "chorus-<pid>-...", or -1 for any other name. */
static long shm_name_pid(const char *entry)
{
    size_t plen = strlen(SHM_PREFIX);
    if (strncmp(entry, SHM_PREFIX, plen) != 0 || entry[plen] < '1' || entry[plen] > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    long pid = strtol(entry + plen, &end, 10);
    if (errno != 0 || *end != '-' || pid <= 0 || pid > INT32_MAX)
        return -1;
    return pid;
}

/* Unlink /dev/shm/chorus-<pid>-* entries of this user whose process is gone (kill(pid, 0) says
 * ESRCH): names a job killed during connection setup left behind. A live pid (even one reused by
 * an unrelated process) keeps its entries; other users' entries and other names are never touched.
 * Limit: a process in another pid namespace that shares this /dev/shm under the same uid looks
 * dead from here; only its setup window (create to connect) is exposed, and it then fails to
 * connect rather than corrupting anything. */
static void shm_sweep(void)
{
    DIR *d = opendir(SHM_DIR);
    if (d == NULL)
        return; /* shm_open reports a missing /dev/shm with its own error */
    uid_t uid = geteuid();
    long self = (long)getpid();
    int removed = 0, failed = 0, failed_errno = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = shm_name_pid(e->d_name);
        if (pid < 0 || pid == self)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != uid)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char name[300];
        snprintf(name, sizeof(name), "/%s", e->d_name);
        if (shm_unlink(name) == 0)
            removed++;
        else if (errno != ENOENT) { /* ENOENT: another process swept it first */
            failed++;
            failed_errno = errno;
        }
    }
    closedir(d);
    if (removed > 0)
        INFO(SUB_SHM,
             "removed %d stale " SHM_DIR "/" SHM_PREFIX "<pid>-* segment(s) of dead "
             "processes",
             removed);
    if (failed > 0)
        WARN(SUB_SHM,
             "could not remove %d stale " SHM_DIR "/" SHM_PREFIX "<pid>-* segment(s) of "
             "dead processes: %s",
             failed, strerror(failed_errno));
}

static pthread_once_t shm_sweep_once = PTHREAD_ONCE_INIT;

void shm_segment_name(char *name, size_t len, int from, int to, int tag)
{
    pthread_once(&shm_sweep_once, shm_sweep);
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
        rnd = (uint32_t)fifo_now_ns();
    snprintf(name, len, "/" SHM_PREFIX "%d-%08x-%d-%d-%d", (int)getpid(), rnd, from, to, tag);
}

/* Give the segment its pages now; ENOSPC is an error that says how much room /dev/shm lacks. */
static chorusResult_t shm_allocate(int fd, const char *name, size_t nbytes, int peer, int window)
{
    int rc;
    int tries = 0;
    /* tmpfs's fallocate stops with EINTR when a signal is pending; the next call goes on. */
    while ((rc = posix_fallocate(fd, 0, (off_t)nbytes)) == EINTR && ++tries < 100)
        ;
    if (rc == 0)
        return chorusSuccess;
    struct statvfs vfs;
    unsigned long long free_nbytes = 0, total_nbytes = 0;
    if (statvfs(SHM_DIR, &vfs) == 0) {
        free_nbytes = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
        total_nbytes = (unsigned long long)vfs.f_blocks * vfs.f_frsize;
    }
    const char *what = window ? "node-local window" : "shared-memory FIFO";
    const char *whose = window ? "of" : "from";
    if (rc == ENOSPC || rc == EFBIG)
        return ERR(chorusSystemError, SUB_SHM,
                   "%s is too small: the %s %s%s %s rank %d needs %zu bytes and %s has %llu bytes "
                   "free of %llu (posix_fallocate: %s). Give %s more room (containers: docker run "
                   "--shm-size=1g or more; Kubernetes: an emptyDir with medium: Memory on %s), or "
                   "%s",
                   SHM_DIR, what, SHM_DIR, name, whose, peer, nbytes, SHM_DIR, free_nbytes,
                   total_nbytes, strerror(rc), SHM_DIR, SHM_DIR,
                   window ? "make the windows smaller (CHORUS_DIRECT_BUFFSIZE)"
                          : "make each FIFO smaller with a lower CHORUS_BUFFSIZE or "
                            "CHORUS_P2P_BUFFSIZE, or use fewer channels (CHORUS_MAX_NCHANNELS)");
    return ERR(chorusSystemError, SUB_SHM,
               "posix_fallocate of %zu bytes for the %s " SHM_DIR
               "%s %s rank %d failed: %s (" SHM_DIR " has %llu bytes free of %llu)",
               nbytes, what, name, whose, peer, strerror(rc), free_nbytes, total_nbytes);
}

/*
 * The segments this process created and still maps, by name. A rank of the same process (ranks as
 * threads) that maps one gets the creator's mapping, counted, instead of a second mapping of the
 * same pages: each flag and buffer then has one address in the process, as it has for the
 * chorusMemAlloc memory zero-copy reads in place, and ThreadSanitizer pairs a release on one
 * rank's thread with the acquire on another's (with two mappings it saw two unrelated words).
 */
typedef struct shm_local {
    struct shm_local *next;
    char name[96];
    void *map;
    size_t nbytes;
    int refs;
} shm_local_t;

static pthread_mutex_t shm_local_lock = PTHREAD_MUTEX_INITIALIZER;
static shm_local_t *shm_local_list;
static pthread_once_t shm_local_once = PTHREAD_ONCE_INIT;

/* A fork while another thread holds the lock leaves the child's copy locked: hold it across. */
static void shm_local_lock_take(void)
{
    pthread_mutex_lock(&shm_local_lock);
}

static void shm_local_lock_drop(void)
{
    pthread_mutex_unlock(&shm_local_lock);
}

static void shm_local_atfork(void)
{
    pthread_atfork(shm_local_lock_take, shm_local_lock_drop, shm_local_lock_drop);
}

/* The creator's mapping of name, counted once more; NULL if this process did not create it. */
static void *shm_local_ref(const char *name, size_t nbytes)
{
    void *map = NULL;
    pthread_mutex_lock(&shm_local_lock);
    for (shm_local_t *l = shm_local_list; l != NULL && map == NULL; l = l->next)
        if (l->name[0] != '\0' && l->nbytes == nbytes && strcmp(l->name, name) == 0) {
            l->refs++;
            map = l->map;
        }
    pthread_mutex_unlock(&shm_local_lock);
    return map;
}

/* A segment just created: named here from now on (an older entry of the same name, unlinked
 * since, keeps its mapping but no longer answers to the name). Without memory, not shared. */
static void shm_local_add(const char *name, void *map, size_t nbytes)
{
    shm_local_t *l = calloc(1, sizeof(*l));
    if (l == NULL || strlen(name) >= sizeof(l->name)) {
        free(l);
        return;
    }
    pthread_once(&shm_local_once, shm_local_atfork);
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->map = map;
    l->nbytes = nbytes;
    l->refs = 1;
    pthread_mutex_lock(&shm_local_lock);
    for (shm_local_t *o = shm_local_list; o != NULL; o = o->next)
        if (strcmp(o->name, name) == 0)
            o->name[0] = '\0';
    l->next = shm_local_list;
    shm_local_list = l;
    pthread_mutex_unlock(&shm_local_lock);
}

int shm_segment_unmap(void *map, size_t nbytes)
{
    pthread_mutex_lock(&shm_local_lock);
    for (shm_local_t **pl = &shm_local_list; *pl != NULL; pl = &(*pl)->next) {
        shm_local_t *l = *pl;
        if (l->map != map)
            continue;
        if (--l->refs > 0) {
            pthread_mutex_unlock(&shm_local_lock);
            return 0;
        }
        *pl = l->next;
        free(l);
        break;
    }
    pthread_mutex_unlock(&shm_local_lock);
    return munmap(map, nbytes);
}

chorusResult_t shm_segment_map(const char *name, size_t nbytes, int create, int peer, int window,
                               void **map_p)
{
    chorusResult_t res;
    if (!create && (*map_p = shm_local_ref(name, nbytes)) != NULL)
        return chorusSuccess;
    int fd = shm_open(name, create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
    if (fd < 0)
        return ERR(chorusSystemError, SUB_SHM,
                   "shm_open(%s) for the %s %s rank %d failed: %s (is " SHM_DIR " mounted, "
                   "writable and not out of inodes?)",
                   name, window ? "window" : "FIFO",
                   window   ? "of"
                   : create ? "from"
                            : "to",
                   peer, strerror(errno));
    if (create)
        CHECK_GOTO(shm_allocate(fd, name, nbytes, peer, window), res, err_unlink);
    /* A peer's mapping is filled in now too (MAP_POPULATE) and touched below, as the creator's
     * is by the memset: no page faults in the first collectives. */
    void *map =
        mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED | (create ? 0 : MAP_POPULATE), fd, 0);
    if (map == MAP_FAILED) {
        res = ERR(chorusSystemError, SUB_SHM, "mmap of %s (%zu bytes) failed: %s", name, nbytes,
                  strerror(errno));
        goto err_unlink;
    }
    close(fd);
    if (create) {
        /* Touch the pages now (allocated and zero): no page faults in the first collective. */
        memset(map, 0, nbytes);
        shm_local_add(name, map, nbytes);
    } else if (window) {
        /* A peer only reads a window: each page read once now. On the VM of 2026-12-05 a
         * process's first touch of a shared page cost about 5 us even when mapped with
         * MAP_POPULATE (2 ranks, 8 B broadcast: the reader's calls 14, 30, 46, 62 took 5 us
         * each, one per 4 KiB of LL slots). */
        for (size_t o = 0; o < nbytes; o += 4096)
            (void)*(volatile const char *)((const char *)map + o);
    } else {
        /* The sender writes each page of a FIFO's slots once now (AMD VM, 2 ranks, broadcast
         * 256K then 512K, -w 2 -n 3: the 512K ring calls took 660-680 us each, 24 us with -w 7,
         * once each of the FIFO's 8 slots had been used; its first write to a page cost about
         * 3 us). An atomic or of 0 writes without changing a byte, whatever the receiver is
         * doing. */
        for (size_t o = (sizeof(fifo_ctrl_t) + 7) & ~(size_t)7; o < nbytes; o = (o | 4095) + 1)
            (void)__atomic_fetch_or((uint64_t *)(void *)((char *)map + o), 0, __ATOMIC_RELAXED);
    }
    *map_p = map;
    return chorusSuccess;
err_unlink:
    close(fd);
    if (create)
        shm_unlink(name);
    return res;
}

static chorusResult_t shm_setup(const conn_setup_t *s, transport_res_t *res, conn_t *conn,
                                transport_handle_t *handle_p)
{
    memset(res, 0, sizeof(*res));
    memset(handle_p, 0, sizeof(*handle_p));
    if (s->dir == CONN_SEND)
        return chorusSuccess; /* the sender owns nothing; it maps the receiver's segment */
    shm_segment_name(res->name, sizeof(res->name), s->peer->rank, s->self->rank, s->tag);
    res->map_nbytes = shm_map_nbytes(s);
    CHECK(shm_segment_map(res->name, res->map_nbytes, 1, s->peer->rank, 0, &res->map));
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
        shm_res_unlink(res); /* the sender has mapped the segment: drop the name now */
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
    CHECK(shm_segment_map(res->name, res->map_nbytes, 0, s->peer->rank, 0, &res->map));
    res->unlinked = 1; /* the owner unlinks */
    shm_bind(res, s, conn);
    return chorusSuccess;
}

void shm_res_unlink(transport_res_t *res)
{
    if (shm_unlink(res->name) != 0)
        WARN(SUB_SHM, "shm_unlink(%s) failed: %s", res->name, strerror(errno));
    res->unlinked = 1;
}

void shm_res_release(transport_res_t *res)
{
    if (res->map != NULL && !res->unlinked && shm_unlink(res->name) != 0 && errno != ENOENT)
        WARN(SUB_SHM, "shm_unlink(%s) failed: %s", res->name, strerror(errno));
    if (res->map != NULL && shm_segment_unmap(res->map, res->map_nbytes) != 0)
        WARN(SUB_SHM, "munmap of %s failed: %s", res->name, strerror(errno));
    res->map = NULL;
}

static void shm_close(transport_res_t *res, conn_t *conn)
{
    shm_res_release(res);
    memset(conn, 0, sizeof(*conn));
}

const transport_ops_t shm_transport = {
    .name = "shm",
    .can_connect = shm_can_connect,
    .setup = shm_setup,
    .connect = shm_connect,
    .close = shm_close,
};
