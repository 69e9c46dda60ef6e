/* A stand-in MPI library for the tests of what pmtrace does when it
 * cannot trace (tests/matrix): it defines MPI_Init, MPI_Finalize and
 * MPI_Get_library_version (and their PMPI_ forms), and nothing else. Its
 * version string is VERSION; with -DMPI3 it also has the MPI-3.0
 * functions pmtrace calls for itself. */
#include <string.h>

#ifndef VERSION
#define VERSION "Fake MPI 1.0"
#endif

int PMPI_Init(int *argc, char ***argv) { (void)argc; (void)argv; return 0; }
int MPI_Init(int *argc, char ***argv) { return PMPI_Init(argc, argv); }
int PMPI_Finalize(void) { return 0; }
int MPI_Finalize(void) { return PMPI_Finalize(); }
int PMPI_Get_library_version(char *version, int *len) {
    strcpy(version, VERSION);
    *len = (int)strlen(VERSION);
    return 0;
}
int MPI_Get_library_version(char *version, int *len) {
    return PMPI_Get_library_version(version, len);
}
