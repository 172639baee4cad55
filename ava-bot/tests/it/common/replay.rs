//! A conversation to replay through a front door (the proxy, the bot), and the measure of
//! what a provider's prompt cache could reuse: the share of each call's prompt that repeats
//! the start of the call before.
//!
//! The conversation is a built-in one of 40 exchanges, or, when `AVA_REPLAY_FILE` names a
//! LoCoMo-format file (`../shared/data/locomo-dev.json`, `beam-dev.json`), the first 40
//! exchanges of its first conversation: how the figures in BENCHMARKS.md were measured.

use serde_json::Value;

/// The exchanges replayed: what the user says, and the answer.
pub(crate) fn exchanges() -> Vec<(String, String)> {
    let from_file = std::env::var_os("AVA_REPLAY_FILE").map(|path| {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("AVA_REPLAY_FILE {}: {e}", path.to_string_lossy()));
        let data: Value = serde_json::from_str(&text).expect("AVA_REPLAY_FILE is JSON");
        from_locomo(&data[0]["conversation"])
    });
    let all = from_file.unwrap_or_else(built_in);
    all.into_iter().take(40).collect()
}

/// 40 exchanges of a chat about many things, each mentioning earlier ones now and then.
fn built_in() -> Vec<(String, String)> {
    const TOPICS: [&str; 8] = [
        "my sister's move to Porto",
        "the cello lessons",
        "the garden's tomatoes",
        "the dentist on Friday",
        "the bike repair",
        "the novel I am reading",
        "the trip to Kyoto in April",
        "the new job at the robotics startup",
    ];
    (0..40)
        .map(|i| {
            let topic = TOPICS[i % TOPICS.len()];
            let earlier = TOPICS[(i * 3 + 1) % TOPICS.len()];
            (
                format!(
                    "Day {i}: some news about {topic}; it reminded me of {earlier}. What do you \
                     think I should do next about it, given what I told you?"
                ),
                format!(
                    "About {topic} (day {i}): take it one step at a time, and keep {earlier} in \
                     mind; you said it mattered to you."
                ),
            )
        })
        .collect()
}

/// The exchanges of a LoCoMo-format conversation: `speaker_a`'s turns are the user's, the
/// other speaker's the answers; consecutive turns of one side are one message.
fn from_locomo(conversation: &Value) -> Vec<(String, String)> {
    let a = conversation["speaker_a"].as_str().unwrap_or_default();
    let mut sessions: Vec<(usize, &Vec<Value>)> = conversation
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix("session_")?.parse().ok()?;
            Some((n, v.as_array()?))
        })
        .collect();
    sessions.sort_by_key(|(n, _)| *n);
    let mut turns: Vec<(bool, String)> = Vec::new();
    for (_, session) in sessions {
        for t in session {
            let user = t["speaker"].as_str() == Some(a);
            let text = t["text"].as_str().unwrap_or_default().to_owned();
            match turns.last_mut() {
                Some((was, said)) if *was == user => {
                    said.push('\n');
                    said.push_str(&text);
                }
                _ => turns.push((user, text)),
            }
        }
    }
    let start = turns.iter().position(|(user, _)| *user).unwrap_or(0);
    turns[start..]
        .chunks(2)
        .filter_map(|pair| match pair {
            [(true, said), (false, answer)] => Some((said.clone(), answer.clone())),
            _ => None,
        })
        .collect()
}

/// The messages of a chat request as one text: each message's role and content (a string,
/// or the text parts of a list).
pub(crate) fn prompt_text(messages: &[Value]) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str(m["role"].as_str().unwrap_or_default());
        out.push('\n');
        match &m["content"] {
            Value::String(s) => out.push_str(s),
            Value::Array(parts) => {
                for p in parts {
                    out.push_str(p["text"].as_str().unwrap_or_default());
                }
            }
            _ => {}
        }
        out.push('\n');
    }
    out
}

/// The mean share of each prompt's characters that repeat the start of the prompt before
/// (the first prompt has none to repeat, and is left out).
pub(crate) fn mean_shared_prefix(prompts: &[String]) -> f64 {
    let shares: Vec<f64> = prompts
        .windows(2)
        .map(|w| {
            let shared = w[0]
                .chars()
                .zip(w[1].chars())
                .take_while(|(a, b)| a == b)
                .count();
            shared as f64 / w[1].chars().count().max(1) as f64
        })
        .collect();
    shares.iter().sum::<f64>() / shares.len().max(1) as f64
}
