/* Collectives that move no data, and communicator management, between
 * uneven computation: count-0 Bcast, Allreduce, Reduce, Alltoall(v),
 * Allgather, Gather, Scatter and Scan; a Gatherv to which only odd ranks
 * contribute; Comm_dup, Comm_split and Comm_free; and one Allreduce of
 * real data per round. No zero-byte member waits for anyone's data, so on
 * one clock nothing here can look reversed, and sync must move nothing.
 * Rank 0 prints a checksum. Any np >= 1 (at most 64). */
#include "expect.h"

static volatile double sink;

/* Busy work of `units` (each some microseconds), different per rank. */
static void work(int units)
{
    double x = 0;
    for (long i = 0; i < units * 20000L; i++) x += (double)i * 0.5;
    sink = x;
}

int main(int argc, char **argv)
{
    int rank, size;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);
    int a[64] = {0}, b[64] = {0}, zeros[64] = {0}, displs[64] = {0}, counts[64], at[64];
    for (int i = 0; i < 64; i++) {
        counts[i] = i % 2;
        at[i] = i;
    }
    long check = 0;
    for (int round = 0; round < 20; round++) {
        int root = round % size;
        work((rank * 7 + round * 3) % 11);
        C(MPI_Bcast, a, 0, MPI_INT, root, MPI_COMM_WORLD);
        work((rank * 5 + round) % 7);
        C(MPI_Allreduce, a, b, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        C(MPI_Reduce, a, b, 0, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
        work((rank + round) % 5);
        C(MPI_Alltoall, a, 0, MPI_INT, b, 0, MPI_INT, MPI_COMM_WORLD);
        C(MPI_Alltoallv, a, zeros, displs, MPI_INT, b, zeros, displs, MPI_INT, MPI_COMM_WORLD);
        C(MPI_Allgather, a, 0, MPI_INT, b, 0, MPI_INT, MPI_COMM_WORLD);
        work((rank * 3 + round * 2) % 9);
        C(MPI_Gather, a, 0, MPI_INT, b, 0, MPI_INT, root, MPI_COMM_WORLD);
        C(MPI_Scatter, a, 0, MPI_INT, b, 0, MPI_INT, root, MPI_COMM_WORLD);
        C(MPI_Scan, a, b, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        /* Only odd ranks send; the root receives theirs. */
        a[0] = rank + round;
        C(MPI_Gatherv, a, rank % 2, MPI_INT, b, counts, at, MPI_INT, 0, MPI_COMM_WORLD);
        if (rank == 0)
            for (int i = 1; i < size; i += 2) check += b[i];
        work((rank * 11 + round) % 13);
        MPI_Comm dup, half;
        C(MPI_Comm_dup, MPI_COMM_WORLD, &dup);
        C(MPI_Comm_split, dup, rank % 2, size - rank, &half);
        work(rank % 3);
        C(MPI_Comm_free, &half);
        C(MPI_Comm_free, &dup);
        /* Real data: every rank waits for all. */
        int mine = rank * round, sum = 0;
        C(MPI_Allreduce, &mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        check += sum;
    }
    if (rank == 0) printf("zerocoll: np=%d check=%ld\n", size, check);
    expect_write(rank);
    MPI_Finalize();
    return 0;
}
