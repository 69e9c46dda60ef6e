//! Clock offsets to rank 0, measured inside `MPI_Init` and `MPI_Finalize`
//! (where the application has no message pending, so the tool may talk
//! over `MPI_COMM_WORLD`).
//!
//! Ranks on one host read one clock, so only one rank per host measures:
//! its leader, the lowest rank there. (Under `PMTRACE_CLOCK_SIM` every rank
//! has its own clock and is its own leader.) Leaders form a binary tree in
//! rank order; each parent ping-pongs each child `reps` times and keeps the
//! sample with the smallest round trip (offset = parent's send time +
//! RTT/2 − child's reading; error bound RTT/2). Offsets add down the tree,
//! so a leader's offset to rank 0 is the sum along its path and its error
//! bound the sum of the RTT/2s. The cost is 2·reps round trips per tree
//! level, O(log hosts) in all, instead of reps round trips per host
//! in sequence; then two allgathers of a few words per rank.
//!
//! Also measured: the smallest one-way latency (RTT/2) between two ranks
//! of one host, and between two hosts, for the controlled logical clock's μ.

use crate::clock;
use crate::ffi::{self, MPI_Comm};
use core::ffi::c_void;
use pmtrace_format::meta::OffsetSample;

const TAG: i32 = 0x7074;

