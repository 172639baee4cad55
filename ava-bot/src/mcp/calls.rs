//! Running the tools: each tool's arguments checked, its work done for the handler's one
//! identity, and its result as text for the model and structured content.

use super::*;

fn parse<T: DeserializeOwned>(tool: &str, args: JsonObject) -> anyhow::Result<T> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| anyhow!("bad arguments for `{tool}`: {e}"))
}

fn in_range(
    name: &str,
    value: Option<u32>,
    default: u32,
    (min, max): (u32, u32),
) -> anyhow::Result<u32> {
    let v = value.unwrap_or(default);
    if !(min..=max).contains(&v) {
        bail!("`{name}` is {v}; expected {min} to {max} (default {default})");
    }
    Ok(v)
}

/// A successful result: `text` for the model, `data` as structured content.
fn reply<T: Serialize>(text: String, data: &T) -> anyhow::Result<CallToolResult> {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(serde_json::to_value(data).context("serialise the result")?);
    Ok(result)
}

impl AvaMcp {
    pub(super) async fn remember(&self, args: JsonObject) -> anyhow::Result<CallToolResult> {
        let a: RememberArgs = parse("remember", args)?;
        self.may_write("remember")?;
        let tags = a
            .tags
            .iter()
            .map(Tag::new)
            .collect::<Result<Vec<_>, _>>()
            .context("bad `tags`")?;
        let cut = memory_core::MessageCut::of(&a.content);
        let mut memory = hydrate::with_entity_tags(NewMemory::new(a.content))
            .with_kind(MemoryKind::Fact)
            .with_source("mcp")
            .with_tags(tags);
        if let Some(context) = a.context.filter(|c| !c.trim().is_empty()) {
            memory = memory.with_context(context);
        }
        if a.pinned {
            memory = memory.pinned();
        }
        let replaces: Option<MemoryId> = a
            .replaces
            .as_deref()
            .filter(|r| !r.trim().is_empty())
            .map(|r| r.trim().parse())
            .transpose()
            .context("bad `replaces`")?;
        // A fact is the person's: kept user-wide, it reaches every private context of theirs.
        let kept = memory_core::keep_fact(
            self.store(),
            &self.scope.user_wide(),
            &self.scope.private_context(),
            memory,
            replaces,
            memory_core::Timestamp::now(),
        )
        .await
        .map_err(|e| match replaces {
            Some(old) => anyhow::Error::new(e).context(format!("could not replace {old}")),
            None => anyhow::Error::new(e).context("could not store the memory"),
        })?;
        let entry = kept.entry().context("the store returned no memory")?;
        let merged = matches!(&kept, FactKept::Once(r) if r.merged);
        let how = match &kept {
            FactKept::Parts(parts) => format!(
                "Remembered in {} linked parts, all tagged {}{}{}",
                parts.len(),
                memory_core::PART_OF_TAG_PREFIX,
                entry.id,
                cut.map(|c| format!(" (the text is {c})"))
                    .unwrap_or_default()
            ),
            FactKept::Once(r) if r.merged => {
                "Already remembered; merged into the same memory".to_owned()
            }
            FactKept::Replaced(_) => "Remembered; it replaces the old fact".to_owned(),
            FactKept::Once(_) if entry.pinned => "Remembered and pinned".to_owned(),
            FactKept::Once(_) => "Remembered".to_owned(),
        };
        let entry = entry.clone();
        reply(
            format!("{how} (id {}).", entry.id),
            &Remembered {
                id: entry.id.to_string(),
                pinned: entry.pinned,
                already_known: merged,
            },
        )
    }

