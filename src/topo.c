/*
 * topo.c: the host's topology (topo.h), read with hwloc from the live machine or from the XML file
 * named by CHORUS_TOPO_FILE, with every I/O object kept (bridges, PCI devices, OS devices).
 *
 * Devices, in hwloc's order: first the PCI devices that are GPUs or NICs, then the NICs without a
 * PCI device (virtual).
 * - GPU: a PCI device with an OS device of type COPROC (cuda0, opencl0d0, ze0) or of type GPU that
 *   is not a DRM node (nvml0, rsmi0; "card0"/"renderD128" alone are a display, like a BMC's VGA),
 *   or an NVIDIA (10de) PCI device of class 03xx without any (no driver loaded). One entry per PCI
 *   device, named after its OS device, cuda first, then nvml, then any COPROC, then any GPU; the
 *   bus id when it has none.
 * - NIC: a PCI device with OS devices of type NETWORK or OPENFABRICS; one entry per PCI device,
 *   named after its OPENFABRICS device if it has one (mlx5_0 over ib0), else its first NETWORK one.
 *   An OS device of those types without a PCI device (veth, bridges, rxe0) is a virtual NIC of its
 *   own, busid "", numa_node -1 and no cpus; the loopback "lo" is left out.
 * A device's numa_node and cpus come from its first non-I/O ancestor (where hwloc attached its
 * host bridge): numa_node is its NUMA node when its nodeset holds exactly one, else -1.
 *
 * Paths, from the closest common ancestor C of the two PCI devices in hwloc's tree:
 * - the same device: SELF.
 * - C a PCI-to-PCI bridge: PIX when each device is at most one bridge below C, else PXB. In the
 *   tree Linux gives, a PCIe switch is an upstream-port bridge over one downstream-port bridge per
 *   slot, so two devices of one switch sit one bridge below its upstream port (PIX), two functions
 *   of one card sit right under their common bridge (PIX), and anything crossing two switches is
 *   deeper (PXB). A hand-made tree that draws a switch as a single bridge gets PIX for its devices
 *   too; one that nests such single-bridge switches gets PIX where PXB is due.
 * - C the host bridge (root complex): PHB.
 * - C a CPU-side object (package, group, machine) whose nodeset is one NUMA node, and that lies
 *   inside one package or in a machine of one package: NODE.
 * - anything else (across NUMA nodes or packages): SYS. A virtual NIC is SYS to every other device.
 *
 * Binding: the live machine's is this process's (hwloc_get_cpubind, all threads), within the
 * allowed cpuset; an XML file's is its whole cpuset, since this process's binding means nothing on
 * another machine. numa_node is the NUMA node whose cpuset holds the whole binding, else -1.
 * Cpu sets hold OS indexes (what sched_setaffinity takes).
 *
 * Thread safety: each call has its own hwloc topology. XML import and export go through one lock,
 * since hwloc's libxml2 backend uses that library's process-wide state. A dump is written to a
 * temporary name and renamed, so concurrent dumps to one path never leave a torn file.
 */
#define _GNU_SOURCE
#include "topo.h"

#include <errno.h>
#include <fcntl.h>
#include <hwloc.h>
#include <hwloc/glibc-sched.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "debug.h"

#define PCI_VENDOR_NVIDIA 0x10de

static pthread_mutex_t topo_xml_lock = PTHREAD_MUTEX_INITIALIZER;

const char *topo_path_name(topo_path_t path)
{
    static const char *const names[] = {"SELF", "PIX", "PXB", "PHB", "NODE", "SYS"};
    return (unsigned)path < sizeof(names) / sizeof(names[0]) ? names[path] : "?";
}

const char *topo_cpus_str(const cpu_set_t *cpus, char *buf, size_t len)
{
    size_t off = 0;
    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, cpus))
            continue;
        int last = cpu;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, cpus))
            last++;
        int n = last == cpu ? snprintf(buf + off, len - off, "%s%d", off ? "," : "", cpu)
                            : snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", cpu, last);
        if (n < 0 || (size_t)n >= len - off)
            return buf; /* truncated: what fit */
        off += (size_t)n;
        cpu = last;
    }
    if (off == 0)
        snprintf(buf, len, "none");
    return buf;
}

int topo_find_dev(const topo_t *topo, topo_dev_kind_t kind, int n)
{
    for (int i = 0; i < topo->ndevs; i++)
        if (topo->devs[i].kind == kind && n-- == 0)
            return i;
    return -1;
}

int topo_find_dev_by_name(const topo_t *topo, const char *name)
{
    for (int i = 0; i < topo->ndevs; i++)
        if (strcmp(topo->devs[i].name, name) == 0)
            return i;
    return -1;
}

