//! YAML for the tools that install the CRDs. `serde_yaml_ng` writes YAML 1.2, where `no` and
//! `yes` are strings; kubectl, Helm and Kustomize read YAML 1.1 (go-yaml v2), where a plain
//! `no` is the boolean false. The `forceUnlock` enum (`no`, `yes`, `auto`) came out of
//! `kubectl apply -f config/crd/` as `[false, true, auto]` with a `false` default, and every
//! object then failed validation. So the checked-in YAML quotes those scalars.

/// Plain scalars YAML 1.1 reads as booleans (a real boolean is written `true`/`false`).
const YAML11_BOOLEANS: &[&str] = &[
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
    "OFF",
];

/// `yaml` (as `serde_yaml_ng` writes it) with every plain value or list item that YAML 1.1
/// would read as a boolean single-quoted; block scalars (`|`, `>`) are left as they are.
pub fn for_yaml11(yaml: &str) -> String {
    let mut out = String::with_capacity(yaml.len() + 64);
    // The indentation of the key whose block scalar the following lines belong to.
    let mut block: Option<usize> = None;
    for line in yaml.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(key_indent) = block {
            if line.trim().is_empty() || indent > key_indent {
                out.push_str(line);
                out.push('\n');
                continue;
            }
            block = None;
        }
        let trimmed = line.trim_start();
        let value_at = if let Some(rest) = trimmed.strip_prefix("- ") {
            Some(line.len() - rest.len())
        } else {
            trimmed.find(": ").map(|i| indent + i + 2)
        };
        match value_at {
            Some(at) if YAML11_BOOLEANS.contains(&&line[at..]) => {
                out.push_str(&line[..at]);
                out.push('\'');
                out.push_str(&line[at..]);
                out.push('\'');
            }
            Some(at) if line[at..].starts_with('|') || line[at..].starts_with('>') => {
                block = Some(indent);
                out.push_str(line);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn yes_and_no_are_quoted_and_nothing_else_changes() {
        let yaml = "a:\n  default: no\n  enum:\n  - no\n  - yes\n  - auto\n  flag: false\n  description: |-\n    forceUnlock: no\n    - yes\n  other: 'x: no'\n";
        assert_eq!(
            for_yaml11(yaml),
            "a:\n  default: 'no'\n  enum:\n  - 'no'\n  - 'yes'\n  - auto\n  flag: false\n  description: |-\n    forceUnlock: no\n    - yes\n  other: 'x: no'\n"
        );
    }

    #[test]
    fn the_quoted_form_reads_back_the_same() {
        let yaml = "default: no\nenum:\n- no\n- yes\n";
        let before: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
        let after: serde_json::Value = serde_yaml_ng::from_str(&for_yaml11(yaml)).unwrap();
        assert_eq!(before, after);
    }
}
