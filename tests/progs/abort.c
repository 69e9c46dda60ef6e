/* A job that ends badly. Every rank exchanges a few messages; then
 *   (no argument) rank 0 calls MPI_Abort while the others wait in a
 *                 receive that never completes;
 *   kill          rank 0 sends rank 1 one message, which rank 1 receives and
 *                 then kills itself with SIGKILL at once, before any other
 *                 call; the others wait until the job is torn down. */
#include "expect.h"
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, np, x = 0;
    int kill_mode = argc > 1 && strcmp(argv[1], "kill") == 0;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &np);
    for (int i = 0; i < 10; i++) {
        int to = (rank + 1) % np, from = (rank + np - 1) % np;
        C(MPI_Sendrecv_replace, &x, 1, MPI_INT, to, 0, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    C(MPI_Barrier, MPI_COMM_WORLD);
    if (kill_mode) {
        if (rank == 0) {
            C(MPI_Send, &x, 1, MPI_INT, 1, 99, MPI_COMM_WORLD);
        } else if (rank == 1) {
            C(MPI_Recv, &x, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            raise(SIGKILL);
        }
        C(MPI_Recv, &x, 1, MPI_INT, 1, 98, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 0) {
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
