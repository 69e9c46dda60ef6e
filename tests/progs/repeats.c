/* Calls that repeat the one before: the runtime records the second and
 * later ones from what it kept of the first (issue 40's fixed records).
 * np=2. Every probe finds nothing (nothing is ever sent); each group's
 * arguments differ from the group before in one way: source, tag,
 * communicator, a communicator freed and made again under a handle MPI
 * may reuse, count, datatype, a datatype freed and made again, root.
 * Prints `repeats: ok`. The test checks each record's fields. */
#include "expect.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                             \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "repeats: check failed at line %d: %s\n", __LINE__, \
                    #cond);                                                     \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static void misses(int src, int tag, MPI_Comm comm, int n) {
    int flag = 1;
    MPI_Status st;
    for (int i = 0; i < n; i++) {
        C(MPI_Iprobe, src, tag, comm, &flag, i % 2 ? MPI_STATUS_IGNORE : &st);
        CHECK(flag == 0);
    }
}

int main(int argc, char **argv) {
    int rank, np;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &np);
    CHECK(np == 2);
    int other = 1 - rank;
    MPI_Comm a, b;

    misses(other, 7, MPI_COMM_WORLD, 3);
    misses(other, 8, MPI_COMM_WORLD, 2);
    misses(MPI_ANY_SOURCE, 8, MPI_COMM_WORLD, 2);
    misses(other, 300000, MPI_COMM_WORLD, 2);
    C(MPI_Comm_dup, MPI_COMM_WORLD, &a);
    misses(other, 7, a, 3);
    C(MPI_Comm_free, &a);
    C(MPI_Comm_dup, MPI_COMM_WORLD, &b);
    misses(other, 7, b, 3);
    misses(other, 7, MPI_COMM_WORLD, 2);

    int in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    double din[2] = {1, 2}, dout[2];
    for (int i = 0; i < 3; i++) C(MPI_Allreduce, in, out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) C(MPI_Allreduce, in, out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) C(MPI_Allreduce, din, dout, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) C(MPI_Allreduce, in, out, 2, MPI_INT, MPI_SUM, b);
    C(MPI_Allreduce, in, out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    C(MPI_Allreduce, in, out, 2, MPI_INT, MPI_SUM, b);
    for (int i = 0; i < 2; i++) C(MPI_Bcast, in, 3, MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) C(MPI_Bcast, in, 3, MPI_INT, 1, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) C(MPI_Reduce, in, out, 4, MPI_INT, MPI_SUM, 1, MPI_COMM_WORLD);
    for (int i = 0; i < 3; i++) C(MPI_Barrier, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) C(MPI_Scan, in, out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) C(MPI_Exscan, in, out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Datatype t;
    C(MPI_Type_contiguous, 3, MPI_INT, &t);
    C(MPI_Type_commit, &t);
    for (int i = 0; i < 2; i++) C(MPI_Bcast, in, 1, t, 0, MPI_COMM_WORLD);
    C(MPI_Type_free, &t);
    C(MPI_Type_contiguous, 5, MPI_INT, &t);
    C(MPI_Type_commit, &t);
    for (int i = 0; i < 2; i++) C(MPI_Bcast, in, 1, t, 0, MPI_COMM_WORLD);
    C(MPI_Type_free, &t);
    C(MPI_Comm_free, &b);

    if (rank == 0) printf("repeats: ok\n");
    expect_write(rank);
    MPI_Finalize();
    return 0;
}
