/* MPI_THREAD_MULTIPLE: T threads per rank (default 4) each exchange N
 * messages (default 200) with the same thread of the partner rank, on their
 * own tag, with MPI_Isend/MPI_Irecv/MPI_Waitall; then, 10 times, the main
 * thread posts an MPI_Irecv and an MPI_Isend and a new thread completes
 * them with MPI_Wait (operations completed by a thread that did not post
 * them); then S threads (third argument, default 0), one after another,
 * each exchange one message with the partner's by MPI_Sendrecv and end
 * (a trace must not grow by a buffer per thread that ever lived); then the
 * main thread does one MPI_Allreduce. Needs an even np. Counts are written
 * per rank. */
#include "expect.h"
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, np, nthreads = 4, n = 200, nshort = 0;
static int errors = 0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long isends = 0, irecvs = 0, waitalls = 0, waits = 0;

static void *worker(void *arg) {
    int t = (int)(long)arg, peer = rank ^ 1, bad = 0;
    for (int i = 0; i < n; i++) {
        int out = rank * 1000000 + t * 1000 + i, in = -1;
        MPI_Request r[2];
        MPI_Irecv(&in, 1, MPI_INT, peer, t, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(&out, 1, MPI_INT, peer, t, MPI_COMM_WORLD, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        if (in != peer * 1000000 + t * 1000 + i) bad++;
    }
    pthread_mutex_lock(&lock);
    errors += bad;
    isends += n; irecvs += n; waitalls += n;
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* Completes the two requests the main thread posted: the send first. */
static void *completer(void *arg) {
    MPI_Request *r = arg;
    MPI_Wait(&r[1], MPI_STATUS_IGNORE);
    MPI_Status st;
    MPI_Wait(&r[0], &st);
    if (st.MPI_SOURCE != (rank ^ 1)) {
        pthread_mutex_lock(&lock);
        errors++;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

/* One short-lived thread's exchange: the k-th of them on each rank. */
static void *brief(void *arg) {
    int k = (int)(long)arg, out = rank * 100000 + k, in = -1;
    MPI_Sendrecv(&out, 1, MPI_INT, rank ^ 1, nthreads + 1, &in, 1, MPI_INT, rank ^ 1,
                 nthreads + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (in != (rank ^ 1) * 100000 + k) {
        pthread_mutex_lock(&lock);
        errors++;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int provided;
    if (argc > 1) nthreads = atoi(argv[1]);
    if (argc > 2) n = atoi(argv[2]);
    if (argc > 3) nshort = atoi(argv[3]);
    C(MPI_Init_thread, &argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &np);
    if (provided < MPI_THREAD_MULTIPLE || np % 2) {
        if (rank == 0) printf("threads: FAIL provided=%d np=%d\n", provided, np);
        C(MPI_Abort, MPI_COMM_WORLD, 1);
    }
    pthread_t th[64];
    for (long t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
    for (int i = 0; i < 10; i++) {
        int out = rank * 100 + i, in = -1;
        MPI_Request r[2];
        C(MPI_Irecv, &in, 1, MPI_INT, rank ^ 1, nthreads, MPI_COMM_WORLD, &r[0]);
        C(MPI_Isend, &out, 1, MPI_INT, rank ^ 1, nthreads, MPI_COMM_WORLD, &r[1]);
        pthread_t other;
        pthread_create(&other, NULL, completer, r);
        pthread_join(other, NULL);
        waits += 2;
        if (in != (rank ^ 1) * 100 + i) errors++;
    }
    for (long k = 0; k < nshort; k++) {
        pthread_t one;
        pthread_create(&one, NULL, brief, (void *)k);
        pthread_join(one, NULL);
    }
    /* The workers' calls, counted here (the C() macro is not thread-safe). */
    for (long i = 0; i < isends; i++) expect_count_("MPI_Isend");
    for (long i = 0; i < irecvs; i++) expect_count_("MPI_Irecv");
    for (long i = 0; i < waitalls; i++) expect_count_("MPI_Waitall");
    for (long i = 0; i < waits; i++) expect_count_("MPI_Wait");
    for (long i = 0; i < nshort; i++) expect_count_("MPI_Sendrecv");
    int total = 0;
    C(MPI_Allreduce, &errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(total ? "threads: FAIL\n" : "threads: ok threads=%d n=%d\n", nthreads, n);
    expect_write(rank);
    MPI_Finalize();
    return total ? 1 : 0;
}
