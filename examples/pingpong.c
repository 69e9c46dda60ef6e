/*
 * pingpong.c - rank 0 and rank 1 exchange messages of 8 B .. 1 MiB.
 *
 * Usage: pingpong [iterations]   (default 5; needs np >= 2)
 * For each of 7 sizes (8, 64, 512, 4 KiB, 32 KiB, 256 KiB, 1 MiB) rank 0
 * sends a pattern to rank 1, which checks it, adds 1 to every byte and
 * sends it back; rank 0 checks the reply and folds it into a per-size
 * FNV-1a checksum.  Rank 1 reports its error count to rank 0 at the end.
 * Ranks >= 2 only call MPI_Init, MPI_Comm_rank, MPI_Comm_size,
 * MPI_Barrier and MPI_Finalize.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <mpi.h>
#include "expect.h"

#define NSIZES 7
#define ERR_TAG 99
static const int sizes[NSIZES] = {8, 64, 512, 4096, 32768, 262144, 1048576};

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

static unsigned char pattern(int k, long it, int s)
{
    return (unsigned char)(k * 7 + it * 13 + s * 29 + (k >> 8));
}

int main(int argc, char **argv)
{
    int rank, size, s, k, errs = 0, peer_errs = 0;
    long iters, it;
    unsigned char *buf = NULL;
    uint64_t sum[NSIZES];
    MPI_Status st;

    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);

    iters = parse_count(argc, argv, 5);
    if (iters < 0 || size < 2) {
        if (rank == 0)
            printf("pingpong: FAIL %s\n", iters < 0 ? "bad iteration count" : "needs at least 2 ranks");
        expect_write(rank);
        MPI_Finalize();
        return 1;
    }

    if (rank < 2) {
        buf = (unsigned char *)malloc((size_t)sizes[NSIZES - 1]);
        if (buf == NULL) {
            fprintf(stderr, "pingpong: out of memory\n");
            return 1;
        }
    }

    for (s = 0; s < NSIZES; s++) {
        int n = sizes[s];
        sum[s] = 1469598103934665603ULL; /* FNV-1a offset basis */
        for (it = 0; it < iters && rank < 2; it++) {
            if (rank == 0) {
                for (k = 0; k < n; k++)
                    buf[k] = pattern(k, it, s);
                C(MPI_Send, buf, n, MPI_BYTE, 1, s, MPI_COMM_WORLD);
                C(MPI_Recv, buf, n, MPI_BYTE, 1, s, MPI_COMM_WORLD, &st);
                for (k = 0; k < n; k++) {
                    if (buf[k] != (unsigned char)(pattern(k, it, s) + 1))
                        errs++;
                    sum[s] = (sum[s] ^ buf[k]) * 1099511628211ULL;
                }
            } else {
                int cnt = -1;
                C(MPI_Recv, buf, n, MPI_BYTE, 0, s, MPI_COMM_WORLD, &st);
                C(MPI_Get_count, &st, MPI_BYTE, &cnt);
                if (cnt != n)
                    errs++;
                for (k = 0; k < n; k++) {
                    if (buf[k] != pattern(k, it, s))
                        errs++;
                    buf[k] = (unsigned char)(buf[k] + 1);
                }
                C(MPI_Send, buf, n, MPI_BYTE, 0, s, MPI_COMM_WORLD);
            }
        }
    }

    if (rank == 1)
        C(MPI_Send, &errs, 1, MPI_INT, 0, ERR_TAG, MPI_COMM_WORLD);
    if (rank == 0)
        C(MPI_Recv, &peer_errs, 1, MPI_INT, 1, ERR_TAG, MPI_COMM_WORLD, &st);

    C(MPI_Barrier, MPI_COMM_WORLD);

    if (rank == 0) {
        for (s = 0; s < NSIZES; s++)
            printf("pingpong: size=%d iters=%ld checksum=%016llx\n", sizes[s], iters,
                   (unsigned long long)sum[s]);
        if (errs + peer_errs != 0)
            printf("pingpong: FAIL errors rank0=%d rank1=%d\n", errs, peer_errs);
        else
            printf("pingpong: ok\n");
    }
    free(buf);

    expect_write(rank);
    MPI_Finalize();
    return (rank == 0 && errs + peer_errs != 0) ? 1 : 0;
}
