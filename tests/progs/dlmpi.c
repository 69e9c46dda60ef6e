/* An MPI program that links no MPI: it opens the library named by argv[1]
 * with dlopen (RTLD_LOCAL | RTLD_DEEPBIND by default, as Julia opens the
 * C libraries packaged for it; argv[2] = "local" for RTLD_LOCAL alone) and
 * calls every MPI function through a pointer from dlsym on that handle.
 * Open MPI's predefined handles are its objects, looked up the same way.
 *
 * argv[2] = "deep" LIBRARY: as Julia runs t8code under MPI.jl. It opens
 * the MPI library as above, then LIBRARY (this file built with -DLIBRARY:
 * the traffic, linked with its MPI as usual, so that it needs libmpi) with
 * RTLD_LAZY | RTLD_DEEPBIND, and calls the traffic through dlsym: the
 * library's own calls are bound to the MPI library first, past any
 * preloaded one. argv[2] = "ctor" LIBRARY: the same, but LIBRARY calls
 * MPI_Init from its constructor, inside dlopen.
 *
 * Built with -DLINKED it is the same program linked with its MPI as usual
 * (`traffic`), which takes no argument.
 *
 * Traffic: a ring of blocking sends, a nonblocking exchange with both
 * neighbours, wildcard receives at rank 0, and collectives. Rank 0 prints
 * the library's version and the results. Compiled with the setup's mpicc
 * (for mpi.h) and linked with the plain C compiler (Makefile). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include "expect.h"

#if !defined(LINKED) && !defined(LIBRARY)
static void *lib;

static void *sym(const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "dlmpi: %s\n", dlerror());
        exit(3);
    }
    return f;
}

#ifdef OPEN_MPI
#undef OMPI_PREDEFINED_GLOBAL
#define OMPI_PREDEFINED_GLOBAL(type, global) ((type) sym(#global))
#endif

#define FUNCTIONS(X)                                                                   \
    X(MPI_Init) X(MPI_Finalize) X(MPI_Comm_rank) X(MPI_Comm_size) X(MPI_Send)          \
    X(MPI_Recv) X(MPI_Isend) X(MPI_Irecv) X(MPI_Waitall) X(MPI_Sendrecv)               \
    X(MPI_Allreduce) X(MPI_Reduce) X(MPI_Bcast) X(MPI_Allgather) X(MPI_Barrier)        \
    X(MPI_Get_library_version) X(MPI_Get_count)

#define DECLARE(name) static __typeof__(&name) p_##name;
FUNCTIONS(DECLARE)
#define LOAD(name) p_##name = (__typeof__(p_##name))sym(#name);

/* From here on every MPI_X names the pointer (expect.h's C() counts the
 * call under the name it was given). */
#define MPI_Init p_MPI_Init
#define MPI_Finalize p_MPI_Finalize
#define MPI_Comm_rank p_MPI_Comm_rank
#define MPI_Comm_size p_MPI_Comm_size
#define MPI_Send p_MPI_Send
#define MPI_Recv p_MPI_Recv
#define MPI_Isend p_MPI_Isend
#define MPI_Irecv p_MPI_Irecv
#define MPI_Waitall p_MPI_Waitall
#define MPI_Sendrecv p_MPI_Sendrecv
#define MPI_Allreduce p_MPI_Allreduce
#define MPI_Reduce p_MPI_Reduce
#define MPI_Bcast p_MPI_Bcast
#define MPI_Allgather p_MPI_Allgather
#define MPI_Barrier p_MPI_Barrier
#define MPI_Get_library_version p_MPI_Get_library_version
#define MPI_Get_count p_MPI_Get_count
#endif

#ifdef LIBRARY
/* Set by the constructor when it initialised MPI (DLMPI_INIT_EARLY). */
static int initialised_early;

