! Phases from Fortran (issue 19): pmtrace_phase_begin('name') and
! pmtrace_phase_end(), linked with libpmtrace. Two phases, one nested,
! around a barrier and an allreduce; rank 0 prints the sum.
program fphase
  use mpi
  implicit none
  integer :: ierr, rank, size, x, total
  external :: pmtrace_phase_begin, pmtrace_phase_end
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  call pmtrace_phase_begin('solve')
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call pmtrace_phase_begin('reduce step    ')
  x = rank + 1
  call MPI_Allreduce(x, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call pmtrace_phase_end()
  call pmtrace_phase_end()
  if (rank == 0) print '(a,i0)', 'fphase: sum=', total
  call MPI_Finalize(ierr)
end program fphase
