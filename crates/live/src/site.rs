//! Where a blocked call came from, for people: the frames the rank's
//! writer thread found (`SiteFrame`: an object and an address in it), with
//! the function, file and line that the object's debug information gives
//! (read with `addr2line`), or else the function its symbol table gives,
//! when the object can be read here. A frame that cannot be resolved keeps
//! the dynamic symbol the writer thread found, or its address.

use std::collections::HashMap;
use std::process::{Command, Stdio};

use pmtrace_format::live::SiteFrame;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Frame {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub object: String,
    /// In the object, as its tables know it (hex).
    pub address: String,
}

impl Frame {
    /// A frame as the writer thread found it, not resolved yet.
    pub fn of(f: &SiteFrame) -> Frame {
        Frame {
            function: f
                .symbol
                .as_deref()
                .map(|s| s.rsplit_once('+').map_or(s, |(name, _)| name).to_string()),
            file: None,
            line: None,
            object: f.object.clone(),
            address: format!("{:#x}", f.address),
        }
    }

    /// "solve (main.c:42)", "solve", or "app+0x11a9".
    pub fn short(&self) -> String {
        let object = || {
            let name = self.object.rsplit('/').next().unwrap_or("");
            format!("{name}+{}", self.address)
        };
        match (&self.function, &self.file, self.line) {
            (Some(f), Some(file), Some(l)) => {
                format!("{f} ({}:{l})", file.rsplit('/').next().unwrap_or(file))
            }
            (Some(f), _, _) => f.clone(),
            (None, Some(file), Some(l)) => {
                format!(
                    "{} ({}:{l})",
                    object(),
                    file.rsplit('/').next().unwrap_or(file)
                )
            }
            _ => object(),
        }
    }
}

/// What `addr2line` said of one address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Resolved {
    function: Option<String>,
    file: Option<String>,
    line: Option<u32>,
}

/// Resolves frames with `addr2line`, once per object and address.
#[derive(Default)]
pub struct Resolver {
    known: HashMap<(String, u64), Resolved>,
    /// `addr2line` could not be run: not tried again.
    missing: bool,
}

impl Resolver {
    /// Fills in the function, file and line of `frames` where the objects'
    /// tables tell them.
    pub fn resolve<'a>(&mut self, frames: impl IntoIterator<Item = &'a mut Frame>) {
        let mut frames: Vec<&mut Frame> = frames.into_iter().collect();
        let mut asks: HashMap<String, Vec<u64>> = HashMap::new();
        for f in &frames {
            let Some(a) = address(f) else { continue };
            if !f.object.is_empty() && !self.known.contains_key(&(f.object.clone(), a)) {
                asks.entry(f.object.clone()).or_default().push(a);
            }
        }
        for (object, mut addrs) in asks {
            addrs.sort_unstable();
            addrs.dedup();
            let answers = self.ask(&object, &addrs);
            for (i, a) in addrs.into_iter().enumerate() {
                let r = answers.get(i).cloned().unwrap_or_default();
                self.known.insert((object.clone(), a), r);
            }
        }
        for f in frames.iter_mut() {
            let Some(a) = address(f) else { continue };
            if let Some(r) = self.known.get(&(f.object.clone(), a)) {
                if r.function.is_some() {
                    f.function.clone_from(&r.function);
                }
                f.file.clone_from(&r.file);
                f.line = r.line;
            }
        }
    }

    /// What the object's tables say of `addrs`. A function name is taken
    /// from `addr2line` only with a file and line: without debug
    /// information it names the nearest dynamic symbol, however far.
    fn ask(&mut self, object: &str, addrs: &[u64]) -> Vec<Resolved> {
        let Ok(image) = std::fs::read(object) else {
            return Vec::new();
        };
        let mut lines = if self.missing {
            Vec::new()
        } else {
            let out = Command::new("addr2line")
                .args(["-f", "-C", "-e", object])
                .args(addrs.iter().map(|a| format!("{a:#x}")))
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output();
            match out {
                Ok(o) if o.status.success() => parse(&String::from_utf8_lossy(&o.stdout)),
                Ok(_) => Vec::new(),
                Err(_) => {
                    self.missing = true;
                    Vec::new()
                }
            }
        };
        lines.resize(addrs.len(), Resolved::default());
        for (r, &a) in lines.iter_mut().zip(addrs) {
            if r.file.is_none() || r.line.is_none() {
                r.function = pmtrace_linkage::elf::function_at(&image, a).map(|(name, _)| name);
            }
        }
        lines
    }
}

