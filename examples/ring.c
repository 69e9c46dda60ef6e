/*
 * ring.c - pass a token around a ring of all ranks for N rounds.
 *
 * Usage: ring [rounds]   (default 10; needs np >= 2)
 * Each rank folds its rank into the token (token = token*31 + rank + 1
 * mod 1000000007) before forwarding it; rank 0 checks the final value
 * against a local simulation.  Per rank: rounds MPI_Send + rounds MPI_Recv.
 */
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>
#include "expect.h"

#define TOKEN_TAG 7
#define MODULUS 1000000007LL

static long parse_count(int argc, char **argv, long def)
{
    char *end;
    long v;
    if (argc < 2)
        return def;
    v = strtol(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || v < 1 || v > 100000000L)
        return -1;
    return v;
}

static long long step(long long token, int rank)
{
    return (token * 31 + rank + 1) % MODULUS;
}

int main(int argc, char **argv)
{
    int rank, size, next, prev, fail = 0;
    long rounds, r;
    long long token = 0;
    MPI_Status st;

    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);

    rounds = parse_count(argc, argv, 10);
    if (rounds < 0 || size < 2) {
        if (rank == 0)
            printf("ring: FAIL %s\n", rounds < 0 ? "bad round count" : "needs at least 2 ranks");
        expect_write(rank);
        MPI_Finalize();
        return 1;
    }

    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    for (r = 0; r < rounds; r++) {
        if (rank == 0) {
            token = step(token, rank);
            C(MPI_Send, &token, 1, MPI_LONG_LONG, next, TOKEN_TAG, MPI_COMM_WORLD);
            C(MPI_Recv, &token, 1, MPI_LONG_LONG, prev, TOKEN_TAG, MPI_COMM_WORLD, &st);
        } else {
            C(MPI_Recv, &token, 1, MPI_LONG_LONG, prev, TOKEN_TAG, MPI_COMM_WORLD, &st);
            token = step(token, rank);
            C(MPI_Send, &token, 1, MPI_LONG_LONG, next, TOKEN_TAG, MPI_COMM_WORLD);
        }
        if (st.MPI_SOURCE != prev || st.MPI_TAG != TOKEN_TAG)
            fail = 1;
    }

    if (rank == 0) {
        long long expect = 0;
        int q;
        for (r = 0; r < rounds; r++)
            for (q = 0; q < size; q++)
                expect = step(expect, q);
        printf("ring: np=%d rounds=%ld token=%lld\n", size, rounds, token);
        if (fail || token != expect) {
            printf("ring: FAIL expected token %lld\n", expect);
            fail = 1;
        } else {
            printf("ring: ok\n");
        }
    } else if (fail) {
        fprintf(stderr, "ring: FAIL rank %d got a message with an unexpected source/tag\n", rank);
    }

    expect_write(rank);
    MPI_Finalize();
    return fail ? 1 : 0;
}
