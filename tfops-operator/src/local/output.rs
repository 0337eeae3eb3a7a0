//! What local mode prints: a line per step, events, and a table of conditions at the end. On
//! a terminal the running step shows a spinner and its elapsed time (`indicatif`); with
//! `--logs`, Terraform's own output is printed as it comes.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

/// Prints progress to standard output, or to standard error when the result goes to
/// standard output as JSON. Colors only on a terminal.
#[derive(Clone)]
pub struct Printer {
    to_stderr: bool,
    color: bool,
    current: Arc<Mutex<String>>,
    /// The running step's spinner: lines printed meanwhile go above it.
    spinner: Arc<Mutex<Option<indicatif::ProgressBar>>>,
    /// Print Terraform's output lines (`--logs`).
    logs: bool,
}

impl Printer {
    /// A printer; `json` sends progress to standard error.
    pub fn new(json: bool) -> Self {
        let color = if json {
            std::io::stderr().is_terminal()
        } else {
            std::io::stdout().is_terminal()
        };
        Self {
            to_stderr: json,
            color,
            current: Arc::new(Mutex::new(String::new())),
            spinner: Arc::new(Mutex::new(None)),
            logs: false,
        }
    }

    /// The same printer, printing Terraform's output lines as they come (`--logs`).
    pub fn with_logs(mut self, logs: bool) -> Self {
        self.logs = logs;
        self
    }

    /// Whether Terraform's output lines are printed.
    pub fn logs(&self) -> bool {
        self.logs
    }

    /// Shows a spinner with `what` and the elapsed time until [`Printer::stop_spinner`], on
    /// a terminal only (elsewhere nothing moves: the step's line comes when it is over).
    pub fn start_spinner(&self, what: &str) {
        if !self.color {
            return;
        }
        let target = if self.to_stderr {
            indicatif::ProgressDrawTarget::stderr()
        } else {
            indicatif::ProgressDrawTarget::stdout()
        };
        let bar = indicatif::ProgressBar::with_draw_target(None, target);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("  {spinner} {msg} {elapsed:.dim}")
        {
            bar.set_style(style);
        }
        bar.set_message(what.to_string());
        bar.enable_steady_tick(std::time::Duration::from_millis(100));
        if let Ok(mut s) = self.spinner.lock()
            && let Some(old) = s.replace(bar)
        {
            old.finish_and_clear();
        }
    }

    /// Removes the spinner, if any.
    pub fn stop_spinner(&self) {
        if let Ok(mut s) = self.spinner.lock()
            && let Some(bar) = s.take()
        {
            bar.finish_and_clear();
        }
    }

    /// One line of Terraform's output, when `--logs` asks for them.
    pub fn terraform_line(&self, line: &str) {
        if self.logs {
            let line = line.trim_end_matches('\n');
            self.emit(&format!("    {}", self.paint("2", line)));
        }
    }

    fn emit(&self, line: &str) {
        let spinner = self.spinner.lock().ok().and_then(|s| s.clone());
        if let Some(bar) = spinner {
            bar.println(line);
            return;
        }
        if self.to_stderr {
            let _ = writeln!(std::io::stderr(), "{line}");
        } else {
            let _ = writeln!(std::io::stdout(), "{line}");
        }
    }

    /// The heading of an object.
    pub fn object(&self, name: &str) {
        if let Ok(mut c) = self.current.lock() {
            c.clear();
            c.push_str(name);
        }
        self.emit(&self.paint("1", &format!("● {name}")));
    }

    /// One step.
    pub fn step(&self, text: &str) {
        self.emit(&format!("  {text}"));
    }

    /// A warning.
    pub fn warn(&self, text: &str) {
        self.emit(&format!("  {}", self.paint("33", &format!("! {text}"))));
    }

    /// `text` in an ANSI color when on a terminal.
    pub fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Prints a table (first row is the header).
    pub fn table(&self, rows: &[Vec<String>]) {
        for line in render_table(rows) {
            self.emit(&line);
        }
    }
}

/// The lines of a table (first row the header): columns two spaces apart, each as wide as its
/// widest cell as a terminal shows it (colour codes take no width), the last column unpadded.
pub fn render_table(rows: &[Vec<String>]) -> Vec<String> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| console::measure_text_width(s)))
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < row.len() {
                    let pad = widths[i] - console::measure_text_width(cell) + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_take_no_width() {
        let green = "\x1b[32mTrue\x1b[0m".to_string();
        let rows = vec![
            vec!["OBJECT".into(), "READY".into(), "REASON".into()],
            vec!["default/a".into(), green, "TerraformAppliedSucceed".into()],
            vec![
                "default/longer-name".into(),
                "False".into(),
                "Failed".into(),
            ],
        ];
        let lines: Vec<String> = render_table(&rows)
            .iter()
            .map(|l| console::strip_ansi_codes(l).into_owned())
            .collect();
        assert_eq!(
            lines,
            [
                "OBJECT               READY  REASON",
                "default/a            True   TerraformAppliedSucceed",
                "default/longer-name  False  Failed",
            ]
        );
    }

    #[test]
    fn wide_characters_count_as_the_terminal_shows_them() {
        let rows = vec![
            vec!["NAME".into(), "X".into()],
            vec!["日本".into(), "1".into()],
        ];
        assert_eq!(render_table(&rows), ["NAME  X", "日本  1"]);
    }
}
