//! [`Fabric`] on MPI, through rsmpi.

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;

use pmtrace_parallel::fabric::Fabric;

/// The processes of `MPI_COMM_WORLD` (a duplicate of it).
pub struct Mpi {
    comm: SimpleCommunicator,
    size: usize,
    index: usize,
}

impl Mpi {
    pub fn new(world: &SimpleCommunicator) -> Mpi {
        let comm = world.duplicate();
        Mpi {
            size: comm.size() as usize,
            index: comm.rank() as usize,
            comm,
        }
    }

    /// One round of the all-to-all, every count and displacement within
    /// an MPI `int`.
    fn round(&self, send: &[u8], counts: &[Count], recv_counts: &[Count]) -> Vec<u8> {
        let displs = offsets(counts);
        let recv_displs = offsets(recv_counts);
        let total: usize = recv_counts.iter().map(|&c| c as usize).sum();
        // Never an empty buffer: an empty slice's address is 1 for bytes,
        // which is what Open MPI's MPI_IN_PLACE is.
        let mut recv = vec![0u8; total.max(1)];
        let one = [0u8; 1];
        let send = if send.is_empty() { &one[..] } else { send };
        {
            let sp = Partition::new(send, counts, &displs[..]);
            let mut rp = PartitionMut::new(&mut recv[..], recv_counts, &recv_displs[..]);
            mpi::request::scope(|scope| {
                wait(
                    self.comm
                        .immediate_all_to_all_varcount_into(scope, &sp, &mut rp),
                );
            });
        }
        recv.truncate(total);
        recv
    }
}

fn offsets(counts: &[Count]) -> Vec<Count> {
    let mut at = 0;
    counts
        .iter()
        .map(|&c| {
            let a = at;
            at += c;
            a
        })
        .collect()
}

impl Fabric for Mpi {
    fn size(&self) -> usize {
        self.size
    }

    fn index(&self) -> usize {
        self.index
    }

    fn exchange(&self, out: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        assert_eq!(out.len(), self.size, "one buffer per process");
        let lens: Vec<u64> = out.iter().map(|b| b.len() as u64).collect();
        let mut recv_lens = vec![0u64; self.size];
        mpi::request::scope(|scope| {
            wait(
                self.comm
                    .immediate_all_to_all_into(scope, &lens[..], &mut recv_lens[..]),
            );
        });
        // Each round moves at most `limit` bytes between two processes, so
        // that what one process receives in a round fits in an int.
        let limit = (i32::MAX as u64 / self.size as u64).max(1);
        let mut rounds = [lens
            .iter()
            .chain(&recv_lens)
            .map(|&l| l.div_ceil(limit))
            .max()
            .unwrap_or(0)];
        self.max(&mut rounds);
        let mut got: Vec<Vec<u8>> = recv_lens
            .iter()
            .map(|&l| Vec::with_capacity(l as usize))
            .collect();
        for k in 0..rounds[0] {
            let piece = |len: u64| {
                let a = (k * limit).min(len);
                (a, (a + limit).min(len))
            };
            let mut send = Vec::new();
            let counts: Vec<Count> = out
                .iter()
                .map(|b| {
                    let (a, z) = piece(b.len() as u64);
                    send.extend_from_slice(&b[a as usize..z as usize]);
                    (z - a) as Count
                })
                .collect();
            let recv_counts: Vec<Count> = recv_lens
                .iter()
                .map(|&l| {
                    let (a, z) = piece(l);
                    (z - a) as Count
                })
                .collect();
            let recv = self.round(&send, &counts, &recv_counts);
            let mut at = 0;
            for (g, &c) in got.iter_mut().zip(&recv_counts) {
                g.extend_from_slice(&recv[at..at + c as usize]);
                at += c as usize;
            }
        }
        got
    }

    // As signed 64-bit integers: an MPI may compare unsigned ones as
    // signed (MPICH 4.0's MPI_MAX on MPI_UINT64_T does). Sums of counts
    // stay far below 2^63; maxima keep their order with the top bit
    // flipped.
    fn sum(&self, v: &mut [u64]) {
        for part in v.chunks_mut(REDUCE_CHUNK) {
            let mine: Vec<i64> = part.iter().map(|&x| x as i64).collect();
            let mut all = vec![0i64; part.len()];
            mpi::request::scope(|scope| {
                wait(self.comm.immediate_all_reduce_into(
                    scope,
                    &mine[..],
                    &mut all[..],
                    SystemOperation::sum(),
                ));
            });
            for (x, a) in part.iter_mut().zip(all) {
                *x = a as u64;
            }
        }
    }

    fn max(&self, v: &mut [u64]) {
        let flip = |x: u64| (x ^ (1 << 63)) as i64;
        for part in v.chunks_mut(REDUCE_CHUNK) {
            let mine: Vec<i64> = part.iter().map(|&x| flip(x)).collect();
            let mut all = vec![0i64; part.len()];
            mpi::request::scope(|scope| {
                wait(self.comm.immediate_all_reduce_into(
                    scope,
                    &mine[..],
                    &mut all[..],
                    SystemOperation::max(),
                ));
            });
            for (x, a) in part.iter_mut().zip(all) {
                *x = (a as u64) ^ (1 << 63);
            }
        }
    }
}

/// Elements reduced at a time: the copies a reduction makes stay at 16 MiB
/// however long the vector (the weighted path's F has 4 M bins).
const REDUCE_CHUNK: usize = 1 << 20;

/// Waits for `req` without holding the core: a run with more processes
/// than cores (the usual way to run many small blocks on a login node)
/// would otherwise spend its time in processes spinning in MPI while the
/// one with work waits for a core. Spins briefly, then yields, then
/// sleeps a little between tests.
fn wait<'a, D: ?Sized, S: mpi::request::Scope<'a>>(mut req: mpi::request::Request<'a, D, S>) {
    let mut tries = 0u32;
    loop {
        match req.test() {
            Ok(_) => return,
            Err(r) => req = r,
        }
        tries += 1;
        if tries > 2_000 {
            std::thread::sleep(std::time::Duration::from_micros(50));
        } else if tries > 200 {
            std::thread::yield_now();
        }
    }
}
