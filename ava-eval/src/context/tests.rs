//! Unit tests of `context`.

use super::evidence::{line_in, turn_line};
use super::*;
use crate::locomo::parse_samples;
use serde_json::json;

const CUTOFFS: Cutoffs = Cutoffs {
    threshold: 0.7,
    limit: 5,
};

const ZEPHYR: &str = "I adopted a greyhound called Zephyr last spring; he sleeps all day \
    on the sofa, steals socks from the laundry basket and howls at the neighbours' trumpet";

/// A chat of `n` turns in one session; turn `D1:1` holds a rare word, the rest filler,
/// and `D1:2` needs escaping.
fn conversation(n: usize) -> Sample {
    let mut session = Vec::new();
    for i in 1..=n {
        let speaker = if i % 2 == 1 { "Ann" } else { "Bob" };
        let text = match i {
            // Longer than any filler, so that no room a filler leaves can hold it.
            1 => ZEPHYR.to_owned(),
            2 => "Tom & Jerry <3 is on tonight".to_owned(),
            // Distinct fillers: each has words of its own, so no two are
            // near-duplicates (which compile would collapse).
            _ => format!(
                "Filler {i} about the usual errands: q{i}a q{i}b q{i}c q{i}d q{i}e q{i}f q{i}g"
            ),
        };
        session.push(json!({"speaker": speaker, "dia_id": format!("D1:{i}"), "text": text}));
    }
    let data = json!([{
        "sample_id": "s1",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "10:00 am on 1 June, 2023",
            "session_1": session,
        },
        "qa": [{"question": "What is the greyhound called?", "answer": "Zephyr",
                "evidence": ["D1:1"], "category": 4}],
    }]);
    let (mut samples, problems) = parse_samples(&data).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    samples.remove(0)
}

async fn stored(sample: &Sample, dir: &tempfile::TempDir) -> Conversation {
    let embedder: Arc<dyn EmbeddingProvider> = Arc::new(HashingEmbedder::new(384).unwrap());
    let store = open_store(&dir.path().join("t.db"), Arc::clone(&embedder))
        .await
        .unwrap();
    ingest(sample, store, embedder, &Overrides::default(), None)
        .await
        .unwrap()
}

#[test]
fn turns_are_stored_as_the_bot_stores_a_chat() {
    let sample = conversation(3);
    assert_eq!(sample.turns[0].role, memory_core::Role::User);
    assert_eq!(sample.turns[1].role, memory_core::Role::Assistant);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let conv = stored(&sample, &dir).await;
        let second = conv.store.get(&conv.scope, conv.ids["D1:2"]).await.unwrap();
        assert_eq!(second.content, "Tom & Jerry <3 is on tonight");
        assert_eq!(
            second.context.as_deref(),
            Some(format!("in reply to: {ZEPHYR}").as_str())
        );
        assert_eq!(
            second.created_at.as_millis()
                - conv
                    .store
                    .get(&conv.scope, conv.ids["D1:1"])
                    .await
                    .unwrap()
                    .created_at
                    .as_millis(),
            60_000
        );
        assert_eq!(conv.now, sample.turns[2].chat_at.plus(NOW_AFTER_LAST_TURN));
    });
}

#[test]
fn evidence_counts_only_when_its_line_is_in_the_prompt() {
    let sample = conversation(60);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let conv = stored(&sample, &dir).await;
        let turns: HashMap<&str, &Turn> = sample
            .turns
            .iter()
            .map(|t| (t.dia_id.as_str(), t))
            .collect();
        let q = &sample.questions[0];

        // Keyword search finds the old turn; the product prompt holds it, escaped too.
        let prompt = conv.prompt(&q.text, 4000, None).await.unwrap();
        assert!(in_prompt(&prompt, turns["D1:1"]), "{:#?}", prompt.messages);
        let s = score(&conv, &turns, q, &prompt, &[], CUTOFFS);
        assert_eq!((s.share, s.disagreements), (1.0, 0));
        // The newest turn is in the recent conversation; a middle one is in neither.
        assert!(in_prompt(&prompt, turns["D1:60"]));
        assert!(!in_prompt(&prompt, turns["D1:30"]));

        // At a budget tight enough, compile drops the found turn (the newest turns of
        // the conversation are kept first): the report says so, and it does not count.
        let mut tight = None;
        for budget in (300..=700).rev().step_by(20) {
            let p = conv.prompt(&q.text, budget, None).await.unwrap();
            if let Some(("semantic", Action::Dropped { .. }, _, _)) =
                report_action(&p, conv.ids["D1:1"])
            {
                tight = Some(p);
                break;
            }
        }
        let tight = tight.expect("some budget from 300 to 700 drops the found turn");
        let s = score(&conv, &turns, q, &tight, &[], CUTOFFS);
        assert_eq!(s.share, 0.0);
        assert_eq!(s.lost, [("D1:1".to_owned(), Lost::DroppedByCompile)]);
        assert_eq!(s.disagreements, 0);

        // The newest-turns baseline at a small budget: the newest turn fits, the oldest
        // (the evidence) does not, so the question scores 0.
        let base = conv.newest_turns(&q.text, 1000).await.unwrap();
        assert!(in_prompt(&base, turns["D1:60"]));
        assert!(!in_prompt(&base, turns["D1:1"]));
        let s = score(&conv, &turns, q, &base, &[], CUTOFFS);
        assert_eq!((s.share, s.disagreements), (0.0, 0));
        assert!(base.report.estimated_prompt_tokens <= 1000);
        // ... and with room for everything, the escaped turn is found too.
        let all = conv.newest_turns(&q.text, 20_000).await.unwrap();
        assert!(in_prompt(&all, turns["D1:1"]));
        assert!(in_prompt(&all, turns["D1:2"]), "escaped text must match");
        let text = all
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<String>();
        assert!(text.contains("Tom &amp; Jerry &lt;3"), "{text}");
    });
}

#[test]
fn only_a_whole_line_is_evidence() {
    let sample = conversation(3);
    let turn = &sample.turns[0];
    let (day, [line, timed]) = turn_line(turn);
    for line in [line, timed] {
        let block = format!(
            "<recalled-memory kind=\"semantic\">\nRecalled data.\n{day}{line}\n</recalled-memory>"
        );
        assert!(line_in([block.as_str()], turn));
        // Cut short by compile, or the same words in another line: not the turn.
        let cut = block.replace("trumpet\n", "\n");
        assert!(!line_in([cut.as_str()], turn));
        let longer = block.replace("trumpet\n", "trumpet, and more\n");
        assert!(!line_in([longer.as_str()], turn));
        // A note after the whole text (the graph's `(mentions X)`) still holds it whole.
        let noted = block.replace("trumpet\n", "trumpet (mentions Zephyr)\n");
        assert!(line_in([noted.as_str()], turn));
        // The same line under another day's header, or under none: not the turn.
        let other = block.replace(&day, "[1999-01-01 Fri]");
        assert!(!line_in([other.as_str()], turn));
        let undated = block.replace(&format!("\n{day}"), "");
        assert!(!line_in([undated.as_str()], turn));
        // A later day's run above the line's own header does not hide it.
        let two = block.replace(
            &format!("\n{day}"),
            &format!("\n[1999-01-01 Fri]\n- 10:00 user: hi\n{day}"),
        );
        assert!(line_in([two.as_str()], turn));
    }
}
