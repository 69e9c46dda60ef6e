/* stall PID NAME STOP_MS RUN_MS: a disk slower than the trace rate, as the
 * writer sees it. Stops the threads of process PID whose name is NAME
 * (ptrace: the other threads run on) for STOP_MS, lets them run for
 * RUN_MS, and again, until the process ends. Prints how many times it
 * stopped them. For tests/faults (pmtrace's writer thread is
 * "pmtrace-flusher"). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* The threads of pid named name, into tids (at most max); their count, or
 * -1 once the process is gone. */
static int threads(int pid, const char *name, int *tids, int max) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.') continue;
        char comm_path[384], comm[64] = "";
        snprintf(comm_path, sizeof comm_path, "%s/%s/comm", path, e->d_name);
        FILE *f = fopen(comm_path, "r");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
        fclose(f);
        if (strcmp(comm, name) == 0) tids[n++] = atoi(e->d_name);
    }
    closedir(d);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: stall PID NAME STOP_MS RUN_MS\n");
        return 2;
    }
    int pid = atoi(argv[1]);
    long stop_ms = atol(argv[3]), run_ms = atol(argv[4]);
    long stops = 0;
    for (;;) {
        int tids[16];
        int n = threads(pid, argv[2], tids, 16);
        if (n < 0) break;
        int held[16], h = 0;
        for (int i = 0; i < n; i++) {
            if (ptrace(PTRACE_SEIZE, tids[i], 0, 0) != 0) continue;
            if (ptrace(PTRACE_INTERRUPT, tids[i], 0, 0) != 0 ||
                waitpid(tids[i], NULL, __WALL) != tids[i]) {
                ptrace(PTRACE_DETACH, tids[i], 0, 0);
                continue;
            }
            held[h++] = tids[i];
        }
        if (h > 0) {
            stops++;
            sleep_ms(stop_ms);
            for (int i = 0; i < h; i++) ptrace(PTRACE_DETACH, held[i], 0, 0);
        }
        sleep_ms(h > 0 ? run_ms : 10);
    }
    printf("%ld\n", stops);
    return 0;
}
