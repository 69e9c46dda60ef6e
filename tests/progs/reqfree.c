/* MPI_Request_free on operations still in flight: MPI finishes them on
 * its own, and the data of a freed receive must reach the user's buffer.
 * The application learns that it has by a later message on the same
 * channel (non-overtaking), then reads the buffer. Pairs (0,1), (2,3), ...
 * each run the same exchange; an odd last rank sits out. Rank 0 prints
 * "reqfree: ok np=N" (or FAIL lines and exits 1). Needs np >= 2. */
#include "expect.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { SMALL = 4, BIG = 8192, LOOSE = 1000 };
enum { T_SMALL = 1, T_GO = 2, T_ANY = 3, T_BIG = 4, T_VEC = 5, T_PERS = 6, T_LOOSE = 7, T_BIGSEND = 8 };

static int errors;

static void fill(int *b, int n, int seed) {
    for (int i = 0; i < n; i++) b[i] = seed * 100003 + i;
}

static void check(const int *b, int n, int seed, const char *what) {
    for (int i = 0; i < n; i++)
        if (b[i] != seed * 100003 + i) {
            printf("reqfree: FAIL %s: element %d is %d, expected %d\n", what, i, b[i], seed * 100003 + i);
            errors++;
            return;
        }
}

/* The go message on `tag` from `peer`: when it has come, so has everything
 * the peer sent before it on the same channel. */
static void go_send(int peer, int tag) {
    int x = 0;
    C(MPI_Send, &x, 1, MPI_INT, peer, tag, MPI_COMM_WORLD);
}

static void go_recv(int peer, int tag) {
    int x;
    C(MPI_Recv, &x, 1, MPI_INT, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static int loose[LOOSE];
static int bigsend[BIG];

int main(int argc, char **argv) {
    int rank, np;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &np);
    if (np < 2) {
        if (rank == 0) printf("reqfree: FAIL needs np >= 2\n");
        C(MPI_Abort, MPI_COMM_WORLD, 1);
    }
    int peer = rank ^ 1;
    MPI_Request req;
    static int small[SMALL], any1[SMALL], any2[SMALL], big[BIG], vec[3 * SMALL], pers[SMALL];
    MPI_Datatype every_third;
    C(MPI_Type_vector, SMALL, 1, 3, MPI_INT, &every_third);
    C(MPI_Type_commit, &every_third);

    if (peer >= np) {
        /* An odd last rank sits out. */
    } else if (rank % 2 == 1) {
        /* A small receive (staged) freed at once. */
        C(MPI_Irecv, small, SMALL, MPI_INT, peer, T_SMALL, MPI_COMM_WORLD, &req);
        C(MPI_Request_free, &req);
        if (req != MPI_REQUEST_NULL) printf("reqfree: FAIL handle not null\n"), errors++;
        go_recv(peer, T_SMALL);
        check(small, SMALL, 1, "small receive");

        /* A wildcard receive freed, then a blocking one on the same tag:
         * the first message goes to the freed one. */
        C(MPI_Irecv, any1, SMALL, MPI_INT, MPI_ANY_SOURCE, T_ANY, MPI_COMM_WORLD, &req);
        C(MPI_Request_free, &req);
        C(MPI_Recv, any2, SMALL, MPI_INT, MPI_ANY_SOURCE, T_ANY, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(any1, SMALL, 31, "freed wildcard receive");
        check(any2, SMALL, 32, "wildcard receive after it");

        /* A large receive (no staging) and a strided one, freed. */
        C(MPI_Irecv, big, BIG, MPI_INT, peer, T_BIG, MPI_COMM_WORLD, &req);
        C(MPI_Request_free, &req);
        go_recv(peer, T_BIG);
        check(big, BIG, 4, "large receive");
        C(MPI_Irecv, vec, 1, every_third, peer, T_VEC, MPI_COMM_WORLD, &req);
        C(MPI_Request_free, &req);
        go_recv(peer, T_VEC);
        int strided[SMALL];
        for (int i = 0; i < SMALL; i++) strided[i] = vec[3 * i];
        check(strided, SMALL, 5, "strided receive");

        /* A persistent receive freed while started. */
        C(MPI_Recv_init, pers, SMALL, MPI_INT, peer, T_PERS, MPI_COMM_WORLD, &req);
        C(MPI_Start, &req);
        C(MPI_Request_free, &req);
        go_recv(peer, T_PERS);
        check(pers, SMALL, 6, "persistent receive");

        /* Fire-and-forget sends, the other way. */
        for (int i = 0; i < LOOSE; i++) {
            loose[i] = 7 * 100003 + i;
            C(MPI_Isend, &loose[i], 1, MPI_INT, peer, T_LOOSE, MPI_COMM_WORLD, &req);
            C(MPI_Request_free, &req);
        }
        fill(bigsend, BIG, 8);
        C(MPI_Isend, bigsend, BIG, MPI_INT, peer, T_BIGSEND, MPI_COMM_WORLD, &req);
        C(MPI_Request_free, &req);
        go_recv(peer, T_GO);
    } else {
        int out[BIG];
        fill(out, SMALL, 1);
        C(MPI_Send, out, SMALL, MPI_INT, peer, T_SMALL, MPI_COMM_WORLD);
        go_send(peer, T_SMALL);

        fill(out, SMALL, 31);
        C(MPI_Send, out, SMALL, MPI_INT, peer, T_ANY, MPI_COMM_WORLD);
        fill(out, SMALL, 32);
        C(MPI_Send, out, SMALL, MPI_INT, peer, T_ANY, MPI_COMM_WORLD);

        fill(out, BIG, 4);
        C(MPI_Send, out, BIG, MPI_INT, peer, T_BIG, MPI_COMM_WORLD);
        go_send(peer, T_BIG);
        fill(out, SMALL, 5);
        int spread[3 * SMALL] = {0};
        for (int i = 0; i < SMALL; i++) spread[3 * i] = out[i];
        C(MPI_Send, spread, 1, every_third, peer, T_VEC, MPI_COMM_WORLD);
        go_send(peer, T_VEC);

        fill(out, SMALL, 6);
        C(MPI_Send, out, SMALL, MPI_INT, peer, T_PERS, MPI_COMM_WORLD);
        go_send(peer, T_PERS);

        int x;
        for (int i = 0; i < LOOSE; i++) {
            C(MPI_Recv, &x, 1, MPI_INT, peer, T_LOOSE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (x != 7 * 100003 + i) {
                printf("reqfree: FAIL fire-and-forget message %d is %d\n", i, x);
                errors++;
                break;
            }
        }
        C(MPI_Recv, out, BIG, MPI_INT, peer, T_BIGSEND, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(out, BIG, 8, "large freed send");
        go_send(peer, T_GO);
    }
    C(MPI_Type_free, &every_third);
    int total = 0;
    C(MPI_Reduce, &errors, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0) printf("reqfree: ok np=%d\n", np);
        else printf("reqfree: FAIL %d errors\n", total);
    }
    fflush(stdout);
    expect_write(rank);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
