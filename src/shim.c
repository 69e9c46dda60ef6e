/* MPI constants that are macros (or implementation-defined objects) and so
 * invisible to Rust bindings. Everything here is read once at MPI_Init. */
#include <mpi.h>

const void *pmtrace_mpi_in_place(void) { return MPI_IN_PLACE; }
const void *pmtrace_mpi_bottom(void) { return MPI_BOTTOM; }
int pmtrace_mpi_root(void) { return MPI_ROOT; }
int pmtrace_mpi_err_in_status(void) { return MPI_ERR_IN_STATUS; }
int pmtrace_mpi_err_pending(void) { return MPI_ERR_PENDING; }
int pmtrace_mpi_max_processor_name(void) { return MPI_MAX_PROCESSOR_NAME; }
MPI_Datatype pmtrace_mpi_byte(void) { return MPI_BYTE; }
MPI_Datatype pmtrace_mpi_uint64(void) { return MPI_UINT64_T; }
MPI_Datatype pmtrace_mpi_char(void) { return MPI_CHAR; }
MPI_Op pmtrace_mpi_op_max(void) { return MPI_MAX; }
MPI_Op pmtrace_mpi_op_sum(void) { return MPI_SUM; }