    pub(super) async fn recall(&self, args: JsonObject) -> anyhow::Result<CallToolResult> {
        let a: RecallArgs = parse("recall", args)?;
        let (default, max) = RECALL_LIMIT;
        let limit = in_range("limit", a.limit, default, (1, max))? as usize;
        if a.query.trim().is_empty() {
            bail!("`query` is empty; say what to look for");
        }
        let store = self.store();
        let mode = a.mode.unwrap_or_default();
        let caps = store.capabilities();
        let semantic = caps.supports(Capability::SemanticSearch);
        if matches!(mode, Mode::Hybrid | Mode::Semantic) && !semantic {
            bail!(
                "`mode` {} needs an embedder and this server has none ({}); use `keyword` or `auto`",
                mode.as_str(),
                self.memory.embedder_note
            );
        }
        let request = match mode {
            // What `ava recall` does: the best search the store offers.
            Mode::Auto => SearchRequest::best(&caps, a.query.as_str()).limit(limit),
            Mode::Hybrid => SearchRequest::hybrid(a.query.as_str()).limit(limit),
            Mode::Keyword => SearchRequest::keyword(a.query.as_str()).limit(limit),
            Mode::Semantic => SearchRequest::semantic(a.query.as_str()).limit(limit),
        };
        let request = match a.as_of.as_deref() {
            Some(at) => request.filter(memory_core::Filter::as_of(
                crate::shared::dates::parse_as_of(at)
                    .map_err(|e| anyhow::anyhow!("`as_of` {e}"))?,
            )),
            None => request,
        };
        // Recall counts feed ranking: a token that may not change memory changes them neither.
        let request = match self.read_only {
            true => request.without_access_tracking(),
            false => request,
        };
        let ran = match request.mode {
            memory_core::SearchMode::Hybrid(_) => "hybrid",
            memory_core::SearchMode::Keyword => "keyword",
            memory_core::SearchMode::Semantic => "semantic",
        };
        // The chat's memories and the person's own facts, ranked as every door's recall.
        let hits = self
            .memory
            .agent
            .ops(self.scope.clone(), crate::agent::Audience::Private)
            .recall_with(request)
            .await
            .context("could not search memories")?;
        let entries: Vec<MemoryEntry> = hits.iter().map(|h| h.entry.clone()).collect();
        let text = memory_block(
            "recall",
            &format!("memories matching \"{}\"", a.query.trim_end()),
            &entries,
            "no memories matched",
        );
        let data = Recalled {
            mode: ran.to_owned(),
            memories: hits
                .iter()
                .map(|h| Hit {
                    memory: MemoryView::from(&h.entry),
                    score: h.score,
                    semantic: h.breakdown.semantic,
                    keyword: h.breakdown.keyword,
                })
                .collect(),
        };
        reply(text, &data)
    }

    pub(super) async fn forget(&self, args: JsonObject) -> anyhow::Result<CallToolResult> {
        let a: ForgetArgs = parse("forget", args)?;
        self.may_write("forget")?;
        let id: MemoryId = a.id.trim().parse().map_err(|_| {
            anyhow!(
                "`id` is not a memory id; use an id (a UUID) that remember, recall or recent gave"
            )
        })?;
        let mut deleted = Ok(());
        for scope in self.scope.private_context() {
            deleted = self.store().delete(&scope, id).await;
            if !matches!(deleted, Err(MemoryError::NotFound { .. })) {
                break;
            }
        }
        match deleted {
            Ok(()) => {}
            Err(MemoryError::NotFound { .. }) => bail!(
                "there is no memory {id} here; it was forgotten already, or the id is not one \
                 of this user's memories"
            ),
            Err(e) => return Err(e).context("could not forget the memory"),
        }
        reply(
            format!("Forgot memory {id}."),
            &Forgotten { id: id.to_string() },
        )
    }

    pub(super) async fn context(&self, args: JsonObject) -> anyhow::Result<CallToolResult> {
        let a: ContextArgs = parse("context", args)?;
        let budget = in_range("budget", a.budget, DEFAULT_BUDGET, CONTEXT_BUDGET)?;
        // The memories do go into a model's prompt, so this counts as recalling them, as
        // in the bot (`ava context` is a dry run that does not), except for a read-only token.
        // Only the recalled blocks are compiled: the client's own prompt has its
        // instructions and says who the user is.
        // A read-only token's prompts count as recalling nothing (counts feed ranking).
        let agent = match self.read_only {
            true => self.memory.agent.looking_only(),
            false => self.memory.agent.clone(),
        };
        let agent = agent.for_apps().with_budget(budget)?;
        let prompt = agent
            .recall_for_app(&self.scope, &a.message, true, Vec::new())
            .await?;
        let blocks: Vec<String> = prompt
            .messages
            .iter()
            .zip(&prompt.layout)
            .filter(|(_, block)| matches!(block, Block::Data(_)))
            .map(|(m, _)| m.content.clone())
            .collect();
        let report = &prompt.report;
        let summary = summarize(report);
        let mut text = if blocks.is_empty() {
            "(nothing recalled for this message)".to_owned()
        } else {
            blocks.join("\n\n")
        };
        text.push_str("\n\n");
        text.push_str(&summary);
        let (mut memories_in, mut memories_dropped) = (Vec::new(), Vec::new());
        for s in &report.sections {
            let Some(id) = s.memory_id else { continue };
            let item = |tokens, reason| ContextItem {
                id: id.to_string(),
                block: s.block.clone(),
                tokens,
                reason,
            };
            match s.action {
                Action::Kept { tokens } => memories_in.push(item(tokens, None)),
                Action::Truncated { to, .. } => memories_in.push(item(to, Some(s.reason.clone()))),
                Action::Dropped { tokens } => {
                    memories_dropped.push(item(tokens, Some(s.reason.clone())));
                }
            }
        }
        let data = ContextView {
            blocks,
            summary,
            prompt_tokens: report.estimated_prompt_tokens,
            available_tokens: report.budget.available,
            fits: report.fits,
            memories_in,
            memories_dropped,
            degradations: report
                .degradations
                .iter()
                .map(ToString::to_string)
                .collect(),
        };
        reply(text, &data)
    }

