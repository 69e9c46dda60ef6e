//! Weak references to MPI functions the running MPI lacks.
//!
//! A program, or a module it loads, may reference MPI functions weakly and
//! test them for null to learn what its MPI has: the extension of mpi4py
//! 4's wheel, built against Open MPI 5, does so for 392 functions (the
//! MPI-4 large-count ones among them), and under Open MPI 4.1 falls back
//! to the older forms. libpmtrace.so defines the functions of three
//! interfaces, so each such reference resolves to pmtrace's and the test
//! says yes. So, once bound, pmtrace writes null back into every weak
//! reference (`R_X86_64_GLOB_DAT`, `R_X86_64_64` of a weak undefined
//! symbol) that the loader pointed at one of pmtrace's functions whose
//! MPI function the running library lacks: what the loader would have
//! written without pmtrace. It does so in every object loaded when it
//! binds, and in each object loaded later before its first lookup through
//! `dlsym` (how Python and Julia reach a module they loaded: src/dl.rs).
//!
//! ```text
//!  object's PT_DYNAMIC ─► DT_RELA (DT_RELASZ) ─► Elf64_Rela { offset, info, addend }
//!                         DT_SYMTAB, DT_STRTAB      │ sym = info >> 32
//!                                                   ▼
//!                          Elf64_Sym { name, info (bind << 4), shndx = 0: undefined }
//! ```

use crate::trampolines::{ENTRIES, NAMES};
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
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const R_X86_64_64: u64 = 1;
const R_X86_64_GLOB_DAT: u64 = 6;
const STB_WEAK: u8 = 2;

/// What is patched so far: the objects seen (by load address and name),
/// and the loader's count of objects added when last looked.
struct Seen {
    objects: Vec<(usize, std::ffi::CString)>,
    adds: u64,
}

static SEEN: Mutex<Seen> = Mutex::new(Seen {
    objects: Vec::new(),
    adds: u64::MAX,
});

/// Patches the weak references of every object not seen yet, for the
/// slots `missing` says the running MPI lacks. Cheap when nothing was
/// loaded since the last call.
pub fn patch(missing: &[bool]) {
    if !missing.iter().any(|&m| m) {
        return;
    }
    let mut seen = SEEN.lock();
    let adds = loader_adds();
    if adds == seen.adds {
        return;
    }
    seen.adds = adds;
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
    let own = link::own() as usize;
    for (base, name, dynamic) in found {
        if seen.objects.iter().any(|(b, n)| *b == base && *n == name) {
            continue;
        }
        seen.objects.push((base, name.clone()));
        let bytes = name.to_bytes();
        if bytes.starts_with(b"linux-vdso") || bytes.starts_with(b"linux-gate") {
            continue;
        }
        let inside = dynamic as *const c_void;
        if link::object_of(inside) as usize == own {
            continue;
        }
        // SAFETY: the dynamic section of an object the loader has loaded.
        unsafe { patch_object(base, dynamic, missing) };
    }
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

/// # Safety
/// `dynamic` is the loaded dynamic section of the object at `base`.
unsafe fn patch_object(base: usize, dynamic: usize, missing: &[bool]) {
    let (mut strtab, mut symtab, mut rela, mut relasz) = (0usize, 0usize, 0usize, 0usize);
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
                _ => {}
            }
            d = d.add(1);
        }
    }
    if strtab == 0 || symtab == 0 || rela == 0 {
        return;
    }
    let relocs = relasz / core::mem::size_of::<libc::Elf64_Rela>();
    // The process's mappings, read at the first write the object needs.
    let mut maps: Option<Vec<(usize, usize, bool)>> = None;
    for i in 0..relocs {
        // SAFETY: within DT_RELASZ bytes of the table.
        let r = unsafe { &*(rela as *const libc::Elf64_Rela).add(i) };
        let kind = r.r_info & 0xffff_ffff;
        if kind != R_X86_64_GLOB_DAT && kind != R_X86_64_64 {
            continue;
        }
        let sym_index = (r.r_info >> 32) as usize;
        // SAFETY: the symbol a relocation of the object names.
        let sym = unsafe { &*(symtab as *const libc::Elf64_Sym).add(sym_index) };
        if sym.st_info >> 4 != STB_WEAK || sym.st_shndx != 0 {
            continue;
        }
        // SAFETY: a NUL-terminated name in the object's string table.
        let name =
            unsafe { CStr::from_ptr((strtab + sym.st_name as usize) as *const libc::c_char) };
        let Ok(slot) = NAMES.binary_search(&name) else {
            continue;
        };
        if !missing[slot] {
            continue;
        }
        let at = base.wrapping_add(r.r_offset as usize) as *mut usize;
        let ours = (ENTRIES[slot] as usize).wrapping_add(r.r_addend as usize);
        // SAFETY: a relocated word of the object, read in place.
        if unsafe { at.read_volatile() } != ours {
            continue;
        }
        let maps = maps.get_or_insert_with(mappings);
        // SAFETY: the word the loader wrote, on a page made writable for the
        // write and given back its protection (RELRO pages are read-only).
        unsafe { write_word(at, r.r_addend as usize, maps) };
    }
}

/// Writes `value` at `at`, whatever the page's protection (`maps`: the
/// process's mappings, as `mappings` reads them).
unsafe fn write_word(at: *mut usize, value: usize, maps: &[(usize, usize, bool)]) {
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
            return;
        }
        at.write_volatile(value);
        if !writable {
            libc::mprotect(start as *mut c_void, end - start, libc::PROT_READ);
        }
    }
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
