//! Piggybacking: a hidden header in front of every point-to-point message,
//! carrying the sender's clocks and the message's id. This module is the
//! piggyback's one door: the generated wrappers (as `pb`), the hooks and
//! the lifecycle reach it through the names below. Its parts, each below
//! the next:
//! - `piggyback_lamport`: the mode, the clocks and LLCP's rules;
//! - `piggyback_header`: the header's layout, written and read;
//! - `piggyback_routes`: how a message and its header travel together
//!   (staged copy or struct datatype);
//! - `piggyback_send`, `piggyback_deliver`: blocking sends and receives,
//!   probes, and the delivery of what came, in front or apart
//!   (`large_headers`, through `header_rings` on one node);
//! - `piggyback_replace`: `MPI_Sendrecv_replace`;
//! - `piggyback_slots`: the state a nonblocking or persistent request
//!   keeps until it completes;
//! - `piggyback_ring`: where a small nonblocking send's header and data
//!   wait instead (a thread's ring of areas).

pub use crate::piggyback_deliver::{fix_probe_status, In, Rx};
pub use crate::piggyback_header::{header_len, record_room, Got};
pub use crate::piggyback_lamport::{forget_pending, mode, Mode};
pub use crate::piggyback_send::{isendrecv_blind, isendrecv_quirks, Out, To};
pub use crate::piggyback_slots::{
    before_start, complete, delivers, finish_orphan, in_flight, paired, peek, post_isendrecv_recv,
    post_isendrecv_send, post_recv, post_replace, post_send, posted_recv, release,
};

/// Switches piggybacking on; every rank does the same (agreed at init).
pub fn enable(mode: Mode, rank: usize, size: usize, serial: bool) {
    if mode == Mode::Vector {
        crate::piggyback_header::carry_vector(size);
    }
    crate::piggyback_lamport::enable(mode, rank, size, serial);
}
