//! The tables through which loaded objects reach MPI functions: what
//! each reference to a function pmtrace exports holds, corrected where the
//! loader's answer is not what the program would see without pmtrace, or
//! not what it would see with pmtrace preloaded as it should be.
//!
//! **Bound past pmtrace.** An object loaded with `RTLD_DEEPBIND` looks
//! its symbols up in itself and its own dependencies first, and only then
//! in the process's global scope, where the preloaded libpmtrace.so comes
//! before any MPI library. Julia opens every packaged C library so: a
//! library that links libmpi (t8code, under Trixi.jl and MPI.jl) then has
//! its references to `MPI_X` bound to the MPI library, and its calls never
//! reach a preloaded tool (MPI.jl #893: Nsight Systems and Extrae see only
//! the calls MPI.jl itself makes, through `dlsym`). So, as LLNL's GOTCHA
//! does, pmtrace writes its own function into every reference of another
//! object to a name it exports (`R_X86_64_JUMP_SLOT`, `R_X86_64_GLOB_DAT`,
//! `R_X86_64_64` of an undefined symbol) that holds another object's
//! definition, or a lazy slot not bound yet, whenever the global scope
//! finds pmtrace's: what the reference would hold without
//! `RTLD_DEEPBIND`. A reference bound to anything else (another tool
//! preloaded before pmtrace, an executable that defines the name) is left
//! alone, and so is an object's reference to a name it defines itself
//! (the MPI library's calls of its own functions). When a table cannot be
//! written, pmtrace says so in one line (`front::say`).
//!
//! **Weak references to what the MPI lacks.** A program, or a module it
//! loads, may reference MPI functions weakly and test them for null to
//! learn what its MPI has: the extension of mpi4py 4's wheel, built
//! against Open MPI 5, does so for 392 functions (the MPI-4 large-count
//! ones among them), and under Open MPI 4.1 falls back to the older forms.
//! libpmtrace.so defines the functions of three interfaces, so each such
//! reference resolves to pmtrace's and the test says yes. So, once bound,
//! pmtrace writes null back into every weak reference (`R_X86_64_GLOB_DAT`,
//! `R_X86_64_64` of a weak undefined symbol) that the loader pointed at
//! one of pmtrace's functions whose MPI function the running library
//! lacks: what the loader would have written without pmtrace.
//!
//! Both happen in every object loaded when pmtrace binds, and in each
//! object loaded later before its first lookup through `dlsym` (how a
//! program reaches the functions of a library it opened, and how Python
//! and Julia reach a module: src/dl.rs). Calls from an object's
//! constructors, which run inside `dlopen`, come too early: if the MPI
//! was initialised so, `front` says at exit that nothing was traced.
//!
//! ```text
//!  object's PT_DYNAMIC ─► DT_RELA (DT_RELASZ),       Elf64_Rela { offset, info, addend }
//!                         DT_JMPREL (DT_PLTRELSZ) ─►   │ sym = info >> 32, kind = info & 0xffffffff
//!                         DT_SYMTAB, DT_STRTAB         ▼
//!                          Elf64_Sym { name, info (bind << 4), shndx = 0: undefined }
//!  word at base + offset: the loader's answer (+ addend); a lazy slot points
//!  into the object's own PLT until its first call
//! ```

use crate::trampolines::{ENTRIES, NAMES, SLOTS};
use core::ffi::{c_void, CStr};
use parking_lot::Mutex;
use pmtrace_linkage as link;

/// `Elf64_Dyn`.
#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_PLTREL: i64 = 20;
const DT_JMPREL: i64 = 23;
const R_X86_64_64: u64 = 1;
const R_X86_64_GLOB_DAT: u64 = 6;
const R_X86_64_JUMP_SLOT: u64 = 7;
const STB_WEAK: u8 = 2;

/// A loaded object, as first seen.
struct Object {
    base: usize,
    name: std::ffi::CString,
    /// Its weak references were looked at with the bound MPI's gaps.
    weak_done: bool,
}

