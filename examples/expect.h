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
 * H(fn) counts an outcome rather than a call: a program puts it after a
 * call of fn that completed or matched something (an MPI_Test that set its
 * flag, an MPI_Improbe that found a message), so that a test knows how
 * many of the program's calls did, where that depends on timing.  Written
 * beside the counts, to $EXPECT_COUNTS_DIR/rank-<world_rank>.hits, in the
 * same form (no file when there were none).
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
static expect_entry_t expect_hits_[EXPECT_MAX_FUNCS];
static int expect_nhits_;

static inline void expect_bump_(expect_entry_t *tab, int *n, const char *name)
{
    int i;
    for (i = 0; i < *n; i++) {
        if (tab[i].name == name || strcmp(tab[i].name, name) == 0) {
            tab[i].count++;
            return;
        }
    }
    if (*n < EXPECT_MAX_FUNCS) {
        tab[*n].name = name;
        tab[*n].count = 1;
        (*n)++;
    }
}

static inline void expect_count_(const char *name)
{
    expect_bump_(expect_tab_, &expect_n_, name);
}

#define C(fn, ...) (expect_count_(#fn), fn(__VA_ARGS__))
#define C0(fn) (expect_count_(#fn), fn())
#define H(fn) expect_bump_(expect_hits_, &expect_nhits_, #fn)

/* Writes tab (sorted by name first) to dir/rank-<world_rank>.<suffix>. */
static inline void expect_dump_(const char *dir, int world_rank, const char *suffix,
                                expect_entry_t *tab, int n)
{
    char *path;
    size_t len;
    FILE *f;
    int i, j;

    /* insertion sort by name (table is small) */
    for (i = 1; i < n; i++) {
        expect_entry_t e = tab[i];
        for (j = i - 1; j >= 0 && strcmp(tab[j].name, e.name) > 0; j--)
            tab[j + 1] = tab[j];
        tab[j + 1] = e;
    }

    len = strlen(dir) + 64;
    path = (char *)malloc(len);
    if (path == NULL)
        return;
    snprintf(path, len, "%s/rank-%d.%s", dir, world_rank, suffix);
    f = fopen(path, "w");
    free(path);
    if (f == NULL)
        return;
    for (i = 0; i < n; i++)
        fprintf(f, "%s %lld\n", tab[i].name, tab[i].count);
    fclose(f);
}

static inline void expect_write(int world_rank)
{
    const char *dir;

    expect_count_("MPI_Finalize"); /* the MPI_Finalize() that follows */

    dir = getenv("EXPECT_COUNTS_DIR");
    if (dir == NULL || dir[0] == '\0')
        return;
    expect_dump_(dir, world_rank, "counts", expect_tab_, expect_n_);
    if (expect_nhits_ > 0)
        expect_dump_(dir, world_rank, "hits", expect_hits_, expect_nhits_);
}

#endif /* PMTRACE_EXPECT_H */
