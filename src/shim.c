/* MPI constants that are macros (or implementation-defined objects) and so
 * invisible to Rust bindings. Everything here is read once at MPI_Init. */
#include <mpi.h>

const void *pmtrace_mpi_in_place(void) { return MPI_IN_PLACE; }
const void *pmtrace_mpi_bottom(void) { return MPI_BOTTOM; }
int pmtrace_mpi_root(void) { return MPI_ROOT; }
int pmtrace_mpi_err_in_status(void) { return MPI_ERR_IN_STATUS; }
int pmtrace_mpi_err_pending(void) { return MPI_ERR_PENDING; }
int pmtrace_mpi_max_processor_name(void) { return MPI_MAX_PROCESSOR_NAME; }
MPI_Datatype pmtrace_mpi_uint64(void) { return MPI_UINT64_T; }
MPI_Datatype pmtrace_mpi_char(void) { return MPI_CHAR; }
MPI_Datatype pmtrace_mpi_byte(void) { return MPI_BYTE; }
MPI_Op pmtrace_mpi_op_max(void) { return MPI_MAX; }
MPI_Op pmtrace_mpi_op_sum(void) { return MPI_SUM; }
MPI_Op pmtrace_mpi_op_min(void) { return MPI_MIN; }
MPI_Info pmtrace_mpi_info_null(void) { return MPI_INFO_NULL; }
int pmtrace_mpi_comm_type_shared(void) { return MPI_COMM_TYPE_SHARED; }

/* The MPI-5 standard ABI build has no mpi-sys: the handful of constants the
 * runtime names as mpi-sys does (RSMPI_*) are defined here. */
#if defined(MPI_ABI_VERSION)
const MPI_Comm RSMPI_COMM_WORLD = MPI_COMM_WORLD;
const MPI_Comm RSMPI_COMM_NULL = MPI_COMM_NULL;
const MPI_Comm RSMPI_COMM_SELF = MPI_COMM_SELF;
const MPI_Datatype RSMPI_DATATYPE_NULL = MPI_DATATYPE_NULL;
const MPI_Datatype RSMPI_INT32_T = MPI_INT32_T;
const MPI_Message RSMPI_MESSAGE_NULL = MPI_MESSAGE_NULL;
const MPI_Request RSMPI_REQUEST_NULL = MPI_REQUEST_NULL;
MPI_Status *const RSMPI_STATUS_IGNORE = MPI_STATUS_IGNORE;
MPI_Status *const RSMPI_STATUSES_IGNORE = MPI_STATUSES_IGNORE;
const int RSMPI_ANY_SOURCE = MPI_ANY_SOURCE;
const int RSMPI_ANY_TAG = MPI_ANY_TAG;
const int RSMPI_PROC_NULL = MPI_PROC_NULL;
const int RSMPI_UNDEFINED = MPI_UNDEFINED;
const int RSMPI_CART = MPI_CART;
const int RSMPI_GRAPH = MPI_GRAPH;
const int RSMPI_DIST_GRAPH = MPI_DIST_GRAPH;
const int RSMPI_THREAD_MULTIPLE = MPI_THREAD_MULTIPLE;
const MPI_Errhandler RSMPI_ERRORS_RETURN = MPI_ERRORS_RETURN;
#endif
