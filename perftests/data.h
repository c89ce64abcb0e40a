/*
 * data.h: the driver's view of data.c: dtype and op names, and the check of a result. What the
 * benchmarks themselves use (perf_dtype_size, perf_value, perf_reduced, perf_store) is in common.h.
 */
#ifndef CHORUS_PERF_DATA_H
#define CHORUS_PERF_DATA_H

#include <stddef.h>

#include "common.h"

/* nccl-tests' name of dtype ("float"), "?" if invalid. */
const char *perf_type_name(chorusDataType_t dtype);
/* nccl-tests' name of op ("sum"). */
const char *perf_op_name(chorusRedOp_t op);
/* The chorusDataType_t / chorusRedOp_t value a -d / -o name stands for (aliases too), or -1. */
int perf_type_lookup(const char *name);
int perf_op_lookup(const char *name);

/* Wrong elements of got against want (count elements of c->dtype): integers bit for bit, floats
 * by value (so +0 == -0 and NaN is always wrong). The first few mismatches go to stderr, naming
 * host, c->rank, the collective and the case. */
long long perf_compare(const perf_coll_t *coll, const char *host, const perf_case_t *c,
                       int in_place, const void *got, const void *want, size_t count);

#endif /* CHORUS_PERF_DATA_H */
