/*
 * halo2d.c - 2-D Jacobi iteration with halo exchange on a Cartesian grid.
 *
 * Usage: halo2d [iterations]   (default 50; any np >= 1)
 * MPI_Dims_create + MPI_Cart_create (non-periodic, no reordering) +
 * MPI_Cart_shift give 4 neighbours (MPI_PROC_NULL on the global edges).
 * Every rank owns a 16x16 block plus one ghost layer.  Rows are exchanged
 * as contiguous doubles, columns with an MPI_Type_vector.  Each exchange is
 * 4 MPI_Irecv + 4 MPI_Isend + 1 MPI_Waitall.  The residual (max |change|)
 * is combined with MPI_Allreduce(MPI_MAX) every iteration, which is
 * bit-for-bit deterministic for a given np.
 * Before iterating, one exchange of a coordinate-encoded field checks that
 * every ghost cell received the right neighbour value.
 */
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>
#include "expect.h"

#define NX 16 /* local interior columns */
#define NY 16 /* local interior rows */
#define IDX(j, i) ((j) * (NX + 2) + (i))

/* tags name the direction of travel */
#define TAG_SOUTH 0
#define TAG_NORTH 1
#define TAG_EAST 2
#define TAG_WEST 3

static long parse_count(int argc, char **argv, long def)
{
    char *end;
    long v;
    if (argc < 2)
        return def;
    v = strtol(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || v < 1 || v > 100000000L)
        return -1;
    return v;
}

static int north, south, west, east;
static MPI_Comm cart;
static MPI_Datatype column;

static void exchange(double *u)
{
    MPI_Request req[8];
    C(MPI_Irecv, &u[IDX(0, 1)], NX, MPI_DOUBLE, north, TAG_SOUTH, cart, &req[0]);
    C(MPI_Irecv, &u[IDX(NY + 1, 1)], NX, MPI_DOUBLE, south, TAG_NORTH, cart, &req[1]);
    C(MPI_Irecv, &u[IDX(1, 0)], 1, column, west, TAG_EAST, cart, &req[2]);
    C(MPI_Irecv, &u[IDX(1, NX + 1)], 1, column, east, TAG_WEST, cart, &req[3]);
    C(MPI_Isend, &u[IDX(1, 1)], NX, MPI_DOUBLE, north, TAG_NORTH, cart, &req[4]);
    C(MPI_Isend, &u[IDX(NY, 1)], NX, MPI_DOUBLE, south, TAG_SOUTH, cart, &req[5]);
    C(MPI_Isend, &u[IDX(1, 1)], 1, column, west, TAG_WEST, cart, &req[6]);
    C(MPI_Isend, &u[IDX(1, NX)], 1, column, east, TAG_EAST, cart, &req[7]);
    C(MPI_Waitall, 8, req, MPI_STATUSES_IGNORE);
}

static double gval(int gy, int gx)
{
    return (double)gy * 10000.0 + (double)gx;
}

