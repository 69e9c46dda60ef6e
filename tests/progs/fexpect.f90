! Call counting for the Fortran test programs, as examples/expect.h does
! for C: `call cnt('MPI_Send')` before each MPI call, and
! `call expect_write(rank)` right before the final MPI_Finalize, which adds
! MPI_Finalize itself and, if EXPECT_COUNTS_DIR is set, writes
! $EXPECT_COUNTS_DIR/rank-<rank>.counts ("MPI_Send 12" lines). Counts use
! the C names, which is what a tracer records.
module fexpect
  implicit none
  private
  public :: cnt, expect_write
  integer, parameter :: maxf = 64
  character(len=40) :: names(maxf)
  integer(8) :: counts(maxf) = 0
  integer :: n = 0
contains
  subroutine cnt(name)
    character(len=*), intent(in) :: name
    integer :: i
    do i = 1, n
      if (names(i) == name) then
        counts(i) = counts(i) + 1
        return
      end if
    end do
    n = n + 1
    names(n) = name
    counts(n) = 1
  end subroutine cnt

  subroutine expect_write(rank)
    integer, intent(in) :: rank
    character(len=4096) :: dir
    character(len=4200) :: path
    integer :: length, status, i, u
    call cnt('MPI_Finalize')
    call get_environment_variable('EXPECT_COUNTS_DIR', dir, length, status)
    if (status /= 0 .or. length == 0) return
    write (path, '(a,a,i0,a)') dir(1:length), '/rank-', rank, '.counts'
    open (newunit=u, file=trim(path), status='replace', action='write', iostat=status)
    if (status /= 0) return
    do i = 1, n
      write (u, '(a,1x,i0)') trim(names(i)), counts(i)
    end do
    close (u)
  end subroutine expect_write
end module fexpect
