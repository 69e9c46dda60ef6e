//! Progress on stderr for verbs that can take more than a couple of
//! seconds: a spinner naming the phase, then a bar while writing. Nothing
//! is drawn unless stderr is a terminal, so logs and pipes stay clean.
//! `PMTRACE_TIMES=1` prints each phase's wall time on stderr when it ends
//! (where a verb's seconds go, for tuning the engine), and out of core
//! the most it held in spill files.

use std::cell::RefCell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
    /// With `PMTRACE_TIMES`: the phase under way and when it began.
    timing: Option<RefCell<(String, Instant)>>,
}

impl Progress {
    pub fn new() -> Progress {
        let bar = if std::io::stderr().is_terminal() {
            let b = ProgressBar::new_spinner();
            b.enable_steady_tick(Duration::from_millis(120));
            b
        } else {
            ProgressBar::hidden()
        };
        let timing = std::env::var_os("PMTRACE_TIMES")
            .filter(|v| v != "0")
            .map(|_| RefCell::new(("starting".to_owned(), Instant::now())));
        Progress { bar, timing }
    }

    /// Ends the phase under way (its time, if asked) and begins `what`.
    fn next(&self, what: &str) {
        if let Some(t) = &self.timing {
            let mut t = t.borrow_mut();
            eprintln!(
                "pmtrace: time: {} {:.3} s",
                t.0,
                t.1.elapsed().as_secs_f64()
            );
            *t = (what.to_owned(), Instant::now());
        }
    }

    /// A phase of unknown length.
    pub fn phase(&self, what: &str) {
        self.next(what);
        self.bar.set_style(ProgressStyle::default_spinner());
        self.bar.set_message(what.to_owned());
    }

    /// A phase of `len` steps; returns the callback that reports them.
    pub fn counted(&self, what: &str, len: u64) -> impl FnMut(u64) + 'static {
        self.next(what);
        self.bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({eta})")
                .expect("the template is valid")
                .progress_chars("=> "),
        );
        self.bar.set_length(len);
        self.bar.set_position(0);
        self.bar.set_message(what.to_owned());
        let bar = self.bar.clone();
        move |done| bar.set_position(done)
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.next("");
        if self.timing.is_some() && crate::spill::peak() > 0 {
            eprintln!(
                "pmtrace: time: out of core, at most {} MiB in spill files",
                crate::spill::peak() >> 20
            );
        }
        self.bar.finish_and_clear();
    }
}
