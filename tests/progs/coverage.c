/*
 * coverage.c - exercise a wide slice of the MPI API, checking every value.
 *
 * Build: mpicc -O2 -Iexamples tests/progs/coverage.c -o coverage
 * Run with any np >= 2.  Point-to-point parts pair ranks (2k, 2k+1): the
 * even rank is the sender ("A"), the odd rank the receiver ("B"); with an
 * odd np the last rank is idle for those parts but takes part in every
 * collective and communicator operation.  All MPI calls go through C()/C0()
 * from expect.h, so EXPECT_COUNTS_DIR gets exact per-rank call counts.
 * Every rank counts failed checks; an MPI_Allreduce at the end brings the
 * total to rank 0, which prints "coverage: ok np=N" or a FAIL line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <mpi.h>
#include "expect.h"

#define W MPI_COMM_WORLD
#define ROLE_IDLE (-1)
#define ROLE_A 0 /* even rank of a pair: sends */
#define ROLE_B 1 /* odd rank of a pair: receives */
#define NEVER_TAG 12345 /* no message ever carries this tag */
#define CANCEL_TAG 12346 /* a send to self, cancelled */
#define BSEND_BYTES (1 << 16)

static int rank, size, partner, role;
static int errs;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            if (errs < 20)                                                                    \
                fprintf(stderr, "coverage: rank %d: check failed at line %d: %s\n", rank,    \
                        __LINE__, #cond);                                                     \
            errs++;                                                                           \
        }                                                                                     \
    } while (0)

/* payload value number i of a message with the given tag */
static int val(int tag, int i)
{
    return tag * 1000 + i * 7 + 3;
}

static void fill(int *buf, int n, int tag)
{
    int i;
    for (i = 0; i < n; i++)
        buf[i] = val(tag, i);
}

static void check_buf(const int *buf, int n, int tag)
{
    int i, bad = 0;
    for (i = 0; i < n; i++)
        if (buf[i] != val(tag, i))
            bad++;
    CHECK(bad == 0);
}

static void check_status(const MPI_Status *st, int src, int tag, int count)
{
    int c = -1;
    CHECK(st->MPI_SOURCE == src);
    CHECK(st->MPI_TAG == tag);
    C(MPI_Get_count, st, MPI_INT, &c);
    CHECK(c == count);
}

/* ------------------------------------------------------------------ */
/* blocking sends in all four modes                                     */
static void test_blocking_modes(void)
{
    int buf[4], tag;
    MPI_Status st;
    MPI_Request req = MPI_REQUEST_NULL;

    if (role == ROLE_A) {
        fill(buf, 4, 1);
        C(MPI_Send, buf, 4, MPI_INT, partner, 1, W);
        fill(buf, 4, 2);
        C(MPI_Bsend, buf, 4, MPI_INT, partner, 2, W);
        fill(buf, 4, 3);
        C(MPI_Ssend, buf, 4, MPI_INT, partner, 3, W);
    } else if (role == ROLE_B) {
        for (tag = 1; tag <= 3; tag++) {
            C(MPI_Recv, buf, 4, MPI_INT, partner, tag, W, &st);
            check_buf(buf, 4, tag);
            check_status(&st, partner, tag, 4);
        }
    }

    /* ready mode: the receive is posted before the barrier */
    if (role == ROLE_B)
        C(MPI_Irecv, buf, 4, MPI_INT, partner, 4, W, &req);
    C(MPI_Barrier, W);
    if (role == ROLE_A) {
        fill(buf, 4, 4);
        C(MPI_Rsend, buf, 4, MPI_INT, partner, 4, W);
    } else if (role == ROLE_B) {
        C(MPI_Wait, &req, &st);
        check_buf(buf, 4, 4);
        check_status(&st, partner, 4, 4);
        CHECK(req == MPI_REQUEST_NULL);
    }
}

/* ------------------------------------------------------------------ */
/* nonblocking sends in all four modes                                  */
static void test_nonblocking_modes(void)
{
    int b[3][4], rb[4], k;
    MPI_Request req[3], rreq = MPI_REQUEST_NULL;
    MPI_Status st[3], s1;

    if (role == ROLE_A) {
        for (k = 0; k < 3; k++)
            fill(b[k], 4, 10 + k);
        C(MPI_Isend, b[0], 4, MPI_INT, partner, 10, W, &req[0]);
        C(MPI_Ibsend, b[1], 4, MPI_INT, partner, 11, W, &req[1]);
        C(MPI_Issend, b[2], 4, MPI_INT, partner, 12, W, &req[2]);
        C(MPI_Waitall, 3, req, st);
    } else if (role == ROLE_B) {
        for (k = 0; k < 3; k++)
            C(MPI_Irecv, b[k], 4, MPI_INT, partner, 10 + k, W, &req[k]);
        C(MPI_Waitall, 3, req, st);
        for (k = 0; k < 3; k++) {
            check_buf(b[k], 4, 10 + k);
            check_status(&st[k], partner, 10 + k, 4);
            CHECK(req[k] == MPI_REQUEST_NULL);
        }
    }

    if (role == ROLE_B)
        C(MPI_Irecv, rb, 4, MPI_INT, partner, 13, W, &rreq);
    C(MPI_Barrier, W);
    if (role == ROLE_A) {
        fill(rb, 4, 13);
        C(MPI_Irsend, rb, 4, MPI_INT, partner, 13, W, &rreq);
        C(MPI_Wait, &rreq, &s1);
    } else if (role == ROLE_B) {
        C(MPI_Wait, &rreq, MPI_STATUS_IGNORE);
        check_buf(rb, 4, 13);
    }
}

