/* A program that handles MPI errors itself: MPI_ERRORS_RETURN on a
 * duplicate of MPI_COMM_WORLD (world stays fatal), calls with an invalid
 * datatype, rank, count, root, tag and communicator-free arguments, each
 * expected to return an error code, then ordinary communication on both
 * communicators. Prints the error class of every failed call and a
 * checksum; a tracer must not change a line of it. Any np >= 2. */
#include "expect.h"

static int fails;

/* The error class of rc, or -1 for success; counted as an MPI call. */
static int cls(int rc)
{
    int c = -1;
    if (rc != MPI_SUCCESS) {
        C(MPI_Error_class, rc, &c);
        fails++;
    }
    return c;
}

/* Every rank makes the call; rank 0 prints (one writer keeps the output
 * in order). */
#define TRY(what, call)                                                      \
    do {                                                                     \
        int c_ = cls(call);                                                  \
        if (rank == 0) printf("%-36s class %d\n", what, c_);                 \
    } while (0)

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Comm comm;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);
    C(MPI_Comm_dup, MPI_COMM_WORLD, &comm);
    C(MPI_Comm_set_errhandler, comm, MPI_ERRORS_RETURN);

    int buf[8] = {0}, out[8] = {0};
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status st;
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;

    /* Invalid datatype. */
    TRY("Send(MPI_DATATYPE_NULL)", C(MPI_Send, buf, 1, MPI_DATATYPE_NULL, peer, 0, comm));
    TRY("Isend(MPI_DATATYPE_NULL)", C(MPI_Isend, buf, 1, MPI_DATATYPE_NULL, peer, 0, comm, &req));
    TRY("Irecv(MPI_DATATYPE_NULL)", C(MPI_Irecv, buf, 1, MPI_DATATYPE_NULL, from, 0, comm, &req));
    TRY("Recv(MPI_DATATYPE_NULL)", C(MPI_Recv, buf, 1, MPI_DATATYPE_NULL, from, 0, comm, &st));
    TRY("Bcast(MPI_DATATYPE_NULL)", C(MPI_Bcast, buf, 1, MPI_DATATYPE_NULL, 0, comm));
    TRY("Sendrecv(MPI_DATATYPE_NULL)", C(MPI_Sendrecv, buf, 1, MPI_DATATYPE_NULL, peer, 0, out, 1,
                                         MPI_INT, from, 0, comm, &st));
    /* Invalid ranks. */
    TRY("Send(rank size+5)", C(MPI_Send, buf, 1, MPI_INT, size + 5, 0, comm));
    TRY("Recv(rank -7)", C(MPI_Recv, buf, 1, MPI_INT, -7, 0, comm, &st));
    TRY("Isend(rank size)", C(MPI_Isend, buf, 1, MPI_INT, size, 0, comm, &req));
    TRY("Iprobe(rank size+1)", C(MPI_Iprobe, size + 1, 0, comm, &buf[0], &st));
    /* Invalid counts and tags. */
    TRY("Send(count -1)", C(MPI_Send, buf, -1, MPI_INT, peer, 0, comm));
    TRY("Irecv(count -3)", C(MPI_Irecv, buf, -3, MPI_INT, from, 0, comm, &req));
    TRY("Send(tag -5)", C(MPI_Send, buf, 1, MPI_INT, peer, -5, comm));
    /* Invalid roots. */
    TRY("Bcast(root size)", C(MPI_Bcast, buf, 1, MPI_INT, size, comm));
    TRY("Reduce(root -9)", C(MPI_Reduce, buf, out, 1, MPI_INT, MPI_SUM, -9, comm));
    TRY("Gather(root size+2)", C(MPI_Gather, buf, 1, MPI_INT, out, 1, MPI_INT, size + 2, comm));
    /* Invalid operation. */
    TRY("Allreduce(MPI_OP_NULL)", C(MPI_Allreduce, buf, out, 1, MPI_INT, MPI_OP_NULL, comm));

    /* Then on as usual, on both communicators: a ring with wildcards, a
     * nonblocking exchange, collectives. */
    long sum = 0;
    for (int round = 0; round < 5; round++) {
        int token = rank * 100 + round, got = -1;
        C(MPI_Sendrecv, &token, 1, MPI_INT, peer, round, &got, 1, MPI_INT, MPI_ANY_SOURCE,
          MPI_ANY_TAG, comm, &st);
        sum += got;
        C(MPI_Irecv, &got, 1, MPI_INT, from, 7, MPI_COMM_WORLD, &req);
        C(MPI_Send, &token, 1, MPI_INT, peer, 7, MPI_COMM_WORLD);
        C(MPI_Wait, &req, &st);
        sum += got;
        int all = 0;
        C(MPI_Allreduce, &got, &all, 1, MPI_INT, MPI_SUM, comm);
        sum += all;
        C(MPI_Bcast, &all, 1, MPI_INT, round % size, MPI_COMM_WORLD);
    }
    int total = 0;
    long sums = 0;
    C(MPI_Reduce, &fails, &total, 1, MPI_INT, MPI_SUM, 0, comm);
    C(MPI_Reduce, &sum, &sums, 1, MPI_LONG, MPI_SUM, 0, comm);
    if (rank == 0) printf("errors: %d failed calls on %d ranks, sum %ld\n", total, size, sums);
    C(MPI_Comm_free, &comm);
    expect_write(rank);
    MPI_Finalize();
    return 0;
}
