//! The reader: files, chunks, records, and every way a trace can be broken.

use pmtrace_fixture::{self as fixture, TraceBuilder};
use pmtrace_format::pending::{PENDING_AT, PENDING_LEN};
use pmtrace_format::record::{op_id, Call, CommDef, Completion, Payload, Record};
use pmtrace_format::{encode_file_header, rank_file_name, Status, CHUNK_HEADER_LEN};
use pmtrace_trace::model;
use pmtrace_trace::ReadError;
use pmtrace_trace::Trace;

use crate::util::{chunks_of, sealed_payloads, Scratch};

/// The records read back, against the records written.
fn assert_records<'a>(got: impl IntoIterator<Item = model::Record<'a>>, expected: &[Record]) {
    let got: Vec<model::Record> = got.into_iter().collect();
    assert_eq!(got.len(), expected.len(), "record count");
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!(model::same(*g, e), "record {i}: read {g:?}, written {e:?}");
    }
}

/// Two ranks exchanging a few messages: a small but complete trace.
fn small_trace() -> TraceBuilder {
    let mut tb = TraceBuilder::new(2);
    for r in 0..2 {
        tb.rank(r).define_world_and_self(0);
        tb.rank(r).thread(0).call("MPI_Init", 10, 20, Payload::None);
    }
    let t0 = tb.rank(0).thread(0);
    for k in 0..20u64 {
        t0.call(
            "MPI_Send",
            100 + 100 * k,
            150 + 100 * k,
            fixture::send(1, 0, 0, 8),
        );
    }
    t0.call("MPI_Finalize", 5000, 5100, Payload::None);
    let t1 = tb.rank(1).thread(0);
    for k in 0..20u64 {
        t1.call(
            "MPI_Recv",
            90 + 100 * k,
            180 + 100 * k,
            fixture::recv(0, 0, 0, 8, fixture::status(0, 0, 8)),
        );
    }
    t1.call("MPI_Finalize", 5000, 5100, Payload::None);
    tb
}

fn call(func: &str, t_start: u64, t_end: u64, payload: Payload) -> Record {
    let func = fixture::FUNCTIONS
        .iter()
        .position(|(n, ..)| *n == func)
        .unwrap() as u32;
    Record::Call(Call {
        func,
        t_start,
        t_end,
        rc: 0,
        payload,
    })
}

