/*
 * topo.h: what this rank's host looks like (DESIGN section 4), read with hwloc.
 *
 * topo_load() reads the live machine, or the hwloc XML named by CHORUS_TOPO_FILE, into a topo_t:
 * NUMA nodes, cores, this process's CPU binding, and the PCI devices that matter to a
 * communication library (GPUs and NICs) with the NUMA node and cpuset each one is attached to and
 * the PCI path type between any two of them (NCCL's PIX/PXB/PHB/NODE/SYS). CHORUS_TOPO_DUMP_FILE
 * writes what was read as hwloc XML, so a user can see it and a test can reload it.
 *
 * Nothing else in Chorus includes hwloc.h: the rest of the library asks this module.
 */
#ifndef CHORUS_TOPO_H
#define CHORUS_TOPO_H

#include <sched.h>
#include <stdint.h>

#include "chorus.h"
#include "params.h"

#define TOPO_MAX_DEVS 32
#define TOPO_NAME_BYTES 32

typedef enum { TOPO_DEV_GPU = 0, TOPO_DEV_NIC = 1 } topo_dev_kind_t;

/* Path types between two devices, closest first (NCCL's names). */
typedef enum {
    TOPO_PATH_SELF = 0, /* the same device */
    TOPO_PATH_PIX = 1, /* through at most one PCI switch */
    TOPO_PATH_PXB = 2, /* through several PCI switches, not the host bridge */
    TOPO_PATH_PHB = 3, /* through the PCI host bridge (same CPU package root complex) */
    TOPO_PATH_NODE = 4, /* through the CPU, same NUMA node */
    TOPO_PATH_SYS = 5, /* across NUMA nodes / sockets */
} topo_path_t;

typedef struct topo_dev {
    topo_dev_kind_t kind;
    char name[TOPO_NAME_BYTES]; /* NIC: OS name (eth0, mlx5_0); GPU: OS name (cuda0, nvml0, ...) */
    char busid[TOPO_NAME_BYTES]; /* PCI bus id "0000:07:00.0"; "" for a virtual NIC */
    int numa_node; /* OS index of the nearest NUMA node; -1 when unknown */
    cpu_set_t cpus; /* cores local to the device, OS indexes (empty when unknown) */
} topo_dev_t;

typedef struct topo {
    char source[PARAM_STR_MAX]; /* "live" or the XML file it came from */
    int nnuma; /* NUMA nodes (1 on a machine without NUMA) */
    int npackages; /* CPU packages (sockets) */
    int ncores; /* physical cores */
    int npus; /* hardware threads */
    int numa_node; /* NUMA node this process is bound inside; -1 when bound across several */
    cpu_set_t cpus; /* this process's CPU binding, as the machine (or XML) allows it */
    int ndevs; /* GPUs and NICs, in hwloc's order */
    topo_dev_t devs[TOPO_MAX_DEVS];
    topo_path_t path[TOPO_MAX_DEVS][TOPO_MAX_DEVS]; /* path type between devs[i] and devs[j] */
    void *priv; /* the hwloc topology, for topo.c only */
} topo_t;

/* Read the topology (params->topo_file or the live machine) and write params->topo_dump_file when
 * set. Thread safe; several communicators in one process each get their own topo_t. */
chorusResult_t topo_load(const params_t *params, topo_t **topo_p);
void topo_free(topo_t *topo);

/* Index in devs[] of the n-th device of a kind (n from 0), -1 when there are fewer. */
int topo_find_dev(const topo_t *topo, topo_dev_kind_t kind, int n);
/* Index in devs[] of the device called name (a NIC's interface or a GPU's OS name), -1 if none. */
int topo_find_dev_by_name(const topo_t *topo, const char *name);
/* The NIC closest to devs[dev] (smallest path type, ties to the lower index; a NIC's is itself);
 * -1 when none. */
int topo_nearest_nic(const topo_t *topo, int dev);
/* Cores a helper thread serving devs[dev] should run on: the device's local cores that are also
 * in this process's binding; when that is empty, the process's binding. */
void topo_cpus_near(const topo_t *topo, int dev, cpu_set_t *cpus_p);
/* "PIX", "PXB", ... for logs. */
const char *topo_path_name(topo_path_t path);
/* "0-3,8-11" for logs (OS indexes; "none" for an empty set). */
const char *topo_cpus_str(const cpu_set_t *cpus, char *buf, size_t len);

#endif /* CHORUS_TOPO_H */