__attribute__((constructor)) static void init_early(void) {
    if (getenv("DLMPI_INIT_EARLY")) {
        MPI_Init(NULL, NULL);
        initialised_early = 1;
    }
}
#define traffic dlmpi_traffic
#else
static const int initialised_early = 0;
static
#endif
int traffic(int argc, char **argv) {
    int rank, size;
    if (!initialised_early)
        C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;

    /* A ring of blocking sends: even ranks send first. */
    int token = rank, got = -1;
    for (int round = 0; round < 3; round++) {
        if (rank % 2 == 0) {
            C(MPI_Send, &token, 1, MPI_INT, right, 1, MPI_COMM_WORLD);
            C(MPI_Recv, &got, 1, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            C(MPI_Recv, &got, 1, MPI_INT, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            C(MPI_Send, &token, 1, MPI_INT, right, 1, MPI_COMM_WORLD);
        }
        token += got;
    }

    /* Both neighbours at once, nonblocking. */
    int out[2] = {rank, -rank}, in[2] = {0, 0};
    MPI_Request reqs[4];
    C(MPI_Irecv, &in[0], 1, MPI_INT, left, 2, MPI_COMM_WORLD, &reqs[0]);
    C(MPI_Irecv, &in[1], 1, MPI_INT, right, 3, MPI_COMM_WORLD, &reqs[1]);
    C(MPI_Isend, &out[0], 1, MPI_INT, right, 2, MPI_COMM_WORLD, &reqs[2]);
    C(MPI_Isend, &out[1], 1, MPI_INT, left, 3, MPI_COMM_WORLD, &reqs[3]);
    C(MPI_Waitall, 4, reqs, MPI_STATUSES_IGNORE);
    int swapped = 0;
    C(MPI_Sendrecv, &rank, 1, MPI_INT, right, 4, &swapped, 1, MPI_INT, left, 4,
      MPI_COMM_WORLD, MPI_STATUS_IGNORE);

    /* Wildcard receives at rank 0, in whatever order they come. */
    long long sources = 0;
    if (rank == 0) {
        for (int i = 1; i < size; i++) {
            int v = 0, n = 0;
            MPI_Status st;
            C(MPI_Recv, &v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            C(MPI_Get_count, &st, MPI_INT, &n);
            if (st.MPI_SOURCE != v || st.MPI_TAG != 10 + v || n != 1) {
                fprintf(stderr, "dlmpi: a wildcard receive got %d from %d tag %d\n", v,
                        st.MPI_SOURCE, st.MPI_TAG);
                return 1;
            }
            sources += v;
        }
    } else {
        C(MPI_Send, &rank, 1, MPI_INT, 0, 10 + rank, MPI_COMM_WORLD);
    }

    /* Collectives. */
    long long mine = token + in[0] + in[1] + swapped, sum = 0, root_sum = 0;
    C(MPI_Allreduce, &mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    C(MPI_Reduce, &mine, &root_sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    int seed = rank == 0 ? 42 : 0;
    C(MPI_Bcast, &seed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int all[64] = {0};
    C(MPI_Allgather, &seed, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    C(MPI_Barrier, MPI_COMM_WORLD);

    if (rank == 0) {
        char version[8192];
        int len = 0;
        C(MPI_Get_library_version, version, &len);
        char *eol = strchr(version, '\n');
        if (eol)
            *eol = 0;
        printf("dlmpi: %s\n", version);
        printf("dlmpi: np=%d sum=%lld reduced=%lld sources=%lld seed=%d last=%d\n", size, sum,
               root_sum, sources, seed, all[size - 1]);
    }
    expect_write(rank);
    MPI_Finalize();
    return 0;
}

#ifndef LIBRARY
int main(int argc, char **argv) {
#ifdef LINKED
    return traffic(argc, argv);
#else
    if (argc < 2) {
        fprintf(stderr, "usage: dlmpi LIBMPI [local | deep LIBRARY | ctor LIBRARY]\n");
        return 2;
    }
    int mode = RTLD_LAZY | RTLD_LOCAL;
    if (argc < 3 || strcmp(argv[2], "local") != 0)
        mode |= RTLD_DEEPBIND;
    lib = dlopen(argv[1], mode);
    if (!lib) {
        fprintf(stderr, "dlmpi: %s\n", dlerror());
        return 2;
    }
    if (argc > 3 && (strcmp(argv[2], "deep") == 0 || strcmp(argv[2], "ctor") == 0)) {
        if (strcmp(argv[2], "ctor") == 0)
            setenv("DLMPI_INIT_EARLY", "1", 1);
        void *library = dlopen(argv[3], RTLD_LAZY | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!library) {
            fprintf(stderr, "dlmpi: %s\n", dlerror());
            return 2;
        }
        int (*run)(int, char **) = (int (*)(int, char **))dlsym(library, "dlmpi_traffic");
        if (!run) {
            fprintf(stderr, "dlmpi: %s\n", dlerror());
            return 2;
        }
        return run(argc, argv);
    }
    FUNCTIONS(LOAD)
    int rc = traffic(argc, argv);
    dlclose(lib);
    return rc;
#endif
}
#endif