#[test]
fn every_record_kind_round_trips_with_operation_ids_counted() {
    let split = CommDef {
        index: 2,
        global_id: 99,
        inter: false,
        size: 1,
        rank: 0,
        remote_size: 0,
        members: vec![0],
    };
    let mut tb = TraceBuilder::new(1);
    let rb = tb.rank(0);
    rb.define_world_and_self(0);
    let th = rb.thread(0);
    th.def_thread(1, 777)
        .call("MPI_Init", 10, 20, Payload::None)
        .call("MPI_Isend", 30, 35, fixture::send(0, 1, 0, 8)) // op 1
        .call("MPI_Irecv", 40, 45, fixture::irecv(-1, 1, 0, 8)) // op 2
        .call("MPI_Send_init", 50, 51, fixture::send(0, 2, 0, 4)) // op 3
        .call("MPI_Recv_init", 52, 53, fixture::irecv(0, 2, 0, 4)) // op 4
        .call(
            "MPI_Startall",
            60,
            62,
            fixture::start(&[op_id(0, 3), op_id(0, 4)]),
        ) // ops 5, 6
        .call(
            "MPI_Waitall",
            70,
            80,
            fixture::complete(&[
                (op_id(0, 1), fixture::no_status()),
                (
                    op_id(0, 2),
                    Status {
                        source: Some(0),
                        ..Status::default()
                    },
                ),
                (op_id(0, 5), fixture::no_status()),
                (op_id(0, 6), Status::default()),
            ]),
        )
        .call(
            "MPI_Improbe",
            90,
            91,
            Payload::Probe {
                src: -1,
                tag: -1,
                comm: 0,
                status: fixture::status(0, 3, 16),
                op: None,
            },
        ) // op 7
        .call(
            "MPI_Imrecv",
            92,
            93,
            Payload::Mrecv {
                msg: Some(op_id(0, 7)),
                posted: 16,
                status: None,
                op: None,
            },
        ) // op 8
        .call(
            "MPI_Iprobe",
            94,
            95,
            Payload::Probe {
                src: 0,
                tag: 9,
                comm: 0,
                status: fixture::empty_status(),
                op: None,
            },
        )
        .call(
            "MPI_Cancel",
            96,
            97,
            Payload::OpRef {
                op: Some(op_id(0, 8)),
                cancelled: false,
            },
        )
        .call(
            "MPI_Request_free",
            98,
            99,
            Payload::OpRef {
                op: Some(op_id(0, 3)),
                cancelled: false,
            },
        )
        .call("MPI_Barrier", 100, 110, fixture::coll(0, None, 0, 0, 0))
        .call("MPI_Allreduce", 111, 120, fixture::coll(0, None, 8, 8, 1))
        .call("MPI_Ibarrier", 121, 122, fixture::coll(1, None, 0, 0, 0)) // op 9
        .call(
            "MPI_Comm_split",
            130,
            140,
            Payload::CommNew {
                parent: Some(0),
                comm: Some(2),
            },
        )
        .def_comm(140, split.clone())
        .call(
            "MPI_Sendrecv",
            150,
            160,
            Payload::Sendrecv {
                peer: 0,
                stag: 5,
                bytes: 4,
                src: 0,
                rtag: 5,
                posted: 4,
                comm: 2,
                status: fixture::status(0, 5, 4),
            },
        )
        .call("MPI_Comm_free", 170, 171, Payload::CommFree { comm: 2 })
        .buffer_wait(175, 180)
        .call_rc("MPI_Send", 181, 182, 5, fixture::send(3, 0, 0, 8))
        .call("MPI_Finalize", 200, 210, Payload::None);
    let scratch = Scratch::new("kinds");
    tb.write(scratch.path()).unwrap();

    let trace = Trace::open(scratch.path()).unwrap();
    let rank = &trace.ranks[0];
    assert!(rank.complete());
    assert_eq!(rank.threads.len(), 1);
    assert_eq!(rank.threads[0].tid, Some(777));
    let ops = |n| Some(op_id(0, n));
    let expected = vec![
        Record::DefComm {
            t: 0,
            def: fixture::world_def(0, 1),
        },
        Record::DefComm {
            t: 0,
            def: fixture::self_def(0),
        },
        Record::DefThread { t: 1, tid: 777 },
        call("MPI_Init", 10, 20, Payload::None),
        call(
            "MPI_Isend",
            30,
            35,
            Payload::Send {
                peer: 0,
                tag: 1,
                comm: 0,
                bytes: 8,
                op: ops(1),
            },
        ),
        call(
            "MPI_Irecv",
            40,
            45,
            Payload::Recv {
                src: -1,
                tag: 1,
                comm: 0,
                posted: 8,
                status: None,
                op: ops(2),
            },
        ),
        call(
            "MPI_Send_init",
            50,
            51,
            Payload::Send {
                peer: 0,
                tag: 2,
                comm: 0,
                bytes: 4,
                op: ops(3),
            },
        ),
        call(
            "MPI_Recv_init",
            52,
            53,
            Payload::Recv {
                src: 0,
                tag: 2,
                comm: 0,
                posted: 4,
                status: None,
                op: ops(4),
            },
        ),
        call(
            "MPI_Startall",
            60,
            62,
            Payload::Start {
                started: vec![(ops(3), op_id(0, 5)), (ops(4), op_id(0, 6))],
            },
        ),
        call(
            "MPI_Waitall",
            70,
            80,
            Payload::Complete {
                done: vec![
                    Completion {
                        op: ops(1),
                        status: fixture::no_status(),
                    },
                    Completion {
                        op: ops(2),
                        status: Status {
                            source: Some(0),
                            ..Status::default()
                        },
                    },
                    Completion {
                        op: ops(5),
                        status: fixture::no_status(),
                    },
                    Completion {
                        op: ops(6),
                        status: Status::default(),
                    },
                ],
            },
        ),
        call(
            "MPI_Improbe",
            90,
            91,
            Payload::Probe {
                src: -1,
                tag: -1,
                comm: 0,
                status: fixture::status(0, 3, 16),
                op: ops(7),
            },
        ),
        call(
            "MPI_Imrecv",
            92,
            93,
            Payload::Mrecv {
                msg: ops(7),
                posted: 16,
                status: None,
                op: ops(8),
            },
        ),
        call(
            "MPI_Iprobe",
            94,
            95,
            Payload::Probe {
                src: 0,
                tag: 9,
                comm: 0,
                status: Status {
                    empty: true,
                    ..fixture::status(0, 9, 0)
                },
                op: None,
            },
        ),
        call(
            "MPI_Cancel",
            96,
            97,
            Payload::OpRef {
                op: ops(8),
                cancelled: false,
            },
        ),
        call(
            "MPI_Request_free",
            98,
            99,
            Payload::OpRef {
                op: ops(3),
                cancelled: false,
            },
        ),
        call("MPI_Barrier", 100, 110, fixture::coll(0, None, 0, 0, 0)),
        call("MPI_Allreduce", 111, 120, fixture::coll(0, None, 8, 8, 1)),
        call(
            "MPI_Ibarrier",
            121,
            122,
            Payload::Coll {
                comm: 1,
                root: None,
                sent: 0,
                recvd: 0,
                seq: 0,
                op: ops(9),
            },
        ),
        call(
            "MPI_Comm_split",
            130,
            140,
            Payload::CommNew {
                parent: Some(0),
                comm: Some(2),
            },
        ),
        Record::DefComm {
            t: 140,
            def: split.clone(),
        },
        call(
            "MPI_Sendrecv",
            150,
            160,
            Payload::Sendrecv {
                peer: 0,
                stag: 5,
                bytes: 4,
                src: 0,
                rtag: 5,
                posted: 4,
                comm: 2,
                status: fixture::status(0, 5, 4),
            },
        ),
        call("MPI_Comm_free", 170, 171, Payload::CommFree { comm: 2 }),
        Record::BufferWait {
            t_start: 175,
            t_end: 180,
        },
        {
            let mut r = call("MPI_Send", 181, 182, fixture::send(3, 0, 0, 8));
            let Record::Call(c) = &mut r else {
                unreachable!()
            };
            c.rc = 5;
            r
        },
        call("MPI_Finalize", 200, 210, Payload::None),
    ];
    assert_records(&rank.threads[0].records, &expected);
    assert_eq!(rank.events(), 20);
    assert_eq!(rank.comm_at(2, 150).unwrap(), &split);
    assert_eq!(trace.to_world(0, 2, 0), Some(0));
}

