/* Calls that repeat the one before: the runtime records the second and
 * later ones from what it kept of the first (issue 40's fixed records).
 * np=2. Every probe finds nothing (no message has its tag); each group's
 * arguments differ from the group before in one way: source, tag,
 * communicator, a communicator freed and made again under a handle MPI
 * may reuse, count, datatype, a datatype freed and made again, root;
 * then nonblocking sends, changed in tag, count, datatype, communicator
 * or mode, and nonblocking receives with blocking sends. Prints `repeats: ok`. The test checks each record's fields. */
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

/* n nonblocking sends to `to` (each received back from it, then waited
 * for): the sends repeat one another, the receives too. */
static void sends(int issend, int to, int tag, const void *buf, int count,
                  MPI_Datatype type, MPI_Comm comm, int n) {
    char back[64];
    for (int i = 0; i < n; i++) {
        MPI_Request r;
        if (issend)
            C(MPI_Issend, buf, count, type, to, tag, comm, &r);
        else
            C(MPI_Isend, buf, count, type, to, tag, comm, &r);
        C(MPI_Recv, back, count, type, to, tag, comm, MPI_STATUS_IGNORE);
        C(MPI_Wait, &r, MPI_STATUS_IGNORE);
    }
}

/* n nonblocking receives from `from`, each matched by a blocking send to
 * it, then waited for: the receives repeat one another, the sends too. */
static void recvs(int from, int tag, const void *buf, int count,
                  MPI_Datatype type, MPI_Comm comm, int n) {
    char in[64];
    for (int i = 0; i < n; i++) {
        MPI_Request r;
        C(MPI_Irecv, in, count, type, from, tag, comm, &r);
        C(MPI_Send, buf, count, type, from, tag, comm);
        C(MPI_Wait, &r, MPI_STATUS_IGNORE);
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

    /* Nonblocking sends: tag, count, datatype, communicator (one freed and
     * made again), the send mode. */
    int w[4] = {1, 2, 3, 4};
    sends(0, other, 5, w, 1, MPI_INT, MPI_COMM_WORLD, 3);
    sends(0, other, 6, w, 1, MPI_INT, MPI_COMM_WORLD, 2);
    sends(0, other, 6, w, 2, MPI_INT, MPI_COMM_WORLD, 2);
    sends(0, other, 6, w, 2, MPI_SHORT, MPI_COMM_WORLD, 2);
    sends(0, other, 6, w, 2, MPI_SHORT, b, 2);
    C(MPI_Comm_free, &b);
    C(MPI_Comm_dup, MPI_COMM_WORLD, &a);
    sends(0, other, 6, w, 2, MPI_SHORT, a, 2);
    sends(1, other, 6, w, 2, MPI_SHORT, a, 2);
    /* The tag alone changes, to varints of other lengths and back. */
    for (int i = 0; i < 2; i++) {
        sends(0, other, 30000, w, 2, MPI_SHORT, a, 1);
        sends(0, other, 70, w, 2, MPI_SHORT, a, 1);
        sends(0, other, 6, w, 2, MPI_SHORT, a, 1);
    }

    /* Nonblocking receives and blocking sends, changed the same ways. */
    recvs(other, 9, w, 1, MPI_INT, a, 3);
    recvs(other, 9, w, 3, MPI_INT, a, 2);
    recvs(other, 9, w, 3, MPI_SHORT, a, 2);
    recvs(other, 10, w, 3, MPI_SHORT, a, 2);
    for (int i = 0; i < 2; i++) {
        recvs(other, 30000, w, 3, MPI_SHORT, a, 1);
        recvs(other, 10, w, 3, MPI_SHORT, a, 1);
    }
    recvs(other, 10, w, 3, MPI_SHORT, MPI_COMM_WORLD, 2);
    C(MPI_Comm_free, &a);

    if (rank == 0) printf("repeats: ok\n");
    expect_write(rank);
    MPI_Finalize();
    return 0;
}
