//! The agent layer with a scripted `ChatModel` (it records what it was sent and answers from
//! a script): `infer` runs memory tool calls against the backend and loops until the model
//! answers, within a step bound; application tools run through their handlers; the memory
//! operations act on the ops' scope only.

use crate::common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::{OBSERVATION, chat_scope, config, embedder, input, request, seed_alice, user_scope};
use hydrate::{
    ChatMessage, ChatModel, ChatResponse, ChatRole, Error, FORGET, Ops, RECALL, REMEMBER, Reach,
    ToolCall, ToolHandler, ToolSpec,
};
use memory_core::{MemoryBackend, MemoryKind, NewMemory, Scope};
use memory_inmem::InMemoryBackend;
use serde_json::json;

#[derive(Debug, Default)]
struct Scripted {
    replies: Mutex<VecDeque<ChatResponse>>,
    seen: Mutex<Vec<(Vec<ChatMessage>, Vec<String>)>>,
    /// Answer every call with this tool call instead of the script.
    forever: Option<ToolCall>,
}

impl Scripted {
    fn new(replies: Vec<ChatResponse>) -> Self {
        Self {
            replies: Mutex::new(replies.into()),
            ..Self::default()
        }
    }

    fn calls(&self) -> Vec<(Vec<ChatMessage>, Vec<String>)> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl ChatModel for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn chat(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
    ) -> hydrate::Result<ChatResponse> {
        self.seen.lock().unwrap().push((
            messages.to_vec(),
            tools.iter().map(|t| t.name.clone()).collect(),
        ));
        if let Some(call) = &self.forever {
            return Ok(calls(vec![call.clone()]));
        }
        self.replies
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| Error::Model {
                model: "scripted".into(),
                message: "script exhausted".into(),
                source: None,
            })
    }
}

fn text(reply: &str) -> ChatResponse {
    ChatResponse {
        model: "scripted-1".into(),
        content: Some(reply.into()),
        tool_calls: Vec::new(),
    }
}

fn calls(tool_calls: Vec<ToolCall>) -> ChatResponse {
    ChatResponse {
        model: "scripted-1".into(),
        content: None,
        tool_calls,
    }
}

fn call(id: &str, name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
    }
}

async fn ops() -> (Ops, Arc<dyn MemoryBackend>) {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    seed_alice(backend.as_ref()).await;
    let cfg = Arc::new(config(Arc::clone(&backend), Some(embedder())));
    (
        Ops::new(cfg, Arc::clone(&backend), chat_scope("alice")),
        backend,
    )
}

#[tokio::test]
async fn infer_runs_memory_tools_until_the_model_answers() {
    let (ops, backend) = ops().await;
    let model = Scripted::new(vec![
        calls(vec![call(
            "c1",
            REMEMBER,
            json!({"content": "Alice adds extra cumin to her dal.", "tags": ["food"], "context": "said while asking for the recipe"}),
        )]),
        // Some APIs send arguments as a JSON string.
        calls(vec![call(
            "c2",
            RECALL,
            json!("{\"query\": \"dal cumin\", \"limit\": 3}"),
        )]),
        text("Red lentils, onion, garlic, cumin (extra for you) and a tin of tomatoes."),
    ]);
    let out = ops
        .infer_with(
            &model,
            input(chat_scope("alice"), request(OBSERVATION, 8000)),
        )
        .await
        .unwrap();
    assert_eq!(out.steps, 3);
    assert_eq!(out.model, "scripted-1");
    assert!(out.reply.starts_with("Red lentils"));
    assert_eq!(out.tool_runs.len(), 2);
    assert!(out.tool_runs.iter().all(|r| r.ok), "{:?}", out.tool_runs);

    // The fact was stored as Alice's (user-wide: it follows her into every private chat),
    // as a fact, with its tag and context.
    let stored: serde_json::Value = serde_json::from_str(&out.tool_runs[0].output).unwrap();
    let id = stored["id"].as_str().unwrap().parse().unwrap();
    let fact = backend.get(&user_scope("alice"), id).await.unwrap();
    assert_eq!(fact.kind, MemoryKind::Fact);
    assert_eq!(fact.source.as_deref(), Some("tool:remember"));
    // With the `graph` feature it also carries the names it mentions.
    let tags: &[&str] = if cfg!(feature = "graph") {
        &["ent:alice", "food"]
    } else {
        &["food"]
    };
    assert_eq!(
        fact.tags.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
        tags
    );

    // Each call saw the conversation so far; tool results answer their call ids, and
    // recalled memories come back as a delimited data block with ids.
    let seen = model.calls();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].1, [REMEMBER, RECALL, FORGET]);
    assert_eq!(seen[0].0, out.prompt.messages);
    let last = &seen[2].0;
    let n = out.prompt.messages.len();
    assert_eq!(last.len(), n + 4);
    assert_eq!(
        (last[n].role, last[n].tool_calls[0].id.as_str()),
        (ChatRole::Assistant, "c1")
    );
    assert_eq!(
        (last[n + 1].role, last[n + 1].tool_call_id.as_deref()),
        (ChatRole::Tool, Some("c1"))
    );
    let recalled = &last[n + 3].content;
    assert!(
        recalled.starts_with("<recalled-memory kind=\"recall\">"),
        "{recalled}"
    );
    assert!(
        recalled.contains(&format!("(id {id}) Alice adds extra cumin to her dal.")),
        "{recalled}"
    );
}

