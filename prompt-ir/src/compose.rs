//! `compose(a, b)`: combining two prompt IRs with explicit semantics per composition mode.
//!
//! The result lists sections grouped by mode, in the order `Hierarchical`, `Constraint`,
//! `Additive`, `Contextual` (hyperprior, then what must hold, then evidence, then
//! observations); within a group, `a`'s sections come before `b`'s, each in its own order.
//!
//! - **Hierarchical** (the hyperprior): `a`'s hierarchical sections stay on top. `b`'s follow
//!   as lower levels of the hierarchy, unless one has the id of an earlier hierarchical
//!   section with other content: it cannot override the hyperprior, so it is left out and
//!   reported as [`Conflict::HyperpriorKept`]. The very same section (same id and content)
//!   appears once.
//! - **Constraint** (product of experts): every constraint is kept, because all must hold.
//!   Identical ones (same content hash) are kept once. Two with the same id but different
//!   content both stay, the later one renamed to `id#<8 hex digits>` (a hash of its mode and
//!   content), and are reported as [`Conflict::ConflictingConstraints`] for the caller to
//!   resolve.
//! - **Additive** (mixture): collected from both and deduplicated by content hash; an id
//!   clash with different content keeps both, the later renamed ([`Conflict::IdCollision`]).
//! - **Contextual** (Bayesian update): sequenced in order, `a`'s observations then `b`'s.
//!   They are not deduplicated by hash (saying "ok" twice is two observations); only the very
//!   same section (same id and content) appears once.
//!
//! Tools are united by name, the first definition winning ([`Conflict::ToolConflict`]). The
//! observation is the newest one, `b`'s when it has one ([`Conflict::ObservationReplaced`]).
//! Meta: the later timestamp, the first budget and strategy set, a cache hit only if both
//! were; derived figures are recomputed and compression figures cleared.
//!
//! Renamed ids are derived from the section itself, not from position, and a renamed section
//! is treated as its original id when composed again, so composition is associative:
//! `compose(compose(a, b), c)` and `compose(a, compose(b, c))` give identical IRs (the
//! conflict lists may differ, as they describe each step). It is not commutative: `a` is the
//! hyperprior. `compose(a, empty)` is `a` with its sections grouped by mode.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ir::{PromptIR, PromptMeta, same_tool};
use crate::section::{CompositionMode, ContentHash, Section};

/// Something [`compose`] resolved that the caller may want to know about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Conflict {
    /// A hierarchical section tried to replace an earlier one with the same id; the earlier
    /// one stays, the later one is left out.
    HyperpriorKept {
        /// The shared id.
        id: String,
        /// Hash of the content kept.
        kept: ContentHash,
        /// Hash of the content left out.
        dropped: ContentHash,
    },
    /// Two constraints share an id but differ. Both are kept; they may contradict each other.
    ConflictingConstraints {
        /// The shared id, still used by the first.
        id: String,
        /// The id the second now has.
        renamed_to: String,
    },
    /// Two non-constraint sections share an id but differ. Both are kept.
    IdCollision {
        /// The shared id, still used by the first.
        id: String,
        /// The id the second now has.
        renamed_to: String,
    },
    /// Two tools share a name but differ; the first definition is kept.
    ToolConflict {
        /// The shared name.
        name: String,
    },
    /// Both IRs had an observation and they differ; the second, newer one is kept.
    ObservationReplaced,
}

/// The result of [`compose`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Composed {
    /// The composed prompt.
    pub ir: PromptIR,
    /// What was resolved along the way, in the order it happened.
    pub conflicts: Vec<Conflict>,
    /// Ids of sections left out as exact duplicates of a section already present.
    pub deduplicated: Vec<String>,
}

