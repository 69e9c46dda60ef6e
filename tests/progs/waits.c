/* waits MODE: wait states with a known cause, for pmtrace's report.
 *
 * Three rounds, each after a barrier; in each, one rank is late by 200 ms
 * (it sleeps) for the call the others then wait in:
 *   late_sender    rank 1 sleeps, then MPI_Send to rank 0, which is in MPI_Recv;
 *   late_receiver  rank 0 is in MPI_Ssend to rank 1, which sleeps, then MPI_Recv;
 *   barrier        the last rank sleeps, then MPI_Barrier;
 *   nxn            rank 1 sleeps, then MPI_Allreduce;
 *   bcast          the root, rank 0, sleeps, then MPI_Bcast;
 *   chain          rank 0 sleeps, then MPI_Send to rank 1, which is in
 *                  MPI_Recv and then sends to rank 2 at once: rank 2 waits
 *                  for rank 1, which was late only because it waited for
 *                  rank 0 (the root cause).
 * Rank 0 prints one line at the end, "waits: ok MODE np=N". */
#include "expect.h"
#include <stdio.h>
#include <string.h>
#include <time.h>

#define DELAY_MS 200

static void late(void)
{
    struct timespec ts = {0, DELAY_MS * 1000L * 1000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int main(int argc, char **argv)
{
    int rank, size, round, x, y = 0;
    const char *mode = argc > 1 ? argv[1] : "late_sender";

    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);
    x = rank + 1;
    for (round = 0; round < 3; round++) {
        C(MPI_Barrier, MPI_COMM_WORLD);
        if (strcmp(mode, "late_sender") == 0) {
            if (rank == 1) {
                late();
                C(MPI_Send, &x, 1, MPI_INT, 0, round, MPI_COMM_WORLD);
            } else if (rank == 0) {
                C(MPI_Recv, &y, 1, MPI_INT, 1, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
        } else if (strcmp(mode, "late_receiver") == 0) {
            if (rank == 0) {
                C(MPI_Ssend, &x, 1, MPI_INT, 1, round, MPI_COMM_WORLD);
            } else if (rank == 1) {
                late();
                C(MPI_Recv, &y, 1, MPI_INT, 0, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
        } else if (strcmp(mode, "barrier") == 0) {
            if (rank == size - 1)
                late();
            C(MPI_Barrier, MPI_COMM_WORLD);
        } else if (strcmp(mode, "bcast") == 0) {
            if (rank == 0)
                late();
            C(MPI_Bcast, &x, 1, MPI_INT, 0, MPI_COMM_WORLD);
        } else if (strcmp(mode, "chain") == 0) {
            if (rank == 0) {
                late();
                C(MPI_Send, &x, 1, MPI_INT, 1, round, MPI_COMM_WORLD);
            } else if (rank == 1) {
                C(MPI_Recv, &y, 1, MPI_INT, 0, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                C(MPI_Send, &x, 1, MPI_INT, 2, round, MPI_COMM_WORLD);
            } else if (rank == 2) {
                C(MPI_Recv, &y, 1, MPI_INT, 1, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
        } else if (strcmp(mode, "nxn") == 0) {
            if (rank == 1)
                late();
            C(MPI_Allreduce, &x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        } else {
            if (rank == 0)
                fprintf(stderr, "waits: unknown mode %s\n", mode);
            C(MPI_Abort, MPI_COMM_WORLD, 2);
        }
    }
    expect_write(rank);
    if (rank == 0)
        printf("waits: ok %s np=%d\n", mode, size);
    C0(MPI_Finalize);
    return 0;
}
