/* The microbenchmark behind `make bench` (np=2). One mode per run:
 *   iprobe     ns per MPI_Iprobe that finds nothing
 *   pingpong   ns per one-way 8-byte message (round trip / 2)
 *   bandwidth  MB/s of 1 MiB messages, 16 in flight
 *   allreduce  ns per 8-byte MPI_Allreduce
 * Rank 0 prints "<mode> <value>". Each measures after a warm-up. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, np;
    const char *mode = argc > 1 ? argv[1] : "iprobe";
    double scale = argc > 2 ? atof(argv[2]) : 1.0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    int peer = rank ^ 1;
    double value = 0;
    if (!strcmp(mode, "iprobe")) {
        long n = (long)(2000000 * scale);
        int flag;
        for (long i = 0; i < n / 10; i++) MPI_Iprobe(MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < n; i++) MPI_Iprobe(MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        value = (MPI_Wtime() - t0) / n * 1e9;
    } else if (!strcmp(mode, "pingpong")) {
        long n = (long)(200000 * scale);
        char b[8] = {0};
        for (int pass = 0; pass < 2; pass++) {
            long iters = pass ? n : n / 10;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long i = 0; i < iters; i++) {
                /* Every pair (2k, 2k+1) plays; an odd last rank sits out. */
                if (peer >= np) {
                    break;
                } else if (rank % 2 == 0) {
                    MPI_Send(b, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                    MPI_Recv(b, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(b, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(b, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                }
            }
            value = (MPI_Wtime() - t0) / iters / 2 * 1e9;
        }
    } else if (!strcmp(mode, "bandwidth")) {
        enum { W = 16, SIZE = 1 << 20 };
        long reps = (long)(40 * scale);
        char *buf = malloc((size_t)W * SIZE);
        memset(buf, 1, (size_t)W * SIZE);
        MPI_Request req[W];
        for (int pass = 0; pass < 2; pass++) {
            long iters = pass ? reps : 4;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long r = 0; r < iters; r++) {
                for (int w = 0; w < W; w++) {
                    if (rank == 0) MPI_Isend(buf + (size_t)w * SIZE, SIZE, MPI_BYTE, peer, w, MPI_COMM_WORLD, &req[w]);
                    else MPI_Irecv(buf + (size_t)w * SIZE, SIZE, MPI_BYTE, peer, w, MPI_COMM_WORLD, &req[w]);
                }
                MPI_Waitall(W, req, MPI_STATUSES_IGNORE);
                char ack = 0;
                if (rank == 0) MPI_Recv(&ack, 1, MPI_BYTE, peer, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                else MPI_Send(&ack, 1, MPI_BYTE, peer, 99, MPI_COMM_WORLD);
            }
            value = (double)iters * W * SIZE / (MPI_Wtime() - t0) / 1e6;
        }
        free(buf);
    } else if (!strcmp(mode, "allreduce")) {
        long n = (long)(200000 * scale);
        double x = rank, y;
        for (int pass = 0; pass < 2; pass++) {
            long iters = pass ? n : n / 10;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long i = 0; i < iters; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            value = (MPI_Wtime() - t0) / iters * 1e9;
        }
    } else {
        if (rank == 0) fprintf(stderr, "mpibench: unknown mode %s\n", mode);
        MPI_Finalize();
        return 2;
    }
    if (rank == 0) printf("%s %.3f\n", mode, value);
    MPI_Finalize();
    return 0;
}