/// What is patched so far.
struct Seen {
    objects: Vec<Object>,
    /// The loader's count of objects added when last looked.
    adds: u64,
    /// Whether the last look knew the bound MPI's gaps.
    bound: bool,
    /// Per slot, once asked: whether the global scope finds pmtrace's
    /// function (pmtrace is preloaded, so that scope never changes
    /// before it).
    global_ours: Vec<Option<bool>>,
    /// Objects whose references bound past pmtrace could not be written.
    unwritable: Vec<String>,
}

static SEEN: Mutex<Seen> = Mutex::new(Seen {
    objects: Vec::new(),
    adds: u64::MAX,
    bound: false,
    global_ours: Vec::new(),
    unwritable: Vec::new(),
});

/// Looks at every object not seen yet: points its references bound past
/// pmtrace at pmtrace's functions; once bound (`missing`: per slot,
/// whether the running MPI lacks the function), nulls its weak references
/// to what the MPI lacks. Cheap when nothing was loaded since the last
/// call. Returns the objects whose tables could not be written (each
/// once).
pub fn patch(missing: Option<&[bool]>) -> Vec<String> {
    let mut seen = SEEN.lock();
    let adds = loader_adds();
    if adds == seen.adds && seen.bound == missing.is_some() {
        return Vec::new();
    }
    seen.adds = adds;
    seen.bound = missing.is_some();
    if seen.global_ours.is_empty() {
        seen.global_ours = vec![None; SLOTS];
    }
    let own = link::own() as usize;
    for (base, name, dynamic) in loaded() {
        let bytes = name.to_bytes();
        if bytes.starts_with(b"linux-vdso") || bytes.starts_with(b"linux-gate") {
            continue;
        }
        if link::object_of(dynamic as *const c_void) as usize == own {
            continue;
        }
        let i = match seen
            .objects
            .iter()
            .position(|o| o.base == base && o.name == name)
        {
            Some(i) => i,
            None => {
                // SAFETY: the dynamic section of an object the loader has loaded.
                let tables = unsafe { Tables::read(base, dynamic) };
                if let Some(tables) = &tables {
                    // SAFETY: the tables of that object, as just read.
                    if !unsafe { redirect(tables, &mut seen.global_ours) } {
                        seen.unwritable.push(name.to_string_lossy().into_owned());
                    }
                }
                seen.objects.push(Object {
                    base,
                    name,
                    weak_done: false,
                });
                seen.objects.len() - 1
            }
        };
        if let Some(missing) = missing {
            if !seen.objects[i].weak_done {
                seen.objects[i].weak_done = true;
                if missing.iter().any(|&m| m) {
                    // SAFETY: as above.
                    if let Some(tables) = unsafe { Tables::read(base, dynamic) } {
                        // SAFETY: the tables of that object, as just read.
                        unsafe { null_weak(&tables, missing) };
                    }
                }
            }
        }
    }
    core::mem::take(&mut seen.unwritable)
}

/// The loaded objects: load address, path, and address of the dynamic
/// section.
fn loaded() -> Vec<(usize, std::ffi::CString, usize)> {
    let mut found: Vec<(usize, std::ffi::CString, usize)> = Vec::new();
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is `found` below; `info` is the loader's.
        let found = unsafe { &mut *(data as *mut Vec<(usize, std::ffi::CString, usize)>) };
        let info = unsafe { &*info };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: the loader's program headers, dlpi_phnum of them.
        let phdrs =
            unsafe { core::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let base = info.dlpi_addr as usize;
        let Some(dynamic) = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC) else {
            return 0;
        };
        let name = if info.dlpi_name.is_null() {
            c"".into()
        } else {
            // SAFETY: a NUL-terminated path from the loader.
            unsafe { CStr::from_ptr(info.dlpi_name) }.into()
        };
        found.push((base, name, base.wrapping_add(dynamic.p_vaddr as usize)));
        0
    }
    // SAFETY: the callback reads only what the loader hands it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut found as *mut _ as *mut c_void) };
    found
}

