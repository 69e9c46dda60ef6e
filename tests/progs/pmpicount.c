/* A small PMPI tool, as mpiP or Darshan are: it defines MPI_Init, MPI_Send,
 * MPI_Init_thread, MPI_Recv, MPI_Isend, MPI_Irecv and MPI_Allreduce, counts their calls and
 * bytes, and passes each to its PMPI_ function. At MPI_Finalize every rank
 * writes its counts to $PMPICOUNT_DIR/rank-<world rank>.txt. Bytes are
 * count x type size as the caller passed them, and for MPI_Recv what the
 * status says arrived (so a tracer's piggyback must not show through).
 *
 * Built as a shared object to preload (before or after pmtrace), or as an
 * object linked into a program. Built with -DPMPICOUNT_DLSYM it finds each
 * PMPI_ function with dlsym(RTLD_NEXT) instead of linking to it, as
 * Darshan's preload build does. Of its own it calls only PMPI_Type_size,
 * PMPI_Get_count and PMPI_Comm_rank, and counts those calls too ("own"
 * lines), since a tracer stacked with it sees them. */
#ifdef PMPICOUNT_DLSYM
#define _GNU_SOURCE
#include <dlfcn.h>
#endif
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef PMPICOUNT_DLSYM
static void *next_function(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "pmpicount: no %s\n", name);
        abort();
    }
    return f;
}
#define REAL(f) ((__typeof__(&f))next_function(#f))
#else
#define REAL(f) f
#endif

enum { INIT, INIT_THREAD, SEND, RECV, ISEND, IRECV, ALLREDUCE, N };
static long long calls[N], bytes[N];
static long long own_type_size, own_get_count;
static const char *const names[N] = {"MPI_Init", "MPI_Init_thread", "MPI_Send", "MPI_Recv",
                                     "MPI_Isend", "MPI_Irecv", "MPI_Allreduce"};

static void count(int which, int n, MPI_Datatype type) {
    int size = 0;
    calls[which]++;
    if (n <= 0)
        return;
    own_type_size++;
    if (REAL(PMPI_Type_size)(type, &size) == MPI_SUCCESS)
        bytes[which] += (long long)n * size;
}

int MPI_Init(int *argc, char ***argv) {
    calls[INIT]++;
    return REAL(PMPI_Init)(argc, argv);
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    calls[INIT_THREAD]++;
    return REAL(PMPI_Init_thread)(argc, argv, required, provided);
}

int MPI_Send(const void *buf, int n, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    count(SEND, n, type);
    return REAL(PMPI_Send)(buf, n, type, dest, tag, comm);
}

int MPI_Recv(void *buf, int n, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status *status) {
    MPI_Status own;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &own : status;
    int rc = REAL(PMPI_Recv)(buf, n, type, source, tag, comm, st);
    int got = 0;
    calls[RECV]++;
    if (rc != MPI_SUCCESS)
        return rc;
    own_get_count++;
    if (REAL(PMPI_Get_count)(st, MPI_BYTE, &got) == MPI_SUCCESS && got != MPI_UNDEFINED)
        bytes[RECV] += got;
    return rc;
}

int MPI_Isend(const void *buf, int n, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request *req) {
    count(ISEND, n, type);
    return REAL(PMPI_Isend)(buf, n, type, dest, tag, comm, req);
}

int MPI_Irecv(void *buf, int n, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request *req) {
    count(IRECV, n, type);
    return REAL(PMPI_Irecv)(buf, n, type, source, tag, comm, req);
}

int MPI_Allreduce(const void *in, void *out, int n, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
    count(ALLREDUCE, n, type);
    return REAL(PMPI_Allreduce)(in, out, n, type, op, comm);
}

int MPI_Finalize(void) {
    const char *dir = getenv("PMPICOUNT_DIR");
    int rank = 0;
    REAL(PMPI_Comm_rank)(MPI_COMM_WORLD, &rank);
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank-%d.txt", dir, rank);
        FILE *f = fopen(path, "w");
        if (f) {
            for (int i = 0; i < N; i++)
                fprintf(f, "%s %lld calls %lld bytes\n", names[i], calls[i], bytes[i]);
            fprintf(f, "own MPI_Type_size %lld\nown MPI_Get_count %lld\nown MPI_Comm_rank 1\n",
                    own_type_size, own_get_count);
            fclose(f);
        }
    }
    return REAL(PMPI_Finalize)();
}
