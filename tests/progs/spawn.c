/* MPI_Comm_spawn under pmtrace: the world spawns two copies of this
 * program, rank 0 sends each child a number over the intercommunicator,
 * each child doubles it, sends it back and joins a barrier of the
 * children's world; both sides disconnect. Rank 0 prints the sum.
 * Calls are counted (examples/expect.h); the children write theirs as
 * rank-<1000 + rank> in the directory their parent names on their
 * command line (a launcher need not pass EXPECT_COUNTS_DIR on to spawned
 * processes). */
#include "expect.h"

int main(int argc, char **argv) {
    int rank, size;
    MPI_Comm parent, inter;
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);
    C(MPI_Comm_get_parent, &parent);
    if (parent == MPI_COMM_NULL) {
        const char *dir = getenv("EXPECT_COUNTS_DIR");
        char *child_argv[] = {"child", (char *)(dir ? dir : ""), NULL};
        int errs[2];
        C(MPI_Comm_spawn, argv[0], child_argv, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
        if (rank == 0) {
            int sum = 0;
            for (int c = 0; c < 2; c++) {
                int v = 100 + c;
                C(MPI_Send, &v, 1, MPI_INT, c, 5, inter);
            }
            for (int c = 0; c < 2; c++) {
                int v;
                C(MPI_Recv, &v, 1, MPI_INT, MPI_ANY_SOURCE, 6, inter, MPI_STATUS_IGNORE);
                sum += v;
            }
            printf("spawn: ok np=%d children=2 sum=%d\n", size, sum);
        }
        C(MPI_Comm_disconnect, &inter);
        expect_write(rank);
    } else {
        int v;
        C(MPI_Recv, &v, 1, MPI_INT, 0, 5, parent, MPI_STATUS_IGNORE);
        v *= 2;
        C(MPI_Send, &v, 1, MPI_INT, 0, 6, parent);
        C(MPI_Barrier, MPI_COMM_WORLD);
        C(MPI_Comm_disconnect, &parent);
        if (argc > 2 && argv[2][0])
            setenv("EXPECT_COUNTS_DIR", argv[2], 1);
        expect_write(1000 + rank);
    }
    MPI_Finalize();
    return 0;
}
