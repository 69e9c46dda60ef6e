/* The piggyback scenarios of issue 3, one per argument. Each rank prints
 * what it received, so that a traced run can be compared with an untraced
 * one; the integration test also asserts the exact logical clocks.
 *
 *   crooked   np=3  the crooked barrier (Vo, Fig. 1.1 / 5.2)
 *   overtake  np=2  receive non-overtaking (Fig. 3.3), wildcard Irecv
 *   reverse   np=2  two Irecv(ANY_SOURCE) on one tag, Waits in reverse
 *                   order, same sender (Fig. 2.14)
 *   reverse   np=3  the same with two different senders (Fig. 2.15)
 *   partial   np=2  receives posted larger than the message, Get_count
 *                   and Get_elements (small, large, derived type, Irecv)
 *   probe     np=2  Probe then Recv of the probed size; Iprobe (which leaves
 *                   the status's MPI_ERROR as it was); Mprobe+Mrecv
 *   bsend     np=2  a buffered send through a buffer sized exactly for it
 */
#include "expect.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, np;

static void crooked(void) {
    MPI_Request h;
    int x = 0, y = 0;
    if (rank == 0) {
        x = 22;
        C(MPI_Isend, &x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &h);
        C(MPI_Barrier, MPI_COMM_WORLD);
        C(MPI_Wait, &h, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        C(MPI_Irecv, &x, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, &h);
        C(MPI_Barrier, MPI_COMM_WORLD);
        C(MPI_Recv, &y, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        C(MPI_Wait, &h, MPI_STATUS_IGNORE);
        /* Which message the Irecv got is a race; the pair is not. */
        printf("crooked: rank 1 got %d and %d\n", x < y ? x : y, x < y ? y : x);
    } else if (rank == 2) {
        x = 33;
        C(MPI_Barrier, MPI_COMM_WORLD);
        C(MPI_Isend, &x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &h);
        C(MPI_Wait, &h, MPI_STATUS_IGNORE);
    } else {
        C(MPI_Barrier, MPI_COMM_WORLD);
    }
}

static void overtake(void) {
    MPI_Request h;
    int a = 1, b = 2, ra = 0, rb = 0;
    if (rank == 0) {
        C(MPI_Isend, &a, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &h);
        C(MPI_Barrier, MPI_COMM_WORLD);
        C(MPI_Send, &b, 1, MPI_INT, 1, 5, MPI_COMM_WORLD);
        C(MPI_Wait, &h, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        C(MPI_Irecv, &ra, 1, MPI_INT, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, &h);
        C(MPI_Barrier, MPI_COMM_WORLD);
        C(MPI_Recv, &rb, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        C(MPI_Wait, &h, MPI_STATUS_IGNORE);
        printf("overtake: irecv got %d, recv got %d\n", ra, rb);
    } else {
        C(MPI_Barrier, MPI_COMM_WORLD);
    }
}

static void reverse(void) {
    int last = np - 1;
    if (rank < last) {
        MPI_Request h[2];
        int v[2] = {100 + 10 * rank, 101 + 10 * rank};
        /* With one sender both messages come from it; with two, one each. */
        int n = np == 2 ? 2 : 1;
        for (int i = 0; i < n; i++)
            C(MPI_Isend, &v[i], 1, MPI_INT, last, 7, MPI_COMM_WORLD, &h[i]);
        C(MPI_Waitall, n, h, MPI_STATUSES_IGNORE);
    } else {
        MPI_Request h1, h2;
        MPI_Status s1, s2;
        int b1 = 0, b2 = 0;
        C(MPI_Irecv, &b1, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &h1);
        C(MPI_Irecv, &b2, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &h2);
        C(MPI_Wait, &h2, &s2);
        C(MPI_Wait, &h1, &s1);
        /* The data must be the sender's (the piggyback did not shift it). */
        int ok = (b1 - 100) / 10 == s1.MPI_SOURCE && (b2 - 100) / 10 == s2.MPI_SOURCE;
        if (np == 2) ok = ok && b1 == 100 && b2 == 101; /* non-overtaking */
        printf("reverse: %s\n", ok ? "OK" : "WRONG");
    }
}

static void counts(const char *what, MPI_Status *s, MPI_Datatype t) {
    int c = -1, e = -1;
    C(MPI_Get_count, s, t, &c);
    C(MPI_Get_elements, s, t, &e);
    printf("partial: %s count=%d elements=%d\n", what, c, e);
}

static void partial(void) {
    enum { BIG = 4096 };
    int *buf = calloc(2 * BIG, sizeof(int));
    MPI_Datatype vec; /* 3 blocks of 2 ints */
    C(MPI_Type_vector, 3, 2, 4, MPI_INT, &vec);
    C(MPI_Type_commit, &vec);
    if (rank == 0) {
        for (int i = 0; i < 2 * BIG; i++) buf[i] = i;
        C(MPI_Send, buf, 5, MPI_INT, 1, 1, MPI_COMM_WORLD);
        C(MPI_Send, buf, BIG, MPI_INT, 1, 2, MPI_COMM_WORLD);
        C(MPI_Send, buf, 2, vec, 1, 3, MPI_COMM_WORLD);
        C(MPI_Send, buf, 7, MPI_INT, 1, 4, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Status s;
        MPI_Request h;
        C(MPI_Recv, buf, 100, MPI_INT, 0, 1, MPI_COMM_WORLD, &s);
        counts("small", &s, MPI_INT);
        printf("partial: small data %d %d\n", buf[0], buf[4]);
        C(MPI_Recv, buf, 2 * BIG, MPI_INT, 0, 2, MPI_COMM_WORLD, &s);
        counts("large", &s, MPI_INT);
        printf("partial: large data %d %d\n", buf[1], buf[BIG - 1]);
        memset(buf, 0, sizeof(int) * 40);
        C(MPI_Recv, buf, 5, vec, 0, 3, MPI_COMM_WORLD, &s);
        counts("vector", &s, vec);
        counts("vector as int", &s, MPI_INT);
        printf("partial: vector data %d %d %d %d\n", buf[0], buf[4], buf[9], buf[12]);
        C(MPI_Irecv, buf, 50, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &h);
        C(MPI_Wait, &h, &s);
        counts("irecv", &s, MPI_INT);
        printf("partial: irecv from %d tag %d data %d\n", s.MPI_SOURCE, s.MPI_TAG, buf[6]);
    }
    C(MPI_Type_free, &vec);
    free(buf);
}

static void probe(void) {
    if (rank == 0) {
        double d[37];
        for (int i = 0; i < 37; i++) d[i] = i * 0.5;
        C(MPI_Send, d, 37, MPI_DOUBLE, 1, 9, MPI_COMM_WORLD);
        C(MPI_Send, d, 11, MPI_DOUBLE, 1, 10, MPI_COMM_WORLD);
        C(MPI_Send, d, 3, MPI_DOUBLE, 1, 11, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Status s;
        int n = 0, flag = 0;
        C(MPI_Probe, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &s);
        C(MPI_Get_count, &s, MPI_DOUBLE, &n);
        double *d = malloc(sizeof(double) * (size_t)n);
        C(MPI_Recv, d, n, MPI_DOUBLE, s.MPI_SOURCE, s.MPI_TAG, MPI_COMM_WORLD, &s);
        printf("probe: probed %d doubles, last %.1f\n", n, d[n - 1]);
        free(d);
        /* A probe does not set MPI_ERROR: MPI leaves the caller's value. */
        s.MPI_ERROR = MPI_ERR_DIMS;
        while (!flag) C(MPI_Iprobe, 0, 10, MPI_COMM_WORLD, &flag, &s);
        printf("probe: iprobe left MPI_ERROR %s\n", s.MPI_ERROR == MPI_ERR_DIMS ? "as it was" : "changed");
        C(MPI_Get_count, &s, MPI_DOUBLE, &n);
        d = malloc(sizeof(double) * (size_t)n);
        C(MPI_Recv, d, n, MPI_DOUBLE, 0, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("probe: iprobed %d doubles, last %.1f\n", n, d[n - 1]);
        free(d);
        MPI_Message m;
        C(MPI_Mprobe, 0, 11, MPI_COMM_WORLD, &m, &s);
        C(MPI_Get_count, &s, MPI_DOUBLE, &n);
        d = malloc(sizeof(double) * (size_t)n);
        C(MPI_Mrecv, d, n, MPI_DOUBLE, &m, &s);
        C(MPI_Get_count, &s, MPI_DOUBLE, &n);
        printf("probe: mprobed %d doubles, last %.1f\n", n, d[n - 1]);
        free(d);
    }
}

static void bsend(void) {
    int v[4] = {1, 2, 3, 4};
    if (rank == 0) {
        int size = 0;
        C(MPI_Pack_size, 4, MPI_INT, MPI_COMM_WORLD, &size);
        size += MPI_BSEND_OVERHEAD;
        char *buf = malloc((size_t)size);
        C(MPI_Buffer_attach, buf, size);
        C(MPI_Bsend, v, 4, MPI_INT, 1, 3, MPI_COMM_WORLD);
        void *back = NULL;
        int back_size = 0;
        C(MPI_Buffer_detach, &back, &back_size);
        int same = back == buf && back_size == size;
        C(MPI_Send, &same, 1, MPI_INT, 1, 4, MPI_COMM_WORLD);
        free(buf);
    } else if (rank == 1) {
        int r[4] = {0};
        int same = 0;
        C(MPI_Recv, r, 4, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        C(MPI_Recv, &same, 1, MPI_INT, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("bsend: got %d %d %d %d; detach gave %s buffer back\n", r[0], r[1], r[2], r[3],
               same ? "the attached" : "ANOTHER");
    }
}

int main(int argc, char **argv) {
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &np);
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "crooked")) crooked();
    else if (!strcmp(what, "overtake")) overtake();
    else if (!strcmp(what, "reverse")) reverse();
    else if (!strcmp(what, "partial")) partial();
    else if (!strcmp(what, "probe")) probe();
    else if (!strcmp(what, "bsend")) bsend();
    else if (rank == 0) printf("scenarios: unknown scenario '%s'\n", what);
    expect_write(rank);
    MPI_Finalize();
    return 0;
}