fn address(f: &Frame) -> Option<u64> {
    u64::from_str_radix(f.address.trim_start_matches("0x"), 16).ok()
}

/// `addr2line -f` output: two lines an address, the function ("??" when
/// not known), then "file:line" ("??:0" or "??:?" when not known; maybe
/// followed by " (discriminator N)").
fn parse(out: &str) -> Vec<Resolved> {
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .map(|pair| {
            let function = pair
                .first()
                .map(|s| s.trim())
                .filter(|s| !s.is_empty() && *s != "??")
                .map(str::to_string);
            let place = pair.get(1).map_or("", |s| s.trim());
            let place = place.split(" (discriminator").next().unwrap_or(place);
            let (file, line) = place.rsplit_once(':').unwrap_or((place, ""));
            Resolved {
                function,
                file: (!file.is_empty() && file != "??").then(|| file.to_string()),
                line: line.parse().ok().filter(|&l| l > 0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addr2line_output_is_read_two_lines_an_address() {
        let out =
            "solve\n/src/app/solver.c:42\n??\n??:0\nmain\n/src/app/main.c:7 (discriminator 3)\n";
        assert_eq!(
            parse(out),
            vec![
                Resolved {
                    function: Some("solve".into()),
                    file: Some("/src/app/solver.c".into()),
                    line: Some(42)
                },
                Resolved::default(),
                Resolved {
                    function: Some("main".into()),
                    file: Some("/src/app/main.c".into()),
                    line: Some(7)
                },
            ]
        );
    }

    #[test]
    fn a_frame_reads_shortly_by_what_is_known_of_it() {
        let f = Frame::of(&SiteFrame {
            address: 0x11a9,
            symbol: Some("run_step+0x40".into()),
            object: "/apps/libphys.so".into(),
        });
        assert_eq!(f.function.as_deref(), Some("run_step"));
        assert_eq!(f.short(), "run_step");
        let mut g = Frame::of(&SiteFrame {
            address: 0x11a9,
            symbol: None,
            object: "/apps/solver".into(),
        });
        assert_eq!(g.short(), "solver+0x11a9");
        g.file = Some("/src/solver.c".into());
        g.line = Some(9);
        assert_eq!(g.short(), "solver+0x11a9 (solver.c:9)");
        g.function = Some("main".into());
        assert_eq!(g.short(), "main (solver.c:9)");
    }

    #[inline(never)]
    fn a_function_of_this_test() -> usize {
        a_function_of_this_test as *const () as usize
    }

    /// A frame in this test's own binary (built with debug information,
    /// and with `addr2line` installed by `make deps`).
    #[test]
    fn a_frame_of_this_binary_is_named_with_its_file_and_line() {
        let at = a_function_of_this_test() + 1;
        let place = pmtrace_linkage::places::locate(&[at])
            .pop()
            .flatten()
            .unwrap();
        let mut f = Frame::of(&SiteFrame {
            address: (at - place.bias) as u64,
            symbol: None,
            object: place.object.to_string_lossy().into_owned(),
        });
        Resolver::default().resolve([&mut f]);
        let function = f.function.clone().unwrap_or_default();
        assert!(function.contains("a_function_of_this_test"), "{f:?}");
        assert!(
            f.file.as_deref().unwrap_or("").ends_with("site.rs"),
            "{f:?}"
        );
        assert!(f.line.is_some(), "{f:?}");
    }

    #[test]
    fn an_object_that_is_not_here_leaves_its_frames_as_they_were() {
        let mut f = Frame::of(&SiteFrame {
            address: 0x10,
            symbol: Some("f+0x1".into()),
            object: "/no/such/object".into(),
        });
        let before = f.clone();
        Resolver::default().resolve([&mut f]);
        assert_eq!(f, before);
    }
}
