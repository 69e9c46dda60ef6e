//! Clock offsets to rank 0, measured inside `MPI_Init` and `MPI_Finalize`
//! (where the application has no message pending, so the tool may talk
//! over `MPI_COMM_WORLD`).
//!
//! Ranks on one host read one clock, so only one rank per clock group
//! measures: its leader, the lowest rank of the group. A group is a host,
//! or under `PMTRACE_CLOCK_SIM` a single rank (every rank has its own
//! clock), so a host holds one leader, or several under simulation.
//!
//! - The first leader of each host (its head) joins a binary tree of heads
//!   in rank order; each parent ping-pongs each child `reps` times and keeps
//!   the sample with the smallest round trip (offset = parent's send time +
//!   RTT/2 − child's reading; error bound RTT/2). Offsets add down the
//!   tree, so a head's offset to rank 0 is the sum along its path and its
//!   error bound the sum of the RTT/2s.
//! - Then each head measures the other leaders of its host one after
//!   another, one hop each: pairs on one host share its cores, and pairs
//!   measured at once there would stretch each other's round trips.
//! - Every rank that waits (for its turn, or for the others to finish)
//!   sleeps between tests instead of spinning in MPI: with more ranks than
//!   cores, spinning waiters stretched the measuring pair's smallest round
//!   trip from about 1 µs to 5–36 µs at np=8 on two cores, and the offsets'
//!   errors with it.
//!
//! Cost: 2·reps round trips per tree level, O(log hosts), plus reps round
//! trips per extra leader on a host (none without simulation), plus a
//! wake-up (tens of µs) per rank that waited; then a barrier and an
//! allgather of a few words per rank.
//!
//! Also measured: the smallest one-way latency (RTT/2) between two ranks
//! of one host, and between two hosts, for the controlled logical clock's μ.

use crate::clock;
use crate::ffi::{self, MPI_Comm, MPI_Request};
use core::ffi::c_void;
use pmtrace_format::meta::OffsetSample;

const TAG: i32 = 0x7074;

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
/// to stop. The first ping is awaited asleep (the turn may be far off).
fn pong(comm: MPI_Comm, peer: i32) {
    let mut go = [0u64];
    let mut req = core::mem::MaybeUninit::<MPI_Request>::uninit();
    // SAFETY: a tool-internal receive into a local that outlives the wait.
    let posted = unsafe {
        ffi::PMPI_Irecv(
            go.as_mut_ptr() as *mut c_void,
            1,
            ffi::consts().uint64,
            peer,
            TAG,
            comm,
            req.as_mut_ptr(),
        )
    } == 0;
    if posted {
        // SAFETY: initialised by the successful Irecv.
        wait_asleep(unsafe { req.assume_init_mut() });
    } else {
        recv_u64s(comm, &mut go, peer);
    }
    while go[0] != 0 {
        send_u64s(comm, &[clock::now()], peer);
        recv_u64s(comm, &mut go, peer);
    }
}

/// Completes `req`, sleeping between tests: a waiting rank leaves the
/// cores to the pair that is measuring.
fn wait_asleep(req: &mut MPI_Request) {
    let nap = libc::timespec {
        tv_sec: 0,
        tv_nsec: 20_000,
    };
    loop {
        let mut flag = 0;
        let mut status = core::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
        // SAFETY: a tool-internal request; MPI frees it when it completes.
        let rc = unsafe { ffi::PMPI_Test(req, &mut flag, status.as_mut_ptr()) };
        if rc != 0 || flag != 0 {
            return;
        }
        // SAFETY: a valid timespec; an interrupted sleep just tests sooner.
        unsafe { libc::nanosleep(&nap, core::ptr::null_mut()) };
    }
}

/// A barrier over `comm` that waits asleep (see `wait_asleep`).
fn barrier_asleep(comm: MPI_Comm) {
    let mut req = core::mem::MaybeUninit::<MPI_Request>::uninit();
    // SAFETY: a tool-internal nonblocking barrier, completed below.
    if unsafe { ffi::PMPI_Ibarrier(comm, req.as_mut_ptr()) } == 0 {
        // SAFETY: initialised by the successful Ibarrier.
        wait_asleep(unsafe { req.assume_init_mut() });
    }
}

