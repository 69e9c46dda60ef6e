//! Message matching: which sends and receives exist, and which pairs MPI's
//! FIFO rule makes.

use pmtrace_fixture::{self as fixture, TraceBuilder};
use pmtrace_format::meta::MpiConstants;
use pmtrace_format::record::{CommDef, Payload};
use pmtrace_format::Status;
use pmtrace_matching::Messages;
use pmtrace_trace::Trace;

use crate::util::Scratch;

pub const ANY: i32 = -1; // Open MPI's MPI_ANY_SOURCE, as the fixture declares

fn open(tb: &TraceBuilder, name: &str) -> (Trace, Messages) {
    let scratch = Scratch::new(name);
    tb.write(scratch.path()).unwrap();
    let trace = Trace::open(scratch.path()).unwrap();
    let messages = Messages::build(&trace);
    (trace, messages)
}

fn two_ranks() -> TraceBuilder {
    let mut tb = TraceBuilder::new(2);
    for r in 0..2 {
        tb.rank(r).define_world_and_self(0);
    }
    tb
}

#[test]
fn brief_scenario_matches_every_message_and_finds_the_reversed_one() {
    let (trace, m) = open(&fixture::two_rank_example(), "brief");
    assert_eq!(trace.to_world(0, 2, 0), Some(1));
    assert_eq!(trace.to_world(1, 2, 1), Some(0));
    assert_eq!(
        (m.sends.len(), m.recvs.len(), m.matched.len(), m.unmatched()),
        (4, 4, 4, 0)
    );
    assert_eq!(m.unresolved(), 0);
    assert_eq!(m.pending_receives, 0);
    let v = m.violations(0);
    assert_eq!((v.reversed, v.clock_condition), (1, 1));
    // Each Isend went to the receive posted in the same position.
    let pairs: Vec<(u64, u64, u64)> = m
        .matched
        .iter()
        .map(|p| {
            (
                m.sends[p.send].bytes,
                m.recvs[p.recv].bytes,
                m.recvs[p.recv].posted_at,
            )
        })
        .collect();
    assert_eq!(
        pairs,
        vec![(8, 8, 90), (16, 16, 95), (24, 24, 98), (4, 4, 250)]
    );
    let split_msg = &m.recvs[m.matched[3].recv];
    assert_eq!(
        (split_msg.src, split_msg.dst, split_msg.comm, split_msg.tag),
        (Some(0), 1, 2, 1)
    );
    assert_eq!(split_msg.time, 290);
}

#[test]
fn extra_send_without_receive_is_unmatched() {
    let mut tb = fixture::two_rank_example();
    tb.rank(0)
        .thread(0)
        .call("MPI_Isend", 400, 401, fixture::send(1, 5, 0, 8));
    let (_, m) = open(&tb, "unmatched");
    assert_eq!(
        (m.sends.len(), m.recvs.len(), m.matched.len(), m.unmatched()),
        (5, 4, 4, 1)
    );
    assert_eq!(m.unmatched_sends.len(), 1);
    assert_eq!(m.sends[m.unmatched_sends[0]].time, 400);
}

#[test]
fn wildcard_receives_completed_in_reverse_order_match_in_posting_order() {
    let mut tb = two_ranks();
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 50, 55, fixture::send(1, 0, 0, 8))
        .call("MPI_Send", 60, 65, fixture::send(1, 0, 0, 16));
    let r1 = tb.rank(1).thread(0);
    let a = r1.next_op();
    r1.call("MPI_Irecv", 10, 11, fixture::irecv(ANY, ANY, 0, 100));
    r1.call("MPI_Irecv", 20, 21, fixture::irecv(ANY, ANY, 0, 100));
    r1.call(
        "MPI_Wait",
        100,
        110,
        fixture::complete(&[(a + 1, fixture::status(0, 0, 16))]),
    );
    r1.call(
        "MPI_Wait",
        200,
        210,
        fixture::complete(&[(a, fixture::status(0, 0, 8))]),
    );
    let (_, m) = open(&tb, "reverse");
    assert_eq!(m.matched.len(), 2);
    for p in &m.matched {
        assert_eq!(
            m.sends[p.send].bytes, m.recvs[p.recv].bytes,
            "first send ↔ first posted receive"
        );
    }
    let first = &m.recvs[m.matched[0].recv];
    assert_eq!((first.posted_at, first.time), (10, 210));
}