/// Combines `a` and `b`; `a` is the hyperprior. See the module docs for the semantics.
pub fn compose(a: &PromptIR, b: &PromptIR) -> Composed {
    // Sections are taken in output order (grouped by mode, `a` before `b` within a group), so
    // composing a composed prompt again sees them in the same order: the key to associativity.
    let mut ordered: Vec<&Section> = a.sections().iter().chain(b.sections()).collect();
    ordered.sort_by_key(|s| s.mode());
    let mut sections: Vec<Section> = Vec::with_capacity(ordered.len());
    // Output id -> (base id, mode, hash) of the section holding it.
    let mut taken: BTreeMap<String, (String, CompositionMode, ContentHash)> = BTreeMap::new();
    let mut exact: BTreeSet<(String, CompositionMode, ContentHash)> = BTreeSet::new();
    let mut by_hash: BTreeSet<(CompositionMode, ContentHash)> = BTreeSet::new();
    let mut hyperprior: BTreeMap<String, ContentHash> = BTreeMap::new();
    let mut conflicts = Vec::new();
    let mut deduplicated = Vec::new();

    for section in ordered {
        let mut section = section.clone();
        let (mode, hash) = (section.mode(), section.hash());
        let suffix = rename_suffix(&section);
        // A section renamed by an earlier compose is treated as its original id, so the
        // result does not depend on how compositions were grouped.
        let base = section
            .id()
            .strip_suffix(suffix.as_str())
            .filter(|b| !b.is_empty())
            .unwrap_or(section.id())
            .to_owned();
        let key = (base.clone(), mode, hash);
        // The same section again, or the same content where the mode deduplicates by hash.
        // Hierarchical sections deduplicate by id and content only: the hyperprior rule
        // below must see every hierarchical id.
        let hash_dedup = matches!(
            mode,
            CompositionMode::Constraint | CompositionMode::Additive
        );
        if exact.contains(&key) || (hash_dedup && by_hash.contains(&(mode, hash))) {
            deduplicated.push(section.id().to_owned());
            continue;
        }
        if mode == CompositionMode::Hierarchical
            && let Some(&kept) = hyperprior.get(&base)
        {
            conflicts.push(Conflict::HyperpriorKept {
                id: base,
                kept,
                dropped: hash,
            });
            continue;
        }
        let id = match taken.get(&base) {
            None => base.clone(),
            Some((_, other_mode, _)) => {
                let renamed = format!("{base}{suffix}");
                if taken.contains_key(&renamed) {
                    // Only a 32-bit hash collision gets here; keep the first.
                    deduplicated.push(section.id().to_owned());
                    continue;
                }
                conflicts.push(
                    if mode == CompositionMode::Constraint
                        && *other_mode == CompositionMode::Constraint
                    {
                        Conflict::ConflictingConstraints {
                            id: base.clone(),
                            renamed_to: renamed.clone(),
                        }
                    } else {
                        Conflict::IdCollision {
                            id: base.clone(),
                            renamed_to: renamed.clone(),
                        }
                    },
                );
                renamed
            }
        };
        if section.id() != id {
            section.rename(id.clone());
        }
        taken.insert(id, key.clone());
        if mode == CompositionMode::Hierarchical {
            hyperprior.insert(base, hash);
        }
        exact.insert(key);
        by_hash.insert((mode, hash));
        sections.push(section);
    }

    let mut tools = a.tools().to_vec();
    for tool in b.tools() {
        match tools.iter().find(|t| t.name() == tool.name()) {
            Some(existing) if same_tool(existing, tool) => {}
            Some(_) => conflicts.push(Conflict::ToolConflict {
                name: tool.name().to_owned(),
            }),
            None => tools.push(tool.clone()),
        }
    }

    let observation = match (a.observation(), b.observation()) {
        (Some(x), Some(y)) => {
            if x.content() != y.content() {
                conflicts.push(Conflict::ObservationReplaced);
            }
            Some(y.clone())
        }
        (x, y) => y.or(x).cloned(),
    };

    let (ma, mb) = (a.meta(), b.meta());
    let meta = PromptMeta {
        timestamp: ma.timestamp.max(mb.timestamp),
        total_tokens: None,
        uncompressed_tokens: None,
        budget: ma.budget.clone().or_else(|| mb.budget.clone()),
        strategy: ma.strategy.clone().or_else(|| mb.strategy.clone()),
        compression_ratio: None,
        estimated_entropy_bits: 0.0,
        cache_hit: ma.cache_hit && mb.cache_hit,
    };
    Composed {
        ir: PromptIR::from_parts(sections, tools, observation, meta),
        conflicts,
        deduplicated,
    }
}

