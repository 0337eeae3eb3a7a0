//! Runnable examples of tfops used as a library; see the `[[example]]` entries of this crate.
