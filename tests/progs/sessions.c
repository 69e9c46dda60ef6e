/* An MPI-4 program that starts with MPI_Session_init and never calls
 * MPI_Init: a communicator from the "mpi://WORLD" process set, a ring of
 * messages and an allreduce on it, then MPI_Session_finalize. Rank 0 prints
 * what it received and the sum; a tracer must not change a line of it.
 * Any np >= 1. */
#include <mpi.h>
#include <stdio.h>

int main(void)
{
    MPI_Session session;
    MPI_Group group;
    MPI_Comm comm;
    int rank, size;
    MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &session);
    MPI_Group_from_session_pset(session, "mpi://WORLD", &group);
    MPI_Comm_create_from_group(group, "pmtrace.sessions", MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL,
                               &comm);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int token = rank * 10 + 1, got = -1;
    MPI_Sendrecv(&token, 1, MPI_INT, (rank + 1) % size, 0, &got, 1, MPI_INT,
                 (rank + size - 1) % size, 0, comm, MPI_STATUS_IGNORE);
    int sum = 0;
    MPI_Allreduce(&got, &sum, 1, MPI_INT, MPI_SUM, comm);
    if (rank == 0) printf("sessions: got %d, sum %d over %d ranks\n", got, sum, size);
    MPI_Comm_free(&comm);
    MPI_Group_free(&group);
    MPI_Session_finalize(&session);
    return 0;
}
