//! What the CLI's end-to-end tests share: running the real executable and checking how it
//! exited.

use std::process::{Command, Output};

pub fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("run strata")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Run a command that must succeed; returns its stdout.
pub fn ok(args: &[&str]) -> String {
    let out = strata(args);
    assert!(
        out.status.success(),
        "strata {args:?} failed with {}: {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Run a command that must fail with `code`; returns its stderr.
pub fn fails(args: &[&str], code: i32) -> String {
    let out = strata(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "strata {args:?}: stdout {} stderr {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}
