//! Fuzz target `options`: the `pmtrace` command line. The input is its
//! arguments, separated by NUL bytes; they are parsed as `pmtrace` parses
//! them (clap, with the value parsers of sizes, times and fractions), and
//! what a verb checks before it starts is checked (`synth`'s imbalance
//! and iteration range). Nothing is run.

use clap::Parser;
use pmtrace_cli::command::{synth_spec, Cli, Command};
use pmtrace_fuzz::{justify, Bounded};

#[global_allocator]
static ALLOC: Bounded = Bounded;

fn main() {
    afl::fuzz!(|input: &[u8]| {
        justify(input.len(), 64);
        let text = String::from_utf8_lossy(input);
        let args = std::iter::once("pmtrace").chain(text.split('\0'));
        // clap's own errors (usage, help, version) are outcomes too.
        let Ok(cli) = Cli::try_parse_from(args) else {
            return;
        };
        if let Command::Synth(args) = cli.command {
            let _ = synth_spec(&args);
        }
        justify(usize::MAX / 2, 1);
    });
}