/* ------------------------------------------------------------------ */
/* persistent requests, several rounds                                  */
#define PERSIST_ROUNDS 3
static void test_persistent(void)
{
    int b[4][4], k, i, round;
    MPI_Request req[4];
    MPI_Status st[4];

    if (role == ROLE_A) {
        C(MPI_Send_init, b[0], 4, MPI_INT, partner, 20, W, &req[0]);
        C(MPI_Bsend_init, b[1], 4, MPI_INT, partner, 21, W, &req[1]);
        C(MPI_Ssend_init, b[2], 4, MPI_INT, partner, 22, W, &req[2]);
        C(MPI_Rsend_init, b[3], 4, MPI_INT, partner, 23, W, &req[3]);
    } else if (role == ROLE_B) {
        for (k = 0; k < 4; k++)
            C(MPI_Recv_init, b[k], 4, MPI_INT, partner, 20 + k, W, &req[k]);
    }

    for (round = 0; round < PERSIST_ROUNDS; round++) {
        if (role == ROLE_A)
            for (k = 0; k < 4; k++)
                for (i = 0; i < 4; i++)
                    b[k][i] = val(20 + k, i) + round * 100000;
        if (role == ROLE_B) {
            for (k = 0; k < 4; k++)
                for (i = 0; i < 4; i++)
                    b[k][i] = -1;
            C(MPI_Startall, 4, req);
        }
        C(MPI_Barrier, W); /* all receives (incl. the ready-mode one) are posted */
        if (role == ROLE_A) {
            C(MPI_Startall, 3, req);
            C(MPI_Start, &req[3]);
            C(MPI_Waitall, 4, req, MPI_STATUSES_IGNORE);
        } else if (role == ROLE_B) {
            C(MPI_Waitall, 4, req, st);
            for (k = 0; k < 4; k++) {
                int bad = 0;
                for (i = 0; i < 4; i++)
                    if (b[k][i] != val(20 + k, i) + round * 100000)
                        bad++;
                CHECK(bad == 0);
                check_status(&st[k], partner, 20 + k, 4);
            }
        }
        if (role != ROLE_IDLE)
            for (k = 0; k < 4; k++)
                CHECK(req[k] != MPI_REQUEST_NULL); /* persistent: still allocated */
    }

    if (role != ROLE_IDLE)
        for (k = 0; k < 4; k++) {
            C(MPI_Request_free, &req[k]);
            CHECK(req[k] == MPI_REQUEST_NULL);
        }
}

/* ------------------------------------------------------------------ */
static void test_sendrecv(void)
{
    int s, r = -1, x;
    MPI_Status st;

    if (role == ROLE_IDLE)
        return;
    s = rank * 10 + 1;
    C(MPI_Sendrecv, &s, 1, MPI_INT, partner, 30, &r, 1, MPI_INT, partner, 30, W, &st);
    CHECK(r == partner * 10 + 1);
    check_status(&st, partner, 30, 1);

    x = rank * 10 + 2;
    C(MPI_Sendrecv_replace, &x, 1, MPI_INT, partner, 31, partner, 31, W, &st);
    CHECK(x == partner * 10 + 2);
    check_status(&st, partner, 31, 1);
}

/* ------------------------------------------------------------------ */
static void test_probe(void)
{
    int buf[8], flag = -1, c = -1;
    MPI_Status st;
    MPI_Message msg;
    MPI_Request req;

    if (role == ROLE_A) {
        fill(buf, 7, 40);
        C(MPI_Send, buf, 7, MPI_INT, partner, 40, W);
        fill(buf, 5, 41);
        C(MPI_Send, buf, 5, MPI_INT, partner, 41, W);
        fill(buf, 3, 42);
        C(MPI_Send, buf, 3, MPI_INT, partner, 42, W);
        fill(buf, 2, 43);
        C(MPI_Send, buf, 2, MPI_INT, partner, 43, W);
    } else if (role == ROLE_B) {
        /* miss: nobody ever sends NEVER_TAG */
        C(MPI_Iprobe, partner, NEVER_TAG, W, &flag, &st);
        CHECK(flag == 0);

        C(MPI_Probe, partner, 40, W, &st);
        check_status(&st, partner, 40, 7);
        C(MPI_Recv, buf, 8, MPI_INT, partner, 40, W, &st);
        check_buf(buf, 7, 40);

        /* hit: poll until it is there */
        do {
            C(MPI_Iprobe, partner, 41, W, &flag, &st);
        } while (!flag);
        check_status(&st, partner, 41, 5);
        C(MPI_Recv, buf, 8, MPI_INT, partner, 41, W, &st);
        check_buf(buf, 5, 41);

        C(MPI_Mprobe, partner, 42, W, &msg, &st);
        check_status(&st, partner, 42, 3);
        C(MPI_Get_count, &st, MPI_INT, &c);
        C(MPI_Mrecv, buf, c, MPI_INT, &msg, &st);
        CHECK(msg == MPI_MESSAGE_NULL);
        check_buf(buf, 3, 42);
        check_status(&st, partner, 42, 3);

        do {
            C(MPI_Improbe, partner, 43, W, &flag, &msg, &st);
        } while (!flag);
        H(MPI_Improbe);
        check_status(&st, partner, 43, 2);
        C(MPI_Imrecv, buf, 8, MPI_INT, &msg, &req);
        C(MPI_Wait, &req, &st);
        check_buf(buf, 2, 43);
        check_status(&st, partner, 43, 2);
    }
}

