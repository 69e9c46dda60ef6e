/* MPI-4 point to point and collectives, mixed with their MPI-3 forms:
 * large-count (_c) sends received by int receives and the reverse,
 * blocking and nonblocking, small (staged) and large (derived-type route);
 * MPI_Isendrecv (also from MPI_ANY_SOURCE) and MPI_Isendrecv_replace;
 * MPI_Bcast_c and MPI_Allreduce_c beside MPI_Bcast and MPI_Allreduce; an
 * MPI_Allreduce_init started three times; a partitioned exchange between
 * rank pairs, started twice. Rank 0 prints one checksum per step; a tracer
 * must not change a digit. Needs an MPI-4 library; any np >= 2. */
#include "expect.h"

/* Open MPI 5.0 has MPI-4.0 but not its large-count (_c) functions: there
 * the program calls the int forms instead (CX expands its first argument
 * before C counts it by name). */
#if defined(OPEN_MPI) && OMPI_MAJOR_VERSION < 6
#define LC(f) f
#define GET_COUNT_C MPI_Get_elements_x
#else
#define LC(f) f##_c
#define GET_COUNT_C MPI_Get_count_c
#endif
#define CX(fn, ...) C(fn, __VA_ARGS__)

#define SMALL 16
#define LARGE 3000 /* doubles: 24000 bytes, beyond the staging copy */
#define PARTS 4
#define PER_PART 16

static int rank, size, right, left;
/* MPICH (4.0 and 5.0) leaves the status of MPI_Isendrecv(_replace)
 * unfilled: a wildcard receive there cannot tell where its message came
 * from, untraced or traced. The program names the source instead there
 * (same output). */
static int wild = 1;

