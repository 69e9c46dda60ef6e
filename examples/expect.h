/*
 * expect.h - header-only MPI call counting for pmtrace test programs.
 *
 * Every MPI call in a test program is made through a macro so that the
 * program itself knows how many times it called each MPI function.  The
 * counts can then be compared with what the pmtrace PMPI library recorded.
 *
 *   C(MPI_Send, buf, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
 *   double t = C0(MPI_Wtime);        (functions without arguments)
 *
 * C(fn, args...) increments the counter for the name "fn" (the macro
 * argument is stringified, never macro-expanded) and then evaluates to
 * fn(args...), so the return value of the MPI call is preserved.
 * C0(fn) does the same for functions taking no arguments (MPI_Wtime,
 * MPI_Wtick, MPI_Finalize).  C0 exists because strict ISO C99 requires at
 * least one argument for "..." in a variadic macro; GCC and Clang also
 * accept C(MPI_Wtime), which counts identically.
 *
 * Counts are per function name (not per call site): a small static table
 * of (name, count) pairs searched linearly.  Every execution of a call is
 * counted, including calls made in loops.
 *
 * expect_write(world_rank) must be called right before the final
 * MPI_Finalize.  It adds 1 to the count of "MPI_Finalize" itself and then,
 * only if the environment variable EXPECT_COUNTS_DIR is set to a non-empty
 * string, writes $EXPECT_COUNTS_DIR/rank-<world_rank>.counts containing one
 * line per function, "MPI_Send 12", sorted by name (byte order, strcmp).
 * The program then calls MPI_Finalize() DIRECTLY (not through C/C0), so it
 * is counted exactly once:
 *
 *   expect_write(rank);
 *   MPI_Finalize();
 *
 * This facility never prints anything; if the file cannot be written it
 * fails silently.  It is not thread-safe (the test programs make MPI calls
 * from the main thread only).  Each program is a single translation unit,
 * so the static table is per program.
 */
#ifndef PMTRACE_EXPECT_H
#define PMTRACE_EXPECT_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT_MAX_FUNCS 512 /* more than the number of MPI C functions */

typedef struct {
    const char *name;
    long long count;
} expect_entry_t;

static expect_entry_t expect_tab_[EXPECT_MAX_FUNCS];
static int expect_n_;

static inline void expect_count_(const char *name)
{
    int i;
    for (i = 0; i < expect_n_; i++) {
        if (expect_tab_[i].name == name || strcmp(expect_tab_[i].name, name) == 0) {
            expect_tab_[i].count++;
            return;
        }
    }
    if (expect_n_ < EXPECT_MAX_FUNCS) {
        expect_tab_[expect_n_].name = name;
        expect_tab_[expect_n_].count = 1;
        expect_n_++;
    }
}

#define C(fn, ...) (expect_count_(#fn), fn(__VA_ARGS__))
#define C0(fn) (expect_count_(#fn), fn())

static inline void expect_write(int world_rank)
{
    const char *dir;
    char *path;
    size_t len;
    FILE *f;
    int i, j;

    expect_count_("MPI_Finalize"); /* the MPI_Finalize() that follows */

    dir = getenv("EXPECT_COUNTS_DIR");
    if (dir == NULL || dir[0] == '\0')
        return;

    /* insertion sort by name (table is small) */
    for (i = 1; i < expect_n_; i++) {
        expect_entry_t e = expect_tab_[i];
        for (j = i - 1; j >= 0 && strcmp(expect_tab_[j].name, e.name) > 0; j--)
            expect_tab_[j + 1] = expect_tab_[j];
        expect_tab_[j + 1] = e;
    }

    len = strlen(dir) + 64;
    path = (char *)malloc(len);
    if (path == NULL)
        return;
    snprintf(path, len, "%s/rank-%d.counts", dir, world_rank);
    f = fopen(path, "w");
    free(path);
    if (f == NULL)
        return;
    for (i = 0; i < expect_n_; i++)
        fprintf(f, "%s %lld\n", expect_tab_[i].name, expect_tab_[i].count);
    fclose(f);
}

#endif /* PMTRACE_EXPECT_H */
