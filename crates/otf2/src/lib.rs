//! Writing OTF2 archives through the system OTF2 library.
//!
//! There is no OTF2 crate; Debian ships the reference C library
//! (`libopen-trace-format2-dev`, OTF2 3.0). `build.rs` binds its headers
//! with bindgen ([`ffi`]); this crate wraps the few calls a serial writer
//! needs in a safe API, so the exporter has no `unsafe`.
//!
//! ```text
//!  Archive::create(dir, name)          OTF2_Archive_Open (write, POSIX, no compression)
//!   ├─ events(loc) -> EventWriter      one per location, events in time order
//!   │     .enter / .mpi_send / ...     each call checks OTF2's error code
//!   ├─ local_defs(loc, offsets)        ClockOffset definitions of a location
//!   ├─ global_defs() -> GlobalDefs     strings, system tree, locations, regions,
//!   │                                  groups, communicators, attributes, clock
//!   └─ close()                         flushes and writes the anchor file
//! ```
//!
//! OTF2 collective callbacks are the serial ones: the archive is written by
//! one process. Flush callbacks say "flush" and write no flush record; an
//! event writer's buffer flushes every few chunks ([`EVENT_CHUNKS`]). OTF2's own
//! error printer is replaced by one that stays silent: every error comes
//! back as an [`Otf2Error`] naming the call.

use parking_lot::lock_api::RawMutex;
use std::ffi::{c_char, c_void, CStr, CString};
use std::marker::PhantomData;
use std::path::Path;
use std::ptr;

use thiserror::Error;

/// The bindgen bindings of `otf2/otf2.h`.
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all
)]
pub mod ffi {
    include!(concat!(env!("OUT_DIR"), "/otf2_bindings.rs"));
}

pub use ffi::{
    OTF2_CollectiveOp as CollectiveOp, OTF2_RegionRole as RegionRole, OTF2_Type as Type,
};

/// `OTF2_UNDEFINED_UINT32`, e.g. "no root".
pub const UNDEFINED_U32: u32 = u32::MAX;
/// `OTF2_UNDEFINED_UINT64`: no reference (a comm without parent, ...).
pub const UNDEFINED_U64: u64 = u64::MAX;

/// An OTF2 call failed.
#[derive(Debug, Error)]
#[error("OTF2 {call} failed: {name} ({description})")]
pub struct Otf2Error {
    pub call: &'static str,
    pub name: String,
    pub description: String,
}

pub type Result<T> = std::result::Result<T, Otf2Error>;

fn check(call: &'static str, code: ffi::OTF2_ErrorCode) -> Result<()> {
    if code == ffi::OTF2_SUCCESS {
        return Ok(());
    }
    // SAFETY: both functions return pointers to static strings (or null
    // for an unknown code, handled by `text`).
    let (name, description) = unsafe {
        (
            text(ffi::OTF2_Error_GetName(code)),
            text(ffi::OTF2_Error_GetDescription(code)),
        )
    };
    Err(Otf2Error {
        call,
        name,
        description,
    })
}

/// # Safety
/// `p` is null or points to a NUL-terminated string.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null and NUL-terminated per the caller.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn null_fail(call: &'static str) -> Otf2Error {
    Otf2Error {
        call,
        name: "NULL".into(),
        description: "the library returned no handle".into(),
    }
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).expect("NUL bytes were replaced")
}

