//! Turns `wrappers/mpi.wrap` into Rust: the function table, the `PMPI_`
//! declarations, and one wrapper per MPI function. Run by `build.rs`; the
//! output is `$OUT_DIR/wrappers.rs` (`make wrappers` copies it to
//! `target/wrappers.rs` to read).
//!
//! Every wrapper has the same shape:
//!
//! ```text
//! guard (re-entry, tracing off)  -> call the real function, nothing else
//! prepare (status substitution, snapshot of request/message handles)
//! t0 = now; rc = PMPI_X(...); t1 = now
//! hooks::<kind>(Call { id, t0, t1, rc }, role arguments...)
//! return rc
//! ```
//!
//! The real function is reached through `real::PMPI_X`, in one place, so
//! that switching to `dlsym(RTLD_NEXT, "MPI_X")` (to stack PMPI tools) stays
//! a change of the `real` module only.

use std::collections::BTreeSet;
use std::fmt::Write;

#[derive(Debug, Clone)]
pub struct Param {
    pub ctype: String,
    pub name: String,
    pub role: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub line: usize,
    pub kind: String,
    pub ret: String,
    pub name: String,
    pub params: Vec<Param>,
    pub variadic: bool,
}

const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move",
    "mut", "priv", "pub", "ref", "return", "self", "static", "struct", "super", "trait", "true",
    "type", "unsafe", "use", "where", "while", "yield",
];

pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |m: &str| format!("wrappers/mpi.wrap:{}: {m}: {line}", i + 1);
        let (kind, rest) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| err("no prototype"))?;
        let rest = rest.trim();
        let open = rest.find('(').ok_or_else(|| err("no '('"))?;
        let close = rest.rfind(')').ok_or_else(|| err("no ')'"))?;
        let head = rest[..open].trim();
        let (ret, name) = head
            .rsplit_once(char::is_whitespace)
            .ok_or_else(|| err("no return type"))?;
        let mut params = Vec::new();
        let mut variadic = false;
        for p in rest[open + 1..close].split(',') {
            let p = p.trim();
            if p.is_empty() || p == "void" {
                continue;
            }
            if p.starts_with("...") {
                variadic = true;
                continue;
            }
            let (decl, role) = match p.split_once('@') {
                Some((d, r)) => (d.trim(), Some(r.trim().to_string())),
                None => (p, None),
            };
            let (ctype, pname) = decl
                .rsplit_once(char::is_whitespace)
                .ok_or_else(|| err("parameter without a name"))?;
            // C names that are Rust keywords (`type`, `in`, ...) get a trailing '_'.
            let pname = if RUST_KEYWORDS.contains(&pname) {
                format!("{pname}_")
            } else {
                pname.to_string()
            };
            params.push(Param {
                ctype: ctype.trim().to_string(),
                name: pname,
                role,
            });
        }
        out.push(Entry {
            line: i + 1,
            kind: kind.to_string(),
            ret: ret.trim().to_string(),
            name: name.to_string(),
            params,
            variadic,
        });
    }
    let mut seen = BTreeSet::new();
    for e in &out {
        if !seen.insert(e.name.clone()) {
            return Err(format!(
                "wrappers/mpi.wrap:{}: {} is described twice",
                e.line, e.name
            ));
        }
    }
    Ok(out)
}

/// The trace-format kind recorded for a description kind.
fn format_kind(kind: &str, name: &str) -> Result<&'static str, String> {
    Ok(match kind {
        "plain" | "type_free" => "Plain",
        "send" => "Send",
        "isend" => "Isend",
        "send_init" => "SendInit",
        "recv" => "Recv",
        "irecv" => "Irecv",
        "recv_init" => "RecvInit",
        "sendrecv" | "sendrecv_replace" => "Sendrecv",
        "probe" => "Probe",
        "iprobe" => "Iprobe",
        "mprobe" => "Mprobe",
        "improbe" => "Improbe",
        "mrecv" => "Mrecv",
        "imrecv" => "Imrecv",
        "start" | "startall" => "Start",
        "wait" | "test" | "waitany" | "testany" | "waitall" | "testall" | "waitsome"
        | "testsome" => "Complete",
        "cancel" => "Cancel",
        "request_get_status"
        | "request_get_status_all"
        | "request_get_status_any"
        | "request_get_status_some" => "Plain",
        "isendrecv" | "isendrecv_replace" => "Isendrecv",
        "psend_init" => "PsendInit",
        "precv_init" => "PrecvInit",
        "buffer_attach" | "buffer_detach" => "Plain",
        "request_free" => "Freed",
        "comm_new" | "comm_agreed" | "comm_dynamic" | "comm_parent" => "CommNew",
        "comm_idup" => "Icoll",
        "comm_free" => "CommFree",
        k if k.starts_with("coll:") => "Coll",
        k if k.starts_with("icoll:") => "Icoll",
        k if k.starts_with("pcoll:") => "CollInit",
        "manual" => match name {
            "MPI_Init" => "Init",
            "MPI_Init_thread" => "InitThread",
            "MPI_Finalize" => "Finalize",
            "MPI_Abort" => "Abort",
            "MPI_Pcontrol" => "Pcontrol",
            _ => return Err(format!("no hand-written wrapper is known for {name}")),
        },
        k => return Err(format!("unknown kind '{k}' for {name}")),
    })
}

const HANDLES: &[&str] = &[
    "MPI_Comm",
    "MPI_Datatype",
    "MPI_Group",
    "MPI_Info",
    "MPI_Message",
    "MPI_Op",
    "MPI_Request",
    "MPI_Win",
    "MPI_File",
    "MPI_Errhandler",
    "MPI_T_enum",
    "MPI_T_cvar_handle",
    "MPI_T_pvar_handle",
    "MPI_T_pvar_session",
    "MPI_Session",
    "MPI_T_event_registration",
    "MPI_T_event_instance",
];

/// Rust type of a by-value C type.
fn value_type(ctype: &str) -> Result<String, String> {
    let t = ctype.trim_start_matches("const ").trim();
    Ok(match t {
        "int" | "MPI_Fint" => "c_int".into(),
        "double" => "f64".into(),
        "MPI_Aint" | "MPI_Offset" | "MPI_Count" | "MPI_T_cb_safety" | "MPI_T_source_order" => {
            format!("ffi::{t}")
        }
        // Callbacks passed by value (`MPI_T_event_free_cb_function f`).
        f if f.ends_with("_function") => "*mut c_void".into(),
        h if HANDLES.contains(&h) => format!("ffi::{h}"),
        other => return Err(format!("no Rust type for C type '{other}'")),
    })
}

/// The handle a by-value C type is, if it is one.
fn by_value_handle(ctype: &str) -> Option<&str> {
    let t = ctype.trim_start_matches("const ").trim();
    (!ctype.contains('*') && HANDLES.contains(&t)).then_some(t)
}