#[test]
fn persistent_requests_make_one_message_per_start() {
    let mut tb = two_ranks();
    let r0 = tb.rank(0).thread(0);
    let init = r0.next_op();
    r0.call("MPI_Send_init", 10, 11, fixture::send(1, 3, 0, 32));
    for t in [100u64, 200] {
        let inst = r0.next_op();
        r0.call("MPI_Start", t, t + 1, fixture::start(&[init]));
        r0.call(
            "MPI_Wait",
            t + 10,
            t + 20,
            fixture::complete(&[(inst, fixture::no_status())]),
        );
    }
    r0.call(
        "MPI_Request_free",
        300,
        301,
        Payload::OpRef {
            op: Some(init),
            cancelled: false,
        },
    );
    let r1 = tb.rank(1).thread(0);
    let init = r1.next_op();
    r1.call("MPI_Recv_init", 10, 11, fixture::irecv(0, 3, 0, 32));
    for t in [90u64, 190] {
        let inst = r1.next_op();
        r1.call("MPI_Start", t, t + 1, fixture::start(&[init]));
        r1.call(
            "MPI_Wait",
            t + 30,
            t + 40,
            fixture::complete(&[(inst, Status::default())]),
        );
    }
    let (_, m) = open(&tb, "persistent");
    assert_eq!((m.sends.len(), m.recvs.len(), m.matched.len()), (2, 2, 2));
    let times: Vec<(u64, u64)> = m
        .matched
        .iter()
        .map(|p| (m.sends[p.send].time, m.recvs[p.recv].time))
        .collect();
    assert_eq!(times, vec![(100, 130), (200, 230)]);
    assert!(m
        .recvs
        .iter()
        .all(|r| r.bytes == 32 && r.src == Some(0) && r.tag == 3));
}

#[test]
fn matched_probe_receives_take_source_and_tag_from_the_probe() {
    let mut tb = two_ranks();
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 10, 20, fixture::send(1, 7, 0, 8))
        .call("MPI_Send", 30, 40, fixture::send(1, 8, 0, 12));
    let r1 = tb.rank(1).thread(0);
    let msg = r1.next_op();
    r1.call(
        "MPI_Mprobe",
        50,
        60,
        Payload::Probe {
            src: ANY,
            tag: ANY,
            comm: 0,
            status: fixture::status(0, 7, 8),
            op: None,
        },
    );
    r1.call(
        "MPI_Mrecv",
        70,
        80,
        Payload::Mrecv {
            msg: Some(msg),
            posted: 8,
            status: Some(Status::default()),
            op: None,
        },
    );
    let msg = r1.next_op();
    r1.call(
        "MPI_Improbe",
        90,
        91,
        Payload::Probe {
            src: 0,
            tag: ANY,
            comm: 0,
            status: fixture::status(0, 8, 12),
            op: None,
        },
    );
    let op = r1.next_op();
    r1.call(
        "MPI_Imrecv",
        92,
        93,
        Payload::Mrecv {
            msg: Some(msg),
            posted: 12,
            status: None,
            op: None,
        },
    );
    r1.call(
        "MPI_Wait",
        100,
        110,
        fixture::complete(&[(op, Status::default())]),
    );
    let (_, m) = open(&tb, "mprobe");
    assert_eq!((m.recvs.len(), m.matched.len(), m.unmatched()), (2, 2, 0));
    let got: Vec<(Option<u32>, i32, u64, u64, u64)> = m
        .recvs
        .iter()
        .map(|r| (r.src, r.tag, r.bytes, r.posted_at, r.time))
        .collect();
    assert_eq!(
        got,
        vec![(Some(0), 7, 8, 50, 80), (Some(0), 8, 12, 90, 110)]
    );
}

