//! The workspace's written rules, executed (rust-analyzer's `tidy`): the dependency rules of
//! ARCHITECTURE.md read from `cargo metadata`, a `//!` line atop every source file, a
//! code-map entry in ARCHITECTURE.md for every crate, and the documentation's own rules (code
//! compiled, every page linked, links that resolve, a README that stays a front page).

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::process::Command;

    use serde_json::Value;

    /// Clients of the outside world that belong to the app alone.
    const APP_ONLY: [&str; 2] = ["teloxide", "rmcp"];
    /// Chat-model clients: never in `hydrate` (no LLM client) or the IR.
    const LLM_CLIENTS: [&str; 2] = ["async-openai", "ollama-rs"];

    /// `cargo metadata` for the workspace, without dependencies.
    fn metadata() -> Value {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("cargo metadata is JSON")
    }

    /// Each workspace crate's normal (non-dev, non-build) dependencies.
    fn normal_dependencies() -> BTreeMap<String, Vec<String>> {
        let meta = metadata();
        let packages = meta["packages"].as_array().expect("packages");
        packages
            .iter()
            .map(|p| {
                let name = p["name"].as_str().unwrap_or_default().to_owned();
                let deps = p["dependencies"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|d| d["kind"].is_null())
                    .filter_map(|d| d["name"].as_str().map(str::to_owned))
                    .collect();
                (name, deps)
            })
            .collect()
    }

    /// Hydrate features that shape `ava`'s prompts with no server to call: the evaluation must
    /// build with each that `ava` turns on by default, or it measures another product.
    const PROMPT_FEATURES: [&str; 1] = ["graph"];

    #[test]
    fn the_eval_measures_the_prompts_ava_ships() {
        let meta = metadata();
        let packages = meta["packages"].as_array().expect("packages");
        let package = |name: &str| {
            packages
                .iter()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("{name} is in the workspace"))
        };
        let bot = package("ava-bot");
        let defaults: Vec<&str> = bot["features"]["default"]
            .as_array()
            .expect("ava-bot has default features")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let eval_hydrate: Vec<&str> = package("ava-eval")["dependencies"]
            .as_array()
            .expect("ava-eval has dependencies")
            .iter()
            .find(|d| d["name"] == "hydrate")
            .expect("ava-eval depends on hydrate")["features"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for feature in PROMPT_FEATURES {
            let shipped = defaults.iter().any(|d| {
                bot["features"][*d]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|f| f.as_str() == Some(&format!("hydrate/{feature}")))
            });
            assert_eq!(
                shipped,
                eval_hydrate.contains(&feature),
                "hydrate feature `{feature}`: on in ava by default is {shipped}, in ava-eval's \
                 build is {}; the evaluation must build what ships",
                eval_hydrate.contains(&feature)
            );
        }
    }

    #[test]
    fn crates_depend_only_downward() {
        let deps = normal_dependencies();
        let workspace: Vec<&str> = deps.keys().map(String::as_str).collect();
        for expected in [
            "memory-core",
            "prompt-ir",
            "hydrate",
            "ava-memory",
            "ava-bot",
            "ava-eval",
            "xtask",
        ] {
            assert!(workspace.contains(&expected), "{expected} in {workspace:?}");
        }
        let backends = backends();
        let backends: Vec<&str> = backends.iter().map(String::as_str).collect();
        let mut broken = Vec::new();
        for (krate, list) in &deps {
            let on = |names: &[&str]| -> Vec<&String> {
                list.iter()
                    .filter(|d| names.contains(&d.as_str()))
                    .collect()
            };
            let app = matches!(krate.as_str(), "ava-bot" | "ava-eval");
            // The facade opens a store by path or URL as `ava` does: it may name backends,
            // and only the apps build on it.
            let facade = krate == "ava-memory";
            // The vocabulary and the IR stand alone.
            if matches!(krate.as_str(), "memory-core" | "prompt-ir") {
                let inner = on(&workspace);
                if !inner.is_empty() {
                    broken.push(format!("{krate} depends on workspace crates {inner:?}"));
                }
            }
            // A backend or the embedders know the vocabulary, nothing above it and no other
            // backend.
            if backends.contains(&krate.as_str()) || krate == "memory-embedders" {
                let inner: Vec<&String> = on(&workspace)
                    .into_iter()
                    .filter(|d| d.as_str() != "memory-core")
                    .collect();
                if !inner.is_empty() {
                    broken.push(format!("backend {krate} depends on {inner:?}"));
                }
            }
            if !app && !facade {
                let picked = on(&backends);
                if !picked.is_empty() {
                    broken.push(format!("{krate} picks a backend: {picked:?}"));
                }
                if !on(&["ava-memory"]).is_empty() {
                    broken.push(format!("{krate} builds on the facade; only the apps do"));
                }
            }
            if facade {
                let above: Vec<&String> = on(&workspace)
                    .into_iter()
                    .filter(|d| {
                        !matches!(
                            d.as_str(),
                            "hydrate" | "prompt-ir" | "memory-core" | "memory-embedders"
                        ) && !backends.contains(&d.as_str())
                    })
                    .collect();
                if !above.is_empty() {
                    broken.push(format!("the facade depends on {above:?}"));
                }
            }
            if !app {
                let clients = on(&APP_ONLY);
                if !clients.is_empty() {
                    broken.push(format!("{krate} uses app-only clients {clients:?}"));
                }
            }
            if matches!(krate.as_str(), "hydrate" | "prompt-ir") {
                let llm = on(&LLM_CLIENTS);
                if !llm.is_empty() {
                    broken.push(format!("{krate} uses an LLM client: {llm:?}"));
                }
            }
            // The tooling builds on the model directory rules alone, so `cargo xtask
            // snapshots` is quick.
            if krate == "xtask" {
                let inner: Vec<&String> = on(&workspace)
                    .into_iter()
                    .filter(|d| d.as_str() != "memory-embedders")
                    .collect();
                if !inner.is_empty() {
                    broken.push(format!(
                        "xtask depends on {inner:?}; evaluations go in ava-eval"
                    ));
                }
            }
            // Nothing builds on the apps or the tooling.
            let top = on(&["ava-bot", "ava-eval", "xtask"]);
            if !top.is_empty() {
                broken.push(format!("{krate} depends on {top:?}"));
            }
        }
        assert!(
            broken.is_empty(),
            "dependency rules broken:\n{}",
            broken.join("\n")
        );
    }

    /// xtask asks memory-embedders for no embedder (their clients and model stack).
    #[test]
    fn xtask_builds_no_embedder() {
        let meta = metadata();
        let xtask = meta["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == "xtask")
            .expect("xtask is a workspace member");
        for dep in xtask["dependencies"].as_array().into_iter().flatten() {
            if dep["name"] == "memory-embedders" {
                let features = dep["features"].as_array().cloned().unwrap_or_default();
                assert!(features.is_empty(), "xtask enables embedders {features:?}");
                assert_ne!(dep["uses_default_features"], Value::Bool(false));
            }
        }
    }

    /// The workspace root.
    fn root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// Every `.rs` file under a crate's `src`, `tests`, `benches` and `examples`.
    fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Every `.rs` file under these folders of every workspace crate.
    fn crate_sources(folders: &[&str]) -> Vec<std::path::PathBuf> {
        let mut files = Vec::new();
        for p in metadata()["packages"].as_array().into_iter().flatten() {
            let manifest = std::path::Path::new(p["manifest_path"].as_str().expect("path"));
            let dir = manifest.parent().expect("crate dir");
            for sub in folders {
                sources(&dir.join(sub), &mut files);
            }
        }
        files
    }

    /// The workspace's crates, each with its folder.
    fn crate_dirs() -> Vec<(String, std::path::PathBuf)> {
        metadata()["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let manifest = std::path::Path::new(p["manifest_path"].as_str().expect("path"));
                let name = p["name"].as_str().expect("name").to_owned();
                (name, manifest.parent().expect("crate dir").to_owned())
            })
            .collect()
    }

    /// Backends, read from the workspace: the crates whose own code implements
    /// `MemoryBackend` (a line opening with that `impl`; memory-core, which declares it,
    /// aside). Only the apps choose one.
    fn backends() -> Vec<String> {
        let found: Vec<String> = crate_dirs()
            .into_iter()
            .filter(|(name, _)| name != "memory-core")
            .filter(|(_, dir)| {
                let mut files = Vec::new();
                sources(&dir.join("src"), &mut files);
                files.iter().any(|f| {
                    std::fs::read_to_string(f).is_ok_and(|t| {
                        t.lines()
                            .any(|l| l.trim_start().starts_with("impl MemoryBackend for "))
                    })
                })
            })
            .map(|(name, _)| name)
            .collect();
        assert!(
            found.iter().any(|b| b == "memory-sqlite") && found.len() >= 3,
            "backends found: {found:?}"
        );
        found
    }

    /// House style: every source file opens with a `//!` line saying what it is.
    #[test]
    fn every_source_file_says_what_it_is() {
        let files = crate_sources(&["src", "tests", "benches", "examples"]);
        assert!(files.len() > 50, "found only {} files", files.len());
        let missing: Vec<String> = files
            .iter()
            .filter(|f| {
                let text = std::fs::read_to_string(f).unwrap_or_default();
                !text.trim_start().starts_with("//!")
            })
            .map(|f| f.display().to_string())
            .collect();
        assert!(
            missing.is_empty(),
            "no `//!` line atop:\n{}",
            missing.join("\n")
        );
    }

    /// Every library crate can be depended on from a registry or a git URL: it has a
    /// description and a README of its own that links the facade (`.ci/run` packages them).
    #[test]
    fn library_crates_say_what_they_are_and_link_the_facade() {
        let mut missing = Vec::new();
        let mut libraries = 0;
        for p in metadata()["packages"].as_array().into_iter().flatten() {
            let name = p["name"].as_str().unwrap_or_default();
            if matches!(name, "ava-bot" | "ava-eval" | "xtask") {
                continue;
            }
            libraries += 1;
            if p["description"]
                .as_str()
                .is_none_or(|d| d.trim().is_empty())
            {
                missing.push(format!("{name}: no description"));
            }
            let manifest = std::path::Path::new(p["manifest_path"].as_str().expect("path"));
            let readme = manifest.parent().expect("crate dir").join("README.md");
            match std::fs::read_to_string(&readme) {
                Ok(text) if name == "ava-memory" || text.contains("ava-memory/README.md") => {}
                Ok(_) => missing.push(format!("{name}: its README does not link the facade")),
                Err(_) => missing.push(format!("{name}: no README.md")),
            }
        }
        assert!(libraries >= 8, "found {libraries} library crates");
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    /// ARCHITECTURE.md's code map has a heading for every crate of the workspace, and
    /// README's "What is here" table a row.
    #[test]
    fn the_code_map_names_every_crate() {
        let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
        let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
        let missing: Vec<String> = normal_dependencies()
            .into_keys()
            .filter(|k| {
                !map.contains(&format!("### `{k}`")) || !readme.contains(&format!("| `{k}` |"))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "ARCHITECTURE.md (`### `name``) or README.md (`| `name` |`) misses {missing:?}"
        );
    }

    /// ARCHITECTURE.md's `unsafe` invariant names every file that holds `unsafe` code, and
    /// no other (clippy's `undocumented_unsafe_blocks` sees to the `SAFETY` comments).
    #[test]
    fn unsafe_is_where_the_architecture_says() {
        let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
        let start = map
            .find("**Invariant:** `unsafe` is in")
            .expect("ARCHITECTURE.md states where `unsafe` is");
        // The rule runs to the next invariant or the paragraph's end.
        let rest = &map[start..];
        let end = ["\n\n", "\n**Invariant:**"]
            .iter()
            .filter_map(|stop| rest.find(stop))
            .min()
            .unwrap_or(rest.len());
        let rule = &rest[..end];
        let named: std::collections::BTreeSet<&str> =
            rule.split('`').filter(|w| w.ends_with(".rs")).collect();
        let mut holding = std::collections::BTreeSet::new();
        let this = root()
            .join("xtask/src/tidy.rs")
            .canonicalize()
            .expect("tidy.rs");
        for file in crate_sources(&["src", "tests", "benches", "examples"]) {
            // This file names what it looks for.
            if file.canonicalize().is_ok_and(|f| f == this) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let has = text.lines().any(|l| {
                let code = l.split("//").next().unwrap_or_default();
                ["unsafe {", "unsafe fn", "unsafe impl", "unsafe extern"]
                    .iter()
                    .any(|u| code.contains(u))
            });
            if has {
                let name = file
                    .file_name()
                    .expect("a file")
                    .to_string_lossy()
                    .into_owned();
                holding.insert(name);
            }
        }
        let holding: std::collections::BTreeSet<&str> =
            holding.iter().map(String::as_str).collect();
        assert!(
            !holding.is_empty(),
            "found no `unsafe` at all: is the scan blind?"
        );
        assert_eq!(
            named, holding,
            "ARCHITECTURE.md's `unsafe` invariant names {named:?}; the code has it in {holding:?}"
        );
    }

    /// Lines without blanks and surrounding space, for comparing a snippet with a file.
    fn lines_of(text: &str) -> Vec<&str> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// The user-facing pages: README.md and every Markdown file under `docs/`, each with
    /// its text.
    fn pages() -> Vec<(std::path::PathBuf, String)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).expect("docs/").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "md") {
                    out.push(path);
                }
            }
        }
        let mut files = vec![root().join("README.md")];
        walk(&root().join("docs"), &mut files);
        files.sort();
        files
            .into_iter()
            .map(|f| {
                let text = std::fs::read_to_string(&f).expect("a page");
                (f, text)
            })
            .collect()
    }

    /// A path for messages: relative to the workspace root.
    fn shown(path: &std::path::Path) -> String {
        let root = root().canonicalize().expect("the root");
        let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
        path.strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string()
    }

    /// Every ```rust block in README.md and `docs/` is the code of a file cargo compiles (an
    /// example or a test), so no page can show code that no longer builds.
    #[test]
    fn rust_in_the_docs_is_compiled_code() {
        let files = crate_sources(&["tests", "examples"]);
        let compiled: Vec<String> = files
            .iter()
            .map(|f| lines_of(&std::fs::read_to_string(f).unwrap_or_default()).join("\n"))
            .collect();
        let mut blocks = 0;
        for (page, text) in pages() {
            let mut rest = text.as_str();
            while let Some(start) = rest.find("```rust\n") {
                let body = &rest[start + "```rust\n".len()..];
                let end = body.find("```").expect("a closed code block");
                let snippet = lines_of(&body[..end]).join("\n");
                blocks += 1;
                assert!(
                    compiled.iter().any(|f| f.contains(&snippet)),
                    "a rust block of {} is not the code of any example or test:\n{snippet}",
                    shown(&page)
                );
                rest = &body[end + 3..];
            }
        }
        assert!(
            blocks >= 2,
            "found {blocks} rust blocks in README.md and docs/"
        );
    }

    /// The README is a front page, not a manual: the rest is in `docs/`.
    const README_MAX_LINES: usize = 200;

    #[test]
    fn the_readme_is_a_front_page() {
        let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
        let lines = readme.lines().count();
        assert!(
            lines <= README_MAX_LINES,
            "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail to a page of docs/ and link it"
        );
    }

    /// Text without fenced code blocks and inline code spans, where neither links nor
    /// headings are read.
    fn prose(text: &str) -> String {
        let mut out = String::new();
        let mut fenced = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                out.push('\n');
                continue;
            }
            if fenced {
                out.push('\n');
                continue;
            }
            // Inline code: every other run between backticks.
            for (k, part) in line.split('`').enumerate() {
                if k % 2 == 0 {
                    out.push_str(part);
                }
            }
            out.push('\n');
        }
        out
    }

    /// The targets of a page's Markdown links and images, `[text](target)`.
    fn link_targets(text: &str) -> Vec<String> {
        let prose = prose(text);
        let mut targets = Vec::new();
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            // `[text](target "title")`: the target alone.
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            targets.push(target.to_owned());
            rest = &after[end..];
        }
        targets
    }

    /// The anchors GitHub gives a page's headings: lower case, letters, digits, `-` and `_`
    /// kept, spaces as `-`, the rest dropped; a repeated one gets `-1`, `-2`, ...
    fn anchors(text: &str) -> std::collections::BTreeSet<String> {
        let mut seen = std::collections::BTreeSet::new();
        let mut fenced = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            if fenced || !line.starts_with('#') {
                continue;
            }
            let title = line.trim_start_matches('#');
            if !title.starts_with(' ') {
                continue;
            }
            let slug: String = title
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect();
            let mut anchor = slug.clone();
            let mut n = 0;
            while seen.contains(&anchor) {
                n += 1;
                anchor = format!("{slug}-{n}");
            }
            seen.insert(anchor);
        }
        seen
    }

    /// Every page of `docs/` is linked from README.md, and every page of `docs/experiments/`
    /// from BENCHMARKS.md, so a newcomer reaches each from the front page. (`docs/bench`
    /// holds the benches' scripts, no pages.)
    #[test]
    fn every_doc_page_is_linked() {
        let linked_from = |page: &str| -> Vec<std::path::PathBuf> {
            let text = std::fs::read_to_string(root().join(page)).expect(page);
            link_targets(&text)
                .iter()
                .map(|t| t.split('#').next().unwrap_or_default())
                .filter_map(|t| root().join(t).canonicalize().ok())
                .collect()
        };
        let from_readme = linked_from("README.md");
        let from_benchmarks = linked_from("BENCHMARKS.md");
        let experiments = root()
            .join("docs/experiments")
            .canonicalize()
            .expect("docs/experiments");
        let mut unlinked = Vec::new();
        let mut read = 0;
        for (page, _) in pages() {
            let page = page.canonicalize().expect("a page");
            if page.parent() == root().canonicalize().ok().as_deref() {
                continue; // README.md itself
            }
            read += 1;
            let (from, links) = if page.starts_with(&experiments) {
                ("BENCHMARKS.md", &from_benchmarks)
            } else {
                ("README.md", &from_readme)
            };
            if !links.contains(&page) {
                unlinked.push(format!("{} (from {from})", shown(&page)));
            }
        }
        assert!(read >= 8, "read only {read} pages of docs/");
        assert!(
            unlinked.is_empty(),
            "pages no one links to: {}",
            unlinked.join(", ")
        );
    }

    /// Every relative link of README.md, ARCHITECTURE.md, BENCHMARKS.md and `docs/` reaches
    /// a file, and its `#anchor` a heading of that file, so moving a section cannot leave a
    /// dead link behind.
    #[test]
    fn relative_links_resolve() {
        let mut pages = pages();
        for top in ["ARCHITECTURE.md", "BENCHMARKS.md"] {
            let text = std::fs::read_to_string(root().join(top)).expect(top);
            pages.push((root().join(top), text));
        }
        let mut broken = Vec::new();
        let mut checked = 0;
        for (page, text) in &pages {
            let dir = page.parent().expect("a page's folder");
            for target in link_targets(text) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((file, anchor)) => (file, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    page.clone()
                } else {
                    dir.join(file)
                };
                if !path.exists() {
                    broken.push(format!("{}: {target} (no such file)", shown(page)));
                    continue;
                }
                if let Some(anchor) = anchor {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    if !anchors(&text).contains(anchor) {
                        broken.push(format!("{}: {target} (no such heading)", shown(page)));
                    }
                }
            }
        }
        assert!(checked >= 50, "checked only {checked} links");
        assert!(broken.is_empty(), "dead links:\n{}", broken.join("\n"));
    }

    /// CI runs the README's test command exactly as the quick start writes it.
    #[test]
    fn ci_runs_the_readmes_test_command() {
        let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
        let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
        let command = readme
            .lines()
            .map(|l| l.split(" #").next().unwrap_or_default().trim())
            .find(|l| l.starts_with("cargo test "))
            .expect("the README's quick start has a `cargo test` line");
        assert!(
            ci.lines().any(|l| l.trim() == command),
            "`.ci/run` does not run the README's test command `{command}` as written"
        );
    }

    #[test]
    fn anchors_are_githubs() {
        let page = "# Ava\n## `ava serve`: memory for any app\n## Ava\n```sh\n# not a heading\n```\n### What's new (issue 35, item 4)\n";
        let got: Vec<String> = anchors(page).into_iter().collect();
        assert_eq!(
            got,
            [
                "ava",
                "ava-1",
                "ava-serve-memory-for-any-app",
                "whats-new-issue-35-item-4"
            ]
        );
        assert_eq!(
            link_targets("see [a](docs/a.md#x) and `[b](nope.md)`, ![i](i.png \"t\")"),
            ["docs/a.md#x", "i.png"]
        );
    }

    /// Identifiers in `text`, in order (letters, digits and `_`).
    fn words(text: &str) -> impl Iterator<Item = &str> {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
    }

    /// The modules of the crate in `dir` (the files of its `src/` and its folders with a
    /// `mod.rs`, each folder one module) and what each imports
    /// from the others: a `crate::module` path (or `super::module` in a binary, whose
    /// modules sit under main.rs), or a name the crate root re-exports from a module
    /// (`crate::Name`, `use crate::{A, B}`). Comment lines are left out.
    fn module_graph(dir: &std::path::Path) -> BTreeMap<String, std::collections::BTreeSet<String>> {
        let src = dir.join("src");
        let mut modules = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(&src).expect("the crate's src").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(m) = name.strip_suffix(".rs")
                && m != "lib"
                && m != "main"
            {
                modules.insert(m.to_owned());
            } else if entry.path().join("mod.rs").is_file() {
                // A folder module (`commands/mod.rs`): one module, all its files.
                modules.insert(name);
            }
        }
        // `pub use module::{A, B};` in the crate root: where each re-exported name lives.
        let lib = std::fs::read_to_string(src.join("lib.rs"))
            .or_else(|_| std::fs::read_to_string(src.join("main.rs")))
            .expect("lib.rs or main.rs");
        let mut home = BTreeMap::new();
        for stmt in lib.split(';') {
            let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
                continue;
            };
            let mut names = words(rest);
            if let Some(m) = names.next().filter(|m| modules.contains(*m)) {
                for n in names {
                    home.insert(n.to_owned(), m.to_owned());
                }
            }
        }
        let mut graph = BTreeMap::new();
        for m in &modules {
            // A module is its file, its folder's files, or both (`llm.rs` beside `llm/`); in
            // a file deeper than the module's own, `super::` is the module itself.
            let mut files = Vec::new();
            sources(&src.join(m), &mut files);
            files.push(src.join(format!("{m}.rs")));
            let mut code = String::new();
            let mut nested = String::new();
            for f in &files {
                let Ok(text) = std::fs::read_to_string(f) else {
                    continue;
                };
                let top = f.parent() == Some(src.as_path()) || f.ends_with(format!("{m}/mod.rs"));
                let into = if top { &mut code } else { &mut nested };
                for l in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                    into.push_str(l);
                    into.push('\n');
                }
            }
            assert!(
                !(code.is_empty() && nested.is_empty()),
                "module {m} of {}",
                dir.display()
            );
            let mut deps = std::collections::BTreeSet::new();
            let paths = code
                .match_indices("crate::")
                .chain(code.match_indices("super::"))
                .map(|(i, p)| (code.as_str(), i + p.len()))
                .chain(
                    nested
                        .match_indices("crate::")
                        .map(|(i, p)| (nested.as_str(), i + p.len())),
                );
            for (code, at) in paths {
                let after = &code[at..];
                // `crate::{A, b::C}` names several; `crate::x` one.
                let span = if after.starts_with('{') {
                    &after[..after.find('}').unwrap_or(after.len())]
                } else {
                    after
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or_default()
                };
                let group = after.starts_with('{');
                for (k, w) in words(span).enumerate() {
                    if !group && k > 0 {
                        break;
                    }
                    let target = if modules.contains(w) {
                        Some(w.to_owned())
                    } else {
                        home.get(w).cloned()
                    };
                    if let Some(t) = target.filter(|t| t != m) {
                        deps.insert(t);
                    }
                }
            }
            graph.insert(m.clone(), deps);
        }
        graph
    }

    /// ARCHITECTURE.md: hydrate's modules import only from below, so there is no cycle.
    #[test]
    fn hydrate_modules_have_no_cycle() {
        let graph = module_graph(&root().join("hydrate"));
        assert!(graph.len() > 15, "read only {} modules", graph.len());
        // The layering the map describes, spot-checked: the bottom does not reach up.
        for (low, high) in [
            ("source", "report"),
            ("provider", "report"),
            ("hydrate", "ops"),
        ] {
            assert!(
                !graph[low].contains(high),
                "{low} imports {high}: {:?}",
                graph[low]
            );
        }
        if let Some(cycle) = cycle_in(&graph) {
            panic!("hydrate's modules import in a cycle: {cycle:?}");
        }
    }

    /// ARCHITECTURE.md: no crate's modules import in a circle, so each can be read from the
    /// bottom up: every workspace crate, read from the workspace, but memory-core, whose error
    /// type names its value types (`Capability`, `EmbeddingSpace`, `MemoryId`) while they
    /// return its errors.
    #[test]
    fn no_crates_modules_import_in_a_circle() {
        let mut read = 0;
        for (krate, dir) in crate_dirs() {
            if krate == "memory-core" {
                continue;
            }
            let graph = module_graph(&dir);
            read += graph.len();
            if let Some(cycle) = cycle_in(&graph) {
                panic!("{krate}'s modules import in a circle: {cycle:?}");
            }
        }
        assert!(read >= 40, "read only {read} modules in the workspace");
    }

    /// A cycle of `graph`, if it has one.
    fn cycle_in(
        graph: &BTreeMap<String, std::collections::BTreeSet<String>>,
    ) -> Option<Vec<String>> {
        // Depth-first search; a module met again on the current path closes a cycle.
        fn visit(
            m: &str,
            graph: &BTreeMap<String, std::collections::BTreeSet<String>>,
            path: &mut Vec<String>,
            done: &mut std::collections::BTreeSet<String>,
        ) -> Option<Vec<String>> {
            if let Some(at) = path.iter().position(|p| p == m) {
                let mut cycle = path[at..].to_vec();
                cycle.push(m.to_owned());
                return Some(cycle);
            }
            if done.contains(m) {
                return None;
            }
            path.push(m.to_owned());
            for d in graph.get(m).into_iter().flatten() {
                if let Some(c) = visit(d, graph, path, done) {
                    return Some(c);
                }
            }
            path.pop();
            done.insert(m.to_owned());
            None
        }
        let mut done = std::collections::BTreeSet::new();
        graph
            .keys()
            .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
    }
}
