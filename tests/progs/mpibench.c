/* The microbenchmark behind `make bench` (np=2). One mode per run:
 *   iprobe     ns per MPI_Iprobe that finds nothing
 *   pingpong   ns per one-way 8-byte message (round trip / 2; a third
 *              argument sets the size in bytes)
 *   bandwidth  MB/s of 1 MiB messages, 16 in flight (a third argument
 *              sets the size in bytes; in flight: 16, at most 256 MiB)
 *   allreduce  ns per 8-byte MPI_Allreduce
 *   self       ns per 8-byte MPI_Send to this rank and the MPI_Recv of it
 *              (any np; `bench.py instructions` counts its instructions;
 *              a third argument sets the size in bytes)
 *   selfi      the same message received by an MPI_Irecv posted before the
 *              send and an MPI_Wait (MPICH's blocking send to its own rank
 *              does not return before the receive is posted)
 *   selfs      the same message sent by an MPI_Isend, received by an
 *              MPI_Recv, the send then completed by an MPI_Wait (the loop
 *              of issue 40's targets)
 * Rank 0 prints "<mode> <value>" (pingpong and allreduce: the median block,
 * then "mean <ns>"). Each measures after a warm-up. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Loops are timed in blocks of BLOCK iterations with CLOCK_MONOTONIC (not
 * MPI_Wtime, which a tracer records). The value printed is the median
 * block, which a descheduled moment on a busy machine does not move; the
 * mean over the whole loop follows it. */
enum { BLOCK = 1000 };

/* Defined only by the allocation-counting library (tests/progs/alloccount.c)
 * when it is preloaded: opens and closes the window its count covers, the
 * measured loop. */
void alloccount_window(int open) __attribute__((weak));
static void window(int open) {
    if (alloccount_window) alloccount_window(open);
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values (sorts them). */
static double median(double *v, long n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int rank, np;
    const char *mode = argc > 1 ? argv[1] : "iprobe";
    double scale = argc > 2 ? atof(argv[2]) : 1.0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    int peer = rank ^ 1;
    double value = 0, mean = 0;
    if (!strcmp(mode, "iprobe")) {
        long n = (long)(2000000 * scale);
        int flag;
        for (long i = 0; i < n / 10; i++) MPI_Iprobe(MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        window(1);
        for (long i = 0; i < n; i++) MPI_Iprobe(MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        window(0);
        value = (MPI_Wtime() - t0) / n * 1e9;
    } else if (!strcmp(mode, "pingpong")) {
        long blocks = (long)(200 * scale);
        int bytes = argc > 3 ? atoi(argv[3]) : 8;
        char *b = calloc((size_t)(bytes > 0 ? bytes : 1), 1);
        double *per = malloc(sizeof(double) * (size_t)blocks);
        for (int pass = 0; pass < 2; pass++) {
            long nb = pass ? blocks : blocks / 10;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now_ns();
            for (long k = 0; k < nb; k++) {
                double b0 = now_ns();
                for (long i = 0; i < BLOCK; i++) {
                    /* Every pair (2k, 2k+1) plays; an odd last rank sits out. */
                    if (peer >= np) {
                        break;
                    } else if (rank % 2 == 0) {
                        MPI_Send(b, bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                        MPI_Recv(b, bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    } else {
                        MPI_Recv(b, bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        MPI_Send(b, bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                    }
                }
                per[k] = (now_ns() - b0) / BLOCK / 2;
            }
            mean = (now_ns() - t0) / nb / BLOCK / 2;
            value = median(per, nb);
        }
        free(per);
        free(b);
    } else if (!strcmp(mode, "bandwidth")) {
        long size = argc > 3 ? atol(argv[3]) : 1 << 20;
        int W = size * 16 > (256L << 20) ? (int)((256L << 20) / size) : 16;
        if (W < 1) W = 1;
        const long SIZE = size;
        /* about 40 x 16 MiB per pass at any size, by default */
        long reps = (long)(40 * scale * (16L << 20) / ((long)W * SIZE));
        if (reps < 4) reps = 4;
        char *buf = malloc((size_t)W * SIZE);
        memset(buf, 1, (size_t)W * SIZE);
        MPI_Request req[16];
        for (int pass = 0; pass < 2; pass++) {
            long iters = pass ? reps : 4;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long r = 0; r < iters; r++) {
                for (int w = 0; w < W; w++) {
                    if (rank == 0) MPI_Isend(buf + (size_t)w * SIZE, (int)SIZE, MPI_BYTE, peer, w, MPI_COMM_WORLD, &req[w]);
                    else MPI_Irecv(buf + (size_t)w * SIZE, (int)SIZE, MPI_BYTE, peer, w, MPI_COMM_WORLD, &req[w]);
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
        long blocks = (long)(200 * scale);
        double x = rank, y;
        double *per = malloc(sizeof(double) * (size_t)blocks);
        for (int pass = 0; pass < 2; pass++) {
            long nb = pass ? blocks : blocks / 10;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now_ns();
            window(pass);
            for (long k = 0; k < nb; k++) {
                double b0 = now_ns();
                for (long i = 0; i < BLOCK; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                per[k] = (now_ns() - b0) / BLOCK;
            }
            window(0);
            mean = (now_ns() - t0) / nb / BLOCK;
            value = median(per, nb);
        }
        free(per);
    } else if (!strcmp(mode, "self") || !strcmp(mode, "selfi") || !strcmp(mode, "selfs")) {
        int posted = !strcmp(mode, "selfi"), isend = !strcmp(mode, "selfs");
        long blocks = (long)(200 * scale);
        int bytes = argc > 3 ? atoi(argv[3]) : 8;
        if (bytes < 1) bytes = 1;
        char *b = calloc((size_t)bytes, 1), *got = calloc((size_t)bytes, 1);
        MPI_Request req;
        double *per = malloc(sizeof(double) * (size_t)(blocks > 0 ? blocks : 1));
        for (int pass = 0; pass < 2; pass++) {
            long nb = pass ? blocks : blocks / 10;
            double t0 = now_ns();
            window(pass);
            for (long k = 0; k < nb; k++) {
                double b0 = now_ns();
                for (long i = 0; i < BLOCK; i++) {
                    if (posted) {
                        MPI_Irecv(got, bytes, MPI_BYTE, rank, 0, MPI_COMM_WORLD, &req);
                        MPI_Send(b, bytes, MPI_BYTE, rank, 0, MPI_COMM_WORLD);
                        MPI_Wait(&req, MPI_STATUS_IGNORE);
                    } else if (isend) {
                        MPI_Isend(b, bytes, MPI_BYTE, rank, 0, MPI_COMM_WORLD, &req);
                        MPI_Recv(got, bytes, MPI_BYTE, rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        MPI_Wait(&req, MPI_STATUS_IGNORE);
                    } else {
                        MPI_Send(b, bytes, MPI_BYTE, rank, 0, MPI_COMM_WORLD);
                        MPI_Recv(b, bytes, MPI_BYTE, rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    }
                }
                per[k] = (now_ns() - b0) / BLOCK;
            }
            window(0);
            mean = nb > 0 ? (now_ns() - t0) / nb / BLOCK : 0;
            value = nb > 0 ? median(per, nb) : 0;
        }
        free(per);
        free(b);
        free(got);
    } else {
        if (rank == 0) fprintf(stderr, "mpibench: unknown mode %s\n", mode);
        MPI_Finalize();
        return 2;
    }
    if (rank == 0) {
        if (mean > 0) printf("%s %.3f mean %.3f\n", mode, value, mean);
        else printf("%s %.3f\n", mode, value);
    }
    MPI_Finalize();
    return 0;
}