int main(int argc, char **argv)
{
    int rank, size, crank, i, j, errs = 0, total_errs = 0;
    int dims[2] = {0, 0}, periods[2] = {0, 0}, coords[2];
    long iters, it;
    double *u, *v, *tmp, first_res = 0.0, res = 0.0, lsum;
    double *sums = NULL;

    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);

    iters = parse_count(argc, argv, 50);
    if (iters < 0) {
        if (rank == 0)
            printf("halo2d: FAIL bad iteration count\n");
        expect_write(rank);
        MPI_Finalize();
        return 1;
    }

    C(MPI_Dims_create, size, 2, dims);
    C(MPI_Cart_create, MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    C(MPI_Comm_rank, cart, &crank);
    C(MPI_Cart_coords, cart, crank, 2, coords);
    C(MPI_Cart_shift, cart, 0, 1, &north, &south);
    C(MPI_Cart_shift, cart, 1, 1, &west, &east);
    C(MPI_Type_vector, NY, 1, NX + 2, MPI_DOUBLE, &column);
    C(MPI_Type_commit, &column);

    u = (double *)calloc((NX + 2) * (NY + 2), sizeof(double));
    v = (double *)calloc((NX + 2) * (NY + 2), sizeof(double));
    if (u == NULL || v == NULL) {
        fprintf(stderr, "halo2d: out of memory\n");
        return 1;
    }

    /* 1. halo check: interior holds its global coordinates */
    {
        int gy0 = coords[0] * NY, gx0 = coords[1] * NX;
        for (j = 0; j < NY + 2; j++)
            for (i = 0; i < NX + 2; i++)
                u[IDX(j, i)] = (j >= 1 && j <= NY && i >= 1 && i <= NX)
                                   ? gval(gy0 + j - 1, gx0 + i - 1) : -1.0;
        exchange(u);
        for (i = 1; i <= NX; i++) {
            if (u[IDX(0, i)] != (north == MPI_PROC_NULL ? -1.0 : gval(gy0 - 1, gx0 + i - 1)))
                errs++;
            if (u[IDX(NY + 1, i)] != (south == MPI_PROC_NULL ? -1.0 : gval(gy0 + NY, gx0 + i - 1)))
                errs++;
        }
        for (j = 1; j <= NY; j++) {
            if (u[IDX(j, 0)] != (west == MPI_PROC_NULL ? -1.0 : gval(gy0 + j - 1, gx0 - 1)))
                errs++;
            if (u[IDX(j, NX + 1)] != (east == MPI_PROC_NULL ? -1.0 : gval(gy0 + j - 1, gx0 + NX)))
                errs++;
        }
    }

    /* 2. Jacobi: global top edge held at 1.0, other edges at 0.0 */
    for (j = 0; j < NY + 2; j++)
        for (i = 0; i < NX + 2; i++)
            u[IDX(j, i)] = v[IDX(j, i)] = (j == 0 && north == MPI_PROC_NULL) ? 1.0 : 0.0;

    for (it = 0; it < iters; it++) {
        double lres = 0.0;
        exchange(u);
        for (j = 1; j <= NY; j++)
            for (i = 1; i <= NX; i++) {
                double nv = 0.25 * (u[IDX(j - 1, i)] + u[IDX(j + 1, i)] + u[IDX(j, i - 1)] + u[IDX(j, i + 1)]);
                double d = nv - u[IDX(j, i)];
                if (d < 0.0)
                    d = -d;
                if (d > lres)
                    lres = d;
                v[IDX(j, i)] = nv;
            }
        C(MPI_Allreduce, &lres, &res, 1, MPI_DOUBLE, MPI_MAX, cart);
        if (it == 0)
            first_res = res;
        tmp = u;
        u = v;
        v = tmp;
    }
    if (!(res >= 0.0 && res <= first_res))
        errs++;

    /* field checksum: gathered per rank, summed in rank order on rank 0 */
    lsum = 0.0;
    for (j = 1; j <= NY; j++)
        for (i = 1; i <= NX; i++)
            lsum += u[IDX(j, i)];
    if (crank == 0)
        sums = (double *)malloc(sizeof(double) * size);
    C(MPI_Gather, &lsum, 1, MPI_DOUBLE, sums, 1, MPI_DOUBLE, 0, cart);
    C(MPI_Allreduce, &errs, &total_errs, 1, MPI_INT, MPI_SUM, cart);

    if (crank == 0) {
        double total = 0.0;
        for (i = 0; i < size; i++)
            total += sums[i];
        printf("halo2d: np=%d dims=%dx%d iters=%ld residual=%.12e sum=%.12e\n", size, dims[0], dims[1],
               iters, res, total);
        if (total_errs != 0)
            printf("halo2d: FAIL %d errors\n", total_errs);
        else
            printf("halo2d: ok\n");
        free(sums);
    }

    C(MPI_Type_free, &column);
    C(MPI_Comm_free, &cart);
    free(u);
    free(v);

    expect_write(rank);
    MPI_Finalize();
    return total_errs != 0 ? 1 : 0;
}
