/* Message races with known answers, for `pmtrace races` (issue 19).
 *
 *   races crooked        np=3: Vo's crooked barrier (003_... Fig. 3.2): rank
 *                        0 Isends to 1, all enter a barrier, rank 2 Isends
 *                        to 1; rank 1 posted an Irecv(ANY_SOURCE) before the
 *                        barrier and a Recv(ANY_SOURCE) after it. Either send
 *                        can match the Irecv.
 *   races master [tasks] np>=3: master/worker. Rank 0 hands out tasks and
 *                        takes results with Recv(ANY_SOURCE); a result could
 *                        have been any worker's whose task was out when the
 *                        receive was posted. Rank 0 prints, for each receive,
 *                        the answer: "expect <k> <source> [<worker>:<n>]...",
 *                        <n> the worker's result number (its message id).
 *   races ordered        np=3: wildcard receives in a causal chain (each
 *                        message is sent only after the previous one was
 *                        received): no races.
 *   races deterministic  np>=2: a ring with named sources: no wildcards.
 *   races fig53          np=3: Fig. 5.3: rank 1 sends to 0 then to 2; rank 0
 *                        takes its message with Recv(ANY_SOURCE), waits
 *                        50 ms and sends to 2; rank 2 takes rank 1's message
 *                        with Recv(ANY_SOURCE), then rank 0's. Rank 0's
 *                        message could have matched rank 2's wildcard
 *                        receive: vector clocks see it, Lamport clocks miss it.
 *   races probe          np=3: ranks 1 and 2 each send a tag-1 message, then
 *                        after a barrier a tag-2 message. Rank 0 takes the
 *                        tag-1 messages with Probe(ANY_SOURCE) + Recv from
 *                        the source found, then the tag-2 ones with
 *                        Mprobe(ANY_SOURCE) + Mrecv. The first probe and the
 *                        first Mprobe each race with the other rank's message.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void crooked(int rank) {
    int x = 0, y = 0, v;
    MPI_Request req;
    if (rank == 0) {
        v = 22;
        MPI_Isend(&v, 1, MPI_INT, 1, 22, MPI_COMM_WORLD, &req);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Recv(&y, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        printf("crooked: irecv got %d, recv got %d\n", x, y);
    } else if (rank == 2) {
        v = 33;
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Isend(&v, 1, MPI_INT, 1, 33, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

enum { TASK = 1, RESULT = 2, STOP = 3 };

static void master(int rank, int size, int tasks) {
    if (rank == 0) {
        int workers = size - 1, next = 0, done = 0;
        int *sent = calloc((size_t)size, sizeof(int)), *got = calloc((size_t)size, sizeof(int));
        for (int w = 1; w <= workers && next < tasks; w++, next++) {
            MPI_Send(&next, 1, MPI_INT, w, TASK, MPI_COMM_WORLD);
            sent[w]++;
        }
        for (int k = 0; done < next; k++) {
            int r;
            MPI_Status st;
            MPI_Recv(&r, 1, MPI_INT, MPI_ANY_SOURCE, RESULT, MPI_COMM_WORLD, &st);
            int a = st.MPI_SOURCE;
            got[a]++;
            done++;
            /* Workers with a task out: their next result could have come instead. */
            printf("expect %d %d", k, a);
            for (int w = 1; w <= workers; w++)
                if (w != a && sent[w] > got[w]) printf(" %d:%d", w, got[w] + 1);
            printf("\n");
            if (next < tasks) {
                MPI_Send(&next, 1, MPI_INT, a, TASK, MPI_COMM_WORLD);
                sent[a]++;
                next++;
            }
        }
        for (int w = 1; w <= workers; w++) MPI_Send(&next, 1, MPI_INT, w, STOP, MPI_COMM_WORLD);
        free(sent);
        free(got);
    } else {
        for (;;) {
            int t;
            MPI_Status st;
            MPI_Recv(&t, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            if (st.MPI_TAG == STOP) break;
            sleep_us(((rank * 7 + t * 3) % 5) * 300);
            int r = t * t;
            MPI_Send(&r, 1, MPI_INT, 0, RESULT, MPI_COMM_WORLD);
        }
    }
}

static void ordered(int rank) {
    /* 0 takes 1's token, passes to 2, takes 2's, passes to 1, ... */
    int v = 0;
    for (int round = 0; round < 10; round++) {
        if (rank == 0) {
            MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&v, 1, MPI_INT, 2, 0, MPI_COMM_WORLD);
            MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (round < 9) MPI_Send(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
        } else if (rank == 1) {
            if (round > 0) MPI_Recv(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            v++;
            MPI_Send(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
        } else if (rank == 2) {
            MPI_Recv(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            v++;
            MPI_Send(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) printf("ordered: %d\n", v);
}

static void deterministic(int rank, int size) {
    int v = rank, in = 0;
    for (int round = 0; round < 10; round++) {
        MPI_Sendrecv(&v, 1, MPI_INT, (rank + 1) % size, 0, &in, 1, MPI_INT, (rank + size - 1) % size, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        v = in + 1;
    }
    if (rank == 0) printf("deterministic: %d\n", v);
}

static void fig53(int rank) {
    int v = rank, a = -1, b = -1;
    MPI_Status st;
    if (rank == 1) {
        MPI_Send(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
        MPI_Send(&v, 1, MPI_INT, 2, 0, MPI_COMM_WORLD);
    } else if (rank == 0) {
        MPI_Recv(&a, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        sleep_us(50000);
        MPI_Send(&v, 1, MPI_INT, 2, 0, MPI_COMM_WORLD);
    } else if (rank == 2) {
        MPI_Recv(&a, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, &st);
        MPI_Recv(&b, 1, MPI_INT, st.MPI_SOURCE == 1 ? 0 : 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("fig53: first from %d, then from %d\n", a, b);
    }
}

static void probe(int rank) {
    int v = rank, got[2] = {-1, -1};
    MPI_Status st;
    if (rank == 1 || rank == 2) {
        MPI_Send(&v, 1, MPI_INT, 0, 1, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Send(&v, 1, MPI_INT, 0, 2, MPI_COMM_WORLD);
    } else if (rank == 0) {
        for (int i = 0; i < 2; i++) {
            MPI_Probe(MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &st);
            MPI_Recv(&got[i], 1, MPI_INT, st.MPI_SOURCE, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        printf("probe: %d %d\n", got[0] + got[1], got[0] * got[1]);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < 2; i++) {
            MPI_Message msg;
            MPI_Mprobe(MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &msg, &st);
            MPI_Mrecv(&got[i], 1, MPI_INT, &msg, MPI_STATUS_IGNORE);
        }
        printf("mprobe: %d %d\n", got[0] + got[1], got[0] * got[1]);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "crooked";
    if (!strcmp(mode, "crooked")) crooked(rank);
    else if (!strcmp(mode, "master")) master(rank, size, argc > 2 ? atoi(argv[2]) : 40);
    else if (!strcmp(mode, "ordered")) ordered(rank);
    else if (!strcmp(mode, "deterministic")) deterministic(rank, size);
    else if (!strcmp(mode, "fig53")) fig53(rank);
    else if (!strcmp(mode, "probe")) probe(rank);
    else if (rank == 0) fprintf(stderr, "races: unknown mode %s\n", mode);
    MPI_Finalize();
    return 0;
}
