//! Progress on stderr for verbs that can take more than a couple of
//! seconds: a spinner naming the phase, then a bar while writing. Nothing
//! is drawn unless stderr is a terminal, so logs and pipes stay clean.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
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
        Progress { bar }
    }

    /// A phase of unknown length.
    pub fn phase(&self, what: &str) {
        self.bar.set_style(ProgressStyle::default_spinner());
        self.bar.set_message(what.to_owned());
    }

    /// A phase of `len` steps; returns the callback that reports them.
    pub fn counted(&self, what: &str, len: u64) -> impl FnMut(u64) + 'static {
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
        self.bar.finish_and_clear();
    }
}
