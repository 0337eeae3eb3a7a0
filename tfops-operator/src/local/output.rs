//! What local mode prints: a line per step, events, and a table of conditions at the end.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

/// Prints progress to standard output, or to standard error when the result goes to
/// standard output as JSON. Colors only on a terminal.
#[derive(Clone)]
pub struct Printer {
    to_stderr: bool,
    color: bool,
    current: Arc<Mutex<String>>,
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
        }
    }

    fn emit(&self, line: &str) {
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
        let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                rows.iter()
                    .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in rows {
            let line: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, cell)| {
                    if i + 1 == row.len() {
                        cell.clone()
                    } else {
                        format!("{cell:<w$}", w = widths[i])
                    }
                })
                .collect();
            self.emit(line.join("  ").trim_end());
        }
    }
}