extern "C" fn pre_flush(
    _user: *mut c_void,
    _file: ffi::OTF2_FileType,
    _loc: ffi::OTF2_LocationRef,
    _caller: *mut c_void,
    _final: bool,
) -> ffi::OTF2_FlushType {
    #[cfg(test)]
    if !_final && u32::from(_file) == ffi::OTF2_FILETYPE_EVENTS {
        tests::EVENT_FLUSHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    ffi::OTF2_FLUSH as _
}

/// OTF2's error hook: say nothing (the caller reports the returned code).
extern "C" fn quiet_error(
    _user: *mut c_void,
    _file: *const c_char,
    _line: u64,
    _function: *const c_char,
    code: ffi::OTF2_ErrorCode,
    _fmt: *const c_char,
    _va: *mut ffi::__va_list_tag,
) -> ffi::OTF2_ErrorCode {
    code
}

/// No post-flush callback: a flush while writing leaves no record in the
/// events, so the files do not depend on when the buffers were flushed.
static FLUSH: ffi::OTF2_FlushCallbacks = ffi::OTF2_FlushCallbacks {
    otf2_pre_flush: Some(pre_flush),
    otf2_post_flush: None,
};

/// The chunks an event writer holds before OTF2 writes them out. Its own
/// pool is 128 MiB a writer, so a location's events stayed in memory to
/// the end; a few chunks a writer keep side-by-side writing small. The
/// other files keep OTF2's pool (a flush within a definition file would
/// add a chunk end to it).
const EVENT_CHUNKS: usize = 8;
const POOL_BYTES: u64 = 128 << 20;

/// One buffer's chunks, in its slot of OTF2's per-buffer data.
#[derive(Default)]
struct Pool {
    chunks: Vec<(*mut u8, std::alloc::Layout)>,
}

/// A chunk for a buffer, or null when its pool is spent (an event
/// writer's: `event_chunks` of them): OTF2 then flushes the buffer, frees
/// its chunks ([`chunks_free`]) and asks again.
unsafe extern "C" fn chunk_allocate(
    event_chunks: *mut c_void,
    file: ffi::OTF2_FileType,
    _loc: ffi::OTF2_LocationRef,
    per_buffer: *mut *mut c_void,
    size: u64,
) -> *mut c_void {
    // SAFETY: OTF2 hands this buffer's slot: null at first, then the pool
    // made here.
    let slot = unsafe { &mut *per_buffer };
    if slot.is_null() {
        *slot = Box::into_raw(Box::<Pool>::default()).cast();
    }
    // SAFETY: the slot holds a live pool of this buffer, used by one
    // thread at a time.
    let pool = unsafe { &mut *slot.cast::<Pool>() };
    let most = if u32::from(file) == ffi::OTF2_FILETYPE_EVENTS {
        // The archive's user data is its bound, not a pointer.
        event_chunks as usize
    } else {
        (POOL_BYTES / size.max(1)) as usize
    };
    if pool.chunks.len() >= most {
        return ptr::null_mut();
    }
    let Ok(layout) = std::alloc::Layout::from_size_align(size as usize, 64) else {
        return ptr::null_mut();
    };
    // SAFETY: a layout of OTF2's chunk size, never zero.
    let chunk = unsafe { std::alloc::alloc(layout) };
    if !chunk.is_null() {
        pool.chunks.push((chunk, layout));
    }
    chunk.cast()
}

/// Frees every chunk of a buffer; on the last call, its pool too.
unsafe extern "C" fn chunks_free(
    _user: *mut c_void,
    _file: ffi::OTF2_FileType,
    _loc: ffi::OTF2_LocationRef,
    per_buffer: *mut *mut c_void,
    last: bool,
) {
    // SAFETY: as in `chunk_allocate`.
    let slot = unsafe { &mut *per_buffer };
    if slot.is_null() {
        return;
    }
    // SAFETY: the pool `chunk_allocate` made for this buffer.
    let pool = unsafe { &mut *slot.cast::<Pool>() };
    for (chunk, layout) in pool.chunks.drain(..) {
        // SAFETY: allocated above with this layout, freed once.
        unsafe { std::alloc::dealloc(chunk, layout) };
    }
    if last {
        // SAFETY: made by `Box::into_raw` above; OTF2 calls with `last` once.
        drop(unsafe { Box::from_raw(slot.cast::<Pool>()) });
        *slot = ptr::null_mut();
    }
}

static MEMORY: ffi::OTF2_MemoryCallbacks = ffi::OTF2_MemoryCallbacks {
    otf2_allocate: Some(chunk_allocate),
    otf2_free_all: Some(chunks_free),
};

/// A location's clock at local time `time`: global = local + `offset`,
/// within `stddev` ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockOffset {
    pub time: u64,
    pub offset: i64,
    pub stddev: f64,
}

/// OTF2's locks, so that the event writers of several locations can run
/// on threads of their own: each lock a boxed raw mutex.
unsafe extern "C" fn lock_create(
    _: *mut std::os::raw::c_void,
    lock: *mut ffi::OTF2_Lock,
) -> ffi::OTF2_CallbackCode {
    let m: Box<parking_lot::RawMutex> = Box::new(<parking_lot::RawMutex as RawMutex>::INIT);
    // SAFETY: OTF2 hands a place for the new lock.
    unsafe { *lock = Box::into_raw(m).cast() };
    ffi::OTF2_CALLBACK_SUCCESS as _
}