fn world() -> MPI_Comm {
    // SAFETY: reads an initialised constant of mpi-sys's shim.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

fn send_u64s(comm: MPI_Comm, v: &[u64], to: i32) {
    // SAFETY: a tool-internal send of a local array.
    unsafe {
        ffi::PMPI_Send(
            v.as_ptr() as *mut c_void,
            v.len() as i32,
            ffi::consts().uint64,
            to,
            TAG,
            comm,
        );
    }
}

fn recv_u64s(comm: MPI_Comm, v: &mut [u64], from: i32) {
    let mut status = core::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
    // SAFETY: a tool-internal receive into a local array.
    unsafe {
        ffi::PMPI_Recv(
            v.as_mut_ptr() as *mut c_void,
            v.len() as i32,
            ffi::consts().uint64,
            from,
            TAG,
            comm,
            status.as_mut_ptr(),
        );
    }
}

fn allgather(comm: MPI_Comm, mine: &[u64], size: usize) -> Vec<u64> {
    let mut all = vec![0u64; mine.len() * size];
    let c = ffi::consts();
    // SAFETY: a tool-internal allgather of equal-sized local arrays.
    unsafe {
        ffi::PMPI_Allgather(
            mine.as_ptr() as *mut c_void,
            mine.len() as i32,
            c.uint64,
            all.as_mut_ptr() as *mut c_void,
            mine.len() as i32,
            c.uint64,
            comm,
        );
    }
    all
}

/// The best of `reps` ping-pongs with `peer`, seen from the pinging side:
/// (offset peer→me, RTT, the peer's reading at that sample).
fn ping(comm: MPI_Comm, peer: i32, reps: u32) -> (i64, u64, u64) {
    let mut best = (0i64, u64::MAX, 0u64);
    for _ in 0..reps {
        let t1 = clock::now();
        send_u64s(comm, &[1], peer);
        let mut theirs = [0u64];
        recv_u64s(comm, &mut theirs, peer);
        let t4 = clock::now();
        let rtt = t4.saturating_sub(t1);
        if rtt < best.1 {
            let mid = t1 + rtt / 2;
            best = (mid as i64 - theirs[0] as i64, rtt, theirs[0]);
        }
    }
    send_u64s(comm, &[0], peer);
    best
}

/// The other side of `ping`: answers with this rank's reading until told
/// to stop.
fn pong(comm: MPI_Comm, peer: i32) {
    loop {
        let mut go = [0u64];
        recv_u64s(comm, &mut go, peer);
        if go[0] == 0 {
            return;
        }
        send_u64s(comm, &[clock::now()], peer);
    }
}

/// A 64-bit id of this process's host (FNV-1a of the hostname).
fn host_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `measure` over a private duplicate of the world: at finalize the
/// application may have left receives posted (with `MPI_ANY_TAG`) that would
/// take the tool's messages on `MPI_COMM_WORLD`. (At init it cannot, and a
/// communicator created then would cost every later call in Open MPI.)
pub fn measure_private(
    rank: usize,
    size: usize,
    reps: u32,
    hostname: &str,
    own_clock: bool,
) -> OffsetSample {
    let mut dup = core::mem::MaybeUninit::<MPI_Comm>::uninit();
    // SAFETY: a collective duplicate of the world, freed below.
    let ok = unsafe { ffi::PMPI_Comm_dup(world(), dup.as_mut_ptr()) } == 0;
    if !ok {
        return measure(world(), rank, size, reps, hostname, own_clock);
    }
    // SAFETY: initialised by the successful dup.
    let mut dup = unsafe { dup.assume_init() };
    let out = measure(dup, rank, size, reps, hostname, own_clock);
    // SAFETY: our own communicator, no operation pending on it.
    unsafe { ffi::PMPI_Comm_free(&mut dup) };
    out
}

/// Every rank's offset to rank 0; collective over `comm` (the world, or a
/// duplicate of it). `own_clock`: this rank's clock is its own
/// (simulated), not its host's.
pub fn measure(
    comm: MPI_Comm,
    rank: usize,
    size: usize,
    reps: u32,
    hostname: &str,
    own_clock: bool,
) -> OffsetSample {
    let reps = reps.max(1);
    let host = host_id(hostname);
    // Clock group: the host, or the rank itself when clocks are simulated.
    let group = if own_clock {
        u64::MAX - rank as u64
    } else {
        host
    };
    let ids = allgather(comm, &[host, group], size);
    let (hosts, groups): (Vec<u64>, Vec<u64>) = ids.chunks(2).map(|c| (c[0], c[1])).unzip();
    let leader_of = |r: usize| groups.iter().position(|&g| g == groups[r]).unwrap_or(r);
    let leaders: Vec<usize> = (0..size).filter(|&r| leader_of(r) == r).collect();

    // (offset to rank 0, error bound, local reading) of this leader.
    let mut mine = (0i64, 0u64, clock::now());
    // Smallest RTT/2 seen on this rank's tree edges, intra- and inter-host.
    let (mut intra, mut inter) = (u64::MAX, u64::MAX);
    if let Some(k) = leaders.iter().position(|&l| l == rank) {
        if k > 0 {
            let parent = leaders[(k - 1) / 2] as i32;
            pong(comm, parent);
            let mut got = [0u64; 3];
            recv_u64s(comm, &mut got, parent);
            mine = (got[0] as i64, got[1], got[2]);
        }
        for c in [2 * k + 1, 2 * k + 2] {
            let Some(&child) = leaders.get(c) else {
                continue;
            };
            let (theta, rtt, at) = ping(comm, child as i32, reps);
            let offset = theta + mine.0;
            send_u64s(comm, &[offset as u64, rtt / 2 + mine.1, at], child as i32);
            if hosts[child] == hosts[rank] {
                intra = intra.min(rtt / 2);
            } else {
                inter = inter.min(rtt / 2);
            }
        }
    }
    // Two ranks of one host that share a clock never meet in the tree:
    // rank 0 and the next rank on its host give the intra-host latency.
    if !own_clock {
        if let Some(peer) = (1..size).find(|&r| hosts[r] == hosts[0]) {
            if rank == 0 {
                intra = intra.min(ping(comm, peer as i32, reps).1 / 2);
            } else if rank == peer {
                pong(comm, 0);
            }
        }
    }
    let all = allgather(comm, &[mine.0 as u64, mine.1, mine.2, intra, inter], size);
    let row = |r: usize| &all[5 * r..5 * r + 5];
    let lead = row(leader_of(rank));
    let min_of = |i: usize| {
        (0..size)
            .map(|r| row(r)[i])
            .min()
            .filter(|&v| v != u64::MAX)
    };
    OffsetSample {
        offset_ns: lead[0] as i64,
        error_ns: lead[1],
        // A member reads the same clock as its leader, at the same moment.
        local_ns: lead[2],
        measured_by: leader_of(rank) as u32,
        hosts: leaders
            .iter()
            .map(|&l| hosts[l])
            .collect::<std::collections::BTreeSet<_>>()
            .len() as u32,
        latency_intra_ns: min_of(3),
        latency_inter_ns: min_of(4),
        reps,
    }
}
