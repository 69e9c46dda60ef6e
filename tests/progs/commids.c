/*
 * commids.c - every way to make a communicator, each one used at once.
 *
 * Build: mpicc -O2 -Iexamples tests/progs/commids.c -o commids
 * Run with any np >= 2.  Makes, in this order: dups of world (one again
 * after a split that leaves rank 0 out), splits (by parity, and one with
 * MPI_UNDEFINED on rank 0), a split by shared memory, MPI_Comm_create with
 * disjoint groups (evens and odds), a Cartesian grid of 2 x (np / 2) (the
 * last rank is left out at odd np) and its rows (MPI_Cart_sub), a graph
 * and a distributed graph (rings), MPI_Comm_create_group (evens only), an
 * intercommunicator between the halves and its merge, a dup of a dup, a
 * dup of MPI_COMM_SELF, and an MPI_Comm_idup of world.  Each new
 * communicator is used at once: an MPI_Allreduce of the world ranks
 * (checked against its group) and, with two or more members, a ring of
 * MPI_Sendrecv (each value checked).  All calls go through C() from
 * expect.h.  Prints "commids: ok np=N".
 */
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>
#include "expect.h"

#define W MPI_COMM_WORLD

static int rank, size, errs;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            if (errs < 20)                                                                    \
                fprintf(stderr, "commids: rank %d: check failed at line %d: %s\n", rank,     \
                        __LINE__, #cond);                                                     \
            errs++;                                                                           \
        }                                                                                     \
    } while (0)

/* The world rank of rank r of comm. */
static int world_of(MPI_Comm comm, int r)
{
    MPI_Group g, wg;
    int w = -1;
    C(MPI_Comm_group, comm, &g);
    C(MPI_Comm_group, W, &wg);
    C(MPI_Group_translate_ranks, g, 1, &r, wg, &w);
    C(MPI_Group_free, &g);
    C(MPI_Group_free, &wg);
    return w;
}

/* Uses an intracommunicator: sum of world ranks, and a ring. */
static void use(MPI_Comm comm, int tag)
{
    int r, s, i, x, y, expect = 0, got = -1;
    MPI_Status st;
    if (comm == MPI_COMM_NULL) {
        errs++;
        return;
    }
    C(MPI_Comm_rank, comm, &r);
    C(MPI_Comm_size, comm, &s);
    for (i = 0; i < s; i++)
        expect += world_of(comm, i);
    x = rank;
    C(MPI_Allreduce, &x, &y, 1, MPI_INT, MPI_SUM, comm);
    CHECK(y == expect);
    if (s < 2)
        return;
    C(MPI_Sendrecv, &x, 1, MPI_INT, (r + 1) % s, tag, &got, 1, MPI_INT, (r + s - 1) % s, tag,
      comm, &st);
    CHECK(got == world_of(comm, (r + s - 1) % s));
}

