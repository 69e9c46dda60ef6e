/* Many cheap calls: N MPI_Iprobe that find nothing per rank (default
 * 5,000,000, so 10 million events at np=2). If RSS_FILE is set, each rank
 * appends "rank maxrss_kib" to it, for the memory-bound check. */
#include "expect.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

int main(int argc, char **argv) {
    int rank, flag, found = 0;
    long n = argc > 1 ? atol(argv[1]) : 5000000L;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    for (long i = 0; i < n; i++) {
        C(MPI_Iprobe, MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        found += flag;
    }
    C(MPI_Barrier, MPI_COMM_WORLD);
    const char *rf = getenv("RSS_FILE");
    if (rf && *rf) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        FILE *f = fopen(rf, "a");
        if (f) { fprintf(f, "%d %ld\n", rank, ru.ru_maxrss); fclose(f); }
    }
    if (rank == 0) printf(found ? "manycalls: FAIL\n" : "manycalls: ok n=%ld\n", n);
    expect_write(rank);
    MPI_Finalize();
    return found ? 1 : 0;
}