/* ------------------------------------------------------------------ */
/* Wait / Test / Waitany / Testany / Waitall / Testall / Waitsome /      */
/* Testsome / Request_get_status                                        */
static void test_completion(void)
{
    int b[3][4], sb[4], k, flag, idx, done, outcount, idxs[3], seen[3];
    MPI_Request req[3], sreq;
    MPI_Status st, sts[3];

    if (role == ROLE_IDLE)
        return;

    /* MPI_Test in a loop, both sides */
    if (role == ROLE_A) {
        fill(sb, 4, 50);
        C(MPI_Isend, sb, 4, MPI_INT, partner, 50, W, &sreq);
    } else {
        C(MPI_Irecv, b[0], 4, MPI_INT, partner, 50, W, &sreq);
    }
    do {
        C(MPI_Test, &sreq, &flag, &st);
    } while (!flag);
    H(MPI_Test);
    CHECK(sreq == MPI_REQUEST_NULL);
    if (role == ROLE_B) {
        check_buf(b[0], 4, 50);
        check_status(&st, partner, 50, 4);
    }

    /* Waitany (51..53), Testany (54..56), Testall (57..58),
       Waitsome (59..61), Testsome (62..64) */
    if (role == ROLE_A) {
        int tag;
        for (tag = 51; tag <= 64; tag++) {
            fill(sb, 4, tag);
            C(MPI_Send, sb, 4, MPI_INT, partner, tag, W);
        }
    } else {
        /* Waitany */
        for (k = 0; k < 3; k++) {
            C(MPI_Irecv, b[k], 4, MPI_INT, partner, 51 + k, W, &req[k]);
            seen[k] = 0;
        }
        for (done = 0; done < 3; done++) {
            C(MPI_Waitany, 3, req, &idx, &st);
            CHECK(idx >= 0 && idx < 3);
            if (idx >= 0 && idx < 3) {
                CHECK(!seen[idx]);
                seen[idx] = 1;
                check_buf(b[idx], 4, 51 + idx);
                check_status(&st, partner, 51 + idx, 4);
            }
        }
        /* Testany */
        for (k = 0; k < 3; k++) {
            C(MPI_Irecv, b[k], 4, MPI_INT, partner, 54 + k, W, &req[k]);
            seen[k] = 0;
        }
        done = 0;
        while (done < 3) {
            C(MPI_Testany, 3, req, &idx, &flag, &st);
            if (flag) {
                H(MPI_Testany);
                CHECK(idx >= 0 && idx < 3);
                if (idx >= 0 && idx < 3) {
                    CHECK(!seen[idx]);
                    seen[idx] = 1;
                    check_buf(b[idx], 4, 54 + idx);
                    check_status(&st, partner, 54 + idx, 4);
                }
                done++;
            }
        }
        /* Testall */
        for (k = 0; k < 2; k++)
            C(MPI_Irecv, b[k], 4, MPI_INT, partner, 57 + k, W, &req[k]);
        do {
            C(MPI_Testall, 2, req, &flag, sts);
        } while (!flag);
        H(MPI_Testall);
        for (k = 0; k < 2; k++) {
            check_buf(b[k], 4, 57 + k);
            check_status(&sts[k], partner, 57 + k, 4);
        }
        /* Waitsome */
        for (k = 0; k < 3; k++) {
            C(MPI_Irecv, b[k], 4, MPI_INT, partner, 59 + k, W, &req[k]);
            seen[k] = 0;
        }
        done = 0;
        while (done < 3) {
            C(MPI_Waitsome, 3, req, &outcount, idxs, sts);
            CHECK(outcount >= 1 && outcount <= 3 - done);
            for (k = 0; k < outcount && k < 3; k++) {
                int i = idxs[k];
                CHECK(i >= 0 && i < 3 && !seen[i]);
                if (i >= 0 && i < 3) {
                    seen[i] = 1;
                    check_buf(b[i], 4, 59 + i);
                    check_status(&sts[k], partner, 59 + i, 4);
                }
            }
            done += outcount > 0 ? outcount : 3; /* never loop forever */
        }
        /* Testsome */
        for (k = 0; k < 3; k++) {
            C(MPI_Irecv, b[k], 4, MPI_INT, partner, 62 + k, W, &req[k]);
            seen[k] = 0;
        }
        done = 0;
        while (done < 3) {
            C(MPI_Testsome, 3, req, &outcount, idxs, sts);
            CHECK(outcount != MPI_UNDEFINED);
            if (outcount == MPI_UNDEFINED)
                break;
            if (outcount > 0)
                H(MPI_Testsome);
            for (k = 0; k < outcount && k < 3; k++) {
                int i = idxs[k];
                CHECK(i >= 0 && i < 3 && !seen[i]);
                if (i >= 0 && i < 3) {
                    seen[i] = 1;
                    check_buf(b[i], 4, 62 + i);
                    check_status(&sts[k], partner, 62 + i, 4);
                }
            }
            done += outcount;
        }
    }

    /* Request_get_status: poll without freeing, then Wait */
    if (role == ROLE_A) {
        fill(sb, 4, 65);
        C(MPI_Isend, sb, 4, MPI_INT, partner, 65, W, &sreq);
    } else {
        C(MPI_Irecv, b[0], 4, MPI_INT, partner, 65, W, &sreq);
    }
    do {
        C(MPI_Request_get_status, sreq, &flag, &st);
    } while (!flag);
    CHECK(sreq != MPI_REQUEST_NULL);
    if (role == ROLE_B)
        check_status(&st, partner, 65, 4);
    C(MPI_Wait, &sreq, MPI_STATUS_IGNORE);
    CHECK(sreq == MPI_REQUEST_NULL);
    if (role == ROLE_B)
        check_buf(b[0], 4, 65);
}