int topo_nearest_nic(const topo_t *topo, int dev)
{
    int best = -1;
    if (dev < 0 || dev >= topo->ndevs)
        return -1;
    for (int i = 0; i < topo->ndevs; i++)
        if (topo->devs[i].kind == TOPO_DEV_NIC &&
            (best < 0 || topo->path[dev][i] < topo->path[dev][best]))
            best = i;
    return best;
}

void topo_cpus_near(const topo_t *topo, int dev, cpu_set_t *cpus_p)
{
    cpu_set_t near;
    CPU_ZERO(&near);
    if (dev >= 0 && dev < topo->ndevs)
        CPU_AND(&near, &topo->devs[dev].cpus, &topo->cpus);
    *cpus_p = CPU_COUNT(&near) > 0 ? near : topo->cpus;
}

/* ---- devices ---------------------------------------------------------------------------- */

static int is_drm_name(const char *name)
{
    return strncmp(name, "card", 4) == 0 || strncmp(name, "renderD", 7) == 0 ||
           strncmp(name, "controlD", 8) == 0;
}

/* How well an OS device names a GPU: 0 when it does not make its PCI device a GPU. */
static int gpu_name_score(hwloc_obj_t os)
{
    const char *name = os->name ? os->name : "";
    hwloc_obj_osdev_type_t t = os->attr->osdev.type;
    if (t == HWLOC_OBJ_OSDEV_COPROC)
        return strncmp(name, "cuda", 4) == 0 ? 4 : 2;
    if (t == HWLOC_OBJ_OSDEV_GPU && !is_drm_name(name))
        return strncmp(name, "nvml", 4) == 0 ? 3 : 1;
    return 0;
}

static int is_net_osdev(hwloc_obj_t os)
{
    return os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
           os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
}

static void obj_to_cpus(hwloc_topology_t topology, hwloc_const_cpuset_t set, cpu_set_t *cpus_p)
{
    CPU_ZERO(cpus_p);
    if (set != NULL)
        hwloc_cpuset_to_glibc_sched_affinity(topology, set, cpus_p, sizeof(*cpus_p));
}

/* Append a device; objs[] keeps its hwloc object (the PCI device, NULL for a virtual NIC). */
static void add_dev(hwloc_topology_t topology, topo_t *topo, hwloc_obj_t *objs, int *dropped_p,
                    topo_dev_kind_t kind, const char *name, hwloc_obj_t pci)
{
    if (topo->ndevs == TOPO_MAX_DEVS) {
        (*dropped_p)++;
        return;
    }
    topo_dev_t *dev = &topo->devs[topo->ndevs];
    memset(dev, 0, sizeof(*dev));
    dev->kind = kind;
    snprintf(dev->name, sizeof(dev->name), "%s", name);
    dev->numa_node = -1;
    CPU_ZERO(&dev->cpus);
    if (pci != NULL) {
        struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
        snprintf(dev->busid, sizeof(dev->busid), "%04x:%02x:%02x.%x", a->domain, a->bus, a->dev,
                 a->func);
        hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topology, pci);
        if (local != NULL) {
            obj_to_cpus(topology, local->cpuset, &dev->cpus);
            if (local->nodeset != NULL && hwloc_bitmap_weight(local->nodeset) == 1)
                dev->numa_node = hwloc_bitmap_first(local->nodeset);
        }
    }
    objs[topo->ndevs++] = pci;
}

