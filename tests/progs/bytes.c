/* Byte accounting: derived datatypes, receives posted larger than the
 * message, MPI_STATUS_IGNORE with wildcards, MPI_IN_PLACE. The integration
 * test asserts the exact byte counts commented below. Needs np >= 2. */
#include <stddef.h>
#include "expect.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

struct pair { int i; double d; };

int main(int argc, char **argv) {
    int rank, np, errors = 0;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &np);
    if (np < 2) {
        if (rank == 0) printf("bytes: FAIL needs np >= 2\n");
        C(MPI_Abort, MPI_COMM_WORLD, 1);
    }

    /* A vector of 3 blocks of 2 ints: 24 bytes of data (extent 40). */
    MPI_Datatype vec;
    C(MPI_Type_vector, 3, 2, 4, MPI_INT, &vec);
    C(MPI_Type_commit, &vec);
    /* {int, double}: 12 bytes of data per element. */
    MPI_Datatype pairt;
    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {offsetof(struct pair, i), offsetof(struct pair, d)};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE};
    C(MPI_Type_create_struct, 2, bl, disp, types, &pairt);
    C(MPI_Type_commit, &pairt);

    int grid[12], in[100];
    struct pair ps[2] = {{1, 1.5}, {2, 2.5}}, pin[10];
    for (int i = 0; i < 12; i++) grid[i] = i;

    if (rank == 0) {
        /* Send: 24 bytes, tag 11. */
        C(MPI_Send, grid, 1, vec, 1, 11, MPI_COMM_WORLD);
        /* Isend: 2 pairs = 24 bytes, tag 12. */
        MPI_Request r;
        C(MPI_Isend, ps, 2, pairt, 1, 12, MPI_COMM_WORLD, &r);
        C(MPI_Wait, &r, MPI_STATUS_IGNORE);
        /* 2 ints = 8 bytes, tag 13, to a wildcard receive. */
        C(MPI_Send, grid, 2, MPI_INT, 1, 13, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Status st;
        int n = -1;
        /* Posted 100 ints = 400 bytes; receives 24. */
        C(MPI_Recv, in, 100, MPI_INT, 0, 11, MPI_COMM_WORLD, &st);
        C(MPI_Get_count, &st, MPI_INT, &n);
        if (n != 6 || in[0] != 0 || in[1] != 1 || in[2] != 4 || in[5] != 9) errors++;
        /* Posted 10 pairs = 120 bytes; receives 24. */
        MPI_Request r;
        C(MPI_Irecv, pin, 10, pairt, 0, 12, MPI_COMM_WORLD, &r);
        C(MPI_Wait, &r, MPI_STATUS_IGNORE);
        if (pin[1].i != 2 || pin[1].d != 2.5) errors++;
        /* Wildcards and no status: the trace still has source 0, tag 13. */
        C(MPI_Recv, in, 100, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (in[1] != 1) errors++;
    }

    /* Allreduce of 5 doubles: 40 bytes sent and received. */
    double v[5] = {1, 2, 3, 4, 5}, w[5];
    C(MPI_Allreduce, v, w, 5, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (w[4] != 5.0 * np) errors++;
    /* Bcast of 3 ints from 0: root sends 12, the others receive 12. */
    int b[3] = {rank, rank, rank};
    C(MPI_Bcast, b, 3, MPI_INT, 0, MPI_COMM_WORLD);
    if (b[2] != 0) errors++;
    /* Gather of 2 ints, in place at the root: root sends 0 and receives
     * 8 * np; the others send 8. */
    int *all = malloc(sizeof(int) * 2 * np);
    int mine[2] = {rank, -rank};
    if (rank == 0) {
        all[0] = 0; all[1] = 0;
        C(MPI_Gather, MPI_IN_PLACE, 2, MPI_INT, all, 2, MPI_INT, 0, MPI_COMM_WORLD);
        for (int i = 0; i < np; i++) if (all[2 * i] != i || all[2 * i + 1] != -i) errors++;
    } else {
        C(MPI_Gather, mine, 2, MPI_INT, NULL, 0, MPI_INT, 0, MPI_COMM_WORLD);
    }
    free(all);

    C(MPI_Type_free, &vec);
    C(MPI_Type_free, &pairt);
    int total = 0;
    C(MPI_Allreduce, &errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(total ? "bytes: FAIL np=%d\n" : "bytes: ok np=%d\n", np);
    expect_write(rank);
    MPI_Finalize();
    return total ? 1 : 0;
}