unsafe extern "C" fn lock_destroy(
    _: *mut std::os::raw::c_void,
    lock: ffi::OTF2_Lock,
) -> ffi::OTF2_CallbackCode {
    // SAFETY: a lock `lock_create` made, destroyed once, not held.
    drop(unsafe { Box::from_raw(lock.cast::<parking_lot::RawMutex>()) });
    ffi::OTF2_CALLBACK_SUCCESS as _
}

unsafe extern "C" fn lock_lock(
    _: *mut std::os::raw::c_void,
    lock: ffi::OTF2_Lock,
) -> ffi::OTF2_CallbackCode {
    // SAFETY: a live lock `lock_create` made.
    unsafe { (*lock.cast::<parking_lot::RawMutex>()).lock() };
    ffi::OTF2_CALLBACK_SUCCESS as _
}

unsafe extern "C" fn lock_unlock(
    _: *mut std::os::raw::c_void,
    lock: ffi::OTF2_Lock,
) -> ffi::OTF2_CallbackCode {
    // SAFETY: a live lock this thread holds (OTF2 pairs the calls).
    unsafe { (*lock.cast::<parking_lot::RawMutex>()).unlock() };
    ffi::OTF2_CALLBACK_SUCCESS as _
}

static LOCKING: ffi::OTF2_LockingCallbacks = ffi::OTF2_LockingCallbacks {
    otf2_release: None,
    otf2_create: Some(lock_create),
    otf2_destroy: Some(lock_destroy),
    otf2_lock: Some(lock_lock),
    otf2_unlock: Some(lock_unlock),
};

/// An archive being written.
pub struct Archive {
    raw: *mut ffi::OTF2_Archive,
    closed: bool,
}

impl Archive {
    /// Creates `dir/name.otf2` and its event and definition directories.
    /// `dir` must not hold an archive of that name already.
    pub fn create(dir: &Path, name: &str) -> Result<Archive> {
        Archive::create_with(dir, name, EVENT_CHUNKS)
    }

    /// [`Archive::create`], an event writer flushing every `event_chunks`
    /// chunks of 1 MiB (tests compare bounds).
    #[doc(hidden)]
    pub fn create_with(dir: &Path, name: &str, event_chunks: usize) -> Result<Archive> {
        let path = cstring(&dir.to_string_lossy());
        let name = cstring(name);
        // SAFETY: registering a callback of exactly the declared type.
        unsafe {
            ffi::OTF2_Error_RegisterCallback(Some(quiet_error), ptr::null_mut());
        }
        // SAFETY: the strings live across the call; OTF2 copies them.
        let raw = unsafe {
            ffi::OTF2_Archive_Open(
                path.as_ptr(),
                name.as_ptr(),
                ffi::OTF2_FILEMODE_WRITE as _,
                1 << 20,
                4 << 20,
                ffi::OTF2_SUBSTRATE_POSIX as _,
                ffi::OTF2_COMPRESSION_NONE as _,
            )
        };
        if raw.is_null() {
            return Err(null_fail("OTF2_Archive_Open"));
        }
        let archive = Archive { raw, closed: false };
        // SAFETY: `raw` is a live archive; FLUSH and LOCKING are static.
        unsafe {
            check(
                "OTF2_Archive_SetLockingCallbacks",
                ffi::OTF2_Archive_SetLockingCallbacks(raw, &LOCKING, ptr::null_mut()),
            )?;
            check(
                "OTF2_Archive_SetFlushCallbacks",
                ffi::OTF2_Archive_SetFlushCallbacks(raw, &FLUSH, ptr::null_mut()),
            )?;
            check(
                "OTF2_Archive_SetMemoryCallbacks",
                ffi::OTF2_Archive_SetMemoryCallbacks(raw, &MEMORY, event_chunks as *mut c_void),
            )?;
            check(
                "OTF2_Archive_SetSerialCollectiveCallbacks",
                ffi::OTF2_Archive_SetSerialCollectiveCallbacks(raw),
            )?;
            check(
                "OTF2_Archive_SetCreator",
                ffi::OTF2_Archive_SetCreator(raw, c"pmtrace".as_ptr()),
            )?;
            check(
                "OTF2_Archive_OpenEvtFiles",
                ffi::OTF2_Archive_OpenEvtFiles(raw),
            )?;
        }
        Ok(archive)
    }

    /// Sets the archive's description.
    pub fn describe(&mut self, description: &str) -> Result<()> {
        let d = cstring(description);
        // SAFETY: live archive; OTF2 copies the string.
        check("OTF2_Archive_SetDescription", unsafe {
            ffi::OTF2_Archive_SetDescription(self.raw, d.as_ptr())
        })
    }

