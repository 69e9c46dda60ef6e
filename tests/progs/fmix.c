/* Ranks 2 and up of tests/progs/fcover.F90's protocol, in C, for a job of
 * mixed languages: `mpirun -np 2 fcover : -np N fmix`. Prints nothing (rank
 * 0, in Fortran, prints the verdict); calls are counted (examples/expect.h). */
#include "expect.h"

int main(int argc, char **argv) {
    int rank, np, errs = 0, total = 0;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &np);
    if (rank < 2) {
        fprintf(stderr, "fmix: ranks 0 and 1 are fcover's\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int right = (rank + 1) % np, left = (rank - 1 + np) % np;

    for (int k = 1; k <= 3; k++) {
        int sbuf[4], rbuf[4] = {-1, -1, -1, -1};
        MPI_Request req[2];
        for (int i = 0; i < 4; i++)
            sbuf[i] = rank * 10 + k;
        C(MPI_Irecv, rbuf, 4, MPI_INT, left, 1, MPI_COMM_WORLD, &req[0]);
        C(MPI_Isend, sbuf, 4, MPI_INT, right, 1, MPI_COMM_WORLD, &req[1]);
        C(MPI_Waitall, 2, req, MPI_STATUSES_IGNORE);
        for (int i = 0; i < 4; i++)
            errs += rbuf[i] != left * 10 + k;
    }

    int v[2] = {rank, rank * rank};
    C(MPI_Send, v, 2, MPI_INT, 0, 2, MPI_COMM_WORLD);

    int x = rank + 1, value = 0;
    C(MPI_Allreduce, MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    errs += x != np * (np + 1) / 2;
    C(MPI_Bcast, &value, 1, MPI_INT, 0, MPI_COMM_WORLD);
    errs += value != (np - 1) * np * (2 * np - 1) / 6;
    C(MPI_Barrier, MPI_COMM_WORLD);
    C(MPI_Reduce, &errs, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    expect_write(rank);
    MPI_Finalize();
    return 0;
}
