//! Just enough of ELF to list the symbols an object expects the dynamic
//! linker to bind: the undefined entries of its `.dynsym` (64-bit,
//! little-endian objects, those of x86-64 and AArch64 Linux).

const SHT_DYNSYM: u32 = 11;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?)).ok()
}

/// The names of the undefined dynamic symbols of the object `image`, or
/// `None` if it is not an ELF object this reads (or is cut short).
pub fn undefined_symbols(image: &[u8]) -> Option<Vec<Vec<u8>>> {
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
    let (_, symoff, symsize, link) = (0..shnum).filter_map(section).find(|s| s.0 == SHT_DYNSYM)?;
    let (_, stroff, strsize, _) = section(link)?;
    let strings = image.get(stroff..stroff.checked_add(strsize)?)?;
    let symbols = image.get(symoff..symoff.checked_add(symsize)?)?;
    let mut out = Vec::new();
    for sym in symbols.chunks_exact(24) {
        let name = u32_at(sym, 0)? as usize;
        let shndx = u16_at(sym, 6)?;
        if shndx != 0 || name == 0 {
            continue;
        }
        let rest = strings.get(name..)?;
        let end = rest.iter().position(|&c| c == 0)?;
        out.push(rest[..end].to_vec());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