/// The type an exported function takes or returns a by-value C type as:
/// handles register-wide (see `ffi::wide`), the rest as `value_type`.
fn exported_value_type(ctype: &str) -> Result<String, String> {
    match by_value_handle(ctype) {
        Some(h) => Ok(format!("ffi::wide::{h}")),
        None => value_type(ctype),
    }
}

/// `exported_value_type` for a parameter.
fn exported_param_type(p: &Param) -> Result<String, String> {
    if p.ctype.contains('*') {
        param_type(p)
    } else {
        exported_value_type(&p.ctype)
    }
}

/// Rust type of a parameter: pointers are opaque unless the role needs them typed.
fn param_type(p: &Param) -> Result<String, String> {
    if !p.ctype.contains('*') {
        return value_type(&p.ctype);
    }
    Ok(match p.role.as_deref() {
        Some("status" | "statuses") => "*mut ffi::MPI_Status".into(),
        Some("request" | "requests") => "*mut ffi::MPI_Request".into(),
        Some("flag" | "index" | "outcount" | "indices") => "*mut c_int".into(),
        Some("sendcounts" | "recvcounts") if p.ctype.contains("MPI_Count") => {
            "*const ffi::MPI_Count".into()
        }
        Some("sendcounts" | "recvcounts") => "*const c_int".into(),
        Some("sendtypes" | "recvtypes") => "*const ffi::MPI_Datatype".into(),
        Some("newcomm" | "comm_inout") => "*mut ffi::MPI_Comm".into(),
        Some("message") => "*mut ffi::MPI_Message".into(),
        _ => "*mut c_void".into(),
    })
}

fn camel(shape: &str) -> String {
    shape
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn role<'a>(e: &'a Entry, r: &str) -> Result<&'a str, String> {
    e.params
        .iter()
        .find(|p| p.role.as_deref() == Some(r))
        .map(|p| p.name.as_str())
        .ok_or_else(|| {
            format!(
                "wrappers/mpi.wrap:{}: {} (kind {}) needs a parameter with role @{r}",
                e.line, e.name, e.kind
            )
        })
}

fn opt_role<'a>(e: &'a Entry, r: &str) -> Option<&'a str> {
    e.params
        .iter()
        .find(|p| p.role.as_deref() == Some(r))
        .map(|p| p.name.as_str())
}

/// A count argument as the hooks take it: `int` and `MPI_Count` alike.
fn wide(name: &str) -> String {
    format!("i64::from({name})")
}

