/* hang MODE [SECONDS]: jobs that hang, or nearly, for `pmtrace top`.
 *
 *   deadlock   ranks 0 and 1 each block in MPI_Recv from the other; the
 *              other ranks wait in MPI_Barrier. Never returns.
 *   waitall    as deadlock, but ranks 0 and 1 post MPI_Irecv from each
 *              other on a communicator split from the world (comm ranks
 *              differ from world ranks) and block in MPI_Waitall.
 *   sends      as deadlock, but ranks 0 and 1 each block in MPI_Send of
 *              16 MiB to the other (too large to go eagerly: neither is
 *              received, since neither rank receives).
 *   stalled    rank 2 computes for SECONDS (default 12) while the others
 *              wait in MPI_Allreduce; then the job ends normally.
 *   taken      every rank takes every real-time signal for a handler of its
 *              own; then rank 0 computes for SECONDS while the others wait
 *              in MPI_Barrier, and rank 0 prints how many of those signals
 *              the ranks got in all ("hang: ok np=N signals=K").
 *
 * Before blocking, every rank makes a few calls (Allreduce, Barrier) so
 * that the collective counts are past zero. Prints "hang: ready" on rank 0
 * once every rank is about to block (stdout, flushed), and, for stalled,
 * "hang: ok np=N" at the end. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The deadlock's receive, in a function of its own: `top` names it, and
 * the line of the call, as where the blocked call came from. */
__attribute__((noinline)) static int receive_from(int peer) {
    int v;
    MPI_Recv(&v, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE); /* site: receive_from */
    return v;
}

static volatile sig_atomic_t signals_got;
static void count_signal(int sig) {
    (void)sig;
    signals_got++;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "deadlock";
    double seconds = argc > 2 ? atof(argv[2]) : 12.0;
    if (size < 3) {
        if (rank == 0) fprintf(stderr, "hang: needs at least 3 ranks\n");
        MPI_Finalize();
        return 2;
    }
    int x = rank, sum = 0;
    for (int i = 0; i < 3; i++) MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("hang: ready\n");
        fflush(stdout);
    }
    if (strcmp(mode, "deadlock") == 0) {
        if (rank < 2) {
            receive_from(1 - rank);
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
        }
    } else if (strcmp(mode, "sends") == 0) {
        if (rank < 2) {
            const int n = 16 << 20;
            char *buf = calloc(n, 1);
            MPI_Send(buf, n, MPI_BYTE, 1 - rank, 10, MPI_COMM_WORLD);
            free(buf);
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
        }
    } else if (strcmp(mode, "waitall") == 0) {
        /* Ranks 0 and 1 get comm ranks 1 and 0 in `pair` (key reversed). */
        MPI_Comm pair;
        MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : 1, -rank, &pair);
        if (rank < 2) {
            int v[2];
            MPI_Request r[2];
            /* The other rank of the pair is comm rank `rank` there. */
            MPI_Irecv(&v[0], 1, MPI_INT, rank, 8, pair, &r[0]);
            MPI_Irecv(&v[1], 1, MPI_INT, rank, 9, pair, &r[1]);
            MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
        }
    } else if (strcmp(mode, "taken") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = count_signal;
        sigemptyset(&sa.sa_mask);
        for (int s = SIGRTMIN; s <= SIGRTMAX; s++) sigaction(s, &sa, NULL);
        if (rank == 0) {
            volatile double acc = 0;
            double t0 = now();
            while (now() - t0 < seconds) {
                for (int i = 0; i < 100000; i++) acc += i * 1e-9;
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        int mine = signals_got, all = 0;
        MPI_Reduce(&mine, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("hang: ok np=%d signals=%d\n", size, all);
    } else if (strcmp(mode, "stalled") == 0) {
        if (rank == 2) {
            volatile double acc = 0;
            double t0 = now();
            while (now() - t0 < seconds) {
                for (int i = 0; i < 100000; i++) acc += i * 1e-9;
            }
        }
        MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) printf("hang: ok np=%d\n", size);
    } else {
        if (rank == 0) fprintf(stderr, "hang: unknown mode %s\n", mode);
        MPI_Finalize();
        return 2;
    }
    MPI_Finalize();
    return 0;
}