/* ------------------------------------------------------------------ */
/* MPI_Cancel of an unmatched receive; MPI_Request_free of an active     */
/* send; MPI_STATUS_IGNORE with wildcards; oversized receive            */
static int freed_send_buf[4]; /* must outlive the freed request */

static void test_cancel_free_ignore(void)
{
    int buf[100], flag = -1, c = -1, src;
    MPI_Request req;
    MPI_Status st;

    /* every rank: cancel a receive nobody will ever match */
    src = role == ROLE_IDLE ? rank : partner;
    C(MPI_Irecv, buf, 1, MPI_INT, src, NEVER_TAG, W, &req);
    C(MPI_Cancel, &req);
    C(MPI_Wait, &req, &st);
    C(MPI_Test_cancelled, &st, &flag);
    CHECK(flag != 0);

    /* every rank: cancel a synchronous send to itself on MPI_COMM_SELF,
     * ask the request's status, and free it if the cancellation
     * succeeded (MPICH), else receive it (Open MPI cancels no send):
     * mpi4py's testProbeCancel */
    C(MPI_Issend, NULL, 0, MPI_INT, 0, CANCEL_TAG, MPI_COMM_SELF, &req);
    C(MPI_Probe, 0, CANCEL_TAG, MPI_COMM_SELF, &st);
    C(MPI_Cancel, &req);
    flag = 0;
    C(MPI_Request_get_status, req, &flag, &st);
    c = 0;
    if (flag)
        C(MPI_Test_cancelled, &st, &c);
    if (c) {
        C(MPI_Request_free, &req);
    } else {
        C(MPI_Recv, NULL, 0, MPI_INT, 0, CANCEL_TAG, MPI_COMM_SELF, MPI_STATUS_IGNORE);
        C(MPI_Wait, &req, MPI_STATUS_IGNORE);
    }
    CHECK(req == MPI_REQUEST_NULL);

    if (role == ROLE_A) {
        fill(freed_send_buf, 4, 71);
        C(MPI_Isend, freed_send_buf, 4, MPI_INT, partner, 71, W, &req);
        C(MPI_Request_free, &req);
        CHECK(req == MPI_REQUEST_NULL);

        fill(buf, 3, 72);
        C(MPI_Send, buf, 3, MPI_INT, partner, 72, W);

        fill(buf, 10, 80);
        C(MPI_Send, buf, 10, MPI_INT, partner, 80, W);
    } else if (role == ROLE_B) {
        C(MPI_Recv, buf, 4, MPI_INT, partner, 71, W, &st);
        check_buf(buf, 4, 71);
        check_status(&st, partner, 71, 4);

        /* the only message still addressed to this rank is tag 72 */
        buf[0] = buf[1] = buf[2] = -1;
        C(MPI_Recv, buf, 3, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, W, MPI_STATUS_IGNORE);
        check_buf(buf, 3, 72);

        /* receive posted for 100 ints, message has 10 */
        for (c = 0; c < 100; c++)
            buf[c] = -1;
        C(MPI_Recv, buf, 100, MPI_INT, partner, 80, W, &st);
        check_buf(buf, 10, 80);
        CHECK(buf[10] == -1 && buf[99] == -1);
        c = -1;
        C(MPI_Get_count, &st, MPI_INT, &c);
        CHECK(c == 10);
        CHECK(st.MPI_SOURCE == partner && st.MPI_TAG == 80);
    }
}

/* ------------------------------------------------------------------ */
/* derived datatypes, incl. an absolute-address struct at MPI_BOTTOM    */
static int bottom_int;
static double bottom_dbl;
struct int_dbl {
    int a;
    double d;
};