/// The loader's count of objects added so far.
fn loader_adds() -> u64 {
    let mut adds = 0u64;
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: the loader's info, of `size` bytes; `data` is `adds`.
        unsafe {
            if size >= core::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) {
                *(data as *mut u64) = (*info).dlpi_adds;
            }
        }
        1
    }
    // SAFETY: the callback writes only `adds`.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut adds as *mut u64 as *mut c_void) };
    adds
}

/// A dynamic entry's address: the loader rewrites them to absolute ones
/// where the section is writable; an offset below the load address is
/// still relative.
fn absolute(base: usize, ptr: usize) -> usize {
    if ptr < base {
        base + ptr
    } else {
        ptr
    }
}

/// An object's relocation tables, as the loader has them in memory.
struct Tables {
    base: usize,
    /// The object, as `pmtrace_linkage::object_of` names it.
    this: *mut c_void,
    strtab: usize,
    symtab: usize,
    /// `DT_RELA` and `DT_JMPREL` (the lazy slots), as (address, entries).
    relas: [(usize, usize); 2],
}

/// One relocation of a name pmtrace exports: its slot, kind, symbol, and
/// where the word is.
struct Reference<'a> {
    slot: usize,
    kind: u64,
    sym: &'a libc::Elf64_Sym,
    at: *mut usize,
    addend: usize,
}

impl Tables {
    /// # Safety
    /// `dynamic` is the loaded dynamic section of the object at `base`.
    unsafe fn read(base: usize, dynamic: usize) -> Option<Tables> {
        let (mut strtab, mut symtab, mut rela, mut relasz) = (0usize, 0usize, 0usize, 0usize);
        let (mut jmprel, mut pltrelsz, mut pltrel) = (0usize, 0usize, DT_RELA);
        let mut d = dynamic as *const Dyn;
        // SAFETY: the dynamic section ends with DT_NULL.
        unsafe {
            while (*d).tag != DT_NULL {
                let v = (*d).val as usize;
                match (*d).tag {
                    DT_STRTAB => strtab = absolute(base, v),
                    DT_SYMTAB => symtab = absolute(base, v),
                    DT_RELA => rela = absolute(base, v),
                    DT_RELASZ => relasz = v,
                    DT_JMPREL => jmprel = absolute(base, v),
                    DT_PLTRELSZ => pltrelsz = v,
                    DT_PLTREL => pltrel = v as i64,
                    _ => {}
                }
                d = d.add(1);
            }
        }
        if strtab == 0 || symtab == 0 {
            return None;
        }
        let size = core::mem::size_of::<libc::Elf64_Rela>();
        let mut relas = [(rela, relasz / size), (0, 0)];
        if jmprel != 0 && pltrel == DT_RELA && jmprel != rela {
            relas[1] = (jmprel, pltrelsz / size);
        }
        Some(Tables {
            base,
            this: link::object_of(dynamic as *const c_void),
            strtab,
            symtab,
            relas,
        })
    }

