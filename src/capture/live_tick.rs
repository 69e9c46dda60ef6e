//! What the writer thread adds to the live file at every tick (layout in
//! `pmtrace_format::live`): the heartbeat and Lamport clock, the table of
//! communicators with this rank's collective counts, and, for each call
//! that has blocked for a while, whom it waits for, resolved from the
//! arguments its thread left in the slot. Only this thread writes those
//! parts, so the application's threads pay for none of it.

use crate::comms::{self, CommInfo, WORLD_GID};
use crate::live::{self, Slot};
use crate::requests::{OpKind, REQUESTS};
use crate::{clock, ffi, piggyback_lamport};
use core::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use pmtrace_format::live::{self as fmt, h, w, LiveKind, Peer, Wait, IN_CALL};

/// A call blocked this long gets its waits resolved.
const RESOLVE_AFTER_NS: u64 = 200_000_000;
/// A call blocked this long gets its call site (`live_site`): a signal to
/// its thread, so not for every passing wait.
const SITE_AFTER_NS: u64 = 1_000_000_000;

/// One tick of the writer thread.
pub fn tick() {
    let now = clock::now();
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let beat = header(h::BEAT).map_or(0, |b| b.load(Relaxed) + 1);
    if let Some(x) = header(h::BEAT_NS) {
        x.store(now, Relaxed);
    }
    if let Some(x) = header(h::BEAT_UNIX_NS) {
        x.store(unix, Relaxed);
    }
    if let Some(x) = header(h::LAMPORT) {
        x.store(piggyback_lamport::clock(), Relaxed);
    }
    write_comms();
    crate::flusher::each_link(|l| {
        let events = l.events.load(Relaxed);
        l.live.word(w::EVENTS).store(events, Relaxed);
        let progress = events + l.dropped.load(Relaxed);
        l.live.word(w::PROGRESS).store(progress, Relaxed);
    });
    for s in live::slots() {
        resolve(s, now);
    }
    if let Some(b) = header(h::BEAT) {
        b.store(beat, Release);
    }
    if beat.is_multiple_of(live::sync_ticks()) {
        live::sync();
    }
}

fn header(at: usize) -> Option<&'static AtomicU64> {
    live::header_u64(at)
}

