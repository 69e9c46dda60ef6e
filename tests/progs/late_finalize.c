/* MPI_Finalize called from a destructor after main returned, as C++
 * programs with static objects do. */
#include "expect.h"
#include <mpi.h>
#include <stdio.h>

static int rank;

__attribute__((destructor)) static void finish(void) {
    C(MPI_Barrier, MPI_COMM_WORLD);
    expect_write(rank);
    MPI_Finalize();
}

int main(int argc, char **argv) {
    int np, x = 1, sum = 0;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &np);
    C(MPI_Allreduce, &x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(sum == np ? "late_finalize: ok\n" : "late_finalize: FAIL\n");
    fflush(stdout);
    return 0;
}
