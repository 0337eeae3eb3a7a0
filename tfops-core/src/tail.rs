//! The bounded tail of what Terraform printed: the driver keeps it while a run goes, the run
//! history records it.

/// The most bytes of Terraform's output kept per run (the last ones).
pub const MAX_TAIL: usize = 8 * 1024;

/// Appends `more` to `tail`, keeping at most [`MAX_TAIL`] bytes (the last ones, cut at a
/// line start where one is near, never inside a character).
pub fn append_tail(tail: &mut String, more: &str) {
    tail.push_str(more);
    if tail.len() <= MAX_TAIL {
        return;
    }
    let mut cut = tail.len() - MAX_TAIL;
    while !tail.is_char_boundary(cut) {
        cut += 1;
    }
    if let Some(nl) = tail[cut..].find('\n')
        && nl < 512
    {
        cut += nl + 1;
    }
    tail.drain(..cut);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes_from_a_line_start() {
        let mut tail = String::new();
        for i in 0..2000 {
            append_tail(&mut tail, &format!("line {i} é\n"));
        }
        assert!(tail.len() <= MAX_TAIL);
        assert!(tail.starts_with("line "), "{}", &tail[..20]);
        assert!(tail.ends_with("line 1999 é\n"));
    }
}