/// The communicators the table held at the last look, by index, and its
/// change count then: the table is scanned again only once it changed.
static KNOWN: parking_lot::Mutex<(u64, Vec<&'static CommInfo>)> =
    parking_lot::Mutex::new((u64::MAX, Vec::new()));

/// The communicators this rank is in, with its collective count on each.
fn write_comms() {
    let Some(t) = live::comms_table() else { return };
    let mut known = KNOWN.lock();
    let changes = comms::changes();
    if known.0 != changes {
        known.1.clear();
        let list = &mut known.1;
        comms::each(|c| list.push(c));
        list.sort_unstable_by_key(|c| c.index);
        known.0 = changes;
    }
    let rows = &known.1;
    let gen = t[0].load(Relaxed);
    t[0].store(gen + 1, Relaxed);
    core::sync::atomic::fence(Release);
    let n = rows.len().min(fmt::MAX_COMMS);
    for (i, c) in rows.iter().take(n).enumerate() {
        let at = 2 + 3 * i;
        t[at].store(c.gid, Relaxed);
        t[at + 1].store(c.seq.load(Relaxed), Relaxed);
        let size = c.size | if c.inter { 1 << 31 } else { 0 };
        t[at + 2].store(u64::from(c.rank) | u64::from(size) << 32, Relaxed);
    }
    let truncated = u64::from(rows.len() > n);
    t[1].store(n as u64 | truncated << 32, Relaxed);
    t[0].store(gen + 2, Release);
}

/// Notes when a thread is first seen in a call, or out of its last one,
/// and resolves whom a call waits for once it has blocked a while.
///
/// A call stores its word alone; when it began is noted here, as the
/// first tick that saw it. A call is new when the word changed since the
/// last tick, or when the thread wrote (or dropped) a record since: each
/// call ends in one, so the same word with more records is the next call
/// of the same function.
fn resolve(s: &Slot, now: u64) {
    let word = u64::from(s.low(w::WORD).load(Acquire));
    let progress = s.word(w::PROGRESS).load(Relaxed);
    if s.word(w::SEEN_WORD).load(Relaxed) != word
        || s.word(w::SEEN_PROGRESS).load(Relaxed) != progress
    {
        s.word(w::SEEN_WORD).store(word, Relaxed);
        s.word(w::SEEN_PROGRESS).store(progress, Relaxed);
        let at = if word & IN_CALL != 0 { w::T } else { w::OUT_T };
        s.word(at).store(now, Release);
    }
    if word & IN_CALL == 0 {
        return;
    }
    let t0 = s.word(w::T).load(Relaxed);
    if now.saturating_sub(t0) >= SITE_AFTER_NS
        && !(s.word(w::SITE_T).load(Relaxed) == t0 && s.word(w::SITE_WORD).load(Relaxed) == word)
    {
        site(s, t0, word);
    }
    if now.saturating_sub(t0) < RESOLVE_AFTER_NS
        || (s.word(w::DETAIL_T).load(Relaxed) == t0 && s.word(w::DETAIL_WORD).load(Relaxed) == word)
    {
        return;
    }
    let a = s.low(w::A).load(Relaxed);
    let b = s.handle_at::<ffi::MPI_Comm>(w::B);
    let mut waits = Vec::new();
    let mut total = 0u32;
    let mut add = |wt: Option<Wait>| {
        if let Some(wt) = wt {
            total += 1;
            waits.push(wt);
        }
    };
    match LiveKind::of((word >> 16) as u8) {
        LiveKind::Recv => add(p2p(b, a as i32, true)),
        LiveKind::Send => add(p2p(b, a as i32, false)),
        LiveKind::Sendrecv => {
            add(p2p(b, a as i32, false));
            add(p2p(b, s.high(w::A).load(Relaxed) as i32, true));
        }
        LiveKind::Wait | LiveKind::Waitall | LiveKind::Waitany | LiveKind::Waitsome => {
            let n = match LiveKind::of((word >> 16) as u8) {
                LiveKind::Wait => 1,
                _ => (a as usize).min(fmt::REQS),
            };
            for i in 0..n {
                add(request(s.handle_at::<ffi::MPI_Request>(w::REQS + i)));
            }
        }
        LiveKind::Coll => {
            if let Some(c) = comms::lookup_by_handle_key(b) {
                add(Some(Wait::Coll {
                    gid: c.gid,
                    seq: c.seq.load(Relaxed),
                }));
            }
        }
        LiveKind::Other => return,
    }
    // The call may have ended while its arguments were read.
    if u64::from(s.low(w::WORD).load(Acquire)) != word {
        return;
    }
    let kept = waits.len().min(fmt::DETAIL_ENTRIES);
    for (i, wt) in waits.iter().take(kept).enumerate() {
        let [x, y] = wt.encode();
        s.word(w::DETAIL + 2 * i).store(x, Relaxed);
        s.word(w::DETAIL + 2 * i + 1).store(y, Relaxed);
    }
    s.word(w::DETAIL_N)
        .store(kept as u64 | u64::from(total) << 32, Relaxed);
    s.word(w::DETAIL_WORD).store(word, Relaxed);
    s.word(w::DETAIL_T).store(t0, Release);
}

/// Finds where the call `word` that began at `t0` came from, once: the
/// site is marked as this call's even when none was found.
fn site(s: &Slot, t0: u64, word: u64) {
    let frames = crate::live_site::site_of(s.word(w::TID).load(Relaxed) as i32).unwrap_or_default();
    // Whole lines, with room for a NUL after them.
    let mut text = Vec::with_capacity(w::SITE_TEXT_LEN);
    for f in &frames {
        let line = f.line();
        if text.len() + line.len() >= w::SITE_TEXT_LEN {
            break;
        }
        text.extend_from_slice(line.as_bytes());
    }
    text.resize(w::SITE_TEXT_LEN, 0);
    // The call may have ended while its thread was asked.
    if u64::from(s.low(w::WORD).load(Acquire)) != word {
        return;
    }
    for (i, c) in text.chunks(8).enumerate() {
        s.word(w::SITE_TEXT + i)
            .store(u64::from_le_bytes(c.try_into().unwrap()), Relaxed);
    }
    s.word(w::SITE_WORD).store(word, Relaxed);
    s.word(w::SITE_T).store(t0, Release);
}

/// A message from (`from`) or to `peer`, a rank of the communicator whose
/// handle key is `comm`; none for `MPI_PROC_NULL` or an unknown
/// communicator.
fn p2p(comm: u64, peer: i32, from: bool) -> Option<Wait> {
    let c = comms::lookup_by_handle_key(comm)?;
    let peer = peer_of(c, peer)?;
    let gid = c.gid;
    Some(if from {
        Wait::From { gid, peer }
    } else {
        Wait::To { gid, peer }
    })
}

fn peer_of(c: &CommInfo, r: i32) -> Option<Peer> {
    let k = ffi::consts();
    if r == k.any_source {
        return Some(Peer::Any);
    }
    if r < 0 || r == k.proc_null {
        return None;
    }
    if c.gid == WORLD_GID && !c.inter {
        return Some(Peer::World(r as u32));
    }
    // MPI_COMM_SELF's only rank is this one.
    if c.gid & 0xffff_ffff == 1 && !c.inter && c.size == 1 {
        return Some(Peer::World((c.gid >> 32) as u32));
    }
    match c.world_ranks.get().and_then(|t| t.get(r as usize)) {
        Some(&wr) if wr >= 0 => Some(Peer::World(wr as u32)),
        _ => Some(Peer::Comm(r as u32)),
    }
}

/// The communicator whose `CommInfo::index` is `index`, among those the
/// table held at the last `write_comms` (one freed since is not found).
fn by_index(index: u32) -> Option<&'static CommInfo> {
    let known = KNOWN.lock();
    let list = &known.1;
    list.binary_search_by_key(&index, |c| c.index)
        .ok()
        .map(|i| list[i])
}

