/*
 * topo_test.c: proves that topo_load (src/topo.c) reads hwloc topologies right.
 *
 * tests/data/topo_dgx.xml (2 packages x 16 cores, no SMT; switch s = 0..3 holds cuda2s, cuda2s+1
 * and mlx5_s; switches 0-1 under package 0's host bridge, 2-3 under package 1's): exact counts
 * (2 packages, 2 NUMA nodes, 32 cores, 32 PUs, 8 GPUs, 4 NICs, nothing else: the nvml and ib OS
 * devices of the same PCI devices are not extra devices, and each NIC is named after its mlx5
 * device), every device's bus id, NUMA node and cpus, and the whole 12 x 12 path matrix against
 * the layout: same device SELF, same switch PIX, same package PHB (one host bridge per package),
 * else SYS; every GPU's nearest NIC is its switch's, through PIX; topo_cpus_near of each NIC is
 * its package's cores; the binding of an XML topology is its whole machine (NUMA -1).
 * tests/data/topo_2socket.xml (2 packages x 8 cores x 2 PUs, PU n and n+16 siblings): counts,
 * one NIC eno1 on package 0 with cpus "0-7,16-23", no GPU. The same file with veth0 and lo added
 * under the machine: veth0 is a virtual NIC (no bus id, NUMA -1, no cpus, SYS to eno1, near cpus
 * fall back to the binding); lo is left out.
 * Live machine: loads, its binding is this process's sched_getaffinity, and the dump written
 * through topo_dump_file (%h and %p expanded) reloads to the same counts and devices.
 * Errors: a missing file, a garbage file, well-formed XML that is not a topology, and a dump into
 * a missing directory give chorusInvalidArgument with the variable and the path in
 * chorusGetLastError(NULL), and leave the output untouched.
 * Threads: 4 threads load the DGX file and dump to one path at once; all get the same answer.
 * Usage: topo_test DATA_DIR. Exit 0: all passed; 1: a check failed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "topo.h"

static const char *data_dir;
static char tmp_dir[256];

static void params_for(params_t *params, const char *topo_file, const char *dump_file)
{
    CHECK_OK(params_load(params));
    snprintf(params->topo_file, sizeof(params->topo_file), "%s", topo_file);
    snprintf(params->topo_dump_file, sizeof(params->topo_dump_file), "%s", dump_file);
}

static topo_t *load(const char *topo_file, const char *dump_file)
{
    params_t params;
    topo_t *topo = NULL;
    params_for(&params, topo_file, dump_file);
    chorusResult_t res = topo_load(&params, &topo);
    if (res != chorusSuccess) {
        FAIL("topo_load(%s): %s: %s", topo_file[0] ? topo_file : "live", chorusGetErrorString(res),
             chorusGetLastError(NULL));
        return NULL;
    }
    return topo;
}

static void cpus_range(cpu_set_t *set, int first, int n)
{
    CPU_ZERO(set);
    for (int i = first; i < first + n; i++)
        CPU_SET(i, set);
}

static void check_cpus(const char *what, const cpu_set_t *got, const cpu_set_t *want)
{
    char g[256], w[256];
    CHECK(CPU_EQUAL(got, want), "%s: cpus %s, want %s", what, topo_cpus_str(got, g, sizeof(g)),
          topo_cpus_str(want, w, sizeof(w)));
}

static void check_counts(const topo_t *t, int npackages, int nnuma, int ncores, int npus)
{
    CHECK(t->npackages == npackages, "%s: %d packages, want %d", t->source, t->npackages,
          npackages);
    CHECK(t->nnuma == nnuma, "%s: %d NUMA nodes, want %d", t->source, t->nnuma, nnuma);
    CHECK(t->ncores == ncores, "%s: %d cores, want %d", t->source, t->ncores, ncores);
    CHECK(t->npus == npus, "%s: %d PUs, want %d", t->source, t->npus, npus);
}

static int count_kind(const topo_t *t, topo_dev_kind_t kind)
{
    int n = 0;
    while (topo_find_dev(t, kind, n) >= 0)
        n++;
    return n;
}

/* ---- DGX-like box ---- */

/* Switch s: upstream port on bus base[s], downstream ports on base+1, devices on base+2+k. */
static const int dgx_switch_bus[4] = {0x01, 0x10, 0x81, 0x90};

