"""The traffic of tests/progs/dlmpi.c from Python, through mpi4py: a ring of
blocking sends, a nonblocking exchange with both neighbours, wildcard
receives at rank 0, and collectives. Rank 0 prints the MPI library's
version and the results."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size

token = rank
for _ in range(3):
    if rank % 2 == 0:
        comm.send(token, dest=right, tag=1)
        got = comm.recv(source=left, tag=1)
    else:
        got = comm.recv(source=left, tag=1)
        comm.send(token, dest=right, tag=1)
    token += got

reqs = [comm.irecv(source=left, tag=2), comm.irecv(source=right, tag=3),
        comm.isend(rank, dest=right, tag=2), comm.isend(-rank, dest=left, tag=3)]
got_left, got_right, _, _ = MPI.Request.waitall(reqs)
swapped = comm.sendrecv(rank, dest=right, sendtag=4, source=left, recvtag=4)

sources = 0
if rank == 0:
    for _ in range(size - 1):
        status = MPI.Status()
        v = comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
        assert status.Get_source() == v and status.Get_tag() == 10 + v, (v, status)
        sources += v
else:
    comm.send(rank, dest=0, tag=10 + rank)

mine = token + got_left + got_right + swapped
total = comm.allreduce(mine, op=MPI.SUM)
reduced = comm.reduce(mine, op=MPI.SUM, root=0)
seed = comm.bcast(42 if rank == 0 else None, root=0)
everyone = comm.allgather(seed)
comm.Barrier()

if rank == 0:
    print("traffic:", MPI.Get_library_version().splitlines()[0].strip())
    print(f"traffic: np={size} sum={total} reduced={reduced} sources={sources} "
          f"seed={seed} last={everyone[-1]}")
