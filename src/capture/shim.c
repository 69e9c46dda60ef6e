/* MPI constants that are macros (or implementation-defined objects) and so
 * invisible to Rust bindings, for one binary interface: build.rs compiles
 * this file once per interface, with that interface's mpi.h and
 * -DPMTRACE_IFACE=<name>, so that libpmtrace.so can hold all three
 * (pmtrace_openmpi_consts, pmtrace_mpich_consts, pmtrace_abi_consts).
 *
 * Nothing here refers to a symbol of an MPI library at link time: Open
 * MPI's predefined handles are the addresses of its global objects
 * (`&ompi_mpi_comm_world`), which are looked up by name in the library the
 * process runs, once it is known (pmtrace_<iface>_set_library). MPICH's and
 * the standard ABI's are numbers. */
#include <mpi.h>
#include <dlfcn.h>
#include <stdint.h>

#define PASTE3(a, b, c) a##_##b##_##c
#define EXPAND3(a, b, c) PASTE3(a, b, c)
#define NAME(x) EXPAND3(pmtrace, PMTRACE_IFACE, x)

#ifdef PMTRACE_IFACE_OPENMPI
static void *library;

/* The object everyone uses: an executable that names one of them gets
 * its own copy (a copy relocation), which the library then uses too; a
 * library opened with RTLD_LOCAL is only found through its handle. */
static void *global(const char *name) {
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p && library)
        p = dlsym(library, name);
    return p;
}

/* Every predefined handle of Open MPI's mpi.h goes through this macro. */
#undef OMPI_PREDEFINED_GLOBAL
#define OMPI_PREDEFINED_GLOBAL(type, g) ((type) global(#g))
#endif

/* The MPI library the process runs (a dlopen handle), which Open MPI's
 * handles are looked up in. */
void NAME(set_library)(void *handle) {
#ifdef PMTRACE_IFACE_OPENMPI
    library = handle;
#else
    (void)handle;
#endif
}

/* The same fields, in the same order, as `ffi::RawConsts`. */
struct raw_consts {
    int64_t comm_world, comm_self, comm_null, datatype_null, int32_t_, message_null,
        request_null, errors_return, status_ignore, statuses_ignore, any_source, any_tag,
        proc_null, undefined, cart, graph, dist_graph, thread_multiple, in_place, bottom,
        root, err_in_status, err_pending, uint64, char_, byte, op_max, op_sum, op_min,
        info_null, comm_type_shared;
};

#define H(x) ((int64_t)(intptr_t)(x))

void NAME(consts)(struct raw_consts *c) {
    c->comm_world = H(MPI_COMM_WORLD);
    c->comm_self = H(MPI_COMM_SELF);
    c->comm_null = H(MPI_COMM_NULL);
    c->datatype_null = H(MPI_DATATYPE_NULL);
    c->int32_t_ = H(MPI_INT32_T);
    c->message_null = H(MPI_MESSAGE_NULL);
    c->request_null = H(MPI_REQUEST_NULL);
    c->errors_return = H(MPI_ERRORS_RETURN);
    c->status_ignore = H(MPI_STATUS_IGNORE);
    c->statuses_ignore = H(MPI_STATUSES_IGNORE);
    c->any_source = MPI_ANY_SOURCE;
    c->any_tag = MPI_ANY_TAG;
    c->proc_null = MPI_PROC_NULL;
    c->undefined = MPI_UNDEFINED;
    c->cart = MPI_CART;
    c->graph = MPI_GRAPH;
    c->dist_graph = MPI_DIST_GRAPH;
    c->thread_multiple = MPI_THREAD_MULTIPLE;
    c->in_place = H(MPI_IN_PLACE);
    c->bottom = H(MPI_BOTTOM);
    c->root = MPI_ROOT;
    c->err_in_status = MPI_ERR_IN_STATUS;
    c->err_pending = MPI_ERR_PENDING;
    c->uint64 = H(MPI_UINT64_T);
    c->char_ = H(MPI_CHAR);
    c->byte = H(MPI_BYTE);
    c->op_max = H(MPI_MAX);
    c->op_sum = H(MPI_SUM);
    c->op_min = H(MPI_MIN);
    c->info_null = H(MPI_INFO_NULL);
    c->comm_type_shared = MPI_COMM_TYPE_SHARED;
}