    /// The event writer of location `loc`. Write its events in time order,
    /// then [`EventWriter::close`] it.
    pub fn events(&mut self, loc: u64) -> Result<EventWriter<'_>> {
        self.writer(loc)
    }

    /// The event writers of locations `locs`, in order, to be written side
    /// by side (each on one thread at a time; the archive locks what they
    /// share).
    pub fn event_writers(&mut self, locs: &[u64]) -> Result<Vec<EventWriter<'_>>> {
        locs.iter().map(|&loc| self.writer(loc)).collect()
    }

    fn writer(&self, loc: u64) -> Result<EventWriter<'_>> {
        // SAFETY: live archive.
        let raw = unsafe { ffi::OTF2_Archive_GetEvtWriter(self.raw, loc) };
        if raw.is_null() {
            return Err(null_fail("OTF2_Archive_GetEvtWriter"));
        }
        // SAFETY: a new, empty attribute list.
        let attrs = unsafe { ffi::OTF2_AttributeList_New() };
        if attrs.is_null() {
            return Err(null_fail("OTF2_AttributeList_New"));
        }
        Ok(EventWriter {
            archive: self.raw,
            raw,
            attrs,
            _archive: PhantomData,
        })
    }

    /// Writes the local definitions of every location in `locs`: the clock
    /// offsets of each.
    pub fn local_defs(&mut self, locs: &[(u64, Vec<ClockOffset>)]) -> Result<()> {
        // SAFETY: live archive, event files already closed.
        unsafe {
            check(
                "OTF2_Archive_CloseEvtFiles",
                ffi::OTF2_Archive_CloseEvtFiles(self.raw),
            )?;
            check(
                "OTF2_Archive_OpenDefFiles",
                ffi::OTF2_Archive_OpenDefFiles(self.raw),
            )?;
        }
        for (loc, offsets) in locs {
            // SAFETY: live archive.
            let w = unsafe { ffi::OTF2_Archive_GetDefWriter(self.raw, *loc) };
            if w.is_null() {
                return Err(null_fail("OTF2_Archive_GetDefWriter"));
            }
            for o in offsets {
                // SAFETY: `w` is a live definition writer.
                check("OTF2_DefWriter_WriteClockOffset", unsafe {
                    ffi::OTF2_DefWriter_WriteClockOffset(w, o.time, o.offset, o.stddev)
                })?;
            }
            // SAFETY: `w` came from this archive and is not used again.
            check("OTF2_Archive_CloseDefWriter", unsafe {
                ffi::OTF2_Archive_CloseDefWriter(self.raw, w)
            })?;
        }
        // SAFETY: live archive.
        check("OTF2_Archive_CloseDefFiles", unsafe {
            ffi::OTF2_Archive_CloseDefFiles(self.raw)
        })
    }

    /// The global definition writer (after [`Archive::local_defs`]).
    pub fn global_defs(&mut self) -> Result<GlobalDefs<'_>> {
        // SAFETY: live archive; this is the primary (only) archive.
        let raw = unsafe { ffi::OTF2_Archive_GetGlobalDefWriter(self.raw) };
        if raw.is_null() {
            return Err(null_fail("OTF2_Archive_GetGlobalDefWriter"));
        }
        Ok(GlobalDefs {
            _archive: self,
            raw,
        })
    }

    /// Finishes the archive (anchor file included).
    pub fn close(mut self) -> Result<()> {
        self.closed = true;
        // SAFETY: live archive, closed once (Drop skips it now).
        check("OTF2_Archive_Close", unsafe {
            ffi::OTF2_Archive_Close(self.raw)
        })
    }
}

impl Drop for Archive {
    fn drop(&mut self) {
        if !self.closed {
            // SAFETY: live archive, closed once; an error path, so the
            // result does not matter.
            unsafe {
                ffi::OTF2_Archive_Close(self.raw);
            }
        }
    }
}

/// Attribute values attached to the next event written.
#[derive(Debug, Clone, Copy)]
pub enum AttrValue {
    U64(u64),
    /// A string reference (defined with [`GlobalDefs::string`]).
    Str(u32),
}

/// Writes the events of one location.
pub struct EventWriter<'a> {
    archive: *mut ffi::OTF2_Archive,
    raw: *mut ffi::OTF2_EvtWriter,
    attrs: *mut ffi::OTF2_AttributeList,
    /// The archive outlives its writers.
    _archive: PhantomData<&'a Archive>,
}

// SAFETY: a writer and its attribute list are used by one thread at a
// time, and what writers share in the archive is locked (`LOCKING`).
unsafe impl Send for EventWriter<'_> {}

