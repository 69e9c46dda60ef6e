/* A job that aborts: every rank exchanges a few messages, then rank 0 calls
 * MPI_Abort while the others wait in a receive that never completes. */
#include "expect.h"
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, np, x = 0;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &np);
    for (int i = 0; i < 10; i++) {
        int to = (rank + 1) % np, from = (rank + np - 1) % np;
        C(MPI_Sendrecv_replace, &x, 1, MPI_INT, to, 0, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    C(MPI_Barrier, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("abort: aborting\n");
        fflush(stdout);
        C(MPI_Abort, MPI_COMM_WORLD, 3);
    } else {
        C(MPI_Recv, &x, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    expect_write(rank);
    MPI_Finalize();
    return 0;
}
