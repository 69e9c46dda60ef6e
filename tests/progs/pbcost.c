/* What piggybacking costs, by route and message size (np=2, not traced):
 *   plain    the message alone
 *   copy     a 24-byte header and the data copied into one staging buffer,
 *            sent as bytes; the receiver copies the data out
 *   struct   a struct datatype {header, data} at MPI_BOTTOM, built,
 *            committed and freed for every message, on both sides
 * Prints one line per size: one-way latency in ns for each route. Used to
 * choose the crossover between the copy and the datatype routes. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HDR = 24 };

static double pingpong(int route, char *buf, char *stage, size_t n, int iters, int rank) {
    int peer = rank ^ 1;
    unsigned long long hdr[3] = {1, 2, 3}, rhdr[3];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        for (int leg = 0; leg < 2; leg++) {
            int sending = (leg == 0) == (rank == 0);
            if (route == 0) {
                if (sending) MPI_Send(buf, (int)n, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                else MPI_Recv(buf, (int)n, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (route == 1) {
                if (sending) {
                    memcpy(stage, hdr, HDR);
                    memcpy(stage + HDR, buf, n);
                    MPI_Send(stage, (int)(n + HDR), MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                } else {
                    MPI_Recv(stage, (int)(n + HDR), MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    memcpy(rhdr, stage, HDR);
                    memcpy(buf, stage + HDR, n);
                }
            } else {
                MPI_Aint disp[2];
                int len[2] = {HDR, (int)n};
                MPI_Datatype types[2] = {MPI_BYTE, MPI_BYTE}, t;
                MPI_Get_address(sending ? (void *)hdr : (void *)rhdr, &disp[0]);
                MPI_Get_address(buf, &disp[1]);
                MPI_Type_create_struct(2, len, disp, types, &t);
                MPI_Type_commit(&t);
                if (sending) MPI_Send(MPI_BOTTOM, 1, t, peer, 0, MPI_COMM_WORLD);
                else MPI_Recv(MPI_BOTTOM, 1, t, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Type_free(&t);
            }
        }
    }
    return (MPI_Wtime() - t0) / iters / 2 * 1e9;
}

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    size_t max = 1 << 20;
    char *buf = malloc(max), *stage = malloc(max + HDR);
    memset(buf, 7, max);
    memset(stage, 0, max + HDR);
    if (rank == 0) printf("%10s %12s %12s %12s\n", "bytes", "plain_ns", "copy_ns", "struct_ns");
    for (size_t n = 8; n <= max; n *= 4) {
        int iters = n <= 4096 ? 20000 : n <= 65536 ? 2000 : 200;
        double best[3] = {1e30, 1e30, 1e30};
        for (int rep = 0; rep < 5; rep++)
            for (int route = 0; route < 3; route++) {
                double v = pingpong(route, buf, stage, n, iters, rank);
                if (v < best[route]) best[route] = v;
            }
        if (rank == 0) printf("%10zu %12.0f %12.0f %12.0f\n", n, best[0], best[1], best[2]);
    }
    free(buf);
    free(stage);
    MPI_Finalize();
    return 0;
}
