//! `docs/cli.md`, the command-line reference, rendered from `ava`'s clap definitions and
//! checked against the file, so the reference cannot drift from the flags (rust-analyzer's
//! generated docs, checked by a test). `AVA_BLESS=1` rewrites the file.

use std::fmt::Write as _;

use clap::{ArgAction, CommandFactory};

/// Where the reference lives, from this crate.
const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md");

/// The command that rewrites the file.
const BLESS: &str = "AVA_BLESS=1 cargo test -p ava-bot --bin ava cli_docs";

/// The whole reference, from the parsed-and-built `Cli` definition. Deterministic: clap
/// keeps declaration order, and nothing here reads the environment or the clock.
fn render() -> String {
    let mut cli = crate::Cli::command();
    // Built, so each subcommand's usage line is `ava <name> ...`.
    cli.build();
    let mut out = String::new();
    out.push_str("# `ava` command reference\n\n");
    let _ = writeln!(
        out,
        "<!-- Generated from ava's clap definitions (ava-bot/src/cli_docs.rs); do not edit.\n     \
         `{BLESS}` rewrites it. -->\n"
    );
    push_about(&mut out, &cli);
    let _ = writeln!(out, "Usage: `{}`\n", usage(&mut cli));
    out.push_str(
        "Every command also takes `-h`/`--help`; `ava --version` prints the version. \
         Where a flag names an environment variable, the variable is read when the flag is \
         not given. For what each command is for, see the pages linked from the \
         [README](../README.md).\n\n",
    );

    out.push_str("## Commands\n\n| command | what it does |\n| --- | --- |\n");
    for sub in visible_subcommands(&cli) {
        list_command(&mut out, sub, &["ava"]);
    }
    out.push('\n');

    out.push_str("## Options of every command\n\n");
    out.push_str(
        "These go before or after the command's name (`ava --db x.db recall ...` or \
         `ava recall --db x.db ...`).\n\n",
    );
    push_args(&mut out, cli.get_arguments().filter(|a| a.is_global_set()));

    let mut subs: Vec<clap::Command> = visible_subcommands(&cli).cloned().collect();
    for sub in &mut subs {
        push_command(&mut out, sub, &["ava"], 2);
    }
    // One trailing newline, as an editor leaves it.
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// The subcommands a user sees (not `help`, nor hidden ones).
fn visible_subcommands(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// A table row for `cmd` (and one for each of its subcommands) in the command list.
fn list_command(out: &mut String, cmd: &clap::Command, parents: &[&str]) {
    let name = full_name(parents, cmd);
    let about = cmd.get_about().map(ToString::to_string).unwrap_or_default();
    let _ = writeln!(
        out,
        "| [`{name}`](#{}) | {} |",
        anchor(&name),
        markdown(&about).replace('|', "\\|")
    );
    let mut path = parents.to_vec();
    path.push(cmd.get_name());
    for sub in visible_subcommands(cmd) {
        list_command(out, sub, &path);
    }
}

/// `ava docs add`: the names from the root down.
fn full_name(parents: &[&str], cmd: &clap::Command) -> String {
    let mut words = parents.to_vec();
    words.push(cmd.get_name());
    words.join(" ")
}

/// The heading anchor GitHub gives `` ## `name` ``: lower case, spaces as dashes.
fn anchor(name: &str) -> String {
    name.to_lowercase().replace(' ', "-")
}

/// The usage line clap prints, without its `Usage: ` prefix.
fn usage(cmd: &mut clap::Command) -> String {
    let text = cmd.render_usage().to_string();
    text.trim()
        .trim_start_matches("Usage:")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The command's long description (its whole doc comment), else its short one.
fn push_about(out: &mut String, cmd: &clap::Command) {
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        for paragraph in about.to_string().split("\n\n") {
            let _ = writeln!(out, "{}\n", markdown(paragraph.trim()));
        }
    }
}

/// A section for `cmd` and, below it, one for each of its subcommands.
fn push_command(out: &mut String, cmd: &mut clap::Command, parents: &[&str], depth: usize) {
    let name = full_name(parents, cmd);
    let _ = writeln!(out, "{} `{name}`\n", "#".repeat(depth));
    push_about(out, cmd);
    let _ = writeln!(out, "Usage: `{}`\n", usage(cmd));
    // Global options are listed once, above; help and version are clap's own.
    let own: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_global_set() && !a.is_hide_set())
        .filter(|a| !matches!(a.get_action(), ArgAction::Help | ArgAction::Version))
        .collect();
    if !own.is_empty() {
        push_args(out, own.into_iter());
    }
    let mut path = parents.to_vec();
    path.push(cmd.get_name());
    let mut subs: Vec<clap::Command> = visible_subcommands(cmd).cloned().collect();
    for sub in &mut subs {
        push_command(out, sub, &path, depth + 1);
    }
}

/// One bullet per argument: how it is written, whether it is required, its variable,
/// default and values, then its help.
fn push_args<'a>(out: &mut String, args: impl Iterator<Item = &'a clap::Arg>) {
    for arg in args {
        if arg.is_hide_set() || matches!(arg.get_action(), ArgAction::Help | ArgAction::Version) {
            continue;
        }
        let mut facts = Vec::new();
        if arg.is_required_set() {
            facts.push("required".to_owned());
        }
        if matches!(arg.get_action(), ArgAction::Append) {
            facts.push("repeatable".to_owned());
        }
        if let Some(env) = arg.get_env().filter(|_| !arg.is_hide_env_set()) {
            facts.push(format!("env `{}`", env.to_string_lossy()));
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        // A flag's implicit `false` says nothing.
        let flag = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
        if !defaults.is_empty() && !flag && !arg.is_hide_default_value_set() {
            facts.push(format!("default `{}`", defaults.join(",")));
        }
        let _ = write!(out, "- `{arg}`");
        if !facts.is_empty() {
            let _ = write!(out, " ({})", facts.join("; "));
        }
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        let help = help.trim();
        if help.is_empty() {
            out.push('\n');
        } else {
            // Paragraphs after the first are indented to stay in the bullet.
            let text = help
                .split("\n\n")
                .map(|p| markdown(p.trim()))
                .collect::<Vec<_>>()
                .join("\n\n  ");
            let _ = writeln!(out, ": {text}");
        }
        let values: Vec<_> = arg
            .get_possible_values()
            .into_iter()
            .filter(|v| !v.is_hide_set())
            .collect();
        // Booleans list `true`/`false`; they say nothing either.
        if !flag && values.iter().any(|v| v.get_help().is_some()) {
            for value in values {
                let help = value
                    .get_help()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                let _ = writeln!(out, "  - `{}`: {}", value.get_name(), markdown(&help));
            }
        } else if !flag && !values.is_empty() {
            let names: Vec<String> = values
                .iter()
                .map(|v| format!("`{}`", v.get_name()))
                .collect();
            let _ = writeln!(out, "  One of {}.", names.join(", "));
        }
    }
    out.push('\n');
}

/// Help text as Markdown: `<` outside code spans is escaped, so `<id>` shows instead of
/// being taken for an HTML tag. Lines are joined (clap keeps a paragraph's line breaks
/// only where the doc comment asked for them).
fn markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '<' if !in_code => out.push_str("\\<"),
            '\n' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

#[test]
fn cli_docs_are_what_the_clap_definitions_say() {
    let want = render();
    if std::env::var_os("AVA_BLESS").is_some() {
        std::fs::write(PATH, &want).expect("write docs/cli.md");
        return;
    }
    let have = std::fs::read_to_string(PATH).unwrap_or_default();
    if have != want {
        let line = have
            .lines()
            .zip(want.lines())
            .position(|(h, w)| h != w)
            .unwrap_or_else(|| have.lines().count().min(want.lines().count()));
        panic!(
            "docs/cli.md differs from ava's clap definitions from line {} on:\n  file: {:?}\n  clap: {:?}\nrun `{BLESS}` to rewrite it",
            line + 1,
            have.lines().nth(line).unwrap_or("(end of file)"),
            want.lines().nth(line).unwrap_or("(end of file)"),
        );
    }
}

#[test]
fn the_reference_covers_every_command_and_flag() {
    let text = render();
    let cli = crate::Cli::command();
    for sub in visible_subcommands(&cli) {
        assert!(
            text.contains(&format!("## `ava {}`", sub.get_name())),
            "{}",
            sub.get_name()
        );
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                assert!(
                    text.contains(&format!("--{long}")),
                    "ava {} --{long}",
                    sub.get_name()
                );
            }
        }
    }
    for env in ["AVA_DB", "AVA_WEBHOOK_URL", "AVA_UPSTREAM_URL"] {
        assert!(text.contains(&format!("env `{env}`")), "{env}");
    }
}