#[test]
fn proc_null_cancelled_and_failed_calls_are_not_messages() {
    // A library whose MPI_PROC_NULL is -99: nothing may assume Open MPI's -2.
    let c = MpiConstants {
        proc_null: -99,
        ..MpiConstants::OPEN_MPI
    };
    let mut tb = TraceBuilder::new(2).constants(c);
    for r in 0..2 {
        tb.rank(r).define_world_and_self(0);
    }
    let r0 = tb.rank(0).thread(0);
    r0.call("MPI_Send", 10, 11, fixture::send(-99, 0, 0, 8));
    r0.call(
        "MPI_Recv",
        12,
        13,
        fixture::recv(-99, 0, 0, 8, fixture::status(-99, ANY, 0)),
    );
    let cancelled = r0.next_op();
    r0.call("MPI_Isend", 20, 21, fixture::send(1, 0, 0, 8));
    r0.call(
        "MPI_Cancel",
        22,
        23,
        Payload::OpRef {
            op: Some(cancelled),
            cancelled: false,
        },
    );
    r0.call(
        "MPI_Wait",
        24,
        25,
        fixture::complete(&[(cancelled, fixture::cancelled_status())]),
    );
    r0.call_rc("MPI_Send", 30, 31, 13, fixture::send(1, 0, 0, 8));
    let r1 = tb.rank(1).thread(0);
    let op = r1.next_op();
    r1.call("MPI_Irecv", 10, 11, fixture::irecv(0, 0, 0, 8));
    r1.call(
        "MPI_Cancel",
        12,
        13,
        Payload::OpRef {
            op: Some(op),
            cancelled: false,
        },
    );
    r1.call(
        "MPI_Wait",
        14,
        15,
        fixture::complete(&[(op, fixture::cancelled_status())]),
    );
    let (_, m) = open(&tb, "skips");
    assert_eq!(
        (m.sends.len(), m.recvs.len(), m.pending_receives),
        (0, 0, 0)
    );
}

#[test]
fn a_send_freed_after_its_cancellation_succeeded_is_not_sent() {
    // mpi4py's testProbeCancel under MPICH: a send cancelled, the status
    // asked, the request freed; `cancelled` says whether that succeeded.
    let mut tb = two_ranks();
    let r0 = tb.rank(0).thread(0);
    for (t, dest, tag, bytes, cancelled) in [(10, 0, 123, 0, true), (20, 1, 5, 8, false)] {
        let op = r0.next_op();
        r0.call("MPI_Isend", t, t + 1, fixture::send(dest, tag, 0, bytes));
        for (name, t, cancelled) in [
            ("MPI_Cancel", t + 2, false),
            ("MPI_Request_free", t + 4, cancelled),
        ] {
            let payload = Payload::OpRef {
                op: Some(op),
                cancelled,
            };
            r0.call(name, t, t + 1, payload);
        }
    }
    // The second, freed while its cancellation was still unknown, was sent.
    tb.rank(1).thread(0).call(
        "MPI_Recv",
        5,
        50,
        fixture::recv(0, 5, 0, 8, Status::default()),
    );
    let (_, m) = open(&tb, "freed-cancelled");
    assert_eq!((m.sends.len(), m.matched.len()), (1, 1));
    assert_eq!(m.unmatched(), 0);
}

#[test]
fn send_whose_request_was_freed_still_counts() {
    let mut tb = two_ranks();
    let r0 = tb.rank(0).thread(0);
    let op = r0.next_op();
    r0.call("MPI_Isend", 10, 11, fixture::send(1, 0, 0, 8));
    r0.call(
        "MPI_Request_free",
        12,
        13,
        Payload::OpRef {
            op: Some(op),
            cancelled: false,
        },
    );
    tb.rank(1).thread(0).call(
        "MPI_Recv",
        5,
        50,
        fixture::recv(0, 0, 0, 8, Status::default()),
    );
    let (_, m) = open(&tb, "freed");
    assert_eq!((m.sends.len(), m.matched.len()), (1, 1));
}

#[test]
fn receive_never_completed_is_pending_not_received() {
    let mut tb = two_ranks();
    tb.rank(1)
        .thread(0)
        .call("MPI_Irecv", 5, 6, fixture::irecv(0, 0, 0, 8));
    let (_, m) = open(&tb, "pending");
    assert_eq!((m.recvs.len(), m.pending_receives), (0, 1));
}

#[test]
fn receive_from_proc_null_is_not_pending_even_if_never_completed() {
    let mut tb = two_ranks();
    let proc_null = pmtrace_format::meta::MpiConstants::OPEN_MPI.proc_null;
    tb.rank(1)
        .thread(0)
        .call("MPI_Irecv", 5, 6, fixture::irecv(proc_null, 0, 0, 8));
    let (_, m) = open(&tb, "procnull-pending");
    assert_eq!((m.recvs.len(), m.pending_receives), (0, 0));
}

#[test]
fn completion_on_another_thread_uses_the_posting_threads_values() {
    let mut tb = two_ranks();
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 10, 20, fixture::send(1, 4, 0, 8));
    let rb = tb.rank(1);
    let op = rb.thread(0).next_op();
    rb.thread(0)
        .call("MPI_Irecv", 5, 6, fixture::irecv(0, 4, 0, 8));
    rb.thread(1).call(
        "MPI_Wait",
        30,
        40,
        fixture::complete(&[(op, Status::default())]),
    );
    let (_, m) = open(&tb, "threads");
    assert_eq!(m.matched.len(), 1);
    let r = &m.recvs[0];
    assert_eq!(
        (
            r.src,
            r.tag,
            r.bytes,
            r.time,
            r.completion.thread,
            r.post.thread
        ),
        (Some(0), 4, 8, 40, 1, 0)
    );
}