#[tokio::test]
async fn tool_errors_go_back_to_the_model() {
    let (ops, backend) = ops().await;
    // A memory of another user: forgetting it from Alice's ops is "not found".
    let bobs = backend
        .store(&chat_scope("bob"), NewMemory::new("Bob's secret"))
        .await
        .unwrap();
    let model = Scripted::new(vec![
        calls(vec![
            call("a", FORGET, json!({"id": bobs.id.to_string()})),
            call("b", "launch_rockets", json!({})),
            call("c", REMEMBER, json!({"context": "no content"})),
        ]),
        text("Sorry, I could not do that."),
    ]);
    let out = ops
        .infer_with(
            &model,
            input(chat_scope("alice"), request(OBSERVATION, 8000)),
        )
        .await
        .unwrap();
    assert_eq!(out.steps, 2);
    let errors: Vec<_> = out
        .tool_runs
        .iter()
        .map(|r| (r.ok, r.output.clone()))
        .collect();
    assert!(errors.iter().all(|(ok, _)| !ok), "{errors:?}");
    assert!(errors[0].1.contains("no memory"), "{errors:?}");
    assert!(
        errors[1].1.contains("there is no tool `launch_rockets`"),
        "{errors:?}"
    );
    assert!(
        errors[2].1.contains("needs a string argument `content`"),
        "{errors:?}"
    );
    assert!(
        backend.get(&chat_scope("bob"), bobs.id).await.is_ok(),
        "Bob's memory survives"
    );
}

#[tokio::test]
async fn a_model_that_never_stops_calling_tools_hits_the_step_bound() {
    let (ops, _) = ops().await;
    let ops = ops.with_max_steps(2).unwrap();
    let model = Scripted {
        forever: Some(call("x", RECALL, json!({"query": "cat"}))),
        ..Scripted::default()
    };
    let err = ops
        .infer_with(
            &model,
            input(chat_scope("alice"), request(OBSERVATION, 8000)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MaxSteps { steps: 2, .. }), "{err}");
    assert_eq!(model.calls().len(), 2);
    assert!(Ops::with_max_steps(ops, 0).is_err());
}

#[tokio::test]
async fn infer_hydrates_for_the_ops_scope_only() {
    let (ops, _) = ops().await;
    let model = Scripted::new(vec![text("ok")]);
    let out = ops.infer(&model, request(OBSERVATION, 8000)).await.unwrap();
    assert!(
        out.prompt
            .messages
            .iter()
            .any(|m| m.content.contains("Miso"))
    );
    let err = ops
        .infer_with(&model, input(chat_scope("bob"), request(OBSERVATION, 8000)))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("make an Ops for that scope"),
        "{err}"
    );
}

