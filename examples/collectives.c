/*
 * collectives.c - a mix of blocking and nonblocking collectives.
 *
 * Usage: collectives [iterations]   (default 3; any np >= 1)
 * Each iteration calls, once each: MPI_Bcast, MPI_Reduce, MPI_Allreduce,
 * MPI_Allreduce(MPI_IN_PLACE), MPI_Gather, MPI_Gatherv, MPI_Scatter,
 * MPI_Scatterv, MPI_Allgather, MPI_Allgatherv, MPI_Alltoall,
 * MPI_Alltoallv, MPI_Reduce_scatter_block, MPI_Scan, MPI_Exscan,
 * MPI_Barrier, MPI_Iallreduce + MPI_Wait, and MPI_Comm_split (even/odd)
 * + MPI_Allreduce on the sub-communicator + MPI_Comm_free.
 * Every result is checked against a closed form; per-operation integer
 * checksums are summed over ranks (MPI_Reduce, after the loop) and printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <mpi.h>
#include "expect.h"

enum {
    K_BCAST, K_REDUCE, K_ALLREDUCE, K_ALLREDUCE_INPLACE, K_GATHER, K_GATHERV, K_SCATTER, K_SCATTERV,
    K_ALLGATHER, K_ALLGATHERV, K_ALLTOALL, K_ALLTOALLV, K_REDUCE_SCATTER_BLOCK, K_SCAN, K_EXSCAN,
    K_IALLREDUCE, K_SPLIT_ALLREDUCE, NKINDS
};
static const char *const kind_name[NKINDS] = {
    "bcast", "reduce", "allreduce", "allreduce_inplace", "gather", "gatherv", "scatter", "scatterv",
    "allgather", "allgatherv", "alltoall", "alltoallv", "reduce_scatter_block", "scan", "exscan",
    "iallreduce", "split_allreduce"};

static int errs;
static int64_t cks[NKINDS];

#define CHECK(kind, got, want)                                                                 \
    do {                                                                                       \
        int64_t g_ = (int64_t)(got), w_ = (int64_t)(want);                                     \
        cks[kind] += g_;                                                                       \
        if (g_ != w_) {                                                                        \
            if (errs < 10)                                                                     \
                fprintf(stderr, "collectives: rank %d: %s got %lld want %lld\n", rank,        \
                        kind_name[kind], (long long)g_, (long long)w_);                        \
            errs++;                                                                            \
        }                                                                                      \
    } while (0)

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

int main(int argc, char **argv)
{
    int rank, size, p, i, j, k, n, total_errs = 0;
    long iters, itl;
    int *sbuf, *rbuf, *counts, *displs, *scounts, *sdispls, *rcounts, *rdispls;
    int64_t sum_cks[NKINDS];
    MPI_Comm half;
    MPI_Request req;

    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);
    p = size;

    iters = parse_count(argc, argv, 3);
    if (iters < 0) {
        if (rank == 0)
            printf("collectives: FAIL bad iteration count\n");
        expect_write(rank);
        MPI_Finalize();
        return 1;
    }

    n = p * (p + 1) / 2 + 4 * p + 16; /* big enough for every buffer below */
    sbuf = (int *)malloc(sizeof(int) * n);
    rbuf = (int *)malloc(sizeof(int) * n);
    counts = (int *)malloc(sizeof(int) * p);
    displs = (int *)malloc(sizeof(int) * p);
    scounts = (int *)malloc(sizeof(int) * p);
    sdispls = (int *)malloc(sizeof(int) * p);
    rcounts = (int *)malloc(sizeof(int) * p);
    rdispls = (int *)malloc(sizeof(int) * p);
    if (!sbuf || !rbuf || !counts || !displs || !scounts || !sdispls || !rcounts || !rdispls) {
        fprintf(stderr, "collectives: out of memory\n");
        return 1;
    }
    /* counts[i] = i + 1, displs = prefix sums (used by the v-variants) */
    for (i = 0; i < p; i++) {
        counts[i] = i + 1;
        displs[i] = i * (i + 1) / 2;
    }

    for (itl = 0; itl < iters; itl++) {
        int it = (int)(itl % 1000);
        int root = (int)(itl % p);

        /* Bcast from a rotating root */
        for (k = 0; k < 4; k++)
            rbuf[k] = rank == root ? root * 100 + it * 10 + k : -1;
        C(MPI_Bcast, rbuf, 4, MPI_INT, root, MPI_COMM_WORLD);
        for (k = 0; k < 4; k++)
            CHECK(K_BCAST, rbuf[k], root * 100 + it * 10 + k);

        /* Reduce SUM to the rotating root */
        for (k = 0; k < 4; k++)
            sbuf[k] = rank + it + k;
        C(MPI_Reduce, sbuf, rbuf, 4, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
        if (rank == root)
            for (k = 0; k < 4; k++)
                CHECK(K_REDUCE, rbuf[k], p * (p - 1) / 2 + p * (it + k));

        /* Allreduce MAX and SUM (2 ints, one op: use MAX) */
        sbuf[0] = rank * 3 + it;
        sbuf[1] = -rank;
        C(MPI_Allreduce, sbuf, rbuf, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        CHECK(K_ALLREDUCE, rbuf[0], (p - 1) * 3 + it);
        CHECK(K_ALLREDUCE, rbuf[1], 0);

        /* Allreduce in place */
        rbuf[0] = rank + 1 + it;
        C(MPI_Allreduce, MPI_IN_PLACE, rbuf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(K_ALLREDUCE_INPLACE, rbuf[0], p * (p + 1) / 2 + p * it);

        /* Gather 2 ints per rank */
        sbuf[0] = rank;
        sbuf[1] = rank * it;
        C(MPI_Gather, sbuf, 2, MPI_INT, rbuf, 2, MPI_INT, root, MPI_COMM_WORLD);
        if (rank == root)
            for (i = 0; i < p; i++) {
                CHECK(K_GATHER, rbuf[2 * i], i);
                CHECK(K_GATHER, rbuf[2 * i + 1], i * it);
            }

        /* Gatherv: rank i contributes i+1 ints */
        for (k = 0; k <= rank; k++)
            sbuf[k] = rank * 1000 + k + it;
        C(MPI_Gatherv, sbuf, rank + 1, MPI_INT, rbuf, counts, displs, MPI_INT, root, MPI_COMM_WORLD);
        if (rank == root)
            for (i = 0; i < p; i++)
                for (k = 0; k <= i; k++)
                    CHECK(K_GATHERV, rbuf[displs[i] + k], i * 1000 + k + it);

        /* Scatter 2 ints per rank */
        if (rank == root)
            for (i = 0; i < 2 * p; i++)
                sbuf[i] = i * 10 + it;
        C(MPI_Scatter, sbuf, 2, MPI_INT, rbuf, 2, MPI_INT, root, MPI_COMM_WORLD);
        for (k = 0; k < 2; k++)
            CHECK(K_SCATTER, rbuf[k], (2 * rank + k) * 10 + it);

        /* Scatterv: rank i receives i+1 ints */
        if (rank == root)
            for (i = 0; i < p * (p + 1) / 2; i++)
                sbuf[i] = i * 7 + it;
        C(MPI_Scatterv, sbuf, counts, displs, MPI_INT, rbuf, rank + 1, MPI_INT, root, MPI_COMM_WORLD);
        for (k = 0; k <= rank; k++)
            CHECK(K_SCATTERV, rbuf[k], (displs[rank] + k) * 7 + it);

        /* Allgather */
        sbuf[0] = rank * rank + it;
        C(MPI_Allgather, sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, MPI_COMM_WORLD);
        for (i = 0; i < p; i++)
            CHECK(K_ALLGATHER, rbuf[i], i * i + it);

        /* Allgatherv: rank i contributes i+1 ints */
        for (k = 0; k <= rank; k++)
            sbuf[k] = rank * 100 + k - it;
        C(MPI_Allgatherv, sbuf, rank + 1, MPI_INT, rbuf, counts, displs, MPI_INT, MPI_COMM_WORLD);
        for (i = 0; i < p; i++)
            for (k = 0; k <= i; k++)
                CHECK(K_ALLGATHERV, rbuf[displs[i] + k], i * 100 + k - it);

        /* Alltoall: 1 int to each peer */
        for (j = 0; j < p; j++)
            sbuf[j] = rank * 100 + j + it;
        C(MPI_Alltoall, sbuf, 1, MPI_INT, rbuf, 1, MPI_INT, MPI_COMM_WORLD);
        for (j = 0; j < p; j++)
            CHECK(K_ALLTOALL, rbuf[j], j * 100 + rank + it);

        /* Alltoallv: (dest % 3) + 1 ints to each dest */
        for (j = 0, k = 0; j < p; j++) {
            scounts[j] = j % 3 + 1;
            sdispls[j] = k;
            k += scounts[j];
        }
        for (j = 0, k = 0; j < p; j++) {
            rcounts[j] = rank % 3 + 1;
            rdispls[j] = k;
            k += rcounts[j];
        }
        for (j = 0; j < p; j++)
            for (k = 0; k < scounts[j]; k++)
                sbuf[sdispls[j] + k] = rank * 1000 + j * 10 + k + it;
        C(MPI_Alltoallv, sbuf, scounts, sdispls, MPI_INT, rbuf, rcounts, rdispls, MPI_INT, MPI_COMM_WORLD);
        for (j = 0; j < p; j++)
            for (k = 0; k < rcounts[j]; k++)
                CHECK(K_ALLTOALLV, rbuf[rdispls[j] + k], j * 1000 + rank * 10 + k + it);

        /* Reduce_scatter_block: 2 ints per rank */
        for (i = 0; i < p; i++)
            for (k = 0; k < 2; k++)
                sbuf[2 * i + k] = rank + i + k + it;
        C(MPI_Reduce_scatter_block, sbuf, rbuf, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (k = 0; k < 2; k++)
            CHECK(K_REDUCE_SCATTER_BLOCK, rbuf[k], p * (p - 1) / 2 + p * (rank + k + it));

        /* Scan and Exscan */
        sbuf[0] = rank + 1;
        C(MPI_Scan, sbuf, rbuf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(K_SCAN, rbuf[0], (rank + 1) * (rank + 2) / 2);
        rbuf[0] = -1;
        C(MPI_Exscan, sbuf, rbuf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank > 0) /* undefined on rank 0 */
            CHECK(K_EXSCAN, rbuf[0], rank * (rank + 1) / 2);

        C(MPI_Barrier, MPI_COMM_WORLD);

        /* Iallreduce + Wait */
        sbuf[0] = rank * (it + 1);
        C(MPI_Iallreduce, sbuf, rbuf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
        C(MPI_Wait, &req, MPI_STATUS_IGNORE);
        CHECK(K_IALLREDUCE, rbuf[0], (it + 1) * p * (p - 1) / 2);

        /* even/odd split + Allreduce on the sub-communicator */
        {
            int color = rank % 2, hsize, hrank, want = 0;
            C(MPI_Comm_split, MPI_COMM_WORLD, color, rank, &half);
            C(MPI_Comm_size, half, &hsize);
            C(MPI_Comm_rank, half, &hrank);
            if (hsize != (color == 0 ? (p + 1) / 2 : p / 2) || hrank != rank / 2)
                errs++;
            for (i = color; i < p; i += 2)
                want += i;
            sbuf[0] = rank;
            C(MPI_Allreduce, sbuf, rbuf, 1, MPI_INT, MPI_SUM, half);
            CHECK(K_SPLIT_ALLREDUCE, rbuf[0], want);
            C(MPI_Comm_free, &half);
        }
    }

    C(MPI_Reduce, cks, sum_cks, NKINDS, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    C(MPI_Allreduce, &errs, &total_errs, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        for (i = 0; i < NKINDS; i++)
            printf("collectives: %s checksum=%lld\n", kind_name[i], (long long)sum_cks[i]);
        if (total_errs)
            printf("collectives: FAIL np=%d iters=%ld errors=%d\n", p, iters, total_errs);
        else
            printf("collectives: ok np=%d iters=%ld\n", p, iters);
    }

    free(sbuf);
    free(rbuf);
    free(counts);
    free(displs);
    free(scounts);
    free(sdispls);
    free(rcounts);
    free(rdispls);
    expect_write(rank);
    MPI_Finalize();
    return total_errs ? 1 : 0;
}
