/* Messages around and above pmtrace's inline limit (a few KiB), in every
 * way a program sends and receives them: each rank sends to the next and
 * receives from the previous one, and checks every byte it gets, the count
 * its status reports, and that nothing past the message in a larger
 * buffer changed. Run at np >= 2; the output (one line per case from rank
 * 0, errors from any rank) must be the same traced and untraced. Exit
 * status 1 on any mismatch. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "expect.h"

static int rank, size, next, prev, errors;
static unsigned char *sbuf, *rbuf;
enum { BIG = (1 << 20) + 64, SENTINEL = 0xEE };

static unsigned char pattern(long i, int seed) { return (unsigned char)((i * 131 + seed * 7 + i / 251) & 0xff); }

static void fill(unsigned char *b, long n, int seed) {
    for (long i = 0; i < n; i++) b[i] = pattern(i, seed);
}

static void clear(long n) { memset(rbuf, SENTINEL, (size_t)n); }

/* The n bytes of a message from `from` with `seed`, then the sentinel up to `posted`. */
static void check(const char *what, long n, long posted, int seed, MPI_Status *st, MPI_Datatype t) {
    for (long i = 0; i < n; i++)
        if (rbuf[i] != pattern(i, seed)) {
            printf("rank %d %s n=%ld: byte %ld is %d, not %d\n", rank, what, n, i, rbuf[i], pattern(i, seed));
            errors++;
            return;
        }
    for (long i = n; i < posted; i++)
        if (rbuf[i] != SENTINEL) {
            printf("rank %d %s n=%ld: byte %ld past the message changed\n", rank, what, n, i);
            errors++;
            return;
        }
    if (st) {
        int count;
        C(MPI_Get_count, st, t, &count);
        long elems = n / (t == MPI_INT ? 4 : 1);
        if (count != elems) {
            printf("rank %d %s n=%ld: count %d, not %ld\n", rank, what, n, count, elems);
            errors++;
        }
    }
}