static void test_datatypes(void)
{
    int buf[20], i, tsz = -1, c = -1;
    MPI_Datatype vt;
    MPI_Status st;

    C(MPI_Type_vector, 5, 2, 4, MPI_INT, &vt); /* ints 0,1, 4,5, 8,9, ... */
    C(MPI_Type_commit, &vt);
    C(MPI_Type_size, vt, &tsz);
    CHECK(tsz == 10 * (int)sizeof(int));

    if (role == ROLE_A) {
        fill(buf, 20, 81);
        C(MPI_Send, buf, 1, vt, partner, 81, W);
    } else if (role == ROLE_B) {
        for (i = 0; i < 20; i++)
            buf[i] = -1;
        C(MPI_Recv, buf, 1, vt, partner, 81, W, &st);
        for (i = 0; i < 20; i++)
            CHECK(i % 4 < 2 ? buf[i] == val(81, i) : buf[i] == -1);
        C(MPI_Get_count, &st, vt, &c);
        CHECK(c == 1);
        C(MPI_Get_count, &st, MPI_INT, &c);
        CHECK(c == 10);
    }
    C(MPI_Type_free, &vt);
    CHECK(vt == MPI_DATATYPE_NULL);

    if (role == ROLE_A) {
        /* struct with absolute displacements, sent from MPI_BOTTOM */
        MPI_Aint disp[2];
        int bl[2] = {1, 1};
        MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE}, abs_t;
        C(MPI_Get_address, &bottom_int, &disp[0]);
        C(MPI_Get_address, &bottom_dbl, &disp[1]);
        C(MPI_Type_create_struct, 2, bl, disp, types, &abs_t);
        C(MPI_Type_commit, &abs_t);
        bottom_int = 4242;
        bottom_dbl = 2.5;
        C(MPI_Send, MPI_BOTTOM, 1, abs_t, partner, 82, W);
        C(MPI_Type_free, &abs_t);
    } else if (role == ROLE_B) {
        /* received into an ordinary struct with relative displacements */
        struct int_dbl rs;
        MPI_Aint disp[2] = {offsetof(struct int_dbl, a), offsetof(struct int_dbl, d)};
        int bl[2] = {1, 1};
        MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE}, rel_t;
        C(MPI_Type_create_struct, 2, bl, disp, types, &rel_t);
        C(MPI_Type_commit, &rel_t);
        rs.a = -1;
        rs.d = -1.0;
        C(MPI_Recv, &rs, 1, rel_t, partner, 82, W, &st);
        CHECK(rs.a == 4242 && rs.d == 2.5);
        C(MPI_Get_count, &st, rel_t, &c);
        CHECK(c == 1);
        C(MPI_Type_free, &rel_t);
    }
}