static void find_devs(hwloc_topology_t topology, topo_t *topo, hwloc_obj_t *objs, int *dropped_p)
{
    for (hwloc_obj_t pci = hwloc_get_next_pcidev(topology, NULL); pci != NULL;
         pci = hwloc_get_next_pcidev(topology, pci)) {
        hwloc_obj_t gpu = NULL, net = NULL;
        int gpu_score = 0;
        for (hwloc_obj_t os = pci->io_first_child; os != NULL; os = os->next_sibling) {
            if (os->type != HWLOC_OBJ_OS_DEVICE)
                continue;
            int score = gpu_name_score(os);
            if (score > gpu_score) {
                gpu = os;
                gpu_score = score;
            }
            if (is_net_osdev(os) &&
                (net == NULL || (net->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS &&
                                 os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)))
                net = os;
        }
        int nvidia_display = pci->attr->pcidev.vendor_id == PCI_VENDOR_NVIDIA &&
                             (pci->attr->pcidev.class_id >> 8) == 0x03;
        if (gpu != NULL || nvidia_display) {
            char busid[TOPO_NAME_BYTES];
            snprintf(busid, sizeof(busid), "%04x:%02x:%02x.%x", pci->attr->pcidev.domain,
                     pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
            add_dev(topology, topo, objs, dropped_p, TOPO_DEV_GPU,
                    gpu != NULL && gpu->name ? gpu->name : busid, pci);
        } else if (net != NULL) {
            add_dev(topology, topo, objs, dropped_p, TOPO_DEV_NIC, net->name ? net->name : "", pci);
        }
    }
    /* Virtual NICs: network OS devices with no PCI device above them. */
    for (hwloc_obj_t os = hwloc_get_next_osdev(topology, NULL); os != NULL;
         os = hwloc_get_next_osdev(topology, os)) {
        if (!is_net_osdev(os) || os->name == NULL || strcmp(os->name, "lo") == 0)
            continue;
        hwloc_obj_t up = os->parent;
        while (up != NULL && up->type == HWLOC_OBJ_OS_DEVICE)
            up = up->parent;
        if (up == NULL || up->type != HWLOC_OBJ_PCI_DEVICE)
            add_dev(topology, topo, objs, dropped_p, TOPO_DEV_NIC, os->name, NULL);
    }
}

/* ---- paths ------------------------------------------------------------------------------ */

/* The closest object that is an ancestor of both (or one of them). hwloc's own helper compares
 * depths, which I/O objects do not have in a usable order, so walk parent pointers instead. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
    for (hwloc_obj_t x = a; x != NULL; x = x->parent)
        for (hwloc_obj_t y = b; y != NULL; y = y->parent)
            if (x == y)
                return x;
    return NULL;
}

/* Bridges strictly between obj and its ancestor top. */
static int bridges_between(hwloc_obj_t obj, hwloc_obj_t top)
{
    int n = 0;
    for (hwloc_obj_t x = obj->parent; x != NULL && x != top; x = x->parent)
        n += x->type == HWLOC_OBJ_BRIDGE;
    return n;
}

static topo_path_t path_between(hwloc_topology_t topology, int npackages, hwloc_obj_t a,
                                hwloc_obj_t b)
{
    if (a == NULL || b == NULL)
        return TOPO_PATH_SYS; /* a virtual NIC */
    if (a == b)
        return TOPO_PATH_SELF;
    hwloc_obj_t c = common_ancestor(a, b);
    if (c == NULL)
        return TOPO_PATH_SYS;
    if (c->type == HWLOC_OBJ_BRIDGE) {
        if (c->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST)
            return TOPO_PATH_PHB;
        return bridges_between(a, c) <= 1 && bridges_between(b, c) <= 1 ? TOPO_PATH_PIX
                                                                        : TOPO_PATH_PXB;
    }
    if (hwloc_obj_type_is_io(c->type))
        return TOPO_PATH_PIX; /* a PCI device above another: not built by hwloc, kept safe */
    int one_package = npackages <= 1 || c->type == HWLOC_OBJ_PACKAGE ||
                      hwloc_get_ancestor_obj_by_type(topology, HWLOC_OBJ_PACKAGE, c) != NULL;
    if (one_package && c->nodeset != NULL && hwloc_bitmap_weight(c->nodeset) == 1)
        return TOPO_PATH_NODE;
    return TOPO_PATH_SYS;
}

/* ---- loading ---------------------------------------------------------------------------- */

/* The live machine, read once per process: a load with I/O devices costs about 70 ms here, and
 * every communicator (and every split) reads the topology. Each caller gets a copy
 * (hwloc_topology_dup); the cached original lives as long as the process. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static hwloc_topology_t live_cache;

static chorusResult_t open_topology(const params_t *params, hwloc_topology_t *topology_p);

static chorusResult_t open_live(const params_t *params, hwloc_topology_t *topology_p)
{
    chorusResult_t res = chorusSuccess;
    pthread_mutex_lock(&live_lock);
    if (live_cache == NULL)
        res = open_topology(params, &live_cache);
    if (res == chorusSuccess && hwloc_topology_dup(topology_p, live_cache) != 0)
        res = ERR(chorusSystemError, SUB_GRAPH, "hwloc_topology_dup failed: %s", strerror(errno));
    pthread_mutex_unlock(&live_lock);
    return res;
}

static chorusResult_t open_topology(const params_t *params, hwloc_topology_t *topology_p)
{
    hwloc_topology_t topology = NULL;
    const char *file = params->topo_file;
    if (hwloc_topology_init(&topology) != 0)
        return ERR(chorusSystemError, SUB_GRAPH, "hwloc_topology_init failed: %s", strerror(errno));
    hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (file[0] == '\0') {
        /* Linux's own backend reads PCI from sysfs just as well; the libpciaccess plugin ("pci")
         * leaks about 1 KiB per load, which a leak checker around communicator init would see. */
        hwloc_topology_set_components(topology, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
        if (hwloc_topology_load(topology) != 0) {
            int e = errno;
            hwloc_topology_destroy(topology);
            return ERR(chorusSystemError, SUB_GRAPH,
                       "hwloc could not read this machine's topology (hwloc_topology_load: %s)",
                       strerror(e));
        }
        *topology_p = topology;
        return chorusSuccess;
    }

    /* hwloc says only EINVAL for a file it cannot read; say whether it is missing first. */
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        hwloc_topology_destroy(topology);
        return ERR(chorusInvalidArgument, SUB_GRAPH, "CHORUS_TOPO_FILE=%s: cannot open it: %s",
                   file, strerror(e));
    }
    close(fd);
    const char *call = "hwloc_topology_set_xml";
    int rc, e = 0;
    pthread_mutex_lock(&topo_xml_lock);
    rc = hwloc_topology_set_xml(topology, file);
    if (rc == 0) {
        call = "hwloc_topology_load";
        rc = hwloc_topology_load(topology);
    }
    if (rc != 0)
        e = errno;
    pthread_mutex_unlock(&topo_xml_lock);
    if (rc != 0) {
        hwloc_topology_destroy(topology);
        return ERR(chorusInvalidArgument, SUB_GRAPH,
                   "CHORUS_TOPO_FILE=%s is not a topology hwloc can read (%s: %s); write one "
                   "with `lstopo --of xml` (HWLOC_XML_VERBOSE=1 makes hwloc say more)",
                   file, call, strerror(e));
    }
    *topology_p = topology;
    return chorusSuccess;
}

