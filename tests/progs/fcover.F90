! Fortran coverage for pmtrace, with `use mpi` (default) or, built with
! -DF08, `use mpi_f08`. Every MPI call is counted (fexpect.f90). At np >= 2:
!  1. a ring, three rounds: MPI_Irecv from the left, MPI_Isend to the right,
!     MPI_Waitall with MPI_STATUSES_IGNORE;
!  2. rank 0 receives one message from every other rank with MPI_ANY_SOURCE
!     and checks the status's source against the data;
!  3. rank 0 sends every other element of six (MPI_Type_vector) to rank 1,
!     which receives three contiguous integers with MPI_STATUS_IGNORE;
!  4. MPI_Allreduce with MPI_IN_PLACE, MPI_Bcast, MPI_Barrier;
!  5. the failed checks summed to rank 0, which prints one line.
! tests/progs/fmix.c takes ranks 2 and up of the same protocol in C, for a
! job of mixed languages (`mpirun -np 2 fcover : -np 2 fmix`).
#ifdef F08
#define USE_MPI use mpi_f08
#define REQUEST type(MPI_Request)
#define DATATYPE type(MPI_Datatype)
#define STATUS type(MPI_Status) :: st
#define SOURCE_OF(s) s%MPI_SOURCE
#define NAME 'fcover08'
#else
#define USE_MPI use mpi
#define REQUEST integer
#define DATATYPE integer
#define STATUS integer :: st(MPI_STATUS_SIZE)
#define SOURCE_OF(s) s(MPI_SOURCE)
#define NAME 'fcover'
#endif

#include "fexpect.f90"

program fcover
  USE_MPI
  use fexpect
  implicit none
  integer :: ierr, rank, np, left, right, k, i, errs, total, x, value
  integer :: sbuf(4), rbuf(4), v(2), a(6), b(3)
  REQUEST :: req(2)
  DATATYPE :: vec
  STATUS

  errs = 0
  call cnt('MPI_Init'); call MPI_Init(ierr)
  call cnt('MPI_Comm_rank'); call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call cnt('MPI_Comm_size'); call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  right = mod(rank + 1, np)
  left = mod(rank - 1 + np, np)

  ! 1. The ring.
  do k = 1, 3
    sbuf = rank * 10 + k
    rbuf = -1
    call cnt('MPI_Irecv'); call MPI_Irecv(rbuf, 4, MPI_INTEGER, left, 1, MPI_COMM_WORLD, req(1), ierr)
    call cnt('MPI_Isend'); call MPI_Isend(sbuf, 4, MPI_INTEGER, right, 1, MPI_COMM_WORLD, req(2), ierr)
    call cnt('MPI_Waitall'); call MPI_Waitall(2, req, MPI_STATUSES_IGNORE, ierr)
    if (any(rbuf /= left * 10 + k)) errs = errs + 1
  end do

  ! 2. Wildcard receives at rank 0.
  total = 0
  if (rank == 0) then
    do i = 1, np - 1
      call cnt('MPI_Recv'); call MPI_Recv(v, 2, MPI_INTEGER, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, st, ierr)
      if (v(1) /= SOURCE_OF(st) .or. v(2) /= v(1) * v(1)) errs = errs + 1
      total = total + v(2)
    end do
  else
    v = [rank, rank * rank]
    call cnt('MPI_Send'); call MPI_Send(v, 2, MPI_INTEGER, 0, 2, MPI_COMM_WORLD, ierr)
  end if

  ! 3. A derived datatype, from rank 0 to rank 1.
  if (rank <= 1) then
    call cnt('MPI_Type_vector'); call MPI_Type_vector(3, 1, 2, MPI_INTEGER, vec, ierr)
    call cnt('MPI_Type_commit'); call MPI_Type_commit(vec, ierr)
    if (rank == 0) then
      a = [(7 * i, i = 1, 6)]
      call cnt('MPI_Send'); call MPI_Send(a, 1, vec, 1, 3, MPI_COMM_WORLD, ierr)
    else
      b = 0
      call cnt('MPI_Recv'); call MPI_Recv(b, 3, MPI_INTEGER, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
      if (any(b /= [7, 21, 35])) errs = errs + 1
    end if
    call cnt('MPI_Type_free'); call MPI_Type_free(vec, ierr)
  end if

  ! 4. Collectives.
  x = rank + 1
  call cnt('MPI_Allreduce'); call MPI_Allreduce(MPI_IN_PLACE, x, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (x /= np * (np + 1) / 2) errs = errs + 1
  value = 0
  if (rank == 0) value = total
  call cnt('MPI_Bcast'); call MPI_Bcast(value, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (value /= (np - 1) * np * (2 * np - 1) / 6) errs = errs + 1
  call cnt('MPI_Barrier'); call MPI_Barrier(MPI_COMM_WORLD, ierr)

  ! 5. The verdict.
  call cnt('MPI_Reduce'); call MPI_Reduce(errs, total, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (total == 0) then
      print '(a,a,i0,a,i0)', NAME, ': ok np=', np, ' squares=', value
    else
      print '(a,a,i0,a)', NAME, ': FAIL ', total, ' checks'
    end if
  end if
  call expect_write(rank)
  call MPI_Finalize(ierr)
  if (rank == 0 .and. total /= 0) stop 1
end program fcover