static void report(const char *what, long cases) {
    int all;
    C(MPI_Allreduce, &errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: %ld sizes, %s\n", what, cases, all ? "ERRORS" : "ok");
}

/* "huge", at np=2: one message of more than 2 GiB (more than an int of
 * bytes, in an int count) in a strided type, from rank 0 to rank 1, whose
 * gaps must stay as they were. */
static void huge(void) {
    enum { DATA = 4096, GAP = 64 };
    const long count = (1L << 31) / DATA + 16;
    MPI_Datatype block, strided;
    C(MPI_Type_contiguous, DATA, MPI_BYTE, &block);
    C(MPI_Type_create_resized, block, 0, DATA + GAP, &strided);
    C(MPI_Type_commit, &strided);
    unsigned char *b = malloc((size_t)count * (DATA + GAP));
    if (!b) {
        printf("rank %d: no memory for the huge message\n", rank);
        errors++;
    } else if (rank == 0) {
        for (long i = 0; i < count; i++)
            for (long j = 0; j < DATA; j++) b[i * (DATA + GAP) + j] = pattern(i * DATA + j, 5);
        C(MPI_Send, b, (int)count, strided, 1, 7, MPI_COMM_WORLD);
    } else if (rank == 1) {
        memset(b, SENTINEL, (size_t)count * (DATA + GAP));
        MPI_Status st;
        C(MPI_Recv, b, (int)count, strided, 0, 7, MPI_COMM_WORLD, &st);
        long bad = 0, first = -1;
        for (long i = 0; i < count; i++)
            for (long j = 0; j < DATA + GAP; j++) {
                unsigned char want = j < DATA ? pattern(i * DATA + j, 5) : SENTINEL;
                if (b[i * (DATA + GAP) + j] != want && bad++ == 0) first = i * DATA + j;
            }
        int got = -1;
        C(MPI_Get_count, &st, strided, &got);
        if (bad || got != (int)count) {
            printf("rank 1 huge: %ld bytes wrong from %ld, count %d of %ld\n", bad, first, got, count);
            errors++;
        }
    }
    free(b);
    C(MPI_Type_free, &block);
    C(MPI_Type_free, &strided);
    report("huge strided message", 1);
}

/* Sizes about the limit, and others. */
static long sizes[600];
static int nsizes;

int main(int argc, char **argv) {
    int provided;
    C(MPI_Init_thread, &argc, &argv, MPI_THREAD_SINGLE, &provided);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;
    sbuf = malloc(BIG);
    rbuf = malloc(BIG);
    /* every size where a header of up to 96 bytes (vector clocks at np=8)
     * can change the route: about 1 KiB (the limit on one node) and 4 KiB
     * (across nodes, or with PMTRACE_SHM=off) */
    for (long n = 1080; n <= 1320; n += 1) sizes[nsizes++] = n;
    for (long n = 4090; n <= 4400; n += 1) sizes[nsizes++] = n;
    long large[] = {0, 1, 100, 3000, 4000, 4500, 8192, 65536, 65537, 1 << 20};
    for (unsigned k = 0; k < sizeof large / sizeof *large; k++) sizes[nsizes++] = large[k];
    MPI_Status st;
    MPI_Request rq[2];
    /* "freed": only receives freed in flight (their sends stay unmatched
     * in the trace, which has no completion for them) */
    int only_freed = argc > 1 && !strcmp(argv[1], "freed");
    if (only_freed) goto freed;
    if (argc > 1 && !strcmp(argv[1], "huge")) {
        huge();
        goto done;
    }

    /* A type of no bytes (blocks of length 0) with a null buffer, to this
     * rank: nothing to place, and MPI takes the null buffer. */
    {
        int lens[3] = {0, 0, 0};
        MPI_Aint displs[3] = {0, 4, 16};
        MPI_Datatype none;
        C(MPI_Type_create_hindexed, 3, lens, displs, MPI_INT, &none);
        C(MPI_Type_commit, &none);
        C(MPI_Irecv, NULL, 2, none, 0, 5, MPI_COMM_SELF, &rq[0]);
        C(MPI_Send, NULL, 1, none, 0, 5, MPI_COMM_SELF);
        C(MPI_Wait, &rq[0], &st);
        int got = -1, elements = -1;
        C(MPI_Get_count, &st, none, &got);
        C(MPI_Get_elements, &st, none, &elements);
        if (rank == 0) printf("a type of no bytes: count %d, elements %d\n", got, elements);
        C(MPI_Type_free, &none);
        report("a type of no bytes, null buffer", 1);
    }

    /* Blocking Send/Recv, posted exactly and posted large. */
    for (int posted_large = 0; posted_large < 2; posted_large++) {
        for (int k = 0; k < nsizes; k++) {
            long n = sizes[k], posted = posted_large ? BIG : n;
            fill(sbuf, n, k);
            clear(BIG);
            if (rank % 2 == 0) {
                C(MPI_Send, sbuf, (int)n, MPI_BYTE, next, k, MPI_COMM_WORLD);
                C(MPI_Recv, rbuf, (int)posted, MPI_BYTE, prev, k, MPI_COMM_WORLD, &st);
            } else {
                C(MPI_Recv, rbuf, (int)posted, MPI_BYTE, prev, k, MPI_COMM_WORLD, &st);
                C(MPI_Send, sbuf, (int)n, MPI_BYTE, next, k, MPI_COMM_WORLD);
            }
            check(posted_large ? "send/recv large" : "send/recv", n, BIG, k, &st, MPI_BYTE);
        }
        report(posted_large ? "send/recv into a larger buffer" : "send/recv", nsizes);
    }

    /* Isend/Irecv with wildcards, completed by Waitall. */
    for (int k = 0; k < nsizes; k++) {
        long n = sizes[k];
        fill(sbuf, n, k + 1);
        clear(BIG);
        C(MPI_Irecv, rbuf, BIG, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq[0]);
        C(MPI_Isend, sbuf, (int)n, MPI_BYTE, next, k, MPI_COMM_WORLD, &rq[1]);
        MPI_Status sts[2];
        C(MPI_Waitall, 2, rq, sts);
        if (sts[0].MPI_SOURCE != prev || sts[0].MPI_TAG != k) {
            printf("rank %d irecv: source %d tag %d\n", rank, sts[0].MPI_SOURCE, sts[0].MPI_TAG);
            errors++;
        }
        check("isend/irecv any", n, BIG, k + 1, &sts[0], MPI_BYTE);
    }
    report("isend/irecv, any source and tag", nsizes);

    /* Synchronous, buffered and ready modes, and persistent requests. */
    int bsize = BIG + MPI_BSEND_OVERHEAD + 4096;
    void *battach = malloc((size_t)bsize);
    C(MPI_Buffer_attach, battach, bsize);
    MPI_Request ps, pr;
    for (int k = 0; k < nsizes; k += 7) {
        long n = sizes[k];
        for (int mode = 0; mode < 4; mode++) {
            fill(sbuf, n, k + mode);
            clear(BIG);
            C(MPI_Irecv, rbuf, (int)n + (mode == 1 ? 100 : 0), MPI_BYTE, prev, mode, MPI_COMM_WORLD, &rq[0]);
            C(MPI_Barrier, MPI_COMM_WORLD);
            if (mode == 0) C(MPI_Ssend, sbuf, (int)n, MPI_BYTE, next, mode, MPI_COMM_WORLD);
            if (mode == 1) C(MPI_Bsend, sbuf, (int)n, MPI_BYTE, next, mode, MPI_COMM_WORLD);
            if (mode == 2) C(MPI_Rsend, sbuf, (int)n, MPI_BYTE, next, mode, MPI_COMM_WORLD);
            if (mode == 3) {
                C(MPI_Send_init, sbuf, (int)n, MPI_BYTE, next, mode, MPI_COMM_WORLD, &ps);
                C(MPI_Start, &ps);
                C(MPI_Wait, &ps, MPI_STATUS_IGNORE);
                C(MPI_Request_free, &ps);
            }
            C(MPI_Wait, &rq[0], &st);
            check("modes", n, BIG, k + mode, &st, MPI_BYTE);
        }
    }
    void *b;
    C(MPI_Buffer_detach, &b, &bsize);
    free(battach);
    report("ssend, bsend, rsend, send_init", nsizes / 7 + 1);

    /* Persistent receive, started three times into a large buffer. */
    C(MPI_Recv_init, rbuf, BIG, MPI_BYTE, prev, 5, MPI_COMM_WORLD, &pr);
    C(MPI_Send_init, sbuf, 0, MPI_BYTE, next, 5, MPI_COMM_WORLD, &ps);
    for (int k = 0; k < nsizes; k += 5) {
        long n = sizes[k];
        fill(sbuf, n, k);
        clear(BIG);
        C(MPI_Start, &pr);
        C(MPI_Send, sbuf, (int)n, MPI_BYTE, next, 5, MPI_COMM_WORLD);
        C(MPI_Wait, &pr, &st);
        check("recv_init", n, BIG, k, &st, MPI_BYTE);
    }
    C(MPI_Request_free, &pr);
    C(MPI_Request_free, &ps);
    report("recv_init", nsizes / 5 + 1);

    /* Sendrecv and Sendrecv_replace. */
    for (int k = 0; k < nsizes; k += 3) {
        long n = sizes[k];
        fill(sbuf, n, k);
        clear(BIG);
        C(MPI_Sendrecv, sbuf, (int)n, MPI_BYTE, next, 9, rbuf, BIG, MPI_BYTE, prev, 9, MPI_COMM_WORLD, &st);
        check("sendrecv", n, BIG, k, &st, MPI_BYTE);
        clear(BIG);
        fill(rbuf, n, k + 3);
        C(MPI_Sendrecv_replace, rbuf, (int)n, MPI_BYTE, next, 10, prev, 10, MPI_COMM_WORLD, &st);
        check("sendrecv_replace", n, BIG, k + 3, &st, MPI_BYTE);
    }
    report("sendrecv, sendrecv_replace", nsizes / 3 + 1);

    /* Probe, Iprobe and matched probes: the count before the receive. */
    for (int k = 0; k < nsizes; k++) {
        long n = sizes[k];
        fill(sbuf, n, k);
        clear(BIG);
        C(MPI_Isend, sbuf, (int)n, MPI_BYTE, next, 11, MPI_COMM_WORLD, &rq[1]);
        int count, flag = 0;
        switch (k % 4) {
        case 0:
            C(MPI_Probe, prev, 11, MPI_COMM_WORLD, &st);
            C(MPI_Get_count, &st, MPI_BYTE, &count);
            C(MPI_Recv, rbuf, count, MPI_BYTE, prev, 11, MPI_COMM_WORLD, &st);
            break;
        case 1:
            while (C(MPI_Iprobe, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st), !flag) usleep(20);
            C(MPI_Get_count, &st, MPI_BYTE, &count);
            C(MPI_Recv, rbuf, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
            break;
        case 2: {
            MPI_Message m;
            C(MPI_Mprobe, prev, 11, MPI_COMM_WORLD, &m, &st);
            C(MPI_Get_count, &st, MPI_BYTE, &count);
            C(MPI_Mrecv, rbuf, count, MPI_BYTE, &m, &st);
            break;
        }
        default: {
            MPI_Message m;
            while (C(MPI_Improbe, MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, &flag, &m, &st), !flag) usleep(20);
            C(MPI_Get_count, &st, MPI_BYTE, &count);
            C(MPI_Imrecv, rbuf, BIG, MPI_BYTE, &m, &rq[0]);
            C(MPI_Wait, &rq[0], &st);
        }
        }
        C(MPI_Wait, &rq[1], MPI_STATUS_IGNORE);
        if (count != n) {
            printf("rank %d probe n=%ld: count %d\n", rank, n, count);
            errors++;
        }
        check("probe", n, BIG, k, &st, MPI_BYTE);
    }
    report("probe, iprobe, mprobe, improbe", nsizes);

    /* Datatypes: a strided send into contiguous ints, contiguous into strided. */
    MPI_Datatype vec;
    C(MPI_Type_vector, 1, 1, 2, MPI_INT, &vec); /* one int, extent of one */
    MPI_Datatype strided;
    C(MPI_Type_create_resized, MPI_INT, 0, 8, &strided);
    C(MPI_Type_commit, &strided);
    C(MPI_Type_free, &vec);
    for (int k = 0; k < nsizes; k += 4) {
        long n = sizes[k] / 4 * 4, ints = n / 4;
        if (2 * n > BIG) continue;
        /* strided send: every other int of a 2n buffer */
        int *sp = (int *)sbuf, *rp = (int *)rbuf;
        fill(sbuf, 2 * n, k);
        clear(BIG);
        C(MPI_Sendrecv, sbuf, (int)ints, strided, next, 12, rbuf, (int)(BIG / 4), MPI_INT, prev, 12, MPI_COMM_WORLD, &st);
        for (long i = 0; i < ints; i++) {
            int want;
            unsigned char w[4];
            for (int j = 0; j < 4; j++) w[j] = pattern(8 * i + j, k);
            memcpy(&want, w, 4);
            if (rp[i] != want) {
                printf("rank %d strided send n=%ld: int %ld\n", rank, n, i);
                errors++;
                break;
            }
        }
        /* strided receive: every other int of rbuf */
        fill(sbuf, n, k + 1);
        clear(BIG);
        C(MPI_Sendrecv, sbuf, (int)ints, MPI_INT, next, 13, rbuf, (int)(BIG / 8), strided, prev, 13, MPI_COMM_WORLD, &st);
        for (long i = 0; i < ints; i++) {
            unsigned char w[4];
            for (int j = 0; j < 4; j++) w[j] = pattern(4 * i + j, k + 1);
            if (memcmp(rbuf + 8 * i, w, 4) || rbuf[8 * i + 4] != SENTINEL) {
                printf("rank %d strided recv n=%ld: int %ld\n", rank, n, i);
                errors++;
                break;
            }
        }
        if (rbuf[8 * ints] != SENTINEL) {
            printf("rank %d strided recv n=%ld: past the message changed\n", rank, n);
            errors++;
        }
        (void)sp;
    }
    C(MPI_Type_free, &strided);
    report("strided sends and receives", nsizes / 4 + 1);

    /* A communicator of reversed ranks, and an intercommunicator. */
    MPI_Comm rev, half, inter;
    C(MPI_Comm_split, MPI_COMM_WORLD, 0, size - rank, &rev);
    int rrank;
    C(MPI_Comm_rank, rev, &rrank);
    for (int k = 0; k < nsizes; k += 5) {
        long n = sizes[k];
        fill(sbuf, n, k);
        clear(BIG);
        C(MPI_Sendrecv, sbuf, (int)n, MPI_BYTE, (rrank + 1) % size, 14, rbuf, BIG, MPI_BYTE, (rrank + size - 1) % size, 14, rev, &st);
        check("reversed", n, BIG, k, &st, MPI_BYTE);
    }
    report("reversed communicator", nsizes / 5 + 1);
    if (size >= 2) {
        int color = rank < size / 2;
        C(MPI_Comm_split, MPI_COMM_WORLD, color, rank, &half);
        C(MPI_Intercomm_create, half, 0, MPI_COMM_WORLD, color ? size / 2 : 0, 99, &inter);
        int lrank, rsize;
        C(MPI_Comm_rank, half, &lrank);
        C(MPI_Comm_remote_size, inter, &rsize);
        int peer = lrank < rsize ? lrank : -1;
        for (int k = 0; k < nsizes; k += 5) {
            long n = sizes[k];
            fill(sbuf, n, k);
            clear(BIG);
            if (peer >= 0) {
                C(MPI_Sendrecv, sbuf, (int)n, MPI_BYTE, peer, 15, rbuf, BIG, MPI_BYTE, peer, 15, inter, &st);
                check("intercomm", n, BIG, k, &st, MPI_BYTE);
            }
        }
        C(MPI_Comm_free, &inter);
        C(MPI_Comm_free, &half);
    }
    report("intercommunicator", nsizes / 5 + 1);
    C(MPI_Comm_free, &rev);

    /* More large messages in flight to one rank than a mailbox holds,
     * received in the reverse order of their tags. */
    {
        enum { FLIGHT = 120, EACH = 8200 };
        MPI_Request fr[FLIGHT];
        for (int i = 0; i < FLIGHT; i++) {
            fill(sbuf + (long)i * EACH, EACH, i);
            C(MPI_Isend, sbuf + (long)i * EACH, EACH, MPI_BYTE, next, 1000 + i, MPI_COMM_WORLD, &fr[i]);
        }
        clear(BIG);
        for (int i = FLIGHT - 1; i >= 0; i--)
            C(MPI_Recv, rbuf + (long)i * EACH, EACH, MPI_BYTE, prev, 1000 + i, MPI_COMM_WORLD, &st);
        C(MPI_Waitall, FLIGHT, fr, MPI_STATUSES_IGNORE);
        for (int i = 0; i < FLIGHT; i++) {
            for (long j = 0; j < EACH; j++)
                if (rbuf[(long)i * EACH + j] != pattern(j, i)) {
                    printf("rank %d in flight %d: byte %ld\n", rank, i, j);
                    errors++;
                    break;
                }
        }
    }
    report("many in flight, received in reverse", 120);

#if MPI_VERSION >= 4
    for (int k = 0; k < nsizes; k += 6) {
        long n = sizes[k];
        fill(sbuf, n, k);
        clear(BIG);
        C(MPI_Isendrecv, sbuf, (int)n, MPI_BYTE, next, 18, rbuf, BIG, MPI_BYTE, prev, 18, MPI_COMM_WORLD, &rq[0]);
        C(MPI_Wait, &rq[0], &st);
        check("isendrecv", n, BIG, k, NULL, MPI_BYTE);
        clear(BIG);
        fill(rbuf, n, k + 2);
        C(MPI_Isendrecv_replace, rbuf, (int)n, MPI_BYTE, next, 19, prev, 19, MPI_COMM_WORLD, &rq[0]);
        C(MPI_Wait, &rq[0], &st);
        check("isendrecv_replace", n, BIG, k + 2, NULL, MPI_BYTE);
    }
#endif
    report("isendrecv, isendrecv_replace", nsizes / 6 + 1);
    goto done;

freed:
    /* A receive freed before it completes: its data must still arrive. */
    for (int k = 0; k < nsizes; k += 9) {
        long n = sizes[k];
        fill(sbuf, n, k);
        clear(BIG);
        C(MPI_Irecv, rbuf, BIG, MPI_BYTE, prev, 16, MPI_COMM_WORLD, &rq[0]);
        C(MPI_Request_free, &rq[0]);
        C(MPI_Send, sbuf, (int)n, MPI_BYTE, next, 16, MPI_COMM_WORLD);
        /* the sender's next message on the same channel matches after it */
        char ack = 1;
        C(MPI_Send, &ack, 1, MPI_CHAR, next, 16, MPI_COMM_WORLD);
        C(MPI_Recv, &ack, 1, MPI_CHAR, prev, 16, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        C(MPI_Barrier, MPI_COMM_WORLD);
        check("freed irecv", n, BIG, k, NULL, MPI_BYTE);
    }
    report("freed receive", nsizes / 9 + 1);

done:

    free(sbuf);
    free(rbuf);
    expect_write(rank);
    MPI_Finalize();
    return errors ? 1 : 0;
}