static void read_binding(hwloc_topology_t topology, int live, topo_t *topo)
{
    hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(topology);
    hwloc_bitmap_t bind = hwloc_bitmap_alloc();
    if (bind == NULL || !live || hwloc_get_cpubind(topology, bind, HWLOC_CPUBIND_PROCESS) != 0) {
        hwloc_bitmap_free(bind);
        bind = hwloc_bitmap_dup(hwloc_get_root_obj(topology)->cpuset);
    } else {
        hwloc_bitmap_and(bind, bind, allowed);
        if (hwloc_bitmap_iszero(bind))
            hwloc_bitmap_copy(bind, allowed);
    }
    obj_to_cpus(topology, bind, &topo->cpus);
    topo->numa_node = -1;
    hwloc_obj_t node = NULL;
    while (bind != NULL && !hwloc_bitmap_iszero(bind) &&
           (node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, node)) != NULL) {
        if (node->cpuset != NULL && hwloc_bitmap_isincluded(bind, node->cpuset)) {
            topo->numa_node = (int)node->os_index;
            break;
        }
    }
    hwloc_bitmap_free(bind);
}

/* params->topo_dump_file with %h (host name), %p (pid) and %% replaced. */
static void dump_path(const char *spec, char *out, size_t len)
{
    char host[256] = "unknown";
    size_t off = 0;
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    out[0] = '\0';
    for (const char *s = spec; *s != '\0' && off + 1 < len; s++) {
        int n;
        if (s[0] == '%' && s[1] == 'h') {
            n = snprintf(out + off, len - off, "%s", host);
            s++;
        } else if (s[0] == '%' && s[1] == 'p') {
            n = snprintf(out + off, len - off, "%ld", (long)getpid());
            s++;
        } else if (s[0] == '%' && s[1] == '%') {
            n = snprintf(out + off, len - off, "%%");
            s++;
        } else {
            n = snprintf(out + off, len - off, "%c", *s);
        }
        if (n < 0 || (size_t)n >= len - off)
            break;
        off += (size_t)n;
    }
}