    pub(super) async fn recent(&self, args: JsonObject) -> anyhow::Result<CallToolResult> {
        let a: RecentArgs = parse("recent", args)?;
        let (default, max) = RECENT_LIMIT;
        let limit = in_range("limit", a.limit, default, (1, max))? as usize;
        // The chat's and the person's own facts, newest first.
        let mut entries = Vec::new();
        for scope in self.scope.private_context() {
            entries.extend(
                self.store()
                    .recent(&scope, limit, &Filter::default())
                    .await
                    .context("could not read the latest memories")?,
            );
        }
        entries.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        entries.truncate(limit);
        let text = memory_block(
            "recent",
            "the latest memories, newest first",
            &entries,
            "no memories yet",
        );
        let data = Recent {
            memories: entries.iter().map(MemoryView::from).collect(),
        };
        reply(text, &data)
    }

    pub(super) async fn facts(&self, args: JsonObject) -> anyhow::Result<CallToolResult> {
        let NoArgs {} = parse("facts", args)?;
        let facts = crate::agent::current_facts(self.store(), &self.scope.private_context())
            .await
            .context("could not read the facts")?;
        let text = memory_block(
            "facts",
            "the facts held about the user now, oldest first (the first is number 1)",
            &facts,
            "no facts yet",
        );
        reply(
            text,
            &Facts {
                facts: facts.iter().map(MemoryView::from).collect(),
            },
        )
    }

    pub(super) async fn stats(&self, args: JsonObject) -> anyhow::Result<CallToolResult> {
        let NoArgs {} = parse("stats", args)?;
        let store = self.store();
        let mut counts = Vec::new();
        for scope in self.scope.private_context() {
            counts.push(
                store
                    .count(&scope)
                    .await
                    .context("could not count memories")?,
            );
        }
        let memories = counts.iter().sum();
        // The last is the user-wide one (the only one when the identity is user-wide).
        let user_wide = counts.last().copied().unwrap_or(0);
        let caps = store.capabilities();
        let search_modes: Vec<String> = [
            (Capability::HybridSearch, "hybrid"),
            (Capability::KeywordSearch, "keyword"),
            (Capability::SemanticSearch, "semantic"),
        ]
        .into_iter()
        .filter(|(c, _)| caps.supports(*c))
        .map(|(_, name)| name.to_owned())
        .collect();
        let data = Stats {
            user: self.scope.user().to_owned(),
            chat: self.scope.chat().map(str::to_owned),
            memories,
            user_wide,
            search_modes,
            store: store.info().name.clone(),
            embedder: self.memory.embedder_note.clone(),
        };
        let text = format!(
            "{} memories for this user in this chat ({} of them the user's own facts); search: \
             {}; {}.",
            data.memories,
            data.user_wide,
            data.search_modes.join(", "),
            data.embedder
        );
        reply(text, &data)
    }
}

/// The explain report in a few lines for a model: tokens, what went in and what was left
/// out, how each source did. It names memories by id only; their text is in the blocks.
fn summarize(report: &ExplainReport) -> String {
    let (mut kept, mut cut, mut dropped) = (0, 0, 0);
    for s in report.sections.iter().filter(|s| s.memory_id.is_some()) {
        match s.action {
            Action::Kept { .. } => kept += 1,
            Action::Truncated { .. } => cut += 1,
            Action::Dropped { .. } => dropped += 1,
        }
    }
    let memories = |n: usize| {
        if n == 1 {
            "1 memory".to_owned()
        } else {
            format!("{n} memories")
        }
    };
    let mut out = format!(
        "explain: {} in the prompt{}, {} left out for the budget; the prompt takes {} of {} \
         available tokens{}.",
        memories(kept),
        if cut > 0 {
            format!(" ({cut} of them cut)")
        } else {
            String::new()
        },
        memories(dropped),
        report.estimated_prompt_tokens,
        report.budget.available,
        if report.fits { "" } else { " and does not fit" },
    );
    let sources: Vec<String> = report
        .sources
        .iter()
        .map(|s| {
            let status = format!("{:?}", s.status).to_lowercase();
            format!(
                "{} {status}{} ({} found, {} kept)",
                s.kind.as_str(),
                s.search
                    .as_deref()
                    .map(|m| format!(", {m}"))
                    .unwrap_or_default(),
                s.returned,
                s.kept
            )
        })
        .collect();
    if !sources.is_empty() {
        let _ = write!(out, "\nsources: {}.", sources.join("; "));
    }
    for d in &report.degradations {
        let _ = write!(out, "\ndegraded: {d}");
    }
    out
}