/* ------------------------------------------------------------------ */
/* blocking collectives                                                 */
static void test_collectives(void)
{
    int p = size, i, j, k, n;
    int *sb, *rb, *cnt, *dsp, *scnt, *sdsp, *rcnt, *rdsp;
    MPI_Datatype *types;
    MPI_Comm half;

    n = p * (p + 1) / 2 + 4 * p + 16;
    sb = (int *)malloc(sizeof(int) * n);
    rb = (int *)malloc(sizeof(int) * n);
    cnt = (int *)malloc(sizeof(int) * p);
    dsp = (int *)malloc(sizeof(int) * p);
    scnt = (int *)malloc(sizeof(int) * p);
    sdsp = (int *)malloc(sizeof(int) * p);
    rcnt = (int *)malloc(sizeof(int) * p);
    rdsp = (int *)malloc(sizeof(int) * p);
    types = (MPI_Datatype *)malloc(sizeof(MPI_Datatype) * p);
    if (!sb || !rb || !cnt || !dsp || !scnt || !sdsp || !rcnt || !rdsp || !types) {
        fprintf(stderr, "coverage: out of memory\n");
        exit(1);
    }
    for (i = 0; i < p; i++) {
        cnt[i] = i + 1;
        dsp[i] = i * (i + 1) / 2;
    }

    /* Bcast from the last rank */
    for (k = 0; k < 3; k++)
        rb[k] = rank == p - 1 ? 500 + k : -1;
    C(MPI_Bcast, rb, 3, MPI_INT, p - 1, W);
    for (k = 0; k < 3; k++)
        CHECK(rb[k] == 500 + k);

    /* Reduce SUM to rank 0 */
    sb[0] = rank + 1;
    sb[1] = 2 * rank;
    C(MPI_Reduce, sb, rb, 2, MPI_INT, MPI_SUM, 0, W);
    if (rank == 0)
        CHECK(rb[0] == p * (p + 1) / 2 && rb[1] == p * (p - 1));

    /* Allreduce MAX / MIN, and in place */
    sb[0] = rank * 5;
    C(MPI_Allreduce, sb, rb, 1, MPI_INT, MPI_MAX, W);
    CHECK(rb[0] == (p - 1) * 5);
    C(MPI_Allreduce, sb, rb, 1, MPI_INT, MPI_MIN, W);
    CHECK(rb[0] == 0);
    rb[0] = rank + 1;
    C(MPI_Allreduce, MPI_IN_PLACE, rb, 1, MPI_INT, MPI_SUM, W);
    CHECK(rb[0] == p * (p + 1) / 2);

    /* Gather to rank 1, then with MPI_IN_PLACE at the root */
    sb[0] = rank * 11;
    C(MPI_Gather, sb, 1, MPI_INT, rb, 1, MPI_INT, 1, W);
    if (rank == 1)
        for (i = 0; i < p; i++)
            CHECK(rb[i] == i * 11);
    if (rank == 0) {
        for (i = 0; i < p; i++)
            rb[i] = i == 0 ? 77 : -1;
        C(MPI_Gather, MPI_IN_PLACE, 1, MPI_INT, rb, 1, MPI_INT, 0, W);
        for (i = 0; i < p; i++)
            CHECK(rb[i] == (i == 0 ? 77 : i * 13));
    } else {
        sb[0] = rank * 13;
        C(MPI_Gather, sb, 1, MPI_INT, NULL, 0, MPI_INT, 0, W);
    }

    /* Gatherv: rank i contributes i+1 ints */
    for (k = 0; k <= rank; k++)
        sb[k] = rank * 100 + k;
    C(MPI_Gatherv, sb, rank + 1, MPI_INT, rb, cnt, dsp, MPI_INT, 0, W);
    if (rank == 0)
        for (i = 0; i < p; i++)
            for (k = 0; k <= i; k++)
                CHECK(rb[dsp[i] + k] == i * 100 + k);

    /* Scatter and Scatterv from rank 0 */
    if (rank == 0)
        for (i = 0; i < p * (p + 1) / 2; i++)
            sb[i] = i * 3 + 1;
    C(MPI_Scatter, sb, 1, MPI_INT, rb, 1, MPI_INT, 0, W);
    CHECK(rb[0] == rank * 3 + 1);
    C(MPI_Scatterv, sb, cnt, dsp, MPI_INT, rb, rank + 1, MPI_INT, 0, W);
    for (k = 0; k <= rank; k++)
        CHECK(rb[k] == (dsp[rank] + k) * 3 + 1);

    /* Allgather, in place too */
    sb[0] = rank + 1000;
    C(MPI_Allgather, sb, 1, MPI_INT, rb, 1, MPI_INT, W);
    for (i = 0; i < p; i++)
        CHECK(rb[i] == i + 1000);
    for (i = 0; i < p; i++)
        rb[i] = i == rank ? rank * 17 : -1;
    C(MPI_Allgather, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, 1, MPI_INT, W);
    for (i = 0; i < p; i++)
        CHECK(rb[i] == i * 17);

    /* Allgatherv */
    for (k = 0; k <= rank; k++)
        sb[k] = rank * 10 + k;
    C(MPI_Allgatherv, sb, rank + 1, MPI_INT, rb, cnt, dsp, MPI_INT, W);
    for (i = 0; i < p; i++)
        for (k = 0; k <= i; k++)
            CHECK(rb[dsp[i] + k] == i * 10 + k);

    /* Alltoall */
    for (j = 0; j < p; j++)
        sb[j] = rank * 100 + j;
    C(MPI_Alltoall, sb, 1, MPI_INT, rb, 1, MPI_INT, W);
    for (j = 0; j < p; j++)
        CHECK(rb[j] == j * 100 + rank);

    /* Alltoallv: (dest % 3) + 1 ints to each dest */
    for (j = 0, k = 0; j < p; j++) {
        scnt[j] = j % 3 + 1;
        sdsp[j] = k;
        k += scnt[j];
    }
    for (j = 0, k = 0; j < p; j++) {
        rcnt[j] = rank % 3 + 1;
        rdsp[j] = k;
        k += rcnt[j];
    }
    for (j = 0; j < p; j++)
        for (k = 0; k < scnt[j]; k++)
            sb[sdsp[j] + k] = rank * 1000 + j * 10 + k;
    C(MPI_Alltoallv, sb, scnt, sdsp, MPI_INT, rb, rcnt, rdsp, MPI_INT, W);
    for (j = 0; j < p; j++)
        for (k = 0; k < rcnt[j]; k++)
            CHECK(rb[rdsp[j] + k] == j * 1000 + rank * 10 + k);

    /* Alltoallw: same pattern, displacements in bytes, per-peer types */
    for (j = 0; j < p; j++) {
        sdsp[j] *= (int)sizeof(int);
        rdsp[j] *= (int)sizeof(int);
        types[j] = MPI_INT;
        for (k = 0; k < scnt[j]; k++)
            sb[sdsp[j] / (int)sizeof(int) + k] = rank * 1000 + j * 10 + k + 5;
    }
    for (i = 0; i < n; i++)
        rb[i] = -1;
    C(MPI_Alltoallw, sb, scnt, sdsp, types, rb, rcnt, rdsp, types, W);
    for (j = 0; j < p; j++)
        for (k = 0; k < rcnt[j]; k++)
            CHECK(rb[rdsp[j] / (int)sizeof(int) + k] == j * 1000 + rank * 10 + k + 5);

    /* Reduce_scatter (rank i gets i+1 ints) and Reduce_scatter_block */
    for (i = 0; i < p * (p + 1) / 2; i++)
        sb[i] = rank + i;
    C(MPI_Reduce_scatter, sb, rb, cnt, MPI_INT, MPI_SUM, W);
    for (k = 0; k <= rank; k++)
        CHECK(rb[k] == p * (p - 1) / 2 + p * (dsp[rank] + k));
    for (i = 0; i < 2 * p; i++)
        sb[i] = rank * i;
    C(MPI_Reduce_scatter_block, sb, rb, 2, MPI_INT, MPI_SUM, W);
    for (k = 0; k < 2; k++)
        CHECK(rb[k] == (2 * rank + k) * p * (p - 1) / 2);

    /* Scan / Exscan */
    sb[0] = rank + 1;
    C(MPI_Scan, sb, rb, 1, MPI_INT, MPI_SUM, W);
    CHECK(rb[0] == (rank + 1) * (rank + 2) / 2);
    C(MPI_Exscan, sb, rb, 1, MPI_INT, MPI_SUM, W);
    if (rank > 0)
        CHECK(rb[0] == rank * (rank + 1) / 2);

    C(MPI_Barrier, W);

    /* even/odd split + Allreduce */
    {
        int color = rank % 2, want = 0;
        C(MPI_Comm_split, W, color, rank, &half);
        for (i = color; i < p; i += 2)
            want += i;
        sb[0] = rank;
        C(MPI_Allreduce, sb, rb, 1, MPI_INT, MPI_SUM, half);
        CHECK(rb[0] == want);
        C(MPI_Comm_free, &half);
        CHECK(half == MPI_COMM_NULL);
    }

    free(sb);
    free(rb);
    free(cnt);
    free(dsp);
    free(scnt);
    free(sdsp);
    free(rcnt);
    free(rdsp);
    free(types);
}