#[test]
fn list_records_continue_across_chunk_boundaries() {
    // Batches of 2 items force Continuation records; 300 waits of 5 items
    // fill many one-page chunks, so some chunks start with a continuation.
    let mut tb = TraceBuilder::new(1).list_batch(2);
    tb.rank(0).define_world_and_self(0);
    let th = tb.rank(0).thread(0);
    let mut t = 10;
    for _ in 0..300 {
        let first = th.next_op();
        for _ in 0..5 {
            th.call("MPI_Irecv", t, t + 1, fixture::irecv(0, 0, 0, 8));
            t += 2;
        }
        let items: Vec<_> = (0..5)
            .map(|k| (first + k, fixture::status(0, 0, 8)))
            .collect();
        th.call("MPI_Waitall", t, t + 5, fixture::complete(&items));
        t += 10;
    }
    let scratch = Scratch::new("continuations");
    tb.write(scratch.path()).unwrap();
    let file = std::fs::read(scratch.join(&rank_file_name(0))).unwrap();
    let continued_chunks = chunks_of(&file)
        .iter()
        .filter(|(at, h)| h.used > 0 && file[at + h.records_offset() as usize] == 2)
        .count();
    assert!(
        continued_chunks > 0,
        "some chunk starts with a continuation record"
    );

    let trace = Trace::open(scratch.path()).unwrap();
    let records = &trace.ranks[0].threads[0].records;
    let waits: Vec<Vec<Completion>> = records
        .iter()
        .filter_map(|r| match r {
            model::Record::Call(model::Call {
                payload: model::Payload::Complete { done },
                ..
            }) => Some(done.iter().collect()),
            _ => None,
        })
        .collect();
    assert_eq!(waits.len(), 300);
    assert!(waits.iter().all(|d| d.len() == 5));
    // The last wait completes the last five irecvs: ids 1496..=1500.
    let last_ids: Vec<u64> = waits[299].iter().map(|c| c.op.unwrap()).collect();
    assert_eq!(
        last_ids,
        (1496..=1500).map(|n| op_id(0, n)).collect::<Vec<_>>()
    );
}