macro_rules! event {
    ($(#[$doc:meta])* $name:ident => $ffi:ident ( $($arg:ident : $ty:ty),* )) => {
        $(#[$doc])*
        #[allow(clippy::too_many_arguments)] // the C API's arguments
        pub fn $name(&mut self, attrs: &[(u32, AttrValue)], time: u64 $(, $arg: $ty)*) -> Result<()> {
            self.attach(attrs)?;
            // SAFETY: live writer and attribute list; OTF2 consumes the
            // list's entries and leaves it empty.
            check(stringify!($ffi), unsafe {
                ffi::$ffi(self.raw, self.attrs, time $(, $arg)*)
            })
        }
    };
}

impl EventWriter<'_> {
    fn attach(&mut self, attrs: &[(u32, AttrValue)]) -> Result<()> {
        for &(attr, v) in attrs {
            // SAFETY: live attribute list.
            let code = unsafe {
                match v {
                    AttrValue::U64(x) => ffi::OTF2_AttributeList_AddUint64(self.attrs, attr, x),
                    AttrValue::Str(s) => ffi::OTF2_AttributeList_AddStringRef(self.attrs, attr, s),
                }
            };
            check("OTF2_AttributeList_Add", code)?;
        }
        Ok(())
    }

    event!(enter => OTF2_EvtWriter_Enter(region: u32));
    event!(leave => OTF2_EvtWriter_Leave(region: u32));
    event!(mpi_send => OTF2_EvtWriter_MpiSend(receiver: u32, comm: u32, tag: u32, bytes: u64));
    event!(mpi_isend => OTF2_EvtWriter_MpiIsend(receiver: u32, comm: u32, tag: u32, bytes: u64, request: u64));
    event!(mpi_isend_complete => OTF2_EvtWriter_MpiIsendComplete(request: u64));
    event!(mpi_irecv_request => OTF2_EvtWriter_MpiIrecvRequest(request: u64));
    event!(mpi_recv => OTF2_EvtWriter_MpiRecv(sender: u32, comm: u32, tag: u32, bytes: u64));
    event!(mpi_irecv => OTF2_EvtWriter_MpiIrecv(sender: u32, comm: u32, tag: u32, bytes: u64, request: u64));
    event!(mpi_request_cancelled => OTF2_EvtWriter_MpiRequestCancelled(request: u64));
    event!(mpi_collective_begin => OTF2_EvtWriter_MpiCollectiveBegin());
    event!(mpi_collective_end => OTF2_EvtWriter_MpiCollectiveEnd(op: CollectiveOp, comm: u32, root: u32, sent: u64, recvd: u64));
    event!(nonblocking_collective_request => OTF2_EvtWriter_NonBlockingCollectiveRequest(request: u64));
    event!(nonblocking_collective_complete => OTF2_EvtWriter_NonBlockingCollectiveComplete(op: CollectiveOp, comm: u32, root: u32, sent: u64, recvd: u64, request: u64));
    event!(
        /// The writer waited for a buffer from `time` to `stop`.
        buffer_flush => OTF2_EvtWriter_BufferFlush(stop: u64)
    );

    /// Hands the writer back to the archive.
    pub fn close(self) -> Result<()> {
        let (archive, raw, attrs) = (self.archive, self.raw, self.attrs);
        std::mem::forget(self);
        // SAFETY: the list and writer are live and not used again.
        unsafe {
            ffi::OTF2_AttributeList_Delete(attrs);
            check(
                "OTF2_Archive_CloseEvtWriter",
                ffi::OTF2_Archive_CloseEvtWriter(archive, raw),
            )
        }
    }
}

impl Drop for EventWriter<'_> {
    fn drop(&mut self) {
        // SAFETY: an error path: free the list; the archive's close frees
        // the writer.
        unsafe {
            ffi::OTF2_AttributeList_Delete(self.attrs);
        }
    }
}

/// Writes the global definitions.
pub struct GlobalDefs<'a> {
    _archive: &'a mut Archive,
    raw: *mut ffi::OTF2_GlobalDefWriter,
}