#[test]
fn intercommunicator_peers_map_through_the_remote_group() {
    // Groups {0, 2} and {1, 3}; global id 9; each group's rank 0 writes its list.
    let mut tb = TraceBuilder::new(4);
    for r in 0..4 {
        tb.rank(r).define_world_and_self(0);
        let (group, local) = if r % 2 == 0 {
            (vec![0, 2], r / 2)
        } else {
            (vec![1, 3], r / 2)
        };
        let members = if local == 0 { group } else { vec![] };
        let def = CommDef {
            index: 2,
            global_id: 9,
            inter: true,
            size: 2,
            rank: local,
            remote_size: 2,
            members,
        };
        tb.rank(r).thread(0).def_comm(1, def);
    }
    // World rank 0 sends to remote rank 1 (world 3); world 3 receives from remote rank 0 (world 0).
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 10, 20, fixture::send(1, 0, 2, 8));
    tb.rank(3).thread(0).call(
        "MPI_Recv",
        5,
        30,
        fixture::recv(ANY, 0, 2, 8, fixture::status(0, 0, 8)),
    );
    let (_, m) = open(&tb, "inter");
    assert_eq!(m.matched.len(), 1);
    assert_eq!((m.sends[0].src, m.sends[0].dst), (0, Some(3)));
    assert_eq!((m.recvs[0].src, m.recvs[0].dst), (Some(0), 3));
}

#[test]
fn sendrecv_is_one_send_and_one_receive() {
    let mut tb = two_ranks();
    for (me, peer) in [(0u32, 1i32), (1, 0)] {
        tb.rank(me).thread(0).call(
            "MPI_Sendrecv",
            10,
            50,
            Payload::Sendrecv {
                peer,
                stag: 0,
                bytes: 8,
                src: peer,
                rtag: 0,
                posted: 8,
                comm: 0,
                status: Status::default(),
            },
        );
    }
    let (_, m) = open(&tb, "sendrecv");
    assert_eq!((m.sends.len(), m.recvs.len(), m.matched.len()), (2, 2, 2));
}

#[test]
fn clock_condition_counts_messages_faster_than_the_minimum_latency() {
    let mut tb = two_ranks();
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 100, 110, fixture::send(1, 0, 0, 8));
    tb.rank(1).thread(0).call(
        "MPI_Recv",
        90,
        105,
        fixture::recv(0, 0, 0, 8, Status::default()),
    );
    let (_, m) = open(&tb, "mu");
    assert_eq!(m.violations(0).reversed, 0);
    assert_eq!(m.violations(0).clock_condition, 0);
    assert_eq!(
        m.violations(10).clock_condition,
        1,
        "received 5 ns after the send, μ = 10 ns"
    );
    assert_eq!(m.violations(10).reversed, 0);
}

#[test]
fn peers_of_a_communicator_without_member_list_are_unresolved() {
    let mut tb = two_ranks();
    for r in 0..2 {
        let def = CommDef {
            index: 2,
            global_id: 44,
            inter: false,
            size: 2,
            rank: r,
            remote_size: 0,
            members: vec![],
        };
        tb.rank(r).thread(0).def_comm(1, def);
    }
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 10, 20, fixture::send(1, 0, 2, 8));
    let (_, m) = open(&tb, "unresolved");
    assert_eq!((m.sends.len(), m.unresolved(), m.unmatched()), (1, 1, 1));
}

#[test]
fn isendrecv_sends_at_its_call_and_receives_at_its_completion() {
    let mut tb = two_ranks();
    for (me, peer) in [(0u32, 1i32), (1, 0)] {
        let r = tb.rank(me).thread(0);
        let op = r.next_op();
        r.call(
            "MPI_Isendrecv",
            10,
            12,
            Payload::Isendrecv {
                peer,
                stag: 4,
                bytes: 8,
                src: ANY,
                rtag: 4,
                posted: 16,
                comm: 0,
                op: Some(op),
            },
        );
        r.call(
            "MPI_Wait",
            40,
            50,
            fixture::complete(&[(op, fixture::status(peer, 4, 8))]),
        );
    }
    let (_, m) = open(&tb, "isendrecv");
    assert_eq!((m.sends.len(), m.recvs.len(), m.matched.len()), (2, 2, 2));
    for p in &m.matched {
        let (s, r) = (&m.sends[p.send], &m.recvs[p.recv]);
        assert_eq!((s.time, r.posted_at, r.time, r.bytes), (10, 10, 50, 8));
        assert!(r.wildcard);
        assert_eq!(r.src, Some(s.src));
    }
}

