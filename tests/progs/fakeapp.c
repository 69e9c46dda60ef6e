/* Calls the stand-in MPI library it links (tests/progs/fakempi.c): prints
 * its version string. With an argument, first opens that library too, with
 * RTLD_LOCAL: a process with two MPI libraries. */
#include <dlfcn.h>
#include <stdio.h>

int MPI_Init(int *argc, char ***argv);
int MPI_Finalize(void);
int MPI_Get_library_version(char *version, int *len);

int main(int argc, char **argv) {
    if (argc > 1 && !dlopen(argv[1], RTLD_NOW | RTLD_LOCAL)) {
        fprintf(stderr, "fakeapp: %s\n", dlerror());
        return 2;
    }
    char version[256];
    int len = 0;
    if (MPI_Init(&argc, &argv) != 0 || MPI_Get_library_version(version, &len) != 0)
        return 1;
    printf("library: %.*s\n", len, version);
    return MPI_Finalize();
}