macro_rules! def {
    ($(#[$doc:meta])* $name:ident => $ffi:ident ( $($arg:ident : $ty:ty),* )) => {
        $(#[$doc])*
        #[allow(clippy::too_many_arguments)] // the C API's arguments
        pub fn $name(&mut self $(, $arg: $ty)*) -> Result<()> {
            // SAFETY: live global definition writer; plain values only.
            check(stringify!($ffi), unsafe { ffi::$ffi(self.raw $(, $arg)*) })
        }
    };
}

impl GlobalDefs<'_> {
    /// Defines string `id`.
    pub fn string(&mut self, id: u32, s: &str) -> Result<()> {
        let c = cstring(s);
        // SAFETY: live writer; OTF2 copies the string.
        check("OTF2_GlobalDefWriter_WriteString", unsafe {
            ffi::OTF2_GlobalDefWriter_WriteString(self.raw, id, c.as_ptr())
        })
    }

    /// Defines group `id` with `members`.
    pub fn group(
        &mut self,
        id: u32,
        name: u32,
        kind: ffi::OTF2_GroupType,
        members: &[u64],
    ) -> Result<()> {
        // SAFETY: live writer; `members` is valid for its length and copied.
        check("OTF2_GlobalDefWriter_WriteGroup", unsafe {
            ffi::OTF2_GlobalDefWriter_WriteGroup(
                self.raw,
                id,
                name,
                kind,
                ffi::OTF2_PARADIGM_MPI as _,
                ffi::OTF2_GROUP_FLAG_NONE as _,
                members.len() as u32,
                members.as_ptr(),
            )
        })
    }

    def!(clock_properties => OTF2_GlobalDefWriter_WriteClockProperties(resolution: u64, offset: u64, length: u64, realtime: u64));
    def!(paradigm => OTF2_GlobalDefWriter_WriteParadigm(paradigm: ffi::OTF2_Paradigm, name: u32, class: ffi::OTF2_ParadigmClass));
    def!(system_tree_node => OTF2_GlobalDefWriter_WriteSystemTreeNode(id: u32, name: u32, class: u32, parent: u32));
    def!(location_group => OTF2_GlobalDefWriter_WriteLocationGroup(id: u32, name: u32, kind: ffi::OTF2_LocationGroupType, parent: u32, creator: u32));
    def!(location => OTF2_GlobalDefWriter_WriteLocation(id: u64, name: u32, kind: ffi::OTF2_LocationType, events: u64, group: u32));
    def!(region => OTF2_GlobalDefWriter_WriteRegion(id: u32, name: u32, canonical: u32, description: u32, role: RegionRole, paradigm: ffi::OTF2_Paradigm, flags: ffi::OTF2_RegionFlag, file: u32, begin: u32, end: u32));
    def!(comm => OTF2_GlobalDefWriter_WriteComm(id: u32, name: u32, group: u32, parent: u32, flags: ffi::OTF2_CommFlag));
    def!(inter_comm => OTF2_GlobalDefWriter_WriteInterComm(id: u32, name: u32, group_a: u32, group_b: u32, common: u32, flags: ffi::OTF2_CommFlag));
    def!(attribute => OTF2_GlobalDefWriter_WriteAttribute(id: u32, name: u32, description: u32, kind: Type));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Event buffers flushed before their writer closed.
    pub(super) static EVENT_FLUSHES: AtomicUsize = AtomicUsize::new(0);

    /// One location of `n` enter/leave pairs, flushed every `chunks`.
    fn write(dir: &Path, chunks: usize, n: u64) -> Vec<u8> {
        let mut a = Archive::create_with(dir, "t", chunks).unwrap();
        let mut w = a.events(0).unwrap();
        for i in 0..n {
            w.enter(&[], 10 * i, (i % 7) as u32).unwrap();
            w.leave(&[(0, AttrValue::U64(i))], 10 * i + 5, (i % 7) as u32)
                .unwrap();
        }
        w.close().unwrap();
        a.close().unwrap();
        std::fs::read(dir.join("t").join("0.evt")).unwrap()
    }

    #[test]
    fn an_event_file_is_the_same_however_often_its_writer_flushed() {
        let base = std::env::temp_dir().join(format!("pmtrace-otf2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        // About 5 MiB of events: one flush at the end, or one every chunk.
        let n = 200_000;
        let whole = write(&base.join("whole"), 128, n);
        assert_eq!(EVENT_FLUSHES.load(Ordering::Relaxed), 0);
        let flushed = write(&base.join("flushed"), 1, n);
        // A flush at every chunk of 1 MiB after the first.
        assert!(EVENT_FLUSHES.load(Ordering::Relaxed) >= 4);
        std::fs::remove_dir_all(&base).unwrap();
        assert!(whole.len() > 4 << 20, "{} bytes", whole.len());
        assert!(whole == flushed, "the files differ");
    }
}
