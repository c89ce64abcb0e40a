#!/usr/bin/env bash
# hostid_wrap.sh RANKS_PER_HOST PROGRAM ARGS...: run PROGRAM as if its rank sat on simulated host
# rank / RANKS_PER_HOST, by setting CHORUS_HOSTID=simhost<k> (DESIGN section 4: the host id is
# hostname + boot id unless CHORUS_HOSTID overrides it), then exec'ing PROGRAM.
#
# The rank comes from the launcher: OMPI_COMM_WORLD_RANK (Open MPI's mpirun), PMIX_RANK or
# PMI_RANK (other MPIs, srun), else CHORUS_RANK (env launch). Example, 2 hosts x 2 ranks:
#   mpirun -np 4 --oversubscribe tests/support/hostid_wrap.sh 2 build/tests/coll_matrix_mpi
# Ranks on one simulated host talk over shm; ranks on different ones need the net transport.
set -euo pipefail

usage() {
    echo "usage: $0 RANKS_PER_HOST PROGRAM [ARGS...]" >&2
    exit 2
}
[ $# -ge 2 ] || usage
per_host=$1
shift
if ! [[ $per_host =~ ^[1-9][0-9]*$ ]]; then
    echo "hostid_wrap.sh: RANKS_PER_HOST must be a positive integer, got '$per_host'" >&2
    usage
fi

rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-${CHORUS_RANK:-}}}}
if ! [[ $rank =~ ^[0-9]+$ ]]; then
    echo "hostid_wrap.sh: no rank: set by mpirun (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK) or" \
        "CHORUS_RANK; got '${rank}'" >&2
    exit 2
fi

export CHORUS_HOSTID=simhost$((rank / per_host))
exec "$@"