/// A 64-bit id of this process's host (FNV-1a of the hostname).
fn host_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Gives every rank of a clock group its leader's TSC scale
/// ([`clock::adopt_tsc_scale`]); collective over `comm`, at init only
/// (before any other thread reads the timer).
pub fn share_tsc_scale(comm: MPI_Comm, rank: usize, size: usize, leader: usize) {
    let all = allgather(comm, &clock::tsc_scale().unwrap_or([0; 4]), size);
    if leader != rank && leader < size {
        let s = &all[4 * leader..4 * leader + 4];
        clock::adopt_tsc_scale([s[0], s[1], s[2], s[3]], 100_000);
    }
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
    let ok = unsafe { ffi::PMPI_Comm_dup(ffi::world(), dup.as_mut_ptr()) } == 0;
    if !ok {
        return measure(ffi::world(), rank, size, reps, hostname, own_clock);
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
    // The lowest rank of each clock group leads it; the first leader of
    // each host heads the host (one pass each, for 10k ranks).
    let first = |keys: &[u64], of: &mut dyn Iterator<Item = usize>| {
        let mut seen = std::collections::HashMap::new();
        let mut by_rank = vec![usize::MAX; size];
        for r in of {
            by_rank[r] = *seen.entry(keys[r]).or_insert(r);
        }
        by_rank
    };
    let leader = first(&groups, &mut (0..size));
    let leader_of = |r: usize| leader[r];
    let leaders: Vec<usize> = (0..size).filter(|&r| leader_of(r) == r).collect();
    let head = first(&hosts, &mut leaders.iter().copied());
    let head_of = |r: usize| head[leader_of(r)];
    let heads: Vec<usize> = leaders
        .iter()
        .copied()
        .filter(|&l| head_of(l) == l)
        .collect();

    // (offset to rank 0, error bound, local reading) of this leader.
    let mut mine = (0i64, 0u64, clock::now());
    // Smallest RTT/2 seen on this rank's edges, intra- and inter-host.
    let (mut intra, mut inter) = (u64::MAX, u64::MAX);
    let mut measure_child = |child: usize, mine: (i64, u64, u64)| {
        let (theta, rtt, at) = ping(comm, child as i32, reps);
        let offset = theta + mine.0;
        send_u64s(comm, &[offset as u64, rtt / 2 + mine.1, at], child as i32);
        if hosts[child] == hosts[rank] {
            intra = intra.min(rtt / 2);
        } else {
            inter = inter.min(rtt / 2);
        }
    };
    if leader_of(rank) == rank {
        let parent = match heads.iter().position(|&h| h == rank) {
            Some(0) => None,
            Some(k) => Some(heads[(k - 1) / 2]),
            None => Some(head_of(rank)),
        };
        if let Some(parent) = parent {
            pong(comm, parent as i32);
            let mut got = [0u64; 3];
            recv_u64s(comm, &mut got, parent as i32);
            mine = (got[0] as i64, got[1], got[2]);
        }
        if let Some(k) = heads.iter().position(|&h| h == rank) {
            for c in [2 * k + 1, 2 * k + 2] {
                if let Some(&child) = heads.get(c) {
                    measure_child(child, mine);
                }
            }
            for &l in leaders.iter().filter(|&&l| l != rank && head_of(l) == rank) {
                measure_child(l, mine);
            }
        }
    }
    // Two ranks of one host that share a clock never meet above: rank 0
    // and the next rank on its host give the intra-host latency.
    if !own_clock {
        if let Some(peer) = (1..size).find(|&r| hosts[r] == hosts[0]) {
            if rank == 0 {
                intra = intra.min(ping(comm, peer as i32, reps).1 / 2);
            } else if rank == peer {
                pong(comm, 0);
            }
        }
    }
    barrier_asleep(comm);
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