/* Device d of the layout: 0..7 cuda<d>, 8..11 mlx5_<d-8>. Its switch and its package. */
static int dgx_switch(int d)
{
    return d < 8 ? d / 2 : d - 8;
}

static topo_path_t dgx_expected_path(int a, int b)
{
    if (a == b)
        return TOPO_PATH_SELF;
    if (dgx_switch(a) == dgx_switch(b))
        return TOPO_PATH_PIX;
    if (dgx_switch(a) / 2 == dgx_switch(b) / 2)
        return TOPO_PATH_PHB;
    return TOPO_PATH_SYS;
}

static void check_dgx(const topo_t *t)
{
    long before = harness_failures;
    int idx[12];
    check_counts(t, 2, 2, 32, 32);
    CHECK(t->ndevs == 12, "dgx: %d devices, want 12", t->ndevs);
    CHECK(count_kind(t, TOPO_DEV_GPU) == 8, "dgx: %d GPUs, want 8", count_kind(t, TOPO_DEV_GPU));
    CHECK(count_kind(t, TOPO_DEV_NIC) == 4, "dgx: %d NICs, want 4", count_kind(t, TOPO_DEV_NIC));
    CHECK(topo_find_dev_by_name(t, "nvml0") < 0, "dgx: nvml0 listed as a device of its own");
    CHECK(topo_find_dev_by_name(t, "ib0") < 0, "dgx: ib0 listed instead of (or beside) mlx5_0");
    cpu_set_t all;
    cpus_range(&all, 0, 32);
    check_cpus("dgx binding", &t->cpus, &all);
    CHECK(t->numa_node == -1, "dgx: binding NUMA node %d, want -1 (spans both)", t->numa_node);

    for (int d = 0; d < 12; d++) {
        char name[16], busid[16], what[64];
        int s = dgx_switch(d), pkg = s / 2;
        if (d < 8)
            snprintf(name, sizeof(name), "cuda%d", d);
        else
            snprintf(name, sizeof(name), "mlx5_%d", d - 8);
        snprintf(busid, sizeof(busid), "0000:%02x:00.0",
                 dgx_switch_bus[s] + 2 + (d < 8 ? d % 2 : 2));
        idx[d] = topo_find_dev_by_name(t, name);
        if (idx[d] < 0) {
            FAIL("dgx: no device %s", name);
            return;
        }
        const topo_dev_t *dev = &t->devs[idx[d]];
        topo_dev_kind_t kind = d < 8 ? TOPO_DEV_GPU : TOPO_DEV_NIC;
        CHECK(dev->kind == kind, "dgx: %s has kind %d, want %d", name, dev->kind, kind);
        CHECK(strcmp(dev->busid, busid) == 0, "dgx: %s busid %s, want %s", name, dev->busid, busid);
        CHECK(dev->numa_node == pkg, "dgx: %s NUMA %d, want %d", name, dev->numa_node, pkg);
        cpu_set_t want, near;
        cpus_range(&want, 16 * pkg, 16);
        snprintf(what, sizeof(what), "dgx: %s", name);
        check_cpus(what, &dev->cpus, &want);
        topo_cpus_near(t, idx[d], &near);
        snprintf(what, sizeof(what), "dgx: topo_cpus_near(%s)", name);
        check_cpus(what, &near, &want);
    }
    for (int a = 0; a < 12; a++)
        for (int b = 0; b < 12; b++) {
            topo_path_t got = t->path[idx[a]][idx[b]], want = dgx_expected_path(a, b);
            CHECK(got == want, "dgx: path %s -> %s is %s, want %s", t->devs[idx[a]].name,
                  t->devs[idx[b]].name, topo_path_name(got), topo_path_name(want));
        }
    for (int g = 0; g < 8; g++) {
        int nic = topo_nearest_nic(t, idx[g]);
        int want = idx[8 + g / 2];
        CHECK(nic == want, "dgx: nearest NIC of cuda%d is %s, want mlx5_%d", g,
              nic >= 0 ? t->devs[nic].name : "(none)", g / 2);
        CHECK(nic >= 0 && t->path[idx[g]][nic] == TOPO_PATH_PIX, "dgx: cuda%d to its NIC not PIX",
              g);
    }
    harness_report(before, "dgx: 2 packages, 32 cores, 8 GPUs, 4 NICs, paths PIX/PHB/SYS, "
                           "nearest NICs, NUMA and cpus of every device");
}

