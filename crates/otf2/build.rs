//! Binds the system OTF2 library (Debian: libopen-trace-format2-dev).
//!
//! Only the writer side is bound. Every reason the probe fails is printed,
//! not just the first, so a missing package is obvious.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=OTF2_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=OTF2_LIB_DIR");
    let include = env::var("OTF2_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let header = PathBuf::from(&include).join("otf2/otf2.h");
    let mut problems = Vec::new();
    if !header.exists() {
        problems.push(format!(
            "{} not found (install libopen-trace-format2-dev, `make deps` does, or set OTF2_INCLUDE_DIR)",
            header.display()
        ));
    }
    if let Ok(dir) = env::var("OTF2_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    }
    println!("cargo:rustc-link-lib=dylib=open-trace-format2");
    let bindings = bindgen::Builder::default()
        .header_contents("otf2_wrap.h", "#include <otf2/otf2.h>\n")
        .clang_arg(format!("-I{include}"))
        .allowlist_function(
            "OTF2_(Archive|GlobalDefWriter|DefWriter|EvtWriter|AttributeList|Error)_.*",
        )
        .allowlist_type("OTF2_.*")
        .allowlist_var("OTF2_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate();
    match bindings {
        Ok(b) => {
            let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
            b.write_to_file(out.join("otf2_bindings.rs"))
                .expect("OUT_DIR is writable");
        }
        Err(e) => {
            problems.push(format!("bindgen over otf2/otf2.h failed: {e}"));
            for p in &problems {
                println!("cargo:warning={p}");
            }
            panic!("cannot bind OTF2:\n  {}", problems.join("\n  "));
        }
    }
}