/* Sums a checksum over ranks and prints it at rank 0. */
static void report(const char *step, double local)
{
    double total = 0;
    C(MPI_Reduce, &local, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%-28s %.1f\n", step, total);
}

static double sum(const double *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * (i % 7 + 1);
    return s;
}

static void fill(double *x, int n, int seed)
{
    for (int i = 0; i < n; i++) x[i] = seed * 1000 + i;
}

static void blocking(void)
{
    static double out[LARGE], in[LARGE];
    MPI_Status st;
    int n;
    MPI_Count nc;
    for (int len = SMALL; len <= LARGE; len = (len == SMALL ? LARGE : LARGE + 1)) {
        fill(out, len, rank + 1);
        /* _c send, int receive; then int send, _c receive. */
        if (rank % 2 == 0) {
            CX(LC(MPI_Send), out, (MPI_Count)len, MPI_DOUBLE, right, 1, MPI_COMM_WORLD);
            C(MPI_Recv, in, len, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &st);
        } else {
            C(MPI_Recv, in, len, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &st);
            CX(LC(MPI_Send), out, (MPI_Count)len, MPI_DOUBLE, right, 1, MPI_COMM_WORLD);
        }
        C(MPI_Get_count, &st, MPI_DOUBLE, &n);
        double s = sum(in, len) + n;
        if (rank % 2 == 0) {
            C(MPI_Send, out, len, MPI_DOUBLE, right, 2, MPI_COMM_WORLD);
            CX(LC(MPI_Recv), in, (MPI_Count)len, MPI_DOUBLE, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &st);
        } else {
            CX(LC(MPI_Recv), in, (MPI_Count)len, MPI_DOUBLE, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &st);
            C(MPI_Send, out, len, MPI_DOUBLE, right, 2, MPI_COMM_WORLD);
        }
        CX(GET_COUNT_C, &st, MPI_DOUBLE, &nc);
        s += sum(in, len) + (double)nc + st.MPI_SOURCE;
        report(len == SMALL ? "send_c/recv small" : "send_c/recv large", s);
    }
}

static void nonblocking(void)
{
    static double out[LARGE], in[LARGE];
    MPI_Request r[2];
    MPI_Status st[2];
    for (int len = SMALL; len <= LARGE; len = (len == SMALL ? LARGE : LARGE + 1)) {
        fill(out, len, rank + 7);
        C(MPI_Irecv, in, len, MPI_DOUBLE, left, 3, MPI_COMM_WORLD, &r[0]);
        CX(LC(MPI_Isend), out, (MPI_Count)len, MPI_DOUBLE, right, 3, MPI_COMM_WORLD, &r[1]);
        C(MPI_Waitall, 2, r, st);
        double s = sum(in, len);
        CX(LC(MPI_Irecv), in, (MPI_Count)len, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG,
          MPI_COMM_WORLD, &r[0]);
        C(MPI_Isend, out, len, MPI_DOUBLE, right, 4, MPI_COMM_WORLD, &r[1]);
        C(MPI_Waitall, 2, r, MPI_STATUSES_IGNORE);
        s += sum(in, len);
        report(len == SMALL ? "isend_c/irecv small" : "isend_c/irecv large", s);
    }
}

static void sendrecv(void)
{
    static double out[LARGE], in[LARGE];
    MPI_Request r;
    MPI_Status st;
    fill(out, SMALL, rank + 3);
    C(MPI_Isendrecv, out, SMALL, MPI_DOUBLE, right, 5, in, SMALL, MPI_DOUBLE, left, 5,
      MPI_COMM_WORLD, &r);
    C(MPI_Wait, &r, MPI_STATUS_IGNORE);
    double s = sum(in, SMALL);
    report("isendrecv small", s);
    /* From anywhere, with the large-count form and the large route. */
    fill(out, LARGE, rank + 4);
    CX(LC(MPI_Isendrecv), out, (MPI_Count)LARGE, MPI_DOUBLE, right, 6, in, (MPI_Count)LARGE,
      MPI_DOUBLE, wild ? MPI_ANY_SOURCE : left, wild ? MPI_ANY_TAG : 6,
      MPI_COMM_WORLD, &r);
    C(MPI_Wait, &r, MPI_STATUS_IGNORE);
    s = sum(in, LARGE);
    report("isendrecv_c large, any", s);
    /* The blocking form against the nonblocking one on the other side. */
    fill(out, SMALL, rank + 5);
    if (rank % 2 == 0) {
        C(MPI_Sendrecv, out, SMALL, MPI_DOUBLE, right, 7, in, SMALL, MPI_DOUBLE, left, 7,
          MPI_COMM_WORLD, &st);
    } else {
        C(MPI_Isendrecv, out, SMALL, MPI_DOUBLE, right, 7, in, SMALL, MPI_DOUBLE, left, 7,
          MPI_COMM_WORLD, &r);
        C(MPI_Wait, &r, &st);
    }
    s = sum(in, SMALL);
    report("sendrecv against isendrecv", s);
    for (int len = SMALL; len <= LARGE; len = (len == SMALL ? LARGE : LARGE + 1)) {
        fill(in, len, rank + 9);
        C(MPI_Isendrecv_replace, in, len, MPI_DOUBLE, right, 8, left, 8, MPI_COMM_WORLD, &r);
        C(MPI_Wait, &r, &st);
        s = sum(in, len);
        report(len == SMALL ? "isendrecv_replace small" : "isendrecv_replace large", s);
        CX(LC(MPI_Isendrecv_replace), in, (MPI_Count)len, MPI_DOUBLE, right, 9,
          wild ? MPI_ANY_SOURCE : left, 9, MPI_COMM_WORLD, &r);
        C(MPI_Wait, &r, MPI_STATUS_IGNORE);
        s = sum(in, len);
        report(len == SMALL ? "isendrecv_replace_c small" : "isendrecv_replace_c large", s);
    }
}

static void collectives(void)
{
    double x[SMALL], y[SMALL];
    fill(x, SMALL, rank == 1 ? 11 : 0);
    CX(LC(MPI_Bcast), x, (MPI_Count)SMALL, MPI_DOUBLE, 1, MPI_COMM_WORLD);
    double s = sum(x, SMALL);
    fill(x, SMALL, rank + 1);
    C(MPI_Bcast, x, SMALL, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    s += sum(x, SMALL);
    fill(x, SMALL, rank + 1);
    CX(LC(MPI_Allreduce), x, y, (MPI_Count)SMALL, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    s += sum(y, SMALL);
    C(MPI_Allreduce, MPI_IN_PLACE, y, SMALL, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    s += sum(y, SMALL);
    report("bcast_c/allreduce_c", s);

    /* A persistent allreduce, started three times with new data. */
    MPI_Request r;
    C(MPI_Allreduce_init, x, y, SMALL, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
    s = 0;
    for (int k = 0; k < 3; k++) {
        fill(x, SMALL, rank + 10 * k);
        C(MPI_Start, &r);
        C(MPI_Wait, &r, MPI_STATUS_IGNORE);
        s += sum(y, SMALL);
    }
    C(MPI_Request_free, &r);
    report("allreduce_init x3", s);
}

/* Even ranks send to the next odd rank in PARTS partitions, twice. Open
 * MPI 5.0's partitioned communication hangs when a rank of the
 * communicator takes no part (odd np): it is left out there. */
static void partitioned(void)
{
    int buf[PARTS * PER_PART];
    int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
    double s = 0;
#if defined(OPEN_MPI)
    if (size % 2) peer = size;
#endif
    if (peer < size) {
        MPI_Request r;
        int sender = rank % 2 == 0;
        if (sender) {
            C(MPI_Psend_init, buf, PARTS, (MPI_Count)PER_PART, MPI_INT, peer, 10,
              MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        } else {
            C(MPI_Precv_init, buf, PARTS, (MPI_Count)PER_PART, MPI_INT, peer, 10,
              MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        }
        for (int round = 0; round < 2; round++) {
            C(MPI_Start, &r);
            if (sender) {
                for (int i = 0; i < PARTS * PER_PART; i++) buf[i] = rank * 100 + round * 10 + i;
                C(MPI_Pready, 0, r);
                C(MPI_Pready_range, 1, 2, r);
                int last[1] = {3};
                C(MPI_Pready_list, 1, last, r);
            } else {
                int flag = 0;
                while (!flag) C(MPI_Parrived, r, PARTS - 1, &flag);
            }
            C(MPI_Wait, &r, MPI_STATUS_IGNORE);
            if (!sender)
                for (int i = 0; i < PARTS * PER_PART; i++) s += buf[i] * (i % 5 + 1);
        }
        C(MPI_Request_free, &r);
    }
    report("partitioned x2", s);
}

int main(int argc, char **argv)
{
    C(MPI_Init, &argc, &argv);
    C(MPI_Comm_rank, MPI_COMM_WORLD, &rank);
    C(MPI_Comm_size, MPI_COMM_WORLD, &size);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    C(MPI_Get_library_version, version, &len);
    if (strstr(version, "MPICH Version:")) wild = 0;
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;
    blocking();
    nonblocking();
    sendrecv();
    collectives();
    partitioned();
    expect_write(rank);
    MPI_Finalize();
    return 0;
}