/* ---- 2-socket host ---- */

static void check_2socket(const topo_t *t)
{
    long before = harness_failures;
    char buf[64];
    check_counts(t, 2, 2, 16, 32);
    CHECK(t->ndevs == 1, "2socket: %d devices, want 1", t->ndevs);
    CHECK(topo_find_dev(t, TOPO_DEV_GPU, 0) < 0, "2socket: found a GPU");
    int nic = topo_find_dev(t, TOPO_DEV_NIC, 0);
    CHECK(nic == 0 && topo_find_dev_by_name(t, "eno1") == 0, "2socket: eno1 is not device 0");
    CHECK(topo_find_dev(t, TOPO_DEV_NIC, 1) < 0, "2socket: more than one NIC");
    if (nic == 0) {
        const topo_dev_t *d = &t->devs[0];
        cpu_set_t want, near;
        cpus_range(&want, 0, 8);
        for (int i = 16; i < 24; i++)
            CPU_SET(i, &want);
        CHECK(strcmp(d->busid, "0000:01:00.0") == 0, "2socket: busid %s", d->busid);
        CHECK(d->numa_node == 0, "2socket: eno1 NUMA %d, want 0", d->numa_node);
        check_cpus("2socket: eno1", &d->cpus, &want);
        topo_cpus_near(t, 0, &near);
        check_cpus("2socket: topo_cpus_near(eno1)", &near, &want);
        topo_cpus_str(&d->cpus, buf, sizeof(buf));
        CHECK(strcmp(buf, "0-7,16-23") == 0, "2socket: topo_cpus_str gives \"%s\"", buf);
        CHECK(topo_nearest_nic(t, 0) == 0 && t->path[0][0] == TOPO_PATH_SELF,
              "2socket: a NIC's nearest NIC is not itself through SELF");
    }
    cpu_set_t none;
    CPU_ZERO(&none);
    topo_cpus_str(&none, buf, sizeof(buf));
    CHECK(strcmp(buf, "none") == 0, "topo_cpus_str(empty) gives \"%s\"", buf);
    harness_report(before, "2socket: 2 packages, 16 cores, 32 PUs, eno1 on NUMA 0 cpus 0-7,16-23");
}

/* The 2-socket file with a virtual NIC (veth0) and the loopback (lo) added under the machine. */
static void check_virtual_nic(void)
{
    long before = harness_failures;
    char src[512], dst[512], line[1024];
    snprintf(src, sizeof(src), "%s/topo_2socket.xml", data_dir);
    snprintf(dst, sizeof(dst), "%s/virtual.xml", tmp_dir);
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    if (in == NULL || out == NULL) {
        FAIL("cannot copy %s to %s", src, dst);
        if (in)
            fclose(in);
        if (out)
            fclose(out);
        return;
    }
    while (fgets(line, sizeof(line), in) != NULL) {
        fputs(line, out);
        if (strstr(line, "name=\"ChorusTestTopology\"") != NULL)
            fputs("    <object type=\"OSDev\" name=\"lo\" osdev_type=\"2\"/>\n"
                  "    <object type=\"OSDev\" name=\"veth0\" osdev_type=\"2\"/>\n",
                  out);
    }
    fclose(in);
    fclose(out);
    topo_t *t = load(dst, "");
    if (t != NULL) {
        int eno = topo_find_dev_by_name(t, "eno1"), veth = topo_find_dev_by_name(t, "veth0");
        CHECK(t->ndevs == 2 && eno == 0 && veth == 1, "virtual: %d devices, eno1 %d, veth0 %d",
              t->ndevs, eno, veth);
        CHECK(topo_find_dev_by_name(t, "lo") < 0, "virtual: the loopback is listed as a NIC");
        if (t->ndevs == 2 && eno == 0 && veth == 1) {
            const topo_dev_t *v = &t->devs[1];
            CHECK(v->kind == TOPO_DEV_NIC && v->busid[0] == '\0' && v->numa_node == -1 &&
                      CPU_COUNT(&v->cpus) == 0,
                  "virtual: veth0 kind %d busid \"%s\" NUMA %d %d cpus", v->kind, v->busid,
                  v->numa_node, CPU_COUNT(&v->cpus));
            CHECK(t->path[0][1] == TOPO_PATH_SYS && t->path[1][0] == TOPO_PATH_SYS,
                  "virtual: eno1 <-> veth0 is %s/%s, want SYS", topo_path_name(t->path[0][1]),
                  topo_path_name(t->path[1][0]));
            CHECK(topo_nearest_nic(t, 1) == 1, "virtual: veth0's nearest NIC is not itself");
            cpu_set_t near;
            topo_cpus_near(t, 1, &near);
            check_cpus("virtual: topo_cpus_near(veth0) (the binding)", &near, &t->cpus);
        }
        topo_free(t);
    }
    unlink(dst);
    harness_report(before, "virtual: veth0 without PCI is a NIC with no bus id, NUMA -1, no cpus, "
                           "SYS to eno1; lo is left out");
}

