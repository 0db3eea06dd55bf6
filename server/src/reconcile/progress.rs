//! A one-line progress bar on stderr, drawn only when stderr is a terminal
//! (redirected output and logs stay free of `\r` noise).

use std::io::{IsTerminal, Write};

pub(crate) struct Progress {
    on: bool,
    label: &'static str,
    total: u64,
    drawn: bool,
}

impl Progress {
    /// A bar for `total` units, shown when `wanted` and stderr is a terminal.
    pub(crate) fn new(label: &'static str, total: u64, wanted: bool) -> Self {
        Progress {
            on: wanted && std::io::stderr().is_terminal(),
            label,
            total,
            drawn: false,
        }
    }

    pub(crate) fn set(&mut self, done: u64) {
        if !self.on {
            return;
        }
        const WIDTH: u64 = 30;
        let done = done.min(self.total);
        // An empty run is complete from the start.
        let filled = (done * WIDTH).checked_div(self.total).unwrap_or(WIDTH);
        let percent = (done * 100).checked_div(self.total).unwrap_or(100);
        let bar: String = (0..WIDTH)
            .map(|i| if i < filled { '#' } else { '-' })
            .collect();
        let mut err = std::io::stderr().lock();
        // A failed write to a terminal is not worth failing the import for.
        let _ = write!(
            err,
            "\r{} [{bar}] {done}/{} ({percent}%)",
            self.label, self.total
        );
        let _ = err.flush();
        self.drawn = true;
    }

    /// Ends the line so whatever is printed next starts on a fresh one.
    pub(crate) fn finish(&mut self) {
        if self.drawn {
            let _ = writeln!(std::io::stderr());
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