/// The suffix a section gets when its id is taken: `#` and 8 hex digits of a hash of its
/// mode and content, so it depends on the section alone, never on what came before.
fn rename_suffix(section: &Section) -> String {
    let mode = match section.mode() {
        CompositionMode::Hierarchical => "hierarchical",
        CompositionMode::Constraint => "constraint",
        CompositionMode::Additive => "additive",
        CompositionMode::Contextual => "contextual",
    };
    let mut keyed = String::with_capacity(mode.len() + 1 + section.content().len());
    keyed.push_str(mode);
    keyed.push('\u{0}');
    keyed.push_str(section.content());
    format!("#{}", ContentHash::of(&keyed).short())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::section::SectionSource;
    use chrono::{DateTime, Utc};

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    fn ir(sections: Vec<Section>) -> PromptIR {
        let mut ir = PromptIR::new(t(0));
        for s in sections {
            ir.push_section(s).unwrap();
        }
        ir
    }

    fn sec(id: &str, source: SectionSource, text: &str) -> Section {
        Section::new(id, id, source, text).unwrap()
    }

    fn ids(ir: &PromptIR) -> Vec<&str> {
        ir.sections().iter().map(Section::id).collect()
    }

    #[test]
    fn hyperprior_of_the_first_stays() {
        let a = ir(vec![sec(
            "sys",
            SectionSource::Static("base".into()),
            "Be brief.",
        )]);
        let b = ir(vec![
            sec("sys", SectionSource::Static("base".into()), "Be verbose."),
            sec("style", SectionSource::Static("style".into()), "Use lists."),
        ]);
        let c = compose(&a, &b);
        assert_eq!(ids(&c.ir), vec!["sys", "style"]);
        assert_eq!(c.ir.sections()[0].content(), "Be brief.");
        assert!(matches!(&c.conflicts[..], [Conflict::HyperpriorKept { id, .. }] if id == "sys"));
    }

    #[test]
    fn constraints_are_all_kept_and_conflicts_reported() {
        let a = ir(vec![sec(
            "lang",
            SectionSource::State("lang".into()),
            "Answer in English.",
        )]);
        let b = ir(vec![
            sec(
                "lang",
                SectionSource::State("lang".into()),
                "Answer in French.",
            ),
            sec(
                "tz",
                SectionSource::State("time".into()),
                "Timezone is UTC.",
            ),
        ]);
        let c = compose(&a, &b);
        let french = format!("lang{}", rename_suffix(&b.sections()[0]));
        assert_eq!(ids(&c.ir), vec!["lang", &french, "tz"]);
        assert_eq!(
            c.conflicts,
            vec![Conflict::ConflictingConstraints {
                id: "lang".into(),
                renamed_to: french.clone()
            }]
        );
        // Composing again does not rename twice.
        let again = compose(&c.ir, &b);
        assert_eq!(ids(&again.ir), vec!["lang", &french, "tz"]);
    }

    #[test]
    fn additive_is_deduplicated_by_hash_contextual_is_not() {
        let fact = |id: &str| sec(id, SectionSource::Knowledge, "Alice has a cat called Miso.");
        let msg = |id: &str| sec(id, SectionSource::Temporal, "ok");
        let a = ir(vec![fact("k1"), msg("m1")]);
        let b = ir(vec![fact("k7"), msg("m2"), msg("m1")]);
        let c = compose(&a, &b);
        assert_eq!(ids(&c.ir), vec!["k1", "m1", "m2"]);
        assert_eq!(c.deduplicated, vec!["k7", "m1"]);
        assert!(c.conflicts.is_empty());
    }

    #[test]
    fn groups_by_mode_and_keeps_order_within() {
        let a = ir(vec![
            sec("m1", SectionSource::Temporal, "first"),
            sec("sys", SectionSource::Static("base".into()), "Be kind."),
            sec("k1", SectionSource::Knowledge, "fact one"),
        ]);
        let b = ir(vec![
            sec("m2", SectionSource::Temporal, "second"),
            sec("user", SectionSource::State("user".into()), "User: Alice."),
        ]);
        let c = compose(&a, &b);
        assert_eq!(ids(&c.ir), vec!["sys", "user", "k1", "m1", "m2"]);
    }

    #[test]
    fn tools_observation_and_meta() {
        let mut a = PromptIR::new(t(0));
        let mut b = PromptIR::new(t(60));
        let schema = serde_json::json!({"type": "object"});
        a.push_tool(crate::ToolDef::new("search", "Search v1", schema.clone()).unwrap())
            .unwrap();
        b.push_tool(crate::ToolDef::new("search", "Search v2", schema.clone()).unwrap())
            .unwrap();
        b.push_tool(crate::ToolDef::new("time", "Tell the time", schema).unwrap())
            .unwrap();
        a.set_observation("old question");
        b.set_observation("new question");
        a.set_cache_hit(true);
        let c = compose(&a, &b);
        let names: Vec<&str> = c.ir.tools().iter().map(|t| t.name()).collect();
        assert_eq!(names, vec!["search", "time"]);
        assert_eq!(c.ir.tools()[0].description(), "Search v1");
        assert_eq!(c.ir.observation().unwrap().content(), "new question");
        assert_eq!(c.ir.meta().timestamp, t(60));
        assert!(!c.ir.meta().cache_hit);
        assert_eq!(
            c.conflicts,
            vec![
                Conflict::ToolConflict {
                    name: "search".into()
                },
                Conflict::ObservationReplaced
            ]
        );
    }
}
