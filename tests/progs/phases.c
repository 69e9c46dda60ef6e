/* User phases and pauses, with a known imbalance (issue 19).
 *
 *   phases [ms]   np=4 (any np >= 2): with U = ms (default 60),
 *     "setup": every rank computes U/2, then a barrier;
 *     "solve": 3 rounds; in each, rank 2 computes 3U/3 = U and the
 *              others U/3, then an MPI_Allreduce (rank 2 computes 3x
 *              longer: 3U in all, against U);
 *     a pause (MPI_Pcontrol(0) .. MPI_Pcontrol(1)) around 1000
 *              MPI_Comm_rank calls (left out, counted) and one
 *              MPI_Allreduce (recorded: it moves data);
 *     "Pcontrol 2" (MPI_Pcontrol(2) .. MPI_Pcontrol(1)): U/6 and a barrier;
 *     "output" with "write" nested in it: U/6 each.
 * Rank 0 prints a checksum. The phase calls go through the weak
 * references of include/pmtrace.h, so the program runs untraced as well.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pmtrace.h"

static void compute_ms(double ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile double x = 0;
    do {
        for (int i = 0; i < 1000; i++) x += i * 1e-9;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6 < ms);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double u = argc > 1 ? atof(argv[1]) : 60;
    double sum = rank, total = 0;

    PMTRACE_PHASE_BEGIN("setup");
    compute_ms(u / 2);
    MPI_Barrier(MPI_COMM_WORLD);
    PMTRACE_PHASE_END();

    PMTRACE_PHASE_BEGIN("solve");
    for (int round = 0; round < 3; round++) {
        compute_ms(rank == 2 ? u : u / 3);
        MPI_Allreduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        sum = total / size + rank;
    }
    PMTRACE_PHASE_END();

    MPI_Pcontrol(0);
    int r = 0;
    for (int i = 0; i < 1000; i++) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Allreduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Pcontrol(1);

    MPI_Pcontrol(2);
    compute_ms(u / 6);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Pcontrol(1);

    PMTRACE_PHASE_BEGIN("output");
    compute_ms(u / 6);
    PMTRACE_PHASE_BEGIN("write");
    compute_ms(u / 6);
    PMTRACE_PHASE_END();
    PMTRACE_PHASE_END();

    if (rank == 0) printf("phases: ok np=%d sum=%.1f\n", size, total);
    MPI_Finalize();
    return 0;
}