    /// Calls `f` for every relocation of an undefined symbol whose name
    /// pmtrace exports.
    ///
    /// # Safety
    /// The tables are those of an object still loaded.
    unsafe fn references(&self, mut f: impl FnMut(Reference<'_>)) {
        for &(table, count) in &self.relas {
            if table == 0 {
                continue;
            }
            for i in 0..count {
                // SAFETY: within the table's size, as its dynamic entry says.
                let r = unsafe { &*(table as *const libc::Elf64_Rela).add(i) };
                let kind = r.r_info & 0xffff_ffff;
                if kind != R_X86_64_GLOB_DAT && kind != R_X86_64_64 && kind != R_X86_64_JUMP_SLOT {
                    continue;
                }
                let sym_index = (r.r_info >> 32) as usize;
                if sym_index == 0 {
                    continue;
                }
                // SAFETY: the symbol a relocation of the object names.
                let sym = unsafe { &*(self.symtab as *const libc::Elf64_Sym).add(sym_index) };
                if sym.st_shndx != 0 {
                    continue;
                }
                // SAFETY: a NUL-terminated name in the object's string table.
                let name = unsafe {
                    CStr::from_ptr((self.strtab + sym.st_name as usize) as *const libc::c_char)
                };
                let Ok(slot) = NAMES.binary_search(&name) else {
                    continue;
                };
                f(Reference {
                    slot,
                    kind,
                    sym,
                    at: self.base.wrapping_add(r.r_offset as usize) as *mut usize,
                    addend: r.r_addend as usize,
                });
            }
        }
    }
}

/// Points the object's references bound past pmtrace at pmtrace's
/// functions (see the module's text); false if a word could not be
/// written. `global_ours` caches, per slot, whether the global scope
/// finds pmtrace's function.
///
/// # Safety
/// The tables are those of an object still loaded.
unsafe fn redirect(tables: &Tables, global_ours: &mut [Option<bool>]) -> bool {
    let own = link::own();
    let this = tables.this;
    let mut maps: Option<Vec<(usize, usize, bool)>> = None;
    let mut written = true;
    // SAFETY: the caller's promise.
    unsafe {
        tables.references(|r| {
            let ours = (ENTRIES[r.slot] as usize).wrapping_add(r.addend);
            // SAFETY: a relocated word of the object, read in place.
            let value = r.at.read_volatile();
            if value == ours || value == 0 {
                return;
            }
            let holder = link::object_of(value.wrapping_sub(r.addend) as *const c_void);
            let unbound = holder == this && r.kind == R_X86_64_JUMP_SLOT;
            if holder.is_null() || holder == own || (holder == this && !unbound) {
                return;
            }
            let global = *global_ours[r.slot].get_or_insert_with(|| {
                let f = link::real_dlsym(libc::RTLD_DEFAULT, NAMES[r.slot]);
                f as usize == ENTRIES[r.slot] as usize
            });
            if !global {
                return;
            }
            let maps = maps.get_or_insert_with(mappings);
            // SAFETY: the word the loader wrote, on a page made writable for
            // the write and given back its protection.
            written &= write_word(r.at, ours, maps);
        });
    }
    written
}

/// Nulls the object's weak references to functions the MPI lacks that
/// the loader pointed at pmtrace's.
///
/// # Safety
/// The tables are those of an object still loaded.
unsafe fn null_weak(tables: &Tables, missing: &[bool]) {
    let mut maps: Option<Vec<(usize, usize, bool)>> = None;
    // SAFETY: the caller's promise.
    unsafe {
        tables.references(|r| {
            if r.kind == R_X86_64_JUMP_SLOT || r.sym.st_info >> 4 != STB_WEAK || !missing[r.slot] {
                return;
            }
            let ours = (ENTRIES[r.slot] as usize).wrapping_add(r.addend);
            // SAFETY: a relocated word of the object, read in place.
            if r.at.read_volatile() != ours {
                return;
            }
            let maps = maps.get_or_insert_with(mappings);
            // SAFETY: as in `redirect`.
            write_word(r.at, r.addend, maps);
        });
    }
}

/// Writes `value` at `at`, whatever the page's protection (`maps`: the
/// process's mappings, as `mappings` reads them); false if it cannot.
unsafe fn write_word(at: *mut usize, value: usize, maps: &[(usize, usize, bool)]) -> bool {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let start = (at as usize) & !(page - 1);
    let end = (at as usize + core::mem::size_of::<usize>() + page - 1) & !(page - 1);
    let writable = maps.iter().any(|&(a, b, w)| a <= start && start < b && w);
    // SAFETY: pages of a loaded object; `at` is an aligned word on them.
    unsafe {
        if !writable
            && libc::mprotect(
                start as *mut c_void,
                end - start,
                libc::PROT_READ | libc::PROT_WRITE,
            ) != 0
        {
            return false;
        }
        at.write_volatile(value);
        if !writable {
            libc::mprotect(start as *mut c_void, end - start, libc::PROT_READ);
        }
    }
    true
}

/// The process's mappings: start, end, and whether writable (from
/// /proc/self/maps; none if it cannot be read).
fn mappings() -> Vec<(usize, usize, bool)> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let (a, b) = range.split_once('-')?;
            let a = usize::from_str_radix(a, 16).ok()?;
            let b = usize::from_str_radix(b, 16).ok()?;
            Some((a, b, perms.as_bytes().get(1) == Some(&b'w')))
        })
        .collect()
}