static chorusResult_t dump_topology(hwloc_topology_t topology, const char *spec)
{
    char path[PATH_MAX], tmp[PATH_MAX + 64];
    dump_path(spec, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.%ld.%ld.tmp", path, (long)getpid(), (long)syscall(SYS_gettid));
    pthread_mutex_lock(&topo_xml_lock);
    int rc = hwloc_topology_export_xml(topology, tmp, 0);
    int e = errno;
    pthread_mutex_unlock(&topo_xml_lock);
    if (rc != 0) {
        unlink(tmp);
        return ERR(chorusInvalidArgument, SUB_GRAPH,
                   "CHORUS_TOPO_DUMP_FILE=%s: cannot write %s (hwloc_topology_export_xml: %s)",
                   spec, tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return ERR(chorusInvalidArgument, SUB_GRAPH,
                   "CHORUS_TOPO_DUMP_FILE=%s: cannot rename %s to %s: %s", spec, tmp, path,
                   strerror(e));
    }
    INFO(SUB_GRAPH, "topo: wrote the topology to %s (CHORUS_TOPO_DUMP_FILE)", path);
    return chorusSuccess;
}

static void log_topology(const topo_t *topo, int dropped)
{
    char cpus[256];
    INFO(SUB_GRAPH,
         "topo: %s: %d packages, %d NUMA nodes, %d cores, %d PUs; bound to cpus %s (NUMA %d); "
         "%d devices",
         topo->source, topo->npackages, topo->nnuma, topo->ncores, topo->npus,
         topo_cpus_str(&topo->cpus, cpus, sizeof(cpus)), topo->numa_node, topo->ndevs);
    if (dropped > 0)
        INFO(SUB_GRAPH, "topo: %d more GPUs/NICs left out (TOPO_MAX_DEVS is %d)", dropped,
             TOPO_MAX_DEVS);
    for (int i = 0; i < topo->ndevs; i++) {
        const topo_dev_t *d = &topo->devs[i];
        char near[TOPO_NAME_BYTES + 32] = "";
        int nic = d->kind == TOPO_DEV_GPU ? topo_nearest_nic(topo, i) : -1;
        if (nic >= 0)
            snprintf(near, sizeof(near), "; nearest NIC %s (%s)", topo->devs[nic].name,
                     topo_path_name(topo->path[i][nic]));
        INFO(SUB_GRAPH, "topo: %s %d %s busid %s NUMA %d cpus %s%s",
             d->kind == TOPO_DEV_GPU ? "GPU" : "NIC", i, d->name,
             d->busid[0] ? d->busid : "(virtual)", d->numa_node,
             topo_cpus_str(&d->cpus, cpus, sizeof(cpus)), near);
    }
    if (debug_level >= LOG_TRACE && (debug_subsys & SUB_GRAPH)) {
        for (int i = 0; i < topo->ndevs; i++) {
            char row[TOPO_MAX_DEVS * 5 + 1];
            size_t off = 0;
            for (int j = 0; j < topo->ndevs; j++)
                off += (size_t)snprintf(row + off, sizeof(row) - off, " %-4s",
                                        topo_path_name(topo->path[i][j]));
            TRACE(SUB_GRAPH, "topo: paths from %s:%s", topo->devs[i].name, row);
        }
    }
}

chorusResult_t topo_load(const params_t *params, topo_t **topo_p)
{
    chorusResult_t res;
    hwloc_topology_t topology = NULL;
    hwloc_obj_t objs[TOPO_MAX_DEVS];
    int dropped = 0;
    int live = params->topo_file[0] == '\0';

    CHECK(debug_init()); /* once per process; a test may load a topology before any communicator */
    CHECK(live ? open_live(params, &topology) : open_topology(params, &topology));
    topo_t *topo = calloc(1, sizeof(*topo));
    if (topo == NULL) {
        res = ERR(chorusSystemError, SUB_GRAPH, "topo: cannot allocate %zu bytes", sizeof(*topo));
        goto err_destroy;
    }
    snprintf(topo->source, sizeof(topo->source), "%s", live ? "live" : params->topo_file);
    topo->npackages = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE);
    topo->nnuma = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
    topo->ncores = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE);
    topo->npus = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU);
    /* hwloc always has a NUMA node and PUs; packages and cores may be unknown (some VMs, ARM). */
    if (topo->npackages < 1)
        topo->npackages = 1;
    if (topo->nnuma < 1)
        topo->nnuma = 1;
    if (topo->ncores < 1)
        topo->ncores = topo->npus;
    read_binding(topology, live, topo);

    find_devs(topology, topo, objs, &dropped);
    for (int i = 0; i < topo->ndevs; i++)
        for (int j = 0; j < topo->ndevs; j++)
            topo->path[i][j] =
                i == j ? TOPO_PATH_SELF : path_between(topology, topo->npackages, objs[i], objs[j]);

    if (params->topo_dump_file[0] != '\0')
        CHECK_GOTO(dump_topology(topology, params->topo_dump_file), res, err_free);
    if (debug_level >= LOG_INFO && (debug_subsys & SUB_GRAPH))
        log_topology(topo, dropped);
    topo->priv = topology;
    *topo_p = topo;
    return chorusSuccess;

err_free:
    free(topo);
err_destroy:
    hwloc_topology_destroy(topology);
    return res;
}

void topo_free(topo_t *topo)
{
    if (topo == NULL)
        return;
    if (topo->priv != NULL)
        hwloc_topology_destroy((hwloc_topology_t)topo->priv);
    free(topo);
}