/* ---- live machine and its dump ---- */

static void check_live(void)
{
    long before = harness_failures;
    char spec[512], path[512], host[256] = "";
    snprintf(spec, sizeof(spec), "%s/live-%%h-%%p.xml", tmp_dir);
    gethostname(host, sizeof(host) - 1);
    snprintf(path, sizeof(path), "%s/live-%s-%ld.xml", tmp_dir, host, (long)getpid());
    topo_t *live = load("", spec);
    if (live == NULL)
        return;
    CHECK(strcmp(live->source, "live") == 0, "live: source \"%s\"", live->source);
    CHECK(live->npackages >= 1 && live->nnuma >= 1 && live->ncores >= 1 &&
              live->ncores <= live->npus,
          "live: %d packages, %d NUMA, %d cores, %d PUs", live->npackages, live->nnuma,
          live->ncores, live->npus);
    cpu_set_t affinity;
    CHECK(sched_getaffinity(0, sizeof(affinity), &affinity) == 0, "sched_getaffinity failed");
    check_cpus("live binding vs sched_getaffinity", &live->cpus, &affinity);
    for (int i = 0; i < live->ndevs; i++)
        CHECK(live->devs[i].name[0] != '\0', "live: device %d has no name", i);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size > 0, "live: no dump at %s", path);
    topo_t *again = load(path, "");
    if (again != NULL) {
        check_counts(again, live->npackages, live->nnuma, live->ncores, live->npus);
        CHECK(again->ndevs == live->ndevs, "reloaded dump: %d devices, live %d", again->ndevs,
              live->ndevs);
        for (int i = 0; i < again->ndevs && i < live->ndevs; i++)
            CHECK(strcmp(again->devs[i].name, live->devs[i].name) == 0 &&
                      strcmp(again->devs[i].busid, live->devs[i].busid) == 0 &&
                      again->devs[i].kind == live->devs[i].kind,
                  "reloaded dump: device %d is %s %s, live %s %s", i, again->devs[i].name,
                  again->devs[i].busid, live->devs[i].name, live->devs[i].busid);
        topo_free(again);
    }
    harness_report(before,
                   "live: %d packages, %d NUMA, %d cores, %d PUs, %d devices; binding is "
                   "the process's; the dump reloads to the same",
                   live->npackages, live->nnuma, live->ncores, live->npus, live->ndevs);
    topo_free(live);
    unlink(path);
}

/* ---- errors ---- */

