//! The front of `ava mcp`'s stdio transport: it reads the client's lines before rmcp does and
//! answers the two that rmcp would leave unanswered, so a client never waits forever: a line
//! that is not JSON gets JSON-RPC's parse error (-32700, id null), and a line longer than
//! rmcp's limit (16 MiB) gets an invalid-request error (-32600) with the id its head shows.
//! Everything else passes through to rmcp unchanged, and rmcp's answers go out whole, one
//! line at a time, never interleaved with the front's own.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// The longest line passed on (rmcp's own limit).
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// How much of an oversized line is kept to look for its id.
const HEAD: usize = 64 * 1024;

/// How long rmcp's last answers get to reach the client once its session ended.
const FLUSH: Duration = Duration::from_secs(5);

/// The front's tasks: one passes the client's lines on, one forwards rmcp's answers.
pub(crate) struct Front {
    answers: JoinHandle<()>,
    requests: JoinHandle<()>,
}

impl Front {
    /// Waits until rmcp's answers are all out (up to [`FLUSH`]) and stops reading.
    pub(crate) async fn finish(self) {
        if tokio::time::timeout(FLUSH, self.answers).await.is_err() {
            tracing::warn!("the last answers did not reach stdout in time");
        }
        self.requests.abort();
    }
}

/// Starts the front between `input` and `output` (the process's stdin and stdout); returns
/// rmcp's ends of the pipes (what it reads, where it writes) and the front.
pub(crate) fn start<R, W>(input: R, output: W) -> ((DuplexStream, DuplexStream), Front)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (rmcp_in, to_rmcp) = tokio::io::duplex(1 << 20);
    let (from_rmcp, rmcp_out) = tokio::io::duplex(1 << 20);
    let output = Arc::new(Mutex::new(output));
    let requests = tokio::spawn(requests(input, to_rmcp, Arc::clone(&output)));
    let answers = tokio::spawn(answers(from_rmcp, output));
    ((rmcp_in, rmcp_out), Front { answers, requests })
}

/// Writes `line` and a newline to `output` at once, and flushes.
async fn emit<W: AsyncWrite + Unpin>(output: &Mutex<W>, line: &[u8]) -> std::io::Result<()> {
    let mut out = output.lock().await;
    out.write_all(line).await?;
    if !line.ends_with(b"\n") {
        out.write_all(b"\n").await?;
    }
    out.flush().await
}

/// A JSON-RPC error answer.
fn error_line(id: Value, code: i64, message: String) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        .to_string()
        .into_bytes()
}

/// The id of a request whose text starts with `head`, if it shows one before the cut: a
/// number or a string right after `"id":` at the top level (good enough for the usual
/// `{"jsonrpc":"2.0","id":...` layout; null otherwise).
fn id_in_head(head: &[u8]) -> Value {
    let text = String::from_utf8_lossy(head);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            '"' if depth == 1 && text[i..].starts_with("\"id\"") => {
                let rest = text[i + 4..].trim_start();
                let Some(value) = rest.strip_prefix(':') else {
                    return Value::Null;
                };
                let mut stream =
                    serde_json::Deserializer::from_str(value.trim_start()).into_iter::<Value>();
                return match stream.next() {
                    Some(Ok(id)) if id.is_number() || id.is_string() => id,
                    _ => Value::Null,
                };
            }
            '"' => in_string = true,
            _ => {}
        }
    }
    Value::Null
}

/// One line read from the client.
enum Line {
    /// A whole line (without its newline).
    Whole(Vec<u8>),
    /// A line over [`MAX_LINE`]: its first [`HEAD`] bytes; the rest was skipped.
    Oversized(Vec<u8>),
}

/// Reads the next line, never holding more than [`MAX_LINE`] bytes of it.
async fn next_line<R: AsyncRead + Unpin>(
    input: &mut BufReader<R>,
) -> std::io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut over = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (line.is_empty(), over) {
                (true, false) => None,
                (_, true) => Some(Line::Oversized(line)),
                (false, false) => Some(Line::Whole(line)),
            });
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        let chunk = &available[..newline.unwrap_or(take)];
        if over {
            // Skipping the rest of an oversized line.
        } else if line.len() + chunk.len() > MAX_LINE {
            over = true;
            line.truncate(HEAD);
            let room = HEAD.saturating_sub(line.len());
            line.extend_from_slice(&chunk[..room.min(chunk.len())]);
        } else {
            line.extend_from_slice(chunk);
        }
        input.consume(take);
        if newline.is_some() {
            return Ok(Some(if over {
                Line::Oversized(line)
            } else {
                Line::Whole(line)
            }));
        }
    }
}

/// Passes the client's lines to rmcp and answers the ones it would not.
async fn requests<R, W>(input: R, mut to_rmcp: DuplexStream, output: Arc<Mutex<W>>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    loop {
        let line = match next_line(&mut input).await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                tracing::error!(error = %e, "could not read stdin");
                break;
            }
        };
        let answer = match line {
            Line::Oversized(head) => {
                tracing::warn!("refused a message longer than 16 MiB");
                error_line(
                    id_in_head(&head),
                    -32600,
                    format!("Invalid Request: the message is longer than {MAX_LINE} bytes"),
                )
            }
            Line::Whole(line) => {
                let text = line.strip_suffix(b"\r").unwrap_or(&line);
                if text.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match serde_json::from_slice::<serde::de::IgnoredAny>(
                    text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text),
                ) {
                    Ok(_) => {
                        let passed = async {
                            to_rmcp.write_all(text).await?;
                            to_rmcp.write_all(b"\n").await?;
                            to_rmcp.flush().await
                        };
                        if passed.await.is_err() {
                            // rmcp is gone: nothing more to pass on.
                            break;
                        }
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "answered a line that is not JSON");
                        error_line(
                            Value::Null,
                            -32700,
                            format!("Parse error: the line is not JSON ({e})"),
                        )
                    }
                }
            }
        };
        if emit(&output, &answer).await.is_err() {
            break;
        }
    }
    // Dropping the pipe tells rmcp the client is gone.
    drop(to_rmcp);
}

/// Copies rmcp's answers to the client, a whole line at a time.
async fn answers<W: AsyncWrite + Unpin>(from_rmcp: DuplexStream, output: Arc<Mutex<W>>) {
    let mut from_rmcp = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    loop {
        line.clear();
        match from_rmcp.read_until(b'\n', &mut line).await {
            Ok(0) => break,
            Ok(_) => {
                if let Err(e) = emit(&output, &line).await {
                    tracing::debug!(error = %e, "stdout closed");
                    break;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "could not read rmcp's answers");
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_found_in_a_heads_top_level() {
        assert_eq!(
            id_in_head(br#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"#),
            7
        );
        assert_eq!(id_in_head(br#"{"id" : "a-1", "params": {"#), "a-1");
        // An "id" inside params or a string is not the request's.
        assert_eq!(
            id_in_head(br#"{"params":{"id":5},"x":"\"id\":6"#),
            Value::Null
        );
        assert_eq!(
            id_in_head(br#"{"method":"tools/call","params":{"arguments":{"#),
            Value::Null
        );
        assert_eq!(id_in_head(b"not json at all"), Value::Null);
    }
}