#[tokio::test]
async fn remember_recall_forget() {
    let (ops, _) = ops().await;
    let first = ops
        .remember("Alice's sister is called Ines.", None, &["family"])
        .await
        .unwrap();
    assert!(!first.merged);
    let id = first.entry.id;
    // The same fact again, told differently and tagged anew: merged into the first.
    let again = ops
        .remember("alice's sister is called  Ines", None, &["sister"])
        .await
        .unwrap();
    assert!(again.merged);
    assert_eq!(again.entry.id, id);
    let tags: Vec<&str> = again.entry.tags.iter().map(|t| t.as_str()).collect();
    // With the `graph` feature, the names each telling mentions are merged too.
    let expected: &[&str] = if cfg!(feature = "graph") {
        &["ent:alice", "ent:ines", "family", "sister"]
    } else {
        &["family", "sister"]
    };
    assert_eq!(tags, expected);
    let other = ops
        .remember("Alice's sister is called Inez.", None, &[])
        .await
        .unwrap();
    assert!(!other.merged, "a different fact is a new memory");
    ops.forget(other.entry.id).await.unwrap();
    let hits = ops.recall("sister Ines", 3).await.unwrap();
    assert_eq!(hits[0].id, id);
    assert!(
        ops.recall("sister", 0)
            .await
            .is_err_and(|e| e.to_string().contains("outside 1..=20"))
    );
    assert!(ops.recall("  ", 3).await.is_err());
    assert!(ops.remember("x", None, &["two words"]).await.is_err());
    ops.forget(id).await.unwrap();
    assert!(
        ops.recall("sister Ines", 3)
            .await
            .unwrap()
            .iter()
            .all(|e| e.id != id)
    );
    assert!(ops.forget(id).await.is_err());
}

/// `infer` is `Send`: a bot can spawn one per incoming message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infer_runs_on_a_spawned_task() {
    let (ops, _) = ops().await;
    let model = Arc::new(Scripted::new(vec![text("spawned")]));
    let task_model = Arc::clone(&model);
    let out = tokio::spawn(async move {
        ops.infer(task_model.as_ref(), request(OBSERVATION, 8000))
            .await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out.reply, "spawned");
    assert_eq!(model.calls().len(), 1);
}

/// An application tool: the weather by city, recording who asked. `Slow` never answers
/// in time; `Broken` fails.
#[derive(Debug, Default)]
struct Weather {
    asked: Mutex<Vec<(memory_core::Scope, serde_json::Value)>>,
}

#[async_trait]
impl ToolHandler for Weather {
    async fn call(
        &self,
        scope: &memory_core::Scope,
        arguments: serde_json::Value,
    ) -> hydrate::Result<String> {
        self.asked
            .lock()
            .unwrap()
            .push((scope.clone(), arguments.clone()));
        match arguments["city"].as_str() {
            Some("Oslo") => Ok(json!({"city": "Oslo", "celsius": 4}).to_string()),
            Some("Slow") => {
                tokio::time::sleep(std::time::Duration::from_secs(10)).await;
                Ok("too late".into())
            }
            Some(other) => Err(Error::invalid("city", format!("no forecast for {other}"))),
            None => Err(Error::invalid("tool arguments", "`city` is missing")),
        }
    }
}

