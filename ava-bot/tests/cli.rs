//! Runs the `ava` binary as a user would and checks what it prints.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;

fn ava(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ava"))
        .args(args)
        .output()
        .expect("run ava")
}

#[test]
fn demo_recalls_the_right_memories_and_keeps_scopes_apart() {
    let out = ava(&["demo"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ava demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Stored 10 memories"), "{stdout}");
    // The first hit after each question is the memory that answers it.
    let first_hit = |question: &str| -> String {
        let after = stdout
            .split(question)
            .nth(1)
            .unwrap_or_else(|| panic!("{question} missing"));
        after.lines().nth(1).unwrap_or_default().to_owned()
    };
    assert!(first_hit("name of my cat").contains("Pixel"), "{stdout}");
    assert!(first_hit("allergic to?").contains("peanuts"), "{stdout}");
    assert!(first_hit("my manager").contains("Tomás"), "{stdout}");
    assert!(first_hit("going to Kyoto").contains("Kyoto"), "{stdout}");
    assert!(stdout.contains("finds 0 memories"), "{stdout}");
    assert!(
        stdout.contains("not a language model"),
        "the demo is honest about its embedder"
    );
}

#[test]
fn unknown_subcommand_fails_with_usage() {
    let out = ava(&["frobnicate"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unrecognized subcommand") && stderr.contains("Usage"),
        "{stderr}"
    );
}