/// The collective number whose low 32 bits are `low`: the latest one
/// below `now`, the communicator's count of collectives begun.
fn seq_near(now: u64, low: u32) -> u64 {
    let s = (now & !0xffff_ffff) | u64::from(low);
    if s >= now && s >= 1 << 32 {
        s - (1 << 32)
    } else {
        s
    }
}

/// What completing the request with handle key `key` waits on.
fn request(key: u64) -> Option<Wait> {
    let op = REQUESTS.get(key, 0)?;
    let c = by_index(op.comm.checked_sub(1)?)?;
    match op.kind {
        OpKind::Send { dst } => Some(Wait::To {
            gid: c.gid,
            peer: peer_of(c, dst)?,
        }),
        OpKind::Recv { src, .. } | OpKind::RecvBlind { src, .. } => Some(Wait::From {
            gid: c.gid,
            peer: peer_of(c, src)?,
        }),
        OpKind::Coll { seq } | OpKind::Idup { seq, .. } => Some(Wait::Coll {
            gid: c.gid,
            seq: seq_near(c.seq.load(Relaxed), seq),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::seq_near;

    #[test]
    fn a_collective_number_is_rebuilt_from_its_low_bits() {
        assert_eq!(seq_near(10, 3), 3);
        assert_eq!(seq_near(10, 9), 9);
        // the count passed 2^32 since it began
        assert_eq!(seq_near((1 << 32) + 5, 0xffff_fff0), 0xffff_fff0);
        assert_eq!(seq_near((1 << 32) + 5, 4), (1 << 32) + 4);
        assert_eq!(seq_near((3 << 32) + 7, 7), (2 << 32) + 7);
    }
}