fn weather_tool() -> prompt_ir::ToolDef {
    prompt_ir::ToolDef::new(
        "weather",
        "Today's weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
    .unwrap()
}

#[tokio::test]
async fn application_tools_run_and_their_results_go_back_to_the_model() {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    seed_alice(backend.as_ref()).await;
    let weather = Arc::new(Weather::default());
    let mut cfg = config(Arc::clone(&backend), Some(embedder()))
        .with_app_tool(weather_tool(), Arc::clone(&weather) as Arc<dyn ToolHandler>)
        .unwrap();
    cfg.tool_timeout = std::time::Duration::from_millis(200);
    // A second tool of the same name is refused.
    let err = cfg
        .clone()
        .with_app_tool(weather_tool(), Arc::clone(&weather) as Arc<dyn ToolHandler>)
        .unwrap_err();
    assert!(
        err.to_string().contains("`weather` is there already"),
        "{err}"
    );
    let ops = Ops::new(Arc::new(cfg), Arc::clone(&backend), chat_scope("alice"));
    let model = Scripted::new(vec![
        calls(vec![
            call("w1", "weather", json!({"city": "Oslo"})),
            call("w2", "weather", json!({"city": "Atlantis"})),
            call("w3", "weather", json!({"city": "Slow"})),
            call("w4", "lunch", json!({})),
        ]),
        text("It is 4 degrees in Oslo."),
    ]);
    let out = ops
        .infer_with(
            &model,
            input(chat_scope("alice"), request("Weather in Oslo?", 8000)),
        )
        .await
        .unwrap();
    assert_eq!(out.reply, "It is 4 degrees in Oslo.");
    let runs: Vec<_> = out
        .tool_runs
        .iter()
        .map(|r| (r.name.as_str(), r.ok, r.output.as_str()))
        .collect();
    assert_eq!((runs[0].0, runs[0].1), ("weather", true));
    // What the handler returned, whatever order its JSON keys come in.
    let told: serde_json::Value = serde_json::from_str(runs[0].2).unwrap();
    assert_eq!(told, json!({"city": "Oslo", "celsius": 4}));
    assert!(
        !runs[1].1 && runs[1].2.contains("no forecast for Atlantis"),
        "{runs:?}"
    );
    assert!(
        !runs[2].1 && runs[2].2.contains("did not finish within 200ms"),
        "{runs:?}"
    );
    assert!(
        !runs[3].1
            && runs[3]
                .2
                .contains("the tools are remember, recall, forget, weather"),
        "{runs:?}"
    );
    // The model saw the tool among its tools, and the result in the next call.
    let seen = model.calls();
    assert!(seen[0].1.contains(&"weather".to_owned()), "{:?}", seen[0].1);
    let second = &seen[1].0;
    assert!(
        second
            .iter()
            .any(|m| m.role == ChatRole::Tool && m.content.contains(r#""celsius":4"#)),
        "{second:?}"
    );
    // The handler ran for Alice's scope, with the model's arguments.
    let asked = weather.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3);
    assert!(asked.iter().all(|(s, _)| *s == chat_scope("alice")));
    assert_eq!(asked[0].1, json!({"city": "Oslo"}));
}

/// A fact told in one private chat is the person's: it reaches the prompt, `recall` and
/// `forget` of another private chat of the same user, never another user, and never a chat
/// others share (a group), where what is remembered stays in that chat.
#[tokio::test]
async fn facts_follow_the_person_into_private_chats_and_stay_out_of_shared_ones() {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    let cfg = Arc::new(config(Arc::clone(&backend), Some(embedder())));
    let in_chat = |user: &str, chat: &str| Scope::for_user(user).unwrap().in_chat(chat).unwrap();
    let private = Ops::new(
        Arc::clone(&cfg),
        Arc::clone(&backend),
        in_chat("alice", "dm"),
    );
    let elsewhere = Ops::new(
        Arc::clone(&cfg),
        Arc::clone(&backend),
        in_chat("alice", "cli"),
    );
    let group = Ops::new(
        Arc::clone(&cfg),
        Arc::clone(&backend),
        in_chat("alice", "-100"),
    )
    .in_shared_chat();
    let bob = Ops::new(Arc::clone(&cfg), Arc::clone(&backend), in_chat("bob", "dm"));

    let told = private
        .remember("Alice's cat is called Pixel.", None, &[])
        .await
        .unwrap();
    assert_eq!(told.entry.scope, user_scope("alice"));
    assert_eq!(private.facts_scope(), user_scope("alice"));
    assert_eq!(group.facts_scope(), in_chat("alice", "-100"));
    let question = "What is my cat called?";
    let holds_pixel =
        |p: &hydrate::CompiledPrompt| p.messages.iter().any(|m| m.content.contains("Pixel"));
    let prompt = |ops: &Ops| {
        let ops = ops.clone();
        async move {
            ops.prepare(&input(ops.scope().clone(), request(question, 4000)))
                .await
                .unwrap()
        }
    };

    assert!(
        holds_pixel(&prompt(&elsewhere).await),
        "another private chat of Alice"
    );
    assert_eq!(
        elsewhere.recall("cat Pixel", 5).await.unwrap()[0].id,
        told.entry.id
    );
    assert!(!holds_pixel(&prompt(&group).await), "a group Alice is in");
    assert!(group.recall("cat Pixel", 5).await.unwrap().is_empty());
    assert!(
        group.forget(told.entry.id).await.is_err(),
        "a group cannot forget it"
    );
    assert!(!holds_pixel(&prompt(&bob).await), "another user");
    assert!(bob.recall("cat Pixel", 5).await.unwrap().is_empty());

    // Not even an input that asks for a private context's reach gets it into a group: the
    // group's operations read what their own reach allows.
    let asked = input(group.scope().clone(), request(question, 4000)).with_reach(Reach::Private);
    let p = group.prepare(&asked).await.unwrap();
    assert!(!holds_pixel(&p));

    // Unless Alice shares hers there: then her prompts in the group hold them (not Bob's,
    // and no request can name whose facts are shared).
    let sharing = group.clone().sharing_facts_of("alice");
    assert!(
        holds_pixel(&prompt(&sharing).await),
        "Alice shared her facts"
    );
    assert!(sharing.recall("cat Pixel", 5).await.unwrap().is_empty());
    let bob_in_group = Ops::new(
        Arc::clone(&cfg),
        Arc::clone(&backend),
        in_chat("bob", "-100"),
    )
    .in_shared_chat();
    let asked =
        input(bob_in_group.scope().clone(), request(question, 4000)).with_reach(Reach::Shared {
            facts_of: Some("alice".into()),
        });
    assert!(!holds_pixel(&bob_in_group.prepare(&asked).await.unwrap()));
    // Hydrated directly, an input's reach is what its sources read.
    let direct = |reach: Reach| {
        let cfg = Arc::clone(&cfg);
        let input = input(group.scope().clone(), request(question, 4000)).with_reach(reach);
        async move {
            let hydrated = hydrate::hydrate(&cfg, &input).await.unwrap();
            hydrate::compile(&cfg, &hydrated).unwrap()
        }
    };
    assert!(!holds_pixel(&direct(Reach::SHARED).await));
    assert!(holds_pixel(&direct(Reach::Private).await));

    // Told in the group, a fact stays in the group.
    let said = group
        .remember("The group meets on Fridays.", None, &[])
        .await
        .unwrap();
    assert_eq!(said.entry.scope, in_chat("alice", "-100"));
    assert!(
        elsewhere
            .recall("group meets Fridays", 5)
            .await
            .unwrap()
            .is_empty()
    );

    // Forgotten from any private chat of hers, it is gone everywhere.
    elsewhere.forget(told.entry.id).await.unwrap();
    assert!(!holds_pixel(&prompt(&private).await));
}

#[tokio::test]
async fn a_fact_longer_than_one_memory_is_kept_whole_in_parts() {
    let (ops, backend) = ops().await;
    let max = backend.info().limits.max_content_bytes;
    let long = format!(
        "{} and the key is under the blue pot.",
        "My recipe notes. ".repeat(max / 16)
    );
    let kept = ops.remember(&long, None, &[]).await.unwrap();
    assert!(!kept.merged);
    let tag = format!("{}{}", memory_core::PART_OF_TAG_PREFIX, kept.entry.id);
    let parts: Vec<_> = backend
        .recent(&ops.facts_scope(), 50, &memory_core::Filter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.tags.iter().any(|t| t.as_str() == tag))
        .collect();
    assert!(parts.len() >= 2, "{} parts", parts.len());
    assert!(
        parts
            .iter()
            .any(|p| p.content.ends_with("under the blue pot."))
    );
}

/// `recall` ranks as the prompt does: a message said amid talk that matches the query
/// comes before a stray match said alone, later, that the search alone ranks first.
#[tokio::test]
async fn recall_reads_a_message_in_the_talk_around_it() {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    const SISTER: &str = "My sister is coming too.";
    const PLUMBER: &str = "The plumber is coming now.";
    // Ten days ago, minutes apart; the stray one two days ago (recall scores by "now").
    let now = memory_core::Timestamp::now();
    let minutes_ago = |m: u64| now.minus(std::time::Duration::from_secs(m * 60));
    let ten_days = 10 * 24 * 60;
    let said = [
        (ten_days, "We fly to Lisbon for the trip in May."),
        (
            ten_days - 1,
            "The Lisbon flat for the trip has a balcony over the river.",
        ),
        (ten_days - 2, SISTER),
        (2 * 24 * 60, PLUMBER),
    ];
    let memories = said
        .iter()
        .map(|(ago, text)| NewMemory::new(*text).at(minutes_ago(*ago)))
        .collect();
    backend
        .store_batch(&chat_scope("alice"), memories)
        .await
        .unwrap();
    let query = "Who is coming on the Lisbon trip?";
    // The search alone, scored as `recall` scores: the two match alike, and the newer,
    // stray one comes first.
    let mut searched: Vec<_> = backend
        .search(
            &chat_scope("alice"),
            &memory_core::SearchRequest::hybrid(query).without_access_tracking(),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|h| hydrate::scoring::score_memory(h, now, Default::default(), Default::default()))
        .collect();
    searched.sort_by(|a, b| b.score.total_cmp(&a.score));
    let position = |texts: &[&str], t: &str| texts.iter().position(|x| *x == t);
    let texts: Vec<&str> = searched.iter().map(|h| h.entry.content.as_str()).collect();
    assert!(
        position(&texts, PLUMBER) < position(&texts, SISTER),
        "{texts:?}"
    );
    let cfg = Arc::new(config(Arc::clone(&backend), Some(embedder())));
    let ops = Ops::new(cfg, Arc::clone(&backend), chat_scope("alice"));
    let recalled = ops.recall(query, 4).await.unwrap();
    let texts: Vec<&str> = recalled.iter().map(|e| e.content.as_str()).collect();
    assert!(
        position(&texts, SISTER).is_some() && position(&texts, SISTER) < position(&texts, PLUMBER),
        "{texts:?}"
    );
    // A memory longer than the embedder's window keeps its own score, as in the prompt:
    // with a window shorter than every message, none is lifted and the order is the
    // search's.
    let recalled = ops
        .with_embedder_window(Some(8))
        .recall(query, 4)
        .await
        .unwrap();
    let texts: Vec<&str> = recalled.iter().map(|e| e.content.as_str()).collect();
    assert!(
        position(&texts, PLUMBER) < position(&texts, SISTER),
        "{texts:?}"
    );
}

/// In a shared chat, operations acting for a member tag what they remember with the member
/// (the model's `remember` tool included), and forget only what is tagged with them.
#[tokio::test]
async fn a_member_of_a_shared_chat_remembers_as_themself_and_forgets_only_their_own() {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    let cfg = Arc::new(config(Arc::clone(&backend), Some(embedder())));
    let group = Scope::for_user("group").unwrap().in_chat("-100").unwrap();
    let shared = Ops::new(Arc::clone(&cfg), Arc::clone(&backend), group.clone()).in_shared_chat();
    let (alice, bob) = (
        memory_core::Tag::new("from:111").unwrap(),
        memory_core::Tag::new("from:222").unwrap(),
    );
    let as_alice = shared.clone().acting_for(alice.clone());
    let as_bob = shared.clone().acting_for(bob.clone());
    let told = as_alice
        .remember("Alice is allergic to kumquats.", None, &[])
        .await
        .unwrap();
    assert!(told.entry.tags.contains(&alice), "{:?}", told.entry.tags);
    // The model's tool, answering Bob.
    let model = Scripted::new(vec![
        calls(vec![call(
            "c1",
            REMEMBER,
            json!({"content": "Bob prefers oolong."}),
        )]),
        text("Noted."),
    ]);
    as_bob
        .infer(&model, request("I prefer oolong", 4000))
        .await
        .unwrap();
    let facts = memory_core::Filter {
        kinds: vec![MemoryKind::Fact],
        ..memory_core::Filter::default()
    };
    let kept = backend.recent(&group, 10, &facts).await.unwrap();
    let bobs = kept
        .iter()
        .find(|m| m.content == "Bob prefers oolong.")
        .unwrap();
    assert!(bobs.tags.contains(&bob) && !bobs.tags.contains(&alice));
    // Bob cannot forget Alice's; she can.
    let refused = as_bob.forget(told.entry.id).await.unwrap_err();
    assert!(matches!(refused, Error::InvalidInput { .. }), "{refused}");
    assert!(refused.to_string().contains("not yours"), "{refused}");
    assert!(backend.get(&group, told.entry.id).await.is_ok());
    as_alice.forget(told.entry.id).await.unwrap();
    assert!(backend.get(&group, told.entry.id).await.is_err());
    // Outside a shared chat acting for someone changes nothing.
    let private = Ops::new(cfg, Arc::clone(&backend), chat_scope("alice")).acting_for(bob);
    assert_eq!(private.member(), None);
}
