"""mpi4py under pmtrace (Debian's python3-mpi4py, which uses the C API).

Pickled messages (mpi4py receives them through MPI_Mprobe and MPI_Mrecv),
buffer messages with MPI_ANY_SOURCE, nonblocking ones completed by
Waitall, and collectives. Only rank 0 prints; the last line is
`mpi4py_ring: ok np=N`. Needs np >= 2.
"""
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, np = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % np, (rank - 1) % np

# Pickled token around the ring, three rounds.
token = {"round": 0, "path": []}
for rnd in range(3):
    if rank == 0:
        token = {"round": rnd, "path": [0]}
        comm.send(token, dest=right, tag=rnd)
        token = comm.recv(source=left, tag=rnd)
    else:
        token = comm.recv(source=left, tag=rnd)
        token["path"].append(rank)
        comm.send(token, dest=right, tag=rnd)

# Buffers: everyone sends 16 bytes to rank 0, which takes them by wildcard.
if rank == 0:
    got = []
    status = MPI.Status()
    for _ in range(np - 1):
        buf = bytearray(32)
        comm.Recv([buf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=7, status=status)
        got.append((status.Get_source(), status.Get_count(MPI.BYTE), bytes(buf[:2])))
    got.sort()
else:
    comm.Send([bytes([rank]) * 16, MPI.BYTE], dest=0, tag=7)

# Nonblocking exchange with both neighbours.
out = bytearray([rank]) * 8
inl, inr = bytearray(8), bytearray(8)
reqs = [
    comm.Irecv([inl, MPI.BYTE], source=left, tag=9),
    comm.Irecv([inr, MPI.BYTE], source=right, tag=9),
    comm.Isend([out, MPI.BYTE], dest=right, tag=9),
    comm.Isend([out, MPI.BYTE], dest=left, tag=9),
]
MPI.Request.Waitall(reqs)
ok = inl[0] == left and inr[0] == right

total = comm.allreduce(rank)
ok = comm.allreduce(ok, op=MPI.LAND)
names = comm.gather("r%d" % rank, root=0)
comm.Barrier()
if rank == 0:
    print("path", token["path"])
    print("wildcard", got)
    print("sum", total, "names", names)
    print("mpi4py_ring: %s np=%d" % ("ok" if ok else "FAIL", np))