/* ------------------------------------------------------------------ */
/* nonblocking collectives                                              */
static void test_nonblocking_collectives(void)
{
    int p = size, i, x, y = -1, z = -1, bb[3];
    int *ag = (int *)malloc(sizeof(int) * p);
    int *sa = (int *)malloc(sizeof(int) * p);
    int *ra = (int *)malloc(sizeof(int) * p);
    MPI_Request req, reqs[4];

    if (!ag || !sa || !ra) {
        fprintf(stderr, "coverage: out of memory\n");
        exit(1);
    }

    C(MPI_Ibarrier, W, &req);
    C(MPI_Wait, &req, MPI_STATUS_IGNORE);

    for (i = 0; i < 3; i++)
        bb[i] = rank == p - 1 ? 900 + i : -1;
    x = rank + 1;
    for (i = 0; i < p; i++)
        sa[i] = rank * 10 + i;
    C(MPI_Ibcast, bb, 3, MPI_INT, p - 1, W, &reqs[0]);
    C(MPI_Ireduce, &x, &y, 1, MPI_INT, MPI_SUM, 0, W, &reqs[1]);
    C(MPI_Iallgather, &x, 1, MPI_INT, ag, 1, MPI_INT, W, &reqs[2]);
    C(MPI_Ialltoall, sa, 1, MPI_INT, ra, 1, MPI_INT, W, &reqs[3]);
    C(MPI_Waitall, 4, reqs, MPI_STATUSES_IGNORE);
    for (i = 0; i < 3; i++)
        CHECK(bb[i] == 900 + i);
    if (rank == 0)
        CHECK(y == p * (p + 1) / 2);
    for (i = 0; i < p; i++) {
        CHECK(ag[i] == i + 1);
        CHECK(ra[i] == i * 10 + rank);
    }

    C(MPI_Iallreduce, &x, &z, 1, MPI_INT, MPI_MAX, W, &req);
    C(MPI_Wait, &req, MPI_STATUS_IGNORE);
    CHECK(z == p);

    free(ag);
    free(sa);
    free(ra);
}

