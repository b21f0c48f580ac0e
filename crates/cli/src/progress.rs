//! A progress bar with rate and ETA on stderr, drawn only when stderr is a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// A progress bar of `len` steps (hidden when stderr is not a terminal: logs stay clean).
#[derive(Debug, Clone)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar labelled `what`, counting `unit`s (items, batches).
    pub fn new(len: u64, what: &str, unit: &str) -> Progress {
        Progress::with_drawing(len, what, unit, std::io::stderr().is_terminal())
    }

    /// A bar drawn on stderr when `drawn`, else hidden.
    pub fn with_drawing(len: u64, what: &str, unit: &str, drawn: bool) -> Progress {
        let target = if drawn {
            ProgressDrawTarget::stderr_with_hz(10)
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(len), target);
        let style = ProgressStyle::with_template(&format!(
            "{{msg}} [{{bar:20}}] {{human_pos}}/{{human_len}} {unit}, {{rate}}, ETA {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "rate",
            |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{}/s", rate(state.per_sec()));
            },
        )
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar }
    }

    /// `n` more steps done.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// `n` steps that were done before this run (items already complete): counted, but kept out
    /// of the rate and the ETA.
    pub fn skip(&self, n: u64) {
        self.bar.inc(n);
        self.bar.reset_eta();
    }

    /// Whether the bar is drawn.
    pub fn is_drawn(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Removes the bar (the summary that follows replaces it).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// A rate with three significant digits and a k/M suffix.
fn rate(per_sec: f64) -> String {
    suffixed(per_sec, [2, 1, 0])
}

/// `n` with an M or k suffix from a thousand up, with `decimals` places for M, k and none.
pub(crate) fn suffixed(n: f64, [m, k, one]: [usize; 3]) -> String {
    if n >= 1e6 {
        format!("{:.m$}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.k$}k", n / 1e3)
    } else {
        format!("{n:.one$}")
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(rate(12_345_678.0), "12.35M");
        assert_eq!(rate(4_096.0), "4.1k");
        assert_eq!(rate(7.4), "7");
    }

    #[test]
    fn a_hidden_bar_counts() {
        let p = Progress::with_drawing(10, "x", "items", false);
        assert!(!p.is_drawn());
        p.skip(2);
        p.inc(3);
        assert_eq!(p.bar.position(), 5);
        p.finish();
        assert!(p.bar.is_finished());
    }
}