#[test]
fn threads_are_decoded_separately_and_chunks_sorted_by_seq() {
    let mut tb = TraceBuilder::new(1);
    tb.rank(0).define_world_and_self(0);
    for th in 0..3 {
        let tw = tb.rank(0).thread(th);
        for k in 0..700u64 {
            tw.call(
                "MPI_Isend",
                10 + 10 * k,
                15 + 10 * k,
                fixture::send(0, th as i32, 0, 8),
            );
        }
    }
    let scratch = Scratch::new("threads");
    tb.write(scratch.path()).unwrap();
    let trace = Trace::open(scratch.path()).unwrap();
    let rank = &trace.ranks[0];
    assert!(rank.chunks > 6, "several chunks per thread");
    assert_eq!(
        rank.threads.iter().map(|t| t.index).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    for th in &rank.threads {
        let sends: Vec<_> = th
            .records
            .iter()
            .filter_map(|r| match r {
                model::Record::Call(model::Call {
                    t_start,
                    payload: model::Payload::Send { op, .. },
                    ..
                }) => Some((t_start, op.unwrap())),
                _ => None,
            })
            .collect();
        assert_eq!(sends.len(), 700);
        assert_eq!(sends[699], (10 + 10 * 699, op_id(th.index, 700)));
    }
}

#[test]
fn rank_that_never_finalized_is_read_as_far_as_it_got() {
    let mut tb = small_trace();
    tb.rank(1).unfinished();
    let scratch = Scratch::new("unfinished");
    tb.write(scratch.path()).unwrap();
    let trace = Trace::open(scratch.path()).unwrap();
    assert_eq!(trace.incomplete_ranks(), vec![1]);
    assert!(trace.ranks[1].trailer.is_none());
    assert_eq!(
        trace.ranks[1].events(),
        22,
        "the open chunk is scanned to its first zero byte"
    );
}

/// A receive left raw in its chunk's pending slot (the thread stopped
/// before encoding it) is read where its thread's records end, in an open
/// chunk or one sealed by another thread, and ignored anywhere else.
#[test]
fn pending_receive_is_read_only_where_its_records_end() {
    for finalized in [false, true] {
        let mut tb = TraceBuilder::new(2);
        for r in 0..2 {
            tb.rank(r).define_world_and_self(0);
            tb.rank(r).thread(0).call("MPI_Init", 10, 20, Payload::None);
        }
        tb.rank(0)
            .thread(0)
            .call("MPI_Send", 100, 150, fixture::send(1, 5, 0, 8));
        tb.rank(1)
            .thread(0)
            .call(
                "MPI_Recv",
                90,
                200,
                fixture::recv(0, 5, 0, 8, fixture::status(0, 5, 8)),
            )
            .pending_recv("MPI_Recv", 300, 420, (-1, 5, 0, 16), (0, 5, 8));
        if !finalized {
            tb.rank(1).unfinished();
        }
        let scratch = Scratch::new(&format!("pending-{finalized}"));
        tb.write(scratch.path()).unwrap();
        let trace = Trace::open(scratch.path()).unwrap();
        let records = &trace.ranks[1].threads[0].records;
        assert_eq!(trace.ranks[1].events(), 3, "finalized: {finalized}");
        assert_records(
            records.iter().skip(records.len() - 1),
            &[call(
                "MPI_Recv",
                300,
                420,
                fixture::recv(-1, 5, 0, 16, fixture::status(0, 5, 8)),
            )],
        );

        // The same slot naming an earlier position: stale, ignored.
        let path = scratch.join(&rank_file_name(1));
        let mut file = std::fs::read(&path).unwrap();
        let (at, _) = chunks_of(&file)
            .into_iter()
            .find(|(_, h)| h.thread == 0 && h.seq == 0)
            .unwrap();
        let field = at + CHUNK_HEADER_LEN + PENDING_AT;
        let pos = u64::from_le_bytes(file[field..field + 8].try_into().unwrap());
        assert!(pos > 1);
        file[field..field + 8].copy_from_slice(&(pos - 1).to_le_bytes());
        std::fs::write(&path, &file).unwrap();
        let trace = Trace::open(scratch.path()).unwrap();
        assert_eq!(trace.ranks[1].events(), 2, "finalized: {finalized}");
    }
}

#[test]
fn special_values_come_from_the_header() {
    let mut c = pmtrace_format::meta::MpiConstants::OPEN_MPI;
    c.any_source = -77;
    let mut tb = TraceBuilder::new(1).constants(c);
    tb.rank(0).define_world_and_self(0);
    let scratch = Scratch::new("constants");
    tb.write(scratch.path()).unwrap();
    assert_eq!(
        Trace::open(scratch.path()).unwrap().constants().any_source,
        -77
    );
}

fn open_err(dir: &std::path::Path) -> String {
    let err = Trace::open(dir).unwrap_err();
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    msg
}

#[test]
fn missing_directory_is_one_clear_line() {
    let scratch = Scratch::new("nodir");
    let msg = open_err(&scratch.join("absent"));
    assert!(
        msg.starts_with("cannot read ") && msg.contains("absent") && msg.contains("No such file"),
        "{msg}"
    );
}

#[test]
fn directory_without_rank_files_is_an_error() {
    let scratch = Scratch::new("empty");
    std::fs::write(scratch.join("rank-1.pmt"), b"not canonical").unwrap();
    assert!(open_err(scratch.path()).starts_with("no pmtrace rank files"));
}

#[test]
fn missing_rank_names_the_missing_file() {
    let scratch = Scratch::new("missing");
    small_trace().write(scratch.path()).unwrap();
    std::fs::remove_file(scratch.join("rank-00001.pmt")).unwrap();
    let msg = open_err(scratch.path());
    assert!(
        msg.starts_with("incomplete trace: rank-00001.pmt is missing from"),
        "{msg}"
    );
    assert!(msg.ends_with("(world size 2)"), "{msg}");
}

#[test]
fn checksum_mismatch_names_file_and_chunk_offset() {
    let scratch = Scratch::new("crc");
    small_trace().write(scratch.path()).unwrap();
    let path = scratch.join("rank-00001.pmt");
    let mut file = std::fs::read(&path).unwrap();
    let first = sealed_payloads(&file)[0].clone();
    file[first.start + 3] ^= 0x04;
    std::fs::write(&path, &file).unwrap();
    assert_eq!(
        open_err(scratch.path()),
        format!(
            "corrupt trace: rank-00001.pmt: chunk checksum mismatch at offset {}",
            first.start - CHUNK_HEADER_LEN - PENDING_LEN
        )
    );
}

#[test]
fn truncated_file_is_an_error_unless_cut_at_a_chunk_boundary() {
    let scratch = Scratch::new("truncated");
    small_trace().write(scratch.path()).unwrap();
    let path = scratch.join("rank-00000.pmt");
    let full = std::fs::read(&path).unwrap();
    let boundaries: Vec<usize> = chunks_of(&full).iter().map(|(at, _)| *at).collect();
    for len in (0..full.len()).step_by(97) {
        std::fs::write(&path, &full[..len]).unwrap();
        match Trace::open(scratch.path()) {
            Ok(trace) => {
                // Cut between chunks: indistinguishable from a run that died.
                assert!(boundaries.contains(&len), "cut at {len} must be an error");
                assert_eq!(trace.incomplete_ranks(), vec![0]);
            }
            Err(e) => {
                assert!(
                    !boundaries.contains(&len),
                    "cut at chunk boundary {len}: {e}"
                );
                assert!(
                    matches!(e, ReadError::Truncated { .. }),
                    "cut at {len}: {e}"
                );
                assert!(
                    e.to_string()
                        .starts_with("truncated trace: rank-00000.pmt: "),
                    "{e}"
                );
            }
        }
    }
}

#[test]
fn bit_flips_anywhere_never_panic_and_flips_in_sealed_payloads_are_caught() {
    let scratch = Scratch::new("flips");
    small_trace().write(scratch.path()).unwrap();
    let path = scratch.join("rank-00001.pmt");
    let clean = std::fs::read(&path).unwrap();
    let (header_end, _) = {
        let json_len = u32::from_le_bytes(clean[12..16].try_into().unwrap()) as usize;
        (20 + json_len, ())
    };
    let payloads = sealed_payloads(&clean);
    let (mut ok, mut err) = (0, 0);
    for pos in (0..clean.len()).step_by(7) {
        let mut file = clean.clone();
        file[pos] ^= 1 << (pos % 8);
        std::fs::write(&path, &file).unwrap();
        match Trace::open(scratch.path()) {
            Ok(_) => {
                ok += 1;
                assert!(
                    pos >= header_end,
                    "flip in the header at {pos} must be caught"
                );
                assert!(
                    !payloads.iter().any(|r| r.contains(&pos)),
                    "flip in a sealed payload at {pos} must be caught"
                );
            }
            Err(e) => {
                err += 1;
                let msg = e.to_string();
                assert!(!msg.contains('\n'));
                assert!(msg.contains("rank-00001.pmt"), "{msg}");
            }
        }
    }
    assert!(ok > 0 && err > 0, "ok {ok}, err {err}");
}

#[test]
fn unknown_function_kind_is_corrupt() {
    let scratch = Scratch::new("kind");
    let mut header = pmtrace_format::meta::Header::example();
    header.world_size = 1;
    header.functions[0].kind = "teleport".into();
    std::fs::write(scratch.join("rank-00000.pmt"), encode_file_header(&header)).unwrap();
    assert_eq!(
        open_err(scratch.path()),
        "corrupt trace: rank-00000.pmt: unknown record kind \"teleport\" for function MPI_Send"
    );
}

#[test]
fn communicator_used_without_definition_is_corrupt() {
    let mut tb = TraceBuilder::new(1);
    tb.rank(0).define_world_and_self(0);
    tb.rank(0)
        .thread(0)
        .call("MPI_Send", 10, 20, fixture::send(0, 0, 7, 8));
    let scratch = Scratch::new("undefcomm");
    tb.write(scratch.path()).unwrap();
    assert_eq!(
        open_err(scratch.path()),
        "corrupt trace: rank-00000.pmt: communicator index 7 is used (MPI_Send at 10 ns) but never defined"
    );
}