/* ------------------------------------------------------------------ */
/* communicators, groups, intercommunicators                            */
static void test_communicators(void)
{
    int p = size, i, r = -1, s = -1, x, y, flag = -1, n1, ne, color = rank % 2;
    int *ranks = (int *)malloc(sizeof(int) * p);
    MPI_Comm dup, half, c1, c2, inter, merged;
    MPI_Group wg, g1, g2;
    MPI_Status st;

    if (!ranks) {
        fprintf(stderr, "coverage: out of memory\n");
        exit(1);
    }

    /* Comm_dup */
    C(MPI_Comm_dup, W, &dup);
    C(MPI_Comm_rank, dup, &r);
    C(MPI_Comm_size, dup, &s);
    CHECK(r == rank && s == p);
    x = 1;
    C(MPI_Allreduce, &x, &y, 1, MPI_INT, MPI_SUM, dup);
    CHECK(y == p);
    C(MPI_Comm_free, &dup);

    /* Comm_split even/odd (kept for the intercommunicator) */
    C(MPI_Comm_split, W, color, rank, &half);
    C(MPI_Comm_rank, half, &r);
    C(MPI_Comm_size, half, &s);
    CHECK(r == rank / 2 && s == (color == 0 ? (p + 1) / 2 : p / 2));

    /* Comm_group + Group_incl + Comm_create: first ceil(p/2) ranks */
    C(MPI_Comm_group, W, &wg);
    n1 = (p + 1) / 2;
    for (i = 0; i < n1; i++)
        ranks[i] = i;
    C(MPI_Group_incl, wg, n1, ranks, &g1);
    C(MPI_Group_size, g1, &s);
    CHECK(s == n1);
    C(MPI_Comm_create, W, g1, &c1);
    if (rank < n1) {
        CHECK(c1 != MPI_COMM_NULL);
        if (c1 != MPI_COMM_NULL) {
            C(MPI_Comm_size, c1, &s);
            CHECK(s == n1);
            x = rank;
            C(MPI_Allreduce, &x, &y, 1, MPI_INT, MPI_SUM, c1);
            CHECK(y == n1 * (n1 - 1) / 2);
            C(MPI_Comm_free, &c1);
        }
    } else {
        CHECK(c1 == MPI_COMM_NULL);
    }

    /* Comm_create_group: even ranks only (non-members do not call it) */
    ne = (p + 1) / 2;
    for (i = 0; i < ne; i++)
        ranks[i] = 2 * i;
    C(MPI_Group_incl, wg, ne, ranks, &g2);
    if (color == 0) {
        C(MPI_Comm_create_group, W, g2, 5, &c2);
        CHECK(c2 != MPI_COMM_NULL);
        if (c2 != MPI_COMM_NULL) {
            C(MPI_Comm_rank, c2, &r);
            CHECK(r == rank / 2);
            x = rank;
            C(MPI_Allreduce, &x, &y, 1, MPI_INT, MPI_SUM, c2);
            CHECK(y == ne * (ne - 1));
            C(MPI_Comm_free, &c2);
        }
    }
    C(MPI_Group_free, &g1);
    C(MPI_Group_free, &g2);
    C(MPI_Group_free, &wg);
    CHECK(g1 == MPI_GROUP_NULL && g2 == MPI_GROUP_NULL && wg == MPI_GROUP_NULL);

    /* intercommunicator between the even and odd halves */
    C(MPI_Intercomm_create, half, 0, W, color == 0 ? 1 : 0, 77, &inter);
    C(MPI_Comm_test_inter, inter, &flag);
    CHECK(flag != 0);
    C(MPI_Comm_remote_size, inter, &s);
    CHECK(s == (color == 0 ? p / 2 : (p + 1) / 2));
    if (rank == 0) {
        x = 31337;
        C(MPI_Send, &x, 1, MPI_INT, 0, 78, inter); /* to remote rank 0 = world 1 */
    } else if (rank == 1) {
        x = -1;
        C(MPI_Recv, &x, 1, MPI_INT, 0, 78, inter, &st);
        CHECK(x == 31337);
        CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 78);
    }
    C(MPI_Intercomm_merge, inter, color, &merged); /* evens low, odds high */
    C(MPI_Comm_rank, merged, &r);
    C(MPI_Comm_size, merged, &s);
    CHECK(s == p);
    CHECK(r == (color == 0 ? rank / 2 : (p + 1) / 2 + rank / 2));
    x = rank;
    C(MPI_Allreduce, &x, &y, 1, MPI_INT, MPI_SUM, merged);
    CHECK(y == p * (p - 1) / 2);
    C(MPI_Comm_free, &merged);
    C(MPI_Comm_free, &inter);
    C(MPI_Comm_free, &half);
    CHECK(merged == MPI_COMM_NULL && inter == MPI_COMM_NULL && half == MPI_COMM_NULL);

    free(ranks);
}

/* ------------------------------------------------------------------ */
int main(int argc, char **argv)
{
    int provided = -1, total = 0, bsize = -1;
    double t0, t1;
    void *battach, *bdetach = NULL;

    C(MPI_Init_thread, &argc, &argv, MPI_THREAD_FUNNELED, &provided);
    C(MPI_Comm_rank, W, &rank);
    C(MPI_Comm_size, W, &size);
    C(MPI_Pcontrol, 1);
    t0 = C0(MPI_Wtime);
    CHECK(C0(MPI_Wtick) > 0.0);

    if (size < 2) {
        if (rank == 0)
            printf("coverage: FAIL needs at least 2 ranks\n");
        expect_write(rank);
        MPI_Finalize();
        return 1;
    }
    CHECK(provided == MPI_THREAD_SINGLE || provided == MPI_THREAD_FUNNELED ||
          provided == MPI_THREAD_SERIALIZED || provided == MPI_THREAD_MULTIPLE);

    if (rank % 2 == 1) {
        role = ROLE_B;
        partner = rank - 1;
    } else if (rank + 1 < size) {
        role = ROLE_A;
        partner = rank + 1;
    } else {
        role = ROLE_IDLE;
        partner = MPI_PROC_NULL;
    }

    battach = malloc(BSEND_BYTES);
    if (battach == NULL) {
        fprintf(stderr, "coverage: out of memory\n");
        return 1;
    }
    C(MPI_Buffer_attach, battach, BSEND_BYTES);

    test_blocking_modes();
    test_nonblocking_modes();
    test_persistent();
    test_sendrecv();
    test_probe();
    test_completion();
    test_cancel_free_ignore();
    test_datatypes();

    C(MPI_Buffer_detach, &bdetach, &bsize);
    CHECK(bdetach == battach && bsize == BSEND_BYTES);
    free(battach);

    test_collectives();
    test_nonblocking_collectives();
    test_communicators();

    t1 = C0(MPI_Wtime);
    CHECK(t1 >= t0);

    C(MPI_Allreduce, &errs, &total, 1, MPI_INT, MPI_SUM, W);
    if (rank == 0) {
        if (total == 0)
            printf("coverage: ok np=%d\n", size);
        else
            printf("coverage: FAIL np=%d errors=%d\n", size, total);
    }

    expect_write(rank);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
