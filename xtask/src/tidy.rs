//! The workspace's dependency rules (ARCHITECTURE.md), executed: `cargo metadata` lists what
//! each crate depends on, and a test fails when a crate reaches past its layer.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::process::Command;

    use serde_json::Value;

    /// Backends: only `ava-bot` and `xtask` choose one.
    const BACKENDS: [&str; 3] = ["memory-inmem", "memory-sqlite", "memory-postgres"];
    /// Clients of the outside world that belong to the app alone.
    const APP_ONLY: [&str; 2] = ["teloxide", "rmcp"];
    /// Chat-model clients: never in `hydrate` (no LLM client) or the IR.
    const LLM_CLIENTS: [&str; 2] = ["async-openai", "ollama-rs"];

    /// Each workspace crate's normal (non-dev, non-build) dependencies.
    fn normal_dependencies() -> BTreeMap<String, Vec<String>> {
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
        let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata is JSON");
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

    #[test]
    fn crates_depend_only_downward() {
        let deps = normal_dependencies();
        let workspace: Vec<&str> = deps.keys().map(String::as_str).collect();
        for expected in ["memory-core", "prompt-ir", "hydrate", "ava-bot", "xtask"] {
            assert!(workspace.contains(&expected), "{expected} in {workspace:?}");
        }
        let mut broken = Vec::new();
        for (krate, list) in &deps {
            let on = |names: &[&str]| -> Vec<&String> {
                list.iter()
                    .filter(|d| names.contains(&d.as_str()))
                    .collect()
            };
            let app = matches!(krate.as_str(), "ava-bot" | "xtask");
            // The vocabulary and the IR stand alone.
            if matches!(krate.as_str(), "memory-core" | "prompt-ir") {
                let inner = on(&workspace);
                if !inner.is_empty() {
                    broken.push(format!("{krate} depends on workspace crates {inner:?}"));
                }
            }
            // A backend knows the vocabulary, nothing above it and no other backend.
            if BACKENDS.contains(&krate.as_str()) {
                let inner: Vec<&String> = on(&workspace)
                    .into_iter()
                    .filter(|d| d.as_str() != "memory-core")
                    .collect();
                if !inner.is_empty() {
                    broken.push(format!("backend {krate} depends on {inner:?}"));
                }
            }
            if !app {
                let backends = on(&BACKENDS);
                if !backends.is_empty() {
                    broken.push(format!("{krate} picks a backend: {backends:?}"));
                }
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
            // Nothing builds on the app or the tooling.
            let top = on(&["ava-bot", "xtask"]);
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
}