#[test]
fn partitioned_channels_send_once_per_start_without_ids() {
    let mut tb = two_ranks();
    let r0 = tb.rank(0).thread(0);
    let init = r0.next_op();
    let psend = Payload::Send {
        peer: 1,
        tag: 7,
        comm: 0,
        bytes: 4 * 64,
        op: None,
    };
    r0.call("MPI_Psend_init", 10, 11, psend);
    for t in [100u64, 200, 300] {
        let inst = r0.next_op();
        r0.call("MPI_Start", t, t + 1, fixture::start(&[init]));
        r0.call(
            "MPI_Wait",
            t + 10,
            t + 20,
            fixture::complete(&[(inst, fixture::no_status())]),
        );
    }
    let r1 = tb.rank(1).thread(0);
    let init = r1.next_op();
    r1.call("MPI_Precv_init", 10, 11, fixture::irecv(0, 7, 0, 256));
    for t in [90u64, 190, 290] {
        let inst = r1.next_op();
        r1.call("MPI_Start", t, t + 1, fixture::start(&[init]));
        r1.call(
            "MPI_Wait",
            t + 30,
            t + 40,
            fixture::complete(&[(inst, Status::default())]),
        );
    }
    let (_trace, m) = open(&tb, "partitioned");
    assert_eq!((m.sends.len(), m.recvs.len(), m.matched.len()), (3, 3, 3));
    let times: Vec<(u64, u64)> = m
        .matched
        .iter()
        .map(|p| (m.sends[p.send].time, m.recvs[p.recv].time))
        .collect();
    assert_eq!(times, vec![(100, 130), (200, 230), (300, 330)]);
    // Partitioned sends carry no header: no message id is spent on them.
    assert_eq!(m.send_ids, vec![0, 0, 0]);
}

/// Rank 0 sends two messages to rank 1 on one tag, posted at 100 and 110
/// by threads `senders`; rank 1's one thread receives the second first,
/// as the piggybacked ids say.
fn crossed(senders: [u32; 2]) -> TraceBuilder {
    use pmtrace_format::record::{msg_id, Pb};
    let mut tb = two_ranks();
    for r in 0..2 {
        tb.rank(r).header_mut().clocks = "lamport".into();
    }
    let mut n = [0u64; 2];
    let mut ids = Vec::new();
    for (i, &t) in senders.iter().enumerate() {
        n[t as usize] += 1;
        ids.push(msg_id(t, n[t as usize]));
        let at = 100 + 10 * i as u64;
        tb.rank(0)
            .thread(t)
            .call("MPI_Send", at, at + 5, fixture::send(1, 7, 0, 8));
    }
    for (i, &id) in ids.iter().rev().enumerate() {
        let status = Status {
            pb: Some(Pb {
                id,
                lc: 1,
                sent: 100,
                vc: None,
            }),
            ..fixture::status(0, 7, 8)
        };
        let at = 200 + 10 * i as u64;
        tb.rank(1)
            .thread(0)
            .call("MPI_Recv", at, at + 5, fixture::recv(0, 7, 0, 8, status));
    }
    tb
}

/// MPI orders the messages of one thread, not of two (MPI-4.1 §3.5): two
/// threads' messages crossing on a channel are not FIFO disagreements, one
/// thread's are.
#[test]
fn messages_of_two_threads_on_one_channel_are_not_held_to_fifo() {
    let (_, two) = open(&crossed([0, 1]), "crossed-two");
    assert_eq!(two.matched.len(), 2);
    let c = two.id_checks(0..two.recvs.len());
    assert_eq!(
        (c.matched_by_id, c.fifo_disagreements, c.fifo_unordered),
        (2, 0, 2)
    );
    assert!(!two.fifo_applies(0) && !two.fifo_applies(1));
    let (_, one) = open(&crossed([0, 0]), "crossed-one");
    let c = one.id_checks(0..one.recvs.len());
    assert_eq!(
        (c.matched_by_id, c.fifo_disagreements, c.fifo_unordered),
        (2, 2, 0)
    );
    assert!(one.fifo_applies(0) && one.fifo_applies(1));
}