/// The preparation lines and the hook call for one entry.
fn body(e: &Entry) -> Result<(Vec<String>, String), String> {
    let mut prep = Vec::new();
    let r = |x: &str| role(e, x);
    let tested_probe = matches!(e.kind.as_str(), "iprobe" | "improbe");
    if let Some(st) = opt_role(e, "status") {
        prep.push(format!(
            "let mut {st}_local = MaybeUninit::<ffi::MPI_Status>::uninit();"
        ));
        if tested_probe {
            // MPI fills the status only when the probe finds a message:
            // the call fills the local one, copied out then (`probe_out`),
            // so that a probe that finds nothing does not choose one.
            prep.push(format!("let {st}_user = {st};"));
            prep.push(format!("let {st} = {st}_local.as_mut_ptr();"));
        } else {
            prep.push(format!(
                "let {st} = status_or_local({st}, &mut {st}_local);"
            ));
        }
    }
    let mut scratch = false;
    if let Some(sts) = opt_role(e, "statuses") {
        let n = r("incount")?;
        prep.push("let mut scratch = Scratch::take();".into());
        prep.push(format!("let {sts} = scratch.statuses({sts}, {n});"));
        scratch = true;
    }
    if let Some(reqs) = opt_role(e, "requests") {
        let n = r("incount")?;
        if !scratch {
            prep.push("let mut scratch = Scratch::take();".into());
        }
        prep.push(format!("scratch.save_requests({reqs}, {n});"));
    }
    let single_request_in = |prep: &mut Vec<String>| -> Result<String, String> {
        let req = r("request")?;
        prep.push(format!(
            "let request_in = unsafe {{ request_value({req}) }};"
        ));
        Ok("request_in".to_string())
    };
    let call = "call";
    let hook = match e.kind.as_str() {
        "plain" => format!("hooks::plain({call})"),
        "type_free" => {
            // Cached sizes are dropped before the handle can be reused.
            prep.push("hooks::types_changing();".into());
            format!("hooks::plain({call})")
        }
        "send" => format!(
            "hooks::send({call}, {}, {}, {}, {}, {})",
            wide(r("count")?),
            r("datatype")?,
            r("peer")?,
            r("tag")?,
            r("comm")?
        ),
        "psend_init" | "precv_init" => format!(
            "hooks::issue({call}, {}.saturating_mul(i64::from({})), {}, {}, {}, {}, {}, Issued::{}, true, 0, false)",
            wide(r("count")?),
            r("partitions")?,
            r("datatype")?,
            r("peer")?,
            r("tag")?,
            r("comm")?,
            r("request")?,
            if e.kind == "psend_init" { "Send" } else { "Recv" },
        ),
        "isend" | "send_init" | "irecv" | "recv_init" => format!(
            "hooks::issue({call}, {}, {}, {}, {}, {}, {}, Issued::{}, {}, pb_post_slot, pb_memo)",
            wide(r("count")?),
            r("datatype")?,
            r("peer")?,
            r("tag")?,
            r("comm")?,
            r("request")?,
            if e.kind.starts_with("is") || e.kind == "send_init" {
                "Send"
            } else {
                "Recv"
            },
            e.kind.ends_with("_init")
        ),
        "recv" => format!(
            "hooks::recv({call}, {}, {}, {}, {}, {}, {}, got)",
            wide(r("count")?),
            r("datatype")?,
            r("peer")?,
            r("tag")?,
            r("comm")?,
            r("status")?
        ),
        "sendrecv" => format!(
            "hooks::sendrecv({call}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, got)",
            wide(r("sendcount")?),
            r("sendtype")?,
            r("peer")?,
            r("sendtag")?,
            wide(r("recvcount")?),
            r("recvtype")?,
            r("source")?,
            r("recvtag")?,
            r("comm")?,
            r("status")?
        ),
        "sendrecv_replace" => format!(
            "hooks::sendrecv({call}, {c}, {d}, {}, {}, {c}, {d}, {}, {}, {}, {}, got)",
            r("peer")?,
            r("sendtag")?,
            r("source")?,
            r("recvtag")?,
            r("comm")?,
            r("status")?,
            c = wide(r("count")?),
            d = r("datatype")?
        ),
        "isendrecv" => format!(
            "hooks::isendrecv({call}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, pb_post_slot)",
            wide(r("sendcount")?),
            r("sendtype")?,
            r("peer")?,
            r("sendtag")?,
            wide(r("recvcount")?),
            r("recvtype")?,
            r("source")?,
            r("recvtag")?,
            r("comm")?,
            r("request")?,
        ),
        "isendrecv_replace" => format!(
            "hooks::isendrecv({call}, {c}, {d}, {}, {}, {c}, {d}, {}, {}, {}, {}, pb_post_slot)",
            r("peer")?,
            r("sendtag")?,
            r("source")?,
            r("recvtag")?,
            r("comm")?,
            r("request")?,
            c = wide(r("count")?),
            d = r("datatype")?
        ),
        "probe" => format!(
            "hooks::probe({call}, {}, {}, {}, None, core::ptr::null_mut(), {})",
            r("peer")?,
            r("tag")?,
            r("comm")?,
            r("status")?
        ),
        "iprobe" => format!(
            "hooks::probe({call}, {}, {}, {}, Some({}), core::ptr::null_mut(), {}); hooks::probe_out(rc, {}, {}, {}_user)",
            r("peer")?,
            r("tag")?,
            r("comm")?,
            r("flag")?,
            r("status")?,
            r("flag")?,
            r("status")?,
            r("status")?
        ),
        "mprobe" => format!(
            "hooks::probe({call}, {}, {}, {}, None, {}, {})",
            r("peer")?,
            r("tag")?,
            r("comm")?,
            r("message")?,
            r("status")?
        ),
        "improbe" => format!(
            "hooks::probe({call}, {}, {}, {}, Some({}), {}, {}); hooks::probe_out(rc, {}, {}, {}_user)",
            r("peer")?,
            r("tag")?,
            r("comm")?,
            r("flag")?,
            r("message")?,
            r("status")?,
            r("flag")?,
            r("status")?,
            r("status")?
        ),
        "mrecv" | "imrecv" => {
            let m = r("message")?;
            // The message is claimed before the real call: once it returns,
            // another thread's probe may get the same handle.
            prep.push(format!(
                "let message_op = hooks::claim_message(unsafe {{ message_value({m}) }});"
            ));
            if e.kind == "mrecv" {
                format!(
                    "hooks::mrecv({call}, {}, {}, message_op, {}, got)",
                    wide(r("count")?),
                    r("datatype")?,
                    r("status")?
                )
            } else {
                format!(
                    "hooks::imrecv({call}, {}, {}, message_op, {}, pb_post_slot)",
                    wide(r("count")?),
                    r("datatype")?,
                    r("request")?
                )
            }
        }
        "start" => {
            let req = single_request_in(&mut prep)?;
            format!(
                "hooks::start({call}, core::slice::from_ref(&{req}), {})",
                r("request")?
            )
        }
        "startall" => format!(
            "hooks::start({call}, scratch.requests(), {})",
            r("requests")?
        ),
        "wait" => {
            let req = single_request_in(&mut prep)?;
            format!(
                "hooks::complete({call}, core::slice::from_ref(&{req}), {}, Done::One({}))",
                r("request")?,
                r("status")?
            )
        }
        "test" => {
            let req = single_request_in(&mut prep)?;
            format!(
                "hooks::complete({call}, core::slice::from_ref(&{req}), {}, Done::IfFlag({}, {}))",
                r("request")?,
                r("flag")?,
                r("status")?
            )
        }
        "waitany" => format!(
            "hooks::complete({call}, scratch.requests(), {}, Done::Index({}, {}))",
            r("requests")?,
            r("index")?,
            r("status")?
        ),
        "testany" => format!(
            "hooks::complete({call}, scratch.requests(), {}, Done::IndexIfFlag({}, {}, {}))",
            r("requests")?,
            r("index")?,
            r("flag")?,
            r("status")?
        ),
        "waitall" => format!(
            "hooks::complete({call}, scratch.requests(), {}, Done::All({}))",
            r("requests")?,
            r("statuses")?
        ),
        "testall" => format!(
            "hooks::complete({call}, scratch.requests(), {}, Done::AllIfFlag({}, {}))",
            r("requests")?,
            r("flag")?,
            r("statuses")?
        ),
        "waitsome" | "testsome" => format!(
            "hooks::complete({call}, scratch.requests(), {}, Done::Some({}, {}, {}))",
            r("requests")?,
            r("outcount")?,
            r("indices")?,
            r("statuses")?
        ),
        "request_get_status_all" => format!(
            "hooks::request_statuses({call}, scratch.requests(), Done::AllIfFlag({}, {}))",
            r("flag")?,
            r("statuses")?
        ),
        "request_get_status_any" => format!(
            "hooks::request_statuses({call}, scratch.requests(), Done::IndexIfFlag({}, {}, {}))",
            r("index")?,
            r("flag")?,
            r("status")?
        ),
        "request_get_status_some" => format!(
            "hooks::request_statuses({call}, scratch.requests(), Done::Some({}, {}, {}))",
            r("outcount")?,
            r("indices")?,
            r("statuses")?
        ),
        "buffer_attach" | "buffer_detach" => format!("hooks::plain({call})"),
        "request_get_status" => format!(
            "hooks::request_status({call}, {}, {}, {})",
            r("reqval")?,
            r("flag")?,
            r("status")?
        ),
        "cancel" | "request_free" => {
            let req = single_request_in(&mut prep)?;
            format!("hooks::{}({call}, {req}, {})", e.kind, r("request")?)
        }
        "comm_new" | "comm_agreed" | "comm_dynamic" => {
            let parent = opt_role(e, "comm").map_or("None".to_string(), |c| format!("Some({c})"));
            let origin = match e.kind.as_str() {
                "comm_new" if parent != "None" => "Collective",
                "comm_new" | "comm_agreed" => "Agreed",
                _ => "Dynamic",
            };
            format!(
                "hooks::comm_new({call}, {parent}, {}, Origin::{origin})",
                r("newcomm")?
            )
        }
        "comm_parent" => format!(
            "hooks::comm_new({call}, None, {}, Origin::Parent)",
            r("newcomm")?
        ),
        "comm_idup" => format!(
            "hooks::comm_idup({call}, {}, {}, {})",
            r("comm")?,
            r("newcomm")?,
            r("request")?
        ),
        "comm_free" => {
            let c = r("comm_inout")?;
            // Forgotten before the real call: once it returns, another
            // thread may get the same handle for a new communicator.
            prep.push(format!("let comm_in = unsafe {{ comm_value({c}) }};"));
            prep.push("let released = hooks::release_comm(comm_in);".into());
            format!("hooks::comm_free({call}, comm_in, released)")
        }
        k if k.starts_with("coll:") || k.starts_with("icoll:") || k.starts_with("pcoll:") => {
            let (prefix, shape) = k.split_once(':').unwrap();
            let mut fields = Vec::new();
            for (field, rl) in [
                ("sendbuf", "sendbuf"),
                ("recvbuf", "recvbuf"),
                ("sendbuf", "buf"),
                ("count", "count"),
                ("datatype", "datatype"),
                ("sendcount", "sendcount"),
                ("sendtype", "sendtype"),
                ("recvcount", "recvcount"),
                ("recvtype", "recvtype"),
                ("sendcounts", "sendcounts"),
                ("recvcounts", "recvcounts"),
                ("sendtypes", "sendtypes"),
                ("recvtypes", "recvtypes"),
                ("root", "root"),
            ] {
                let Some(p) = e.params.iter().find(|p| p.role.as_deref() == Some(rl)) else {
                    continue;
                };
                let v = &p.name;
                let value = match rl {
                    "sendbuf" | "recvbuf" | "buf" => format!("{v} as *const c_void"),
                    "count" | "sendcount" | "recvcount" => wide(v),
                    "sendcounts" | "recvcounts" if p.ctype.contains("MPI_Count") => {
                        format!("Counts::Large({v})")
                    }
                    "sendcounts" | "recvcounts" => format!("Counts::Int({v})"),
                    _ => v.clone(),
                };
                fields.push(format!("{field}: {value}"));
            }
            let args = format!(
                "CollArgs {{ {}, ..CollArgs::new({}) }}",
                fields.join(", "),
                r("comm")?
            );
            let args = args.replace("{ , ", "{ ");
            if prefix == "coll" {
                // Built where it is needed: the fast path of a repeated
                // collective reads a few fields (`hooks_colls::coll`).
                format!("hooks::coll({call}, Shape::{}, || {args})", camel(shape))
            } else if prefix == "pcoll" {
                format!(
                    "hooks::pcoll({call}, Shape::{}, &{args}, {})",
                    camel(shape),
                    r("request")?
                )
            } else {
                format!(
                    "hooks::icoll({call}, Shape::{}, &{args}, {})",
                    camel(shape),
                    r("request")?
                )
            }
        }
        k => {
            return Err(format!(
                "wrappers/mpi.wrap:{}: no wrapper template for kind '{k}'",
                e.line
            ))
        }
    };
    Ok((prep, hook))
}

