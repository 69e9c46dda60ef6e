//! Just enough of ELF to list the symbols an object expects the dynamic
//! linker to bind (the undefined entries of its `.dynsym`), and to name
//! the function an address lies in (64-bit, little-endian objects, those
//! of x86-64 and AArch64 Linux).

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const STT_FUNC: u8 = 2;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?)).ok()
}

/// A symbol table of an object: its entries and their string table.
struct Table<'a> {
    symbols: &'a [u8],
    strings: &'a [u8],
}

impl Table<'_> {
    fn name(&self, sym: &[u8]) -> Option<&[u8]> {
        let rest = self.strings.get(u32_at(sym, 0)? as usize..)?;
        Some(&rest[..rest.iter().position(|&c| c == 0)?])
    }
}

/// The symbol tables of type `kind` of the object `image`; `None` if it
/// is not an ELF object this reads (or is cut short).
fn tables(image: &[u8], kind: u32) -> Option<Vec<Table<'_>>> {
    if image.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = u64_at(image, 0x28)?;
    let shentsize = usize::from(u16_at(image, 0x3a)?);
    let shnum = usize::from(u16_at(image, 0x3c)?);
    let section = |i: usize| -> Option<(u32, usize, usize, usize)> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(image, h + 4)?,           // sh_type
            u64_at(image, h + 24)?,          // sh_offset
            u64_at(image, h + 32)?,          // sh_size
            u32_at(image, h + 40)? as usize, // sh_link
        ))
    };
    let mut out = Vec::new();
    for (_, symoff, symsize, link) in (0..shnum).filter_map(section).filter(|s| s.0 == kind) {
        let (_, stroff, strsize, _) = section(link)?;
        out.push(Table {
            strings: image.get(stroff..stroff.checked_add(strsize)?)?,
            symbols: image.get(symoff..symoff.checked_add(symsize)?)?,
        });
    }
    Some(out)
}

/// The names of the undefined dynamic symbols of the object `image`, or
/// `None` if it is not an ELF object this reads (or is cut short).
pub fn undefined_symbols(image: &[u8]) -> Option<Vec<Vec<u8>>> {
    let dynsym = tables(image, SHT_DYNSYM)?;
    let t = dynsym.first()?;
    let mut out = Vec::new();
    for sym in t.symbols.chunks_exact(24) {
        let shndx = u16_at(sym, 6)?;
        if shndx != 0 || u32_at(sym, 0)? == 0 {
            continue;
        }
        out.push(t.name(sym)?.to_vec());
    }
    Some(out)
}

/// The function of the object `image` that address `addr` (as the
/// object's tables know it) lies in, by its full symbol table if it kept
/// one, else its dynamic one; with the offset of `addr` into it.
pub fn function_at(image: &[u8], addr: u64) -> Option<(String, u64)> {
    let within = |t: &Table| {
        t.symbols.chunks_exact(24).find_map(|sym| {
            let value = u64::from_le_bytes(sym.get(8..16)?.try_into().ok()?);
            let size = u64::from_le_bytes(sym.get(16..24)?.try_into().ok()?);
            if sym[4] & 0xf != STT_FUNC || addr < value || addr - value >= size {
                return None;
            }
            Some((
                String::from_utf8_lossy(t.name(sym)?).into_owned(),
                addr - value,
            ))
        })
    };
    [SHT_SYMTAB, SHT_DYNSYM]
        .into_iter()
        .find_map(|kind| tables(image, kind)?.iter().find_map(within))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn named_for_the_test() -> usize {
        named_for_the_test as *const () as usize
    }

    #[test]
    fn an_address_inside_a_function_of_the_test_binary_is_named_by_it() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let image = std::fs::read(exe).unwrap();
        let at = named_for_the_test();
        let place = crate::places::locate(&[at]).pop().flatten().unwrap();
        let addr = (at - place.bias) as u64;
        let (name, off) = function_at(&image, addr + 1).unwrap();
        assert!(name.contains("named_for_the_test"), "{name}");
        assert_eq!(off, 1);
        assert_eq!(function_at(&image, 0), None);
        assert_eq!(function_at(b"not an object", addr), None);
    }

    #[test]
    fn the_test_binary_expects_libc_to_define_write() {
        let image = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let names = undefined_symbols(&image).expect("an ELF object");
        assert!(names.iter().any(|n| n == b"write"), "{} names", names.len());
        assert!(!names.iter().any(|n| n.is_empty()));
    }

    #[test]
    fn what_is_not_a_whole_elf_object_reads_as_none() {
        let image = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(undefined_symbols(b"#!/bin/sh\n"), None);
        assert_eq!(undefined_symbols(&image[..64]), None);
        assert_eq!(undefined_symbols(&[]), None);
    }
}
