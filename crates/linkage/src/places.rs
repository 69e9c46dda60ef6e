//! Which loaded object holds a code address, and where in it: what the
//! live view's call sites (the frames a blocked call came from) are made
//! of. Not for signal handlers: the loader's lists are read under its lock.

use core::ffi::{c_void, CStr};
use std::path::PathBuf;

/// A code address, placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The object's file (the executable's, read from /proc, for the
    /// executable).
    pub object: PathBuf,
    /// The object's load bias: the address minus it is what its symbol and
    /// debug tables (and `addr2line -e object`) know the address by.
    pub bias: usize,
    /// The dynamic symbol the address lies in, with the address's offset
    /// from it (none for an address past the symbol's end, in code the
    /// dynamic table does not name, such as a static function).
    pub symbol: Option<(String, usize)>,
}

/// A loaded object: its bias, its name (empty for the executable) and the
/// address ranges it is loaded at.
type Loaded = (usize, Vec<u8>, Vec<(usize, usize)>);

/// The objects loaded now.
fn objects() -> Vec<Loaded> {
    let mut all: Vec<Loaded> = Vec::new();
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is `all` below; `info`, its name and its program
        // headers are the loader's, valid during the callback.
        let (all, info) = unsafe { (&mut *(data as *mut Vec<Loaded>), &*info) };
        let name = if info.dlpi_name.is_null() {
            Vec::new()
        } else {
            // SAFETY: a NUL-terminated path from the loader.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_bytes()
                .to_vec()
        };
        let bias = info.dlpi_addr as usize;
        let ranges = (0..usize::from(info.dlpi_phnum))
            // SAFETY: `dlpi_phnum` headers at `dlpi_phdr`.
            .map(|i| unsafe { &*info.dlpi_phdr.add(i) })
            .filter(|p| p.p_type == libc::PT_LOAD)
            .map(|p| {
                let start = bias + p.p_vaddr as usize;
                (start, start + p.p_memsz as usize)
            })
            .collect();
        all.push((bias, name, ranges));
        0
    }
    // SAFETY: the callback reads only what the loader hands it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut all as *mut _ as *mut c_void) };
    all
}

/// Each of `addrs` placed, or `None` for one in no loaded object (code
/// made at run time, for one).
pub fn locate(addrs: &[usize]) -> Vec<Option<Place>> {
    let objects = objects();
    addrs
        .iter()
        .map(|&a| {
            let (bias, name, _) = objects
                .iter()
                .find(|(_, _, r)| r.iter().any(|&(s, e)| (s..e).contains(&a)))?;
            let object = if name.is_empty() {
                std::fs::read_link("/proc/self/exe").ok()?
            } else {
                use std::os::unix::ffi::OsStrExt;
                std::ffi::OsStr::from_bytes(name).into()
            };
            Some(Place {
                object,
                bias: *bias,
                symbol: symbol_at(a),
            })
        })
        .collect()
}

/// `dladdr1`'s flag for the symbol table entry (dlfcn.h).
const RTLD_DL_SYMENT: libc::c_int = 1;

/// The dynamic symbol `addr` lies in, and the offset from it.
fn symbol_at(addr: usize) -> Option<(String, usize)> {
    let mut info = core::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    let mut sym: *mut c_void = core::ptr::null_mut();
    // SAFETY: dladdr1 fills `info` and `sym` for any address, or returns 0.
    let found = unsafe {
        libc::dladdr1(
            addr as *const c_void,
            info.as_mut_ptr(),
            &mut sym,
            RTLD_DL_SYMENT,
        )
    };
    if found == 0 {
        return None;
    }
    // SAFETY: filled by dladdr1.
    let info = unsafe { info.assume_init() };
    if info.dli_sname.is_null() || info.dli_saddr.is_null() || sym.is_null() {
        return None;
    }
    // SAFETY: the loader's entry of the symbol named.
    let size = unsafe { (*(sym as *const libc::Elf64_Sym)).st_size } as usize;
    if addr.wrapping_sub(info.dli_saddr as usize) >= size {
        return None;
    }
    // SAFETY: a NUL-terminated name from the loader.
    let name = unsafe { CStr::from_ptr(info.dli_sname) };
    Some((
        name.to_string_lossy().into_owned(),
        addr.wrapping_sub(info.dli_saddr as usize),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn here() -> usize {
        here as *const () as usize
    }

    #[test]
    fn an_address_of_this_test_is_in_its_executable_and_libc_is_in_libc() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let getpid = libc::getpid as *const () as usize;
        let found = locate(&[here(), getpid, 8]);
        let own = found[0].as_ref().unwrap();
        assert_eq!(own.object, exe);
        assert!(own.bias <= here());
        let c = found[1].as_ref().unwrap();
        assert!(
            c.object.to_string_lossy().contains("libc.so"),
            "{:?}",
            c.object
        );
        let (name, off) = c.symbol.as_ref().unwrap();
        assert!(name.contains("getpid"), "{name}");
        assert!(*off < 4096);
        assert_eq!(found[2], None);
    }
}
