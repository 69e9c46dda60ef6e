/*
 * syncbench.c - a run of many quick exchanges, for measuring how well
 * `pmtrace sync` recovers the true time under PMTRACE_CLOCK_SIM.
 *
 * Usage: syncbench [seconds]   (default 2; any np >= 2)
 *
 * Each round: rank 0 ping-pongs every other rank in turn (a star), every
 * rank exchanges with its ring neighbours (MPI_Sendrecv), spins about
 * 20 us, and rank 0 broadcasts whether the time is up. The star gives
 * every rank fast messages both ways with rank 0, which is what the
 * message-based regression of `pmtrace sync` needs.
 *
 * Prints one line from rank 0: "syncbench: np N, R rounds, checksum C".
 * The checksum depends only on N and R.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "expect.h"

static void spin_us(double us)
{
    double until = MPI_Wtime() + us * 1e-6;
    while (MPI_Wtime() < until) {
    }
}

int main(int argc, char **argv)
{
    int rank, size;
    double seconds = 2.0;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);
    if (argc > 1) {
        char *end;
        seconds = strtod(argv[1], &end);
        if (*end != '\0' || seconds <= 0.0 || seconds > 3600.0) {
            if (rank == 0)
                fprintf(stderr, "usage: syncbench [seconds]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "syncbench: needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    long rounds = 0, sum = 0;
    double start = MPI_Wtime();
    int more = 1;
    while (more) {
        long v = rounds, w = 0;
        if (rank == 0) {
            for (int p = 1; p < size; p++) {
                C(MPI_Send, &v, 1, MPI_LONG, p, 1, MPI_COMM_WORLD);
                C(MPI_Recv, &w, 1, MPI_LONG, p, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                sum += w;
            }
        } else {
            C(MPI_Recv, &w, 1, MPI_LONG, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            w += rank;
            C(MPI_Send, &w, 1, MPI_LONG, 0, 2, MPI_COMM_WORLD);
        }
        long got = 0;
        C(MPI_Sendrecv, &v, 1, MPI_LONG, right, 3, &got, 1, MPI_LONG, left, 3, MPI_COMM_WORLD,
          MPI_STATUS_IGNORE);
        spin_us(20);
        rounds++;
        if (rank == 0)
            more = MPI_Wtime() - start < seconds;
        C(MPI_Bcast, &more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    if (rank == 0) {
        /* sum over rounds r and workers p of (r + p) */
        long expect = (long)(size - 1) * (rounds * (rounds - 1) / 2) +
                      rounds * ((long)size * (size - 1) / 2);
        printf("syncbench: np %d, %ld rounds, checksum %s\n", size, rounds,
               sum == expect ? "ok" : "BAD");
    }
    expect_write(rank);
    MPI_Finalize();
    return 0;
}