/// What the piggyback layer does around the real call of an entry: lines
/// after the start time is taken, the arguments it replaces (by role), and
/// lines after the call returned.
#[derive(Default)]
struct Around {
    pre: Vec<String>,
    subst: Vec<(String, String)>,
    post: Vec<String>,
    /// The real call's expression, when not `real::PMPI_X(args)`.
    call: Option<String>,
    /// A fast path taken before `pre` when its first half gives its
    /// arguments (`pb_fast`, with the same fields as the `pre` variable
    /// the substitutions name): that half, and the second, which ends the
    /// wrapper. Both see `rc`, `t0` and `t1` (see `hooks_recv`).
    fast: Option<(String, String, String)>,
}

/// The real call of `MPI_(I)Sendrecv_replace`: when the piggyback layer's
/// `var` sends its message apart, from a copy (`apart_send`), the call is
/// the matching `MPI_(I)Sendrecv` into the user's buffer; else the replace
/// itself (`{REAL}`). `last`: the status or request role.
fn replace_apart_call(e: &Entry, var: &str, last: &str) -> Result<String, String> {
    let r = |x: &str| role(e, x);
    Ok(format!(
        "if let Some((pb_sb, pb_sc)) = {var}.apart_send() {{ real::P{}(pb_sb as _, pb_sc as _, ffi::consts().byte, {}, {}, {var}.buf as _, {var}.count as _, {var}.datatype, {}, {}, {}, {}) }} else {{ {{REAL}} }}",
        e.name.replace("_replace", ""),
        r("peer")?,
        r("sendtag")?,
        r("source")?,
        r("recvtag")?,
        r("comm")?,
        r(last)?
    ))
}

/// `pb_memo`: whether the thread's point-to-point memo is this
/// nonblocking call's, asked before the call (`hooks::memo_hit`); never
/// for a persistent one, which takes no fixed record.
fn memo_line(e: &Entry, count: &str, datatype: &str) -> Result<String, String> {
    if e.kind.ends_with("_init") {
        return Ok("let pb_memo = false;".into());
    }
    let r = |x: &str| role(e, x);
    Ok(format!(
        "let pb_memo = hooks::memo_hit(guard.thread(), i64::from({count}), {datatype}, {}, {});",
        r("peer")?,
        r("comm")?
    ))
}

