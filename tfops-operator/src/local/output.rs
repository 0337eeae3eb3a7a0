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
