/* Preloaded before libpmtrace.so: counts the heap calls (malloc, calloc,
 * realloc, free, the aligned ones) made by libpmtrace.so's own code on
 * the process's main thread, and at exit appends
 *   <program> main=<calls> window=<calls> first=<offset> by=<offset>:<calls>,...
 * to $ALLOCCOUNT_OUT: all of them; those while the program's window (its
 * measured loop, `alloccount_window`) was open, and the first of those's
 * caller; all by caller, for the first 1024 callers. Callers are offsets
 * into the library's code segment, for addr2line. glibc only: the real
 * calls are its __libc_* entry points, so nothing here allocates. */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

static uintptr_t lo, hi;
static pthread_t main_thread;
static unsigned long calls, in_window;
static uintptr_t window_first;
static int window;

/* Called by the program around what it measures (see mpibench.c). */
void alloccount_window(int open) { window = open; }
/* Calls by caller, the first CALLERS callers. */
enum { CALLERS = 1024 };
static uintptr_t caller_at[CALLERS];
static unsigned long caller_calls[CALLERS];
static int ncallers;

static int find(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libpmtrace")) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type != PT_LOAD || !(p->p_flags & PF_X)) continue;
        lo = info->dlpi_addr + p->p_vaddr;
        hi = lo + p->p_memsz;
        return 1;
    }
    return 0;
}

__attribute__((constructor)) static void start(void) {
    main_thread = pthread_self();
    dl_iterate_phdr(find, NULL);
}

static void count(void *caller) {
    uintptr_t a = (uintptr_t)caller;
    if (a < lo || a >= hi || !pthread_equal(pthread_self(), main_thread)) return;
    calls++;
    if (window && !in_window++) window_first = a - lo;
    for (int i = 0; i < ncallers; i++)
        if (caller_at[i] == a - lo) {
            caller_calls[i]++;
            return;
        }
    if (ncallers < CALLERS) {
        caller_at[ncallers] = a - lo;
        caller_calls[ncallers++] = 1;
    }
}

void *malloc(size_t n) {
    count(__builtin_return_address(0));
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m) {
    count(__builtin_return_address(0));
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
    count(__builtin_return_address(0));
    return __libc_realloc(p, n);
}
void free(void *p) {
    if (p) count(__builtin_return_address(0));
    __libc_free(p);
}
void *memalign(size_t a, size_t n) {
    count(__builtin_return_address(0));
    return __libc_memalign(a, n);
}
void *aligned_alloc(size_t a, size_t n) {
    count(__builtin_return_address(0));
    return __libc_memalign(a, n);
}
int posix_memalign(void **out, size_t a, size_t n) {
    count(__builtin_return_address(0));
    void *p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("ALLOCCOUNT_OUT");
    if (!path || !*path || !lo) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s main=%lu window=%lu first=%lx by=", program_invocation_short_name, calls,
            in_window, (unsigned long)window_first);
    for (int i = 0; i < ncallers; i++)
        fprintf(f, "%s%lx:%lu", i ? "," : "", (unsigned long)caller_at[i], caller_calls[i]);
    fprintf(f, "\n");
    fclose(f);
}