fn around(e: &Entry) -> Result<Around, String> {
    let r = |x: &str| role(e, x);
    let mut a = Around::default();
    let replace = |a: &mut Around, var: &str, roles: [&str; 3]| {
        a.subst.push((roles[0].into(), format!("{var}.buf as _")));
        // The piggyback layer's counts are i64; the user's own value, or a
        // small one of its own, both fit the parameter's type.
        a.subst.push((roles[1].into(), format!("{var}.count as _")));
        a.subst.push((roles[2].into(), format!("{var}.datatype")));
    };
    let data = |x: [&str; 3]| -> Result<[String; 3], String> {
        Ok([
            r(x[0])?.to_string(),
            r(x[1])?.to_string(),
            r(x[2])?.to_string(),
        ])
    };
    match e.kind.as_str() {
        "send" => {
            let [b, c, d] = data(["buf", "count", "datatype"])?;
            a.pre.push(format!(
                "let pb_out = pb::Out::new(guard.thread(), t0, {b} as *const c_void, i64::from({c}), {d}, pb::To::new({}, {}, {}));",
                r("peer")?,
                r("tag")?,
                r("comm")?
            ));
            replace(&mut a, "pb_out", ["buf", "count", "datatype"]);
            a.post.push("drop(pb_out);".into());
        }
        "isend" | "send_init" => {
            let [b, c, d] = data(["buf", "count", "datatype"])?;
            a.pre.push(memo_line(e, &c, &d)?);
            a.pre.push(format!(
                "let pb_post = pb::post_send(guard.thread(), t0, {b} as *const c_void, i64::from({c}), {d}, pb::To::new({}, {}, {}), {}, pb_memo);",
                r("peer")?,
                r("tag")?,
                r("comm")?,
                e.kind == "send_init"
            ));
            replace(&mut a, "pb_post", ["buf", "count", "datatype"]);
            a.post
                .push("let pb_post_slot = pb_post.into_slot();".into());
        }
        "irecv" | "recv_init" => {
            let [b, c, d] = data(["buf", "count", "datatype"])?;
            a.pre.push(memo_line(e, &c, &d)?);
            a.pre.push(format!(
                "let pb_post = pb::post_recv(guard.thread(), {b} as *mut c_void, i64::from({c}), {d}, pb::Rx::new({}, {}), {}, {}, pb_memo);",
                r("peer")?,
                r("comm")?,
                r("tag")?,
                e.kind == "recv_init"
            ));
            replace(&mut a, "pb_post", ["buf", "count", "datatype"]);
            a.post
                .push("let pb_post_slot = pb_post.into_slot();".into());
        }
        "imrecv" => {
            let [b, c, d] = data(["buf", "count", "datatype"])?;
            a.pre.push(format!(
                "let pb_post = pb::post_recv(guard.thread(), {b} as *mut c_void, i64::from({c}), {d}, pb_rx, 0, false, false);"
            ));
            a.pre.insert(
                0,
                format!(
                    "let pb_rx = pb::Rx::of_message(unsafe {{ message_value({}) }});",
                    r("message")?
                ),
            );
            replace(&mut a, "pb_post", ["buf", "count", "datatype"]);
            a.post
                .push("let pb_post_slot = pb_post.into_slot();".into());
        }
        "recv" | "mrecv" => {
            let [b, c, d] = data(["buf", "count", "datatype"])?;
            let rx = if e.kind == "recv" {
                format!("pb::Rx::new({}, {})", r("peer")?, r("comm")?)
            } else {
                a.pre.push(format!(
                    "let pb_rx = pb::Rx::of_message(unsafe {{ message_value({}) }});",
                    r("message")?
                ));
                "pb_rx".to_string()
            };
            a.pre.push(format!(
                "let pb_in = pb::In::new(guard.thread(), {b} as *mut c_void, i64::from({c}), {d}, {rx});"
            ));
            replace(&mut a, "pb_in", ["buf", "count", "datatype"]);
            if e.kind == "recv" {
                let id = format!("ids::{}", e.name.to_ascii_uppercase());
                let args = format!(
                    "{b} as *mut c_void, i64::from({c}), {d}, {}, {}, {}",
                    r("peer")?,
                    r("tag")?,
                    r("comm")?
                );
                a.fast = Some((
                    format!(
                        "hooks::recv_fast(&guard, i64::from({c}), {d}, {}, {})",
                        r("peer")?,
                        r("comm")?
                    ),
                    format!(
                        "hooks::recv_fast_end(&guard, pb_fast, ({id}, rc, t0, t1), {args}, {})",
                        r("status")?
                    ),
                    "pb_in".into(),
                ));
            }
            a.post.push(format!(
                "let got = pb_in.finish(rc, {}, {rx});",
                r("status")?
            ));
        }
        "sendrecv" => {
            let [b, c, d] = data(["sendbuf", "sendcount", "sendtype"])?;
            a.pre.push(format!(
                "let pb_out = pb::Out::new(guard.thread(), t0, {b} as *const c_void, i64::from({c}), {d}, pb::To::new({}, {}, {}));",
                r("peer")?,
                r("sendtag")?,
                r("comm")?
            ));
            replace(&mut a, "pb_out", ["sendbuf", "sendcount", "sendtype"]);
            let [b, c, d] = data(["recvbuf", "recvcount", "recvtype"])?;
            a.pre.push(format!(
                "let pb_in = pb::In::new(guard.thread(), {b} as *mut c_void, i64::from({c}), {d}, pb::Rx::new({}, {}));",
                r("source")?,
                r("comm")?
            ));
            replace(&mut a, "pb_in", ["recvbuf", "recvcount", "recvtype"]);
            a.post.push("drop(pb_out);".into());
            a.post.push(format!(
                "let got = pb_in.finish(rc, {}, pb::Rx::new({}, {}));",
                r("status")?,
                r("source")?,
                r("comm")?
            ));
        }
        "sendrecv_replace" => {
            let [b, c, d] = data(["buf", "count", "datatype"])?;
            a.pre.push(format!(
                "let pb_rep = pb::In::replace(guard.thread(), t0, {b} as *mut c_void, i64::from({c}), {d}, pb::To::new({}, {}, {}), pb::Rx::new({}, {}));",
                r("peer")?,
                r("sendtag")?,
                r("comm")?,
                r("source")?,
                r("comm")?
            ));
            replace(&mut a, "pb_rep", ["buf", "count", "datatype"]);
            a.call = Some(replace_apart_call(e, "pb_rep", "status")?);
            a.post.push(format!(
                "let got = pb_rep.finish(rc, {}, pb::Rx::new({}, {}));",
                r("status")?,
                r("source")?,
                r("comm")?
            ));
        }
        "isendrecv" => {
            let [b, c, d] = data(["sendbuf", "sendcount", "sendtype"])?;
            a.pre.push(format!(
                "let pb_send = pb::post_isendrecv_send(guard.thread(), t0, {b} as *const c_void, i64::from({c}), {d}, pb::To::new({}, {}, {}));",
                r("peer")?,
                r("sendtag")?,
                r("comm")?
            ));
            replace(&mut a, "pb_send", ["sendbuf", "sendcount", "sendtype"]);
            let [b, c, d] = data(["recvbuf", "recvcount", "recvtype"])?;
            a.pre.push(format!(
                "let pb_post = pb::post_isendrecv_recv(guard.thread(), {b} as *mut c_void, i64::from({c}), {d}, pb::Rx::new({}, {}), {});",
                r("source")?,
                r("comm")?,
                r("recvtag")?,
            ));
            replace(&mut a, "pb_post", ["recvbuf", "recvcount", "recvtype"]);
            a.post.push(
                "let pb_post_slot = pb::paired(pb_post.into_slot(), pb_send.into_slot());".into(),
            );
        }
        "isendrecv_replace" => {
            let [b, c, d] = data(["buf", "count", "datatype"])?;
            a.pre.push(format!(
                "let pb_post = pb::post_replace(guard.thread(), t0, {b} as *mut c_void, i64::from({c}), {d}, pb::Rx::new({}, {}), {}, pb::To::new({}, {}, {}));",
                r("source")?,
                r("comm")?,
                r("recvtag")?,
                r("peer")?,
                r("sendtag")?,
                r("comm")?,
            ));
            replace(&mut a, "pb_post", ["buf", "count", "datatype"]);
            a.call = Some(replace_apart_call(e, "pb_post", "request")?);
            a.post
                .push("let pb_post_slot = pb_post.into_slot();".into());
        }
        "buffer_attach" => {
            let scope = buffer_scope(e);
            a.call = Some(format!(
                "crate::buffers::attach({scope}, {b}, i64::from({n}), |b, n| real::P{}({}))",
                e.name,
                e.params
                    .iter()
                    .map(|p| match p.role.as_deref() {
                        Some("buf") => "b".to_string(),
                        Some("size") => "n as _".to_string(),
                        _ => p.name.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                b = r("buf")?,
                n = r("size")?,
            ));
        }
        "buffer_detach" => {
            let scope = buffer_scope(e);
            let size = e.params.iter().find(|p| p.role.as_deref() == Some("size"));
            let wide = size.is_some_and(|p| p.ctype.contains("MPI_Count"));
            a.call = Some(format!(
                "crate::buffers::detach({scope}, {b}, {n} as *mut c_void, {wide}, |b, n| real::P{}({}))",
                e.name,
                e.params
                    .iter()
                    .map(|p| match p.role.as_deref() {
                        Some("buf") => "b".to_string(),
                        Some("size") => "n as _".to_string(),
                        _ => p.name.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                b = r("buf")?,
                n = r("size")?,
            ));
        }
        "start" => a.pre.push(format!(
            "hooks::before_start(&guard, t0, core::slice::from_ref(&request_in), {});",
            r("request")?
        )),
        "startall" => a.pre.push(format!(
            "hooks::before_start(&guard, t0, scratch.requests(), {});",
            r("requests")?
        )),
        // An operation in flight keeps its request (see `orphans`).
        "request_free" => a.call = Some(format!("crate::orphans::free({})", r("request")?)),
        // Spawned processes get what they need to be traced (`spawn`).
        "comm_dynamic" if opt_role(e, "spawn_info").is_some() => {
            a.pre.push(format!(
                "let spawn_env = crate::spawn::Env::new(core::slice::from_ref(&{}), {}, {});",
                r("spawn_info")?,
                r("root")?,
                r("comm")?
            ));
            a.subst
                .push(("spawn_info".into(), "spawn_env.infos()[0]".into()));
            a.post.push("drop(spawn_env);".into());
        }
        "comm_dynamic" if opt_role(e, "spawn_infos").is_some() => {
            a.pre.push(format!(
                "let spawn_env = crate::spawn::Env::many({}, {}, {}, {});",
                r("spawn_infos")?,
                r("count")?,
                r("root")?,
                r("comm")?
            ));
            a.subst.push((
                "spawn_infos".into(),
                format!("spawn_env.infos_or({}) as _", r("spawn_infos")?),
            ));
            a.post.push("drop(spawn_env);".into());
        }
        _ => {}
    }
    Ok(a)
}

/// Which attached buffer a `buffer_attach`/`buffer_detach` entry names.
fn buffer_scope(e: &Entry) -> String {
    if let Some(c) = opt_role(e, "comm") {
        format!("crate::buffers::Scope::Comm(ffi::handle_key({c}))")
    } else if let Some(s) = opt_role(e, "session") {
        format!("crate::buffers::Scope::Session(ffi::handle_key({s}))")
    } else {
        "crate::buffers::Scope::Process".to_string()
    }
}

/// A module of the `PMPI_` functions, with the given parameter and return
/// types: each resolved by name when first called (`crate::next`), so that
/// the library names no MPI function at link time; a variadic one (which
/// Rust cannot define) is declared `extern "C"`.
fn extern_module(
    o: &mut String,
    wrapped: &[&Entry],
    doc: &str,
    name: &str,
    param: fn(&Param) -> Result<String, String>,
    value: fn(&str) -> Result<String, String>,
) -> Result<(), String> {
    writeln!(
        o,
        "{doc}\n#[allow(clippy::all, dead_code, clashing_extern_declarations, non_snake_case)]\n\
         pub mod {name} {{\n    use super::*;\n    use core::sync::atomic::AtomicUsize;"
    )
    .unwrap();
    for e in wrapped {
        let mut ps = Vec::new();
        let mut types = Vec::new();
        for p in &e.params {
            let t = param(p)?;
            ps.push(format!("{}: {t}", p.name));
            types.push(t);
        }
        let ret = value(&e.ret)?;
        // Rust defines no variadic function: a variadic real one is called
        // through a variadic pointer, with the described arguments.
        let dots = if e.variadic { ", ..." } else { "" };
        let args: Vec<&str> = e.params.iter().map(|p| p.name.as_str()).collect();
        writeln!(
            o,
            "    #[inline(always)]\n    pub unsafe fn P{n}({ps}) -> {ret} {{\n        \
             static AT: AtomicUsize = AtomicUsize::new(0);\n        \
             let f = crate::next::function(&AT, c\"P{n}\");\n        \
             // SAFETY: the library's P{n}, of the prototype its mpi.h declares.\n        \
             unsafe {{ core::mem::transmute::<usize, unsafe extern \"C\" fn({types}{dots}) -> {ret}>(f)({args}) }}\n    }}",
            n = e.name,
            ps = ps.join(", "),
            types = types.join(", "),
            args = args.join(", "),
        )
        .unwrap();
    }
    writeln!(o, "}}\n").unwrap();
    Ok(())
}

/// Generates the whole module. `declared` holds the `PMPI_` names the
/// installed mpi.h declares; entries without one get no wrapper.
/// Where `generate`'s text divides: before it, the tables and the real
/// functions (`crate::mpi`, which imports nothing above it); after it,
/// the wrappers (`crate::wrappers`, the entry layer).
pub const SPLIT: &str = "\n// ---- wrappers ----\n";

pub fn generate(entries: &[Entry], declared: &BTreeSet<String>) -> Result<String, String> {
    let mut o = String::new();
    writeln!(
        o,
        "// @generated by wrappers/generate.rs from wrappers/mpi.wrap. Do not edit."
    )
    .unwrap();
    writeln!(
        o,
        "// {} functions described, wrappers for those the MPI library declares.\n",
        entries.len()
    )
    .unwrap();

    // Function table: ids are positions, stable across MPI libraries.
    writeln!(o, "/// Every described function, indexed by function id.").unwrap();
    writeln!(
        o,
        "pub static FUNCTIONS: [(&str, Kind); {}] = [",
        entries.len()
    )
    .unwrap();
    for e in entries {
        writeln!(
            o,
            "    (\"{}\", Kind::{}),",
            e.name,
            format_kind(&e.kind, &e.name)?
        )
        .unwrap();
    }
    writeln!(o, "];\n").unwrap();
    // What the analyses need of a collective: its shape as described
    // here, written into the trace's header (pmtrace_format::coll).
    writeln!(
        o,
        "/// Each described function's collective shape (\"\": none), by function id."
    )
    .unwrap();
    writeln!(o, "pub static COLL_SHAPES: [&str; {}] = [", entries.len()).unwrap();
    for e in entries {
        let shape = match e.kind.split_once(':') {
            Some(("coll" | "icoll" | "pcoll", shape)) => shape,
            _ if e.kind == "comm_idup" => "comm_idup",
            _ => "",
        };
        writeln!(o, "    \"{shape}\",").unwrap();
    }
    writeln!(o, "];\n").unwrap();
    writeln!(o, "/// Function ids.\n#[allow(dead_code)]\npub mod ids {{").unwrap();
    for (i, e) in entries.iter().enumerate() {
        writeln!(
            o,
            "    pub const {}: u32 = {i};",
            e.name.to_ascii_uppercase()
        )
        .unwrap();
    }
    writeln!(o, "}}\n").unwrap();

    let wrapped: Vec<&Entry> = entries
        .iter()
        .filter(|e| declared.contains(&format!("P{}", e.name)))
        .collect();

    // The real functions, and the same as the untraced path calls them.
    extern_module(
        &mut o,
        &wrapped,
        "/// The implementation below the wrappers. The one place that names it.",
        "real",
        param_type,
        value_type,
    )?;
    extern_module(
        &mut o,
        &wrapped,
        "/// `real` with handles as the exported functions take them (`ffi::wide`):\n\
         /// what a wrapper calls when it records nothing.",
        "pass",
        exported_param_type,
        exported_value_type,
    )?;

    // The wrappers, in a file of their own (`split`).
    o.push_str(SPLIT);
    for e in &wrapped {
        if e.kind != "manual" {
            wrapper(&mut o, e)?;
        }
    }
    Ok(o)
}

/// The two levels of one wrapper: the exported outer one, which may pass
/// to another tool (`crate::next`), and `P{name}`, which records.
fn wrapper(o: &mut String, e: &Entry) -> Result<(), String> {
    let ret = exported_value_type(&e.ret)?;
    let ret_handle = by_value_handle(&e.ret).is_some();
    let mut ps = Vec::new();
    for p in &e.params {
        ps.push(format!("{}: {}", p.name, exported_param_type(p)?));
    }
    let args: Vec<&str> = e.params.iter().map(|p| p.name.as_str()).collect();
    let args = args.join(", ");
    let (prep, hook) = body(e)?;
    let around = around(e)?;
    let real_args: Vec<String> = e
        .params
        .iter()
        .map(|p| {
            p.role
                .as_ref()
                .and_then(|role| around.subst.iter().find(|(r, _)| r == role))
                .map_or(p.name.clone(), |(_, v)| v.clone())
        })
        .collect();
    let real_args = real_args.join(", ");
    let rc_of = if e.ret.trim() == "int" {
        "rc"
    } else {
        "MPI_SUCCESS_CODE"
    };
    let types: Vec<String> = e
        .params
        .iter()
        .map(exported_param_type)
        .collect::<Result<_, _>>()?;
    // A wrapper that passes the caller's arguments to the real function
    // unchanged can record at the outer level too, around the next
    // tool's function (see `crate::next`).
    let outer_records = e.ret.trim() == "int"
        && prep.is_empty()
        && around.pre.is_empty()
        && around.subst.is_empty()
        && around.post.is_empty()
        && around.call.is_none();
    writeln!(
        o,
        "/// Generated from wrappers/mpi.wrap line {} (kind `{}`): the outer level\n\
         /// (`crate::next`), another tool's `{n}` when one follows pmtrace's.\n\
         pub unsafe extern \"C\" fn {n}({ps}) -> {ret} {{\n    \
         if TOOL_{upper}.load(core::sync::atomic::Ordering::Relaxed) == crate::next::NONE {{\n        \
         // SAFETY: the caller's arguments, passed on.\n        \
         return unsafe {{ P{n}({args}) }};\n    \
         }}\n    \
         // SAFETY: as above.\n    \
         unsafe {{ next_{n}({args}) }}\n}}\n\n\
         /// The tool that follows pmtrace's {n} (see `crate::next`).\n\
         static TOOL_{upper}: AtomicUsize = AtomicUsize::new(0);\n\n\
         /// {n} when another tool may follow: found out once, then taken\n\
         /// only when one does. (Of the same prototype as {n}, so that\n\
         /// both ways out of it can be jumps.)\n\
         #[cold]\n\
         #[inline(never)]\n\
         unsafe {abi}fn next_{n}({ps}) -> {ret} {{\n    \
         if let Some(f) = crate::next::tool(&TOOL_{upper}, c\"{n}\", c\"P{n}\", {needs_inner}) {{\n        \
         // SAFETY: the other tool's {n}, of the prototype mpi.h declares.\n        \
         let next = unsafe {{ core::mem::transmute::<usize, unsafe extern \"C\" fn({types}) -> {ret}>(f) }};",
        e.line,
        e.kind,
        n = e.name,
        ps = ps.join(", "),
        types = types.join(", "),
        needs_inner = !outer_records,
        upper = e.name.to_ascii_uppercase(),
        // All in registers: a jump to the C function. (With arguments on
        // the stack the compiler copies them and calls, whatever the ABI;
        // the Rust one then costs least.)
        abi = if e.params.len() <= 6 { "extern \"C\" " } else { "" },
    )
    .unwrap();
    if outer_records {
        writeln!(
            o,
            "        // Recorded here: the inner level, if the tool reaches it, passes\n        \
             // through, as this call holds the guard.\n        \
             let Some(guard) = Guard::acquire() else {{\n            \
             // SAFETY: the caller's arguments, passed on.\n            \
             return unsafe {{ next({args}) }};\n        \
             }};\n        \
             let t0 = clock::now();\n        \
             {}\n        \
             // SAFETY: the caller's arguments, passed on.\n        \
             let rc = unsafe {{ next({args}) }};\n        \
             let t1 = clock::now();\n        \
             {}",
            live_enter(e, true)?,
            live_leave(e)
        )
        .unwrap();
        narrow_handles(o, e, "        ");
        writeln!(
            o,
            "        let call = Call::new(&guard, ids::{}, t0, t1, rc);\n        \
             {hook};\n        \
             return rc;",
            e.name.to_ascii_uppercase()
        )
        .unwrap();
    } else {
        writeln!(
            o,
            "        // SAFETY: the caller's arguments, passed on.\n        \
             return unsafe {{ next({args}) }};"
        )
        .unwrap();
    }
    writeln!(
        o,
        "    }}\n    \
         // SAFETY: the caller's arguments, passed on.\n    \
         unsafe {{ P{}({args}) }}\n}}\n",
        e.name
    )
    .unwrap();
    inner_level(
        o,
        e,
        &ps,
        &args,
        &real_args,
        rc_of,
        (&prep, &hook),
        &around,
        ret_handle,
    )
}

/// The line after `t0` that tells the live status file (`crate::live`)
/// which call the thread is entering and, for a call that may block on
/// others, the arguments that say whom it waits for. `narrow` says the
/// handles are still the exported (wide) ones.
fn live_enter(e: &Entry, narrow: bool) -> Result<String, String> {
    let r = |x: &str| role(e, x);
    let comm = |c: &str| {
        if narrow {
            format!("{{ let c: ffi::MPI_Comm = ffi::Wide::narrow({c}); c }}")
        } else {
            c.to_string()
        }
    };
    let word = |kind: &str| {
        format!(
            "const {{ (word(ids::{}, LiveKind::{kind}) | IN_CALL) as u32 }}",
            e.name.to_ascii_uppercase()
        )
    };
    let slot = "guard.recorder().live";
    Ok(match e.kind.as_str() {
        "recv" | "probe" | "mprobe" => format!(
            "live::enter_with({slot}, {}, {}, {});",
            word("Recv"),
            r("peer")?,
            comm(r("comm")?)
        ),
        "send" => format!(
            "live::enter_with({slot}, {}, {}, {});",
            word("Send"),
            r("peer")?,
            comm(r("comm")?)
        ),
        "sendrecv" | "sendrecv_replace" => format!(
            "live::enter_pair({slot}, {}, {}, {}, {});",
            word("Sendrecv"),
            r("peer")?,
            r("source")?,
            comm(r("comm")?)
        ),
        "wait" if !narrow => format!("live::enter_wait({slot}, {}, request_in);", word("Wait")),
        "waitall" | "waitany" | "waitsome" if !narrow => {
            let kind = match e.kind.as_str() {
                "waitall" => "Waitall",
                "waitany" => "Waitany",
                _ => "Waitsome",
            };
            format!(
                "live::enter_waits({slot}, {}, scratch.requests());",
                word(kind)
            )
        }
        k if (k.starts_with("coll:") || k == "comm_new") && opt_role(e, "comm").is_some() => {
            format!(
                "live::enter_comm({slot}, {}, {});",
                word("Coll"),
                comm(r("comm")?)
            )
        }
        _ => format!("live::enter({slot}, {});", word("Other")),
    })
}

/// The line after `t1` that tells the live status file the call ended.
fn live_leave(e: &Entry) -> String {
    format!(
        "live::leave(guard.recorder().live, ids::{});",
        e.name.to_ascii_uppercase()
    )
}

/// `P{name}`: records the call around the real function, and piggybacks.
#[allow(clippy::too_many_arguments)]
fn inner_level(
    o: &mut String,
    e: &Entry,
    ps: &[String],
    args: &str,
    real_args: &str,
    rc_of: &str,
    (prep, hook): (&[String], &str),
    around: &Around,
    ret_handle: bool,
) -> Result<(), String> {
    let ret = exported_value_type(&e.ret)?;
    if converts_handles(&e.name) {
        writeln!(
            o,
            "/// What {} records, not exported as `P{0}`: an MPI's own Fortran\n\
             /// layer converts handles through `P{0}`, which is not the program's call.",
            e.name
        )
        .unwrap();
    } else {
        writeln!(
            o,
            "/// The inner level of {}: records and piggybacks.",
            e.name
        )
        .unwrap();
    }
    let n = &e.name;
    let ps = ps.join(", ");
    // Two copies of the body: one for the main thread's lane, where the
    // thread's state is at a fixed address and the lane's tests are known
    // to pass (see `lane`), and one, out of line, for any thread.
    writeln!(
        o,
        "pub unsafe extern \"C\" fn P{n}({ps}) -> {ret} {{\n    \
         if let Some(guard) = Guard::in_lane() {{\n        \
         // SAFETY: the caller's arguments, passed on.\n        \
         return unsafe {{ traced_P{n}(guard, {args}) }};\n    \
         }}\n    \
         let Some(guard) = Guard::acquire() else {{\n        \
         // SAFETY: the caller's arguments, passed through unchanged.\n        \
         return unsafe {{ pass::P{n}({args}) }};\n    \
         }};\n    \
         // SAFETY: the caller's arguments, passed on.\n    \
         unsafe {{ traced_any_P{n}(guard, {args}) }}\n\
         }}\n\n\
         /// P{n} traced on any thread.\n\
         #[inline(never)]\n\
         unsafe fn traced_any_P{n}(guard: Guard, {ps}) -> {ret} {{\n    \
         // SAFETY: the caller's arguments, passed on.\n    \
         unsafe {{ traced_P{n}(guard, {args}) }}\n\
         }}\n\n\
         /// P{n} traced under `guard`.\n\
         #[inline(always)]\n\
         unsafe fn traced_P{n}(guard: Guard, {ps}) -> {ret} {{"
    )
    .unwrap();
    narrow_handles(o, e, "    ");
    for l in prep {
        writeln!(o, "    {l}").unwrap();
    }
    writeln!(o, "    let t0 = guard.now();").unwrap();
    writeln!(o, "    {}", live_enter(e, false)?).unwrap();
    if let Some((first, second, var)) = &around.fast {
        let fast_args = real_args.replace(&format!("{var}."), "pb_fast.");
        writeln!(o, "    if let Some(pb_fast) = {first} {{").unwrap();
        writeln!(
            o,
            "        // SAFETY: the caller's arguments, the message buffer the fast path's."
        )
        .unwrap();
        writeln!(
            o,
            "        let rc = unsafe {{ real::P{}({fast_args}) }};",
            e.name
        )
        .unwrap();
        writeln!(o, "        let t1 = guard.now();").unwrap();
        writeln!(o, "        {}", live_leave(e)).unwrap();
        writeln!(o, "        {second};").unwrap();
        writeln!(o, "        return rc;").unwrap();
        writeln!(o, "    }}").unwrap();
    }
    for l in &around.pre {
        writeln!(o, "    {l}").unwrap();
    }
    writeln!(
        o,
        "    // SAFETY: the caller's arguments; ignored statuses replaced by local"
    )
    .unwrap();
    writeln!(
        o,
        "    // storage, message buffers by the piggyback layer's (see `piggyback`)."
    )
    .unwrap();
    let direct = format!("real::P{}({real_args})", e.name);
    let real_call = around
        .call
        .as_ref()
        .map_or_else(|| direct.clone(), |c| c.replace("{REAL}", &direct));
    writeln!(o, "    let rc = unsafe {{ {real_call} }};").unwrap();
    writeln!(o, "    let t1 = guard.now();").unwrap();
    // Out of the call at once, before what the piggyback unpacks: the
    // slot's address is at hand, and nothing made since need move.
    writeln!(o, "    {}", live_leave(e)).unwrap();
    for l in &around.post {
        writeln!(o, "    {l}").unwrap();
    }
    writeln!(
        o,
        "    let call = Call::new(&guard, ids::{}, t0, t1, {rc_of});",
        e.name.to_ascii_uppercase()
    )
    .unwrap();
    writeln!(o, "    {hook};").unwrap();
    if ret_handle {
        writeln!(o, "    ffi::Wide::widen(rc)\n}}\n").unwrap();
    } else {
        writeln!(o, "    rc\n}}\n").unwrap();
    }
    Ok(())
}

/// The lines that turn the by-value handles a wrapper takes (register-wide,
/// `ffi::wide`) into this build's handles, shadowing the parameters.
fn narrow_handles(o: &mut String, e: &Entry, indent: &str) {
    for p in &e.params {
        if let Some(h) = by_value_handle(&p.ctype) {
            writeln!(
                o,
                "{indent}let {}: ffi::{h} = ffi::Wide::narrow({});",
                p.name, p.name
            )
            .unwrap();
        }
    }
}

/// The names the generated wrappers of one interface export through
/// libpmtrace.so: `MPI_X` for every wrapped function, and the inner level
/// `PMPI_X` but for conversions (see `generate`).
pub fn exported_names(entries: &[Entry], declared: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for e in entries {
        if e.kind == "manual" || !declared.contains(&format!("P{}", e.name)) {
            continue;
        }
        out.push(e.name.clone());
        if !converts_handles(&e.name) {
            out.push(format!("P{}", e.name));
        }
    }
    out
}

/// A handle or status conversion between languages or to integers
/// (`MPI_Comm_f2c`, `MPI_Status_c2f08`, `MPI_Comm_toint`, ...).
fn converts_handles(name: &str) -> bool {
    [
        "_f2c", "_c2f", "_f082c", "_c2f08", "_f2f08", "_f082f", "_toint", "_fromint",
    ]
    .iter()
    .any(|s| name.ends_with(s))
}

/// `PMPI_` names in preprocessed mpi.h text.
pub fn declared_names(preprocessed: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = preprocessed.as_bytes();
    let mut i = 0;
    while let Some(off) = preprocessed[i..].find("PMPI_") {
        let start = i + off;
        let mut end = start + 5;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        let before_ok =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        // A declaration: the name is followed by '('.
        let rest = preprocessed[end..].trim_start();
        if before_ok && rest.starts_with('(') {
            out.insert(preprocessed[start..end].to_string());
        }
        i = end;
    }
    out
}