int main(int argc, char **argv)
{
    MPI_Comm d1, d2, dd, half, most, shared, parity, cart, row, graph, dist, evens, inter,
        merged, self, idup;
    MPI_Group wg, g;
    MPI_Request req;
    int i, n, total, color, *ranks, *index, *edges;
    int dims[2], periods[2] = {0, 1}, remain[2] = {0, 1}, left, right;

    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, W, &rank);
    C(MPI_Comm_size, W, &size);
    color = rank % 2;
    ranks = malloc(sizeof(int) * (size_t)size);
    index = malloc(sizeof(int) * (size_t)size);
    edges = malloc(sizeof(int) * 2 * (size_t)size);
    if (!ranks || !index || !edges) {
        fprintf(stderr, "commids: out of memory\n");
        return 1;
    }

    C(MPI_Comm_dup, W, &d1);
    use(d1, 1);
    C(MPI_Comm_split, W, color, rank, &half);
    use(half, 2);
    /* rank 0 is left out: it counts the split all the same */
    C(MPI_Comm_split, W, rank == 0 ? MPI_UNDEFINED : 0, size - rank, &most);
    if (rank == 0)
        CHECK(most == MPI_COMM_NULL);
    else
        use(most, 3);
    C(MPI_Comm_dup, W, &d2);
    use(d2, 4);
    C(MPI_Comm_split_type, W, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared);
    use(shared, 5);

    /* MPI_Comm_create with disjoint groups: each rank names its half */
    C(MPI_Comm_group, W, &wg);
    n = 0;
    for (i = color; i < size; i += 2)
        ranks[n++] = i;
    C(MPI_Group_incl, wg, n, ranks, &g);
    C(MPI_Comm_create, W, g, &parity);
    use(parity, 6);
    C(MPI_Group_free, &g);

    /* 2 x (size / 2): at odd np the last rank gets MPI_COMM_NULL */
    dims[0] = 2;
    dims[1] = size / 2;
    C(MPI_Cart_create, W, 2, dims, periods, 0, &cart);
    if (rank < 2 * (size / 2)) {
        use(cart, 7);
        C(MPI_Cart_sub, cart, remain, &row);
        use(row, 8);
        C(MPI_Comm_free, &row);
        C(MPI_Comm_free, &cart);
    } else {
        CHECK(cart == MPI_COMM_NULL);
    }

    /* a ring as a graph, and as a distributed graph */
    for (i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + size - 1) % size;
        edges[2 * i + 1] = (i + 1) % size;
    }
    C(MPI_Graph_create, W, size, index, edges, 0, &graph);
    use(graph, 9);
    left = (rank + size - 1) % size;
    right = (rank + 1) % size;
    {
        int sources[2] = {left, right}, targets[2] = {left, right}, weights[2] = {1, 1};
        C(MPI_Dist_graph_create_adjacent, W, 2, sources, weights, 2, targets, weights,
          MPI_INFO_NULL, 0, &dist);
    }
    use(dist, 10);

    /* evens only; the odd ranks do not call it */
    if (color == 0) {
        n = 0;
        for (i = 0; i < size; i += 2)
            ranks[n++] = i;
        C(MPI_Group_incl, wg, n, ranks, &g);
        C(MPI_Comm_create_group, W, g, 5, &evens);
        use(evens, 11);
        C(MPI_Comm_free, &evens);
        C(MPI_Group_free, &g);
    }
    C(MPI_Group_free, &wg);

    C(MPI_Intercomm_create, half, 0, W, color == 0 ? 1 : 0, 77, &inter);
    C(MPI_Intercomm_merge, inter, color, &merged);
    use(merged, 12);

    C(MPI_Comm_dup, d1, &dd);
    use(dd, 13);
    C(MPI_Comm_dup, MPI_COMM_SELF, &self);
    use(self, 14);
    C(MPI_Comm_idup, W, &idup, &req);
    C(MPI_Wait, &req, MPI_STATUS_IGNORE);
    use(idup, 15);

    C(MPI_Comm_free, &idup);
    C(MPI_Comm_free, &self);
    C(MPI_Comm_free, &dd);
    C(MPI_Comm_free, &merged);
    C(MPI_Comm_free, &inter);
    C(MPI_Comm_free, &dist);
    C(MPI_Comm_free, &graph);
    C(MPI_Comm_free, &parity);
    C(MPI_Comm_free, &shared);
    C(MPI_Comm_free, &d2);
    if (rank != 0)
        C(MPI_Comm_free, &most);
    C(MPI_Comm_free, &half);
    C(MPI_Comm_free, &d1);

    C(MPI_Allreduce, &errs, &total, 1, MPI_INT, MPI_SUM, W);
    if (rank == 0) {
        if (total == 0)
            printf("commids: ok np=%d\n", size);
        else
            printf("commids: FAIL np=%d errors=%d\n", size, total);
    }
    free(ranks);
    free(index);
    free(edges);
    expect_write(rank);
    MPI_Finalize();
    return total != 0;
}