static void expect_refused(const char *what, const char *file, const char *dump, const char *word)
{
    params_t params;
    topo_t *sentinel = (topo_t *)&params, *topo = sentinel;
    params_for(&params, file, dump);
    chorusResult_t res = topo_load(&params, &topo);
    harness_expect_refused(what, res, chorusInvalidArgument, chorusGetLastError(NULL), word,
                           dump[0] ? tmp_dir : file);
    CHECK(topo == sentinel, "%s: the output was written on failure", what);
    if (res == chorusSuccess && topo != sentinel)
        topo_free(topo);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        FAIL("cannot create %s", path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

static void check_errors(void)
{
    long before = harness_failures;
    char missing[512], garbage[512], notopo[512], dgx[512], baddump[512];
    snprintf(missing, sizeof(missing), "%s/no-such-file.xml", tmp_dir);
    snprintf(garbage, sizeof(garbage), "%s/garbage.xml", tmp_dir);
    snprintf(notopo, sizeof(notopo), "%s/not-a-topology.xml", tmp_dir);
    snprintf(dgx, sizeof(dgx), "%s/topo_dgx.xml", data_dir);
    snprintf(baddump, sizeof(baddump), "%s/no-such-dir/dump.xml", tmp_dir);
    write_file(garbage, "\x01\x02 this is not XML at all <<<\n");
    write_file(notopo, "<?xml version=\"1.0\"?>\n<inventory><item/></inventory>\n");
    expect_refused("missing CHORUS_TOPO_FILE", missing, "", "CHORUS_TOPO_FILE");
    expect_refused("garbage CHORUS_TOPO_FILE", garbage, "", "CHORUS_TOPO_FILE");
    expect_refused("non-topology CHORUS_TOPO_FILE", notopo, "", "CHORUS_TOPO_FILE");
    expect_refused("unwritable CHORUS_TOPO_DUMP_FILE", dgx, baddump, "CHORUS_TOPO_DUMP_FILE");
    unlink(garbage);
    unlink(notopo);
    harness_report(before, "errors: missing, garbage and non-topology files and an unwritable dump "
                           "are chorusInvalidArgument naming the variable and the path");
}

/* ---- concurrent loads ---- */

#define NTHREADS 4
static topo_t *thread_topo[NTHREADS];
static char shared_dump[512];

static void *load_thread(void *arg)
{
    char file[512];
    snprintf(file, sizeof(file), "%s/topo_dgx.xml", data_dir);
    thread_topo[(long)arg] = load(file, shared_dump);
    return NULL;
}

static void check_threads(void)
{
    long before = harness_failures;
    pthread_t th[NTHREADS];
    snprintf(shared_dump, sizeof(shared_dump), "%s/shared-dump.xml", tmp_dir);
    int started = 0;
    for (long i = 0; i < NTHREADS; i++, started++)
        if (pthread_create(&th[i], NULL, load_thread, (void *)i) != 0) {
            FAIL("pthread_create failed");
            break;
        }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    /* Thread 0's answer against the layout (check_dgx), the others against thread 0's. */
    for (int i = 1; i < started; i++)
        if (thread_topo[0] != NULL && thread_topo[i] != NULL)
            CHECK(thread_topo[i]->ndevs == thread_topo[0]->ndevs &&
                      memcmp(thread_topo[i]->devs, thread_topo[0]->devs,
                             sizeof(thread_topo[0]->devs)) == 0 &&
                      memcmp(thread_topo[i]->path, thread_topo[0]->path,
                             sizeof(thread_topo[0]->path)) == 0,
                  "thread %d: devices or paths differ from thread 0's", i);
    if (thread_topo[0] != NULL)
        check_dgx(thread_topo[0]);
    for (int i = 0; i < started; i++)
        topo_free(thread_topo[i]);
    topo_t *dumped = load(shared_dump, "");
    if (dumped != NULL) {
        check_dgx(dumped);
        topo_free(dumped);
    }
    unlink(shared_dump);
    harness_report(before, "threads: %d concurrent loads agree; their shared dump is the DGX again",
                   NTHREADS);
}

int main(int argc, char **argv)
{
    char file[512];
    if (argc != 2) {
        fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
        return 2;
    }
    data_dir = argv[1];
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof(tmp_dir), "%s/chorus-topo-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(tmp_dir) == NULL) {
        fprintf(stderr, "cannot create %s\n", tmp_dir);
        return 1;
    }

    snprintf(file, sizeof(file), "%s/topo_dgx.xml", data_dir);
    topo_t *t = load(file, "");
    if (t != NULL) {
        check_dgx(t);
        topo_free(t);
    }
    snprintf(file, sizeof(file), "%s/topo_2socket.xml", data_dir);
    t = load(file, "");
    if (t != NULL) {
        check_2socket(t);
        topo_free(t);
    }
    check_virtual_nic();
    check_live();
    check_errors();
    check_threads();
    rmdir(tmp_dir);
    return harness_finish("topo: synthetic DGX and 2-socket XML, live machine, dumps, errors");
}
