/*
 * master_worker.c - dynamic task farm.
 *
 * Usage: master_worker [tasks]   (default 40; needs np >= 2)
 * Rank 0 hands out task ids with MPI_Send (tag TAG_TASK); a worker replies
 * with the result using tag RESULT_BASE + task id; rank 0 receives with
 * MPI_Recv(MPI_ANY_SOURCE, MPI_ANY_TAG) and uses status.MPI_SOURCE /
 * status.MPI_TAG to see who finished which task, then sends that worker
 * the next task or TAG_STOP.  The printed sum does not depend on the
 * completion order; the per-worker call counts do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>
#include "expect.h"

#define TAG_TASK 1
#define TAG_STOP 2
#define RESULT_BASE 10

static long parse_count(int argc, char **argv, long def)
{
    char *end;
    long v;
    if (argc < 2)
        return def;
    v = strtol(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || v < 1 || v > 30000L) /* tags stay <= 32767 */
        return -1;
    return v;
}

static long long work(int task)
{
    long long x = task, k;
    for (k = 0; k < 1000; k++)
        x = (x * 6364136223846793005LL + 1442695040888963407LL) & 0xffffffffLL;
    return x % 100003 + task;
}

int main(int argc, char **argv)
{
    int rank, size, errs = 0;
    long ntasks;
    MPI_Status st;

    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);

    ntasks = parse_count(argc, argv, 40);
    if (ntasks < 0 || size < 2) {
        if (rank == 0)
            printf("master_worker: FAIL %s\n", ntasks < 0 ? "bad task count" : "needs at least 2 ranks");
        expect_write(rank);
        MPI_Finalize();
        return 1;
    }

    if (rank == 0) {
        int next = 0, active = 0, w, t, dummy = 0;
        long long sum = 0, expect = 0, result;
        char *done = (char *)calloc((size_t)ntasks, 1);

        for (w = 1; w < size; w++) {
            if (next < ntasks) {
                C(MPI_Send, &next, 1, MPI_INT, w, TAG_TASK, MPI_COMM_WORLD);
                next++;
                active++;
            } else {
                C(MPI_Send, &dummy, 1, MPI_INT, w, TAG_STOP, MPI_COMM_WORLD);
            }
        }
        while (active > 0) {
            C(MPI_Recv, &result, 1, MPI_LONG_LONG, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            active--;
            t = st.MPI_TAG - RESULT_BASE;
            if (t < 0 || t >= ntasks || done[t] || result != work(t) || st.MPI_SOURCE < 1 ||
                st.MPI_SOURCE >= size) {
                errs++;
            } else {
                done[t] = 1;
                sum += result;
            }
            if (next < ntasks) {
                C(MPI_Send, &next, 1, MPI_INT, st.MPI_SOURCE, TAG_TASK, MPI_COMM_WORLD);
                next++;
                active++;
            } else {
                C(MPI_Send, &dummy, 1, MPI_INT, st.MPI_SOURCE, TAG_STOP, MPI_COMM_WORLD);
            }
        }
        for (t = 0; t < ntasks; t++) {
            expect += work(t);
            if (!done[t])
                errs++;
        }
        if (sum != expect)
            errs++;
        printf("master_worker: np=%d tasks=%ld sum=%lld\n", size, ntasks, sum);
        if (errs)
            printf("master_worker: FAIL %d errors (expected sum %lld)\n", errs, expect);
        else
            printf("master_worker: ok\n");
        free(done);
    } else {
        int task;
        for (;;) {
            long long result;
            C(MPI_Recv, &task, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            if (st.MPI_TAG == TAG_STOP)
                break;
            result = work(task);
            C(MPI_Send, &result, 1, MPI_LONG_LONG, 0, RESULT_BASE + task, MPI_COMM_WORLD);
        }
    }

    expect_write(rank);
    MPI_Finalize();
    return errs ? 1 : 0;
}
