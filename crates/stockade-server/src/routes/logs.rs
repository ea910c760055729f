//! `GET /api/v1/sandbox/{id}/logs`: the main process's recent lines
//! as JSON, or a Server-Sent Events stream (tail, then live lines) that
//! resumes after `Last-Event-ID` without duplicates or gaps.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::RawQuery;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::stream::StreamExt;
use stockade_api::{ErrorBody, LogLineResponse, LogsEndEvent, LogsResponse};
use stockade_core::{SandboxId, ValidationErrors};
use stockade_runtime::{LogLines, LogsOptions, Runtime};
use tracing::instrument;
use utoipa::OpenApi;

use crate::error::ApiResult;
use crate::extract::{query_pairs, AuthedId};
use crate::routes::apidoc::SandboxErrors;
use crate::{sse, AppState};
use stockade_service::lifecycle;
use stockade_service::log_cursor::{IdAssigner, IdLine, LogEventId, ResumeFilter};
use stockade_service::ServiceError;

/// Lines of a request without `tail`.
const DEFAULT_TAIL: usize = 100;
/// The most lines one request may ask for.
const MAX_TAIL: usize = 10_000;
/// A JSON answer holds at most this much line text.
const MAX_JSON_BYTES: usize = 8 * 1024 * 1024;
/// How long a resumed stream looks for the cursor's line before it goes by
/// time instead (its history arrives within milliseconds).
const SEEK_WAIT: Duration = Duration::from_secs(1);

/// The routes of this module.
pub fn routes() -> Router<AppState> {
    Router::new().route("/sandbox/{id}/logs", get(logs))
}

/// This module's part of the OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    paths(logs),
    components(schemas(LogsResponse, LogLineResponse, LogsEndEvent)),
    tags((name = "logs", description = "Output of a sandbox's main process"))
)]
pub struct LogsApi;

#[derive(Debug)]
struct LogsQuery {
    tail: usize,
    follow: Option<bool>,
    after: Option<LogEventId>,
}

fn parse_query(raw: Option<&str>, headers: &HeaderMap) -> ApiResult<LogsQuery> {
    let mut q = LogsQuery {
        tail: DEFAULT_TAIL,
        follow: None,
        after: None,
    };
    let mut errs = ValidationErrors::default();
    for (k, v) in query_pairs(raw) {
        match k.as_str() {
            "tail" => match v.parse::<usize>() {
                Ok(n) if n <= MAX_TAIL => q.tail = n,
                _ => errs.push(
                    "tail",
                    format!("must be a whole number from 0 to {MAX_TAIL}, got '{v}'"),
                ),
            },
            "follow" => match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => q.follow = Some(true),
                "false" | "0" | "no" => q.follow = Some(false),
                _ => errs.push("follow", format!("expected true or false, got '{v}'")),
            },
            "lastEventId" | "last_event_id" => {
                if let Some(id) = errs.check(LogEventId::parse_field(&v, "lastEventId")) {
                    q.after = Some(id);
                }
            }
            other => errs.push(other, "unknown query parameter"),
        }
    }
    // The header (sent by a reconnecting EventSource) is fresher than a
    // query parameter of the original URL.
    if let Some(h) = headers.get("last-event-id") {
        match h.to_str() {
            Ok(v) if v.trim().is_empty() => {}
            Ok(v) => {
                if let Some(id) = errs.check(LogEventId::parse_field(v, "Last-Event-ID")) {
                    q.after = Some(id);
                }
            }
            Err(_) => errs.push("Last-Event-ID", "must be ASCII"),
        }
    }
    errs.into_result()?;
    Ok(q)
}

/// The main process's output: recent lines, or a live stream.
///
/// JSON by default: the last `tail` lines, or with `lastEventId` the (at most
/// `tail`) lines after that one. With `Accept: text/event-stream` or
/// `follow=true`, Server-Sent Events: one event per line, typed `stdout` or
/// `stderr`, `id` the line's id and `data` its text; first the `tail` lines
/// (or those after `Last-Event-ID`), then new lines as they come; a comment
/// keeps an idle stream open; when the sandbox stops a final `end` event
/// closes it (`follow=false` ends it after the tail).
#[utoipa::path(get, path = "/api/v1/sandbox/{id}/logs", tag = "logs",
    params(
        ("id" = String, Path, description = "sandbox id"),
        ("tail" = Option<u32>, Query, description = "lines to start with, 0-10000 (default 100); with lastEventId: at most this many lines"),
        ("follow" = Option<bool>, Query, description = "stream (SSE) and keep following; false: SSE that ends after the tail"),
        ("lastEventId" = Option<String>, Query, description = "continue after this line id"),
        ("Last-Event-ID" = Option<String>, Header, description = "continue after this line id (wins over lastEventId)"),
    ),
    responses(
        (status = 200, description = "Lines as JSON, or an SSE stream of `stdout`/`stderr` events and a final `end` event (data: LogsEndEvent)",
            content((LogsResponse = "application/json"), (String = "text/event-stream"))),
        (status = 400, description = "A parameter is invalid", body = ErrorBody),
        SandboxErrors,
        (status = 409, description = "The sandbox is terminated or has no container", body = ErrorBody),
    ))]
#[instrument(skip_all, fields(account.id = %caller.account.id, sandbox.id = %id), err(level = "debug", Display))]
pub async fn logs(
    AuthedId { state, caller, id }: AuthedId,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let sb = lifecycle::load(&state.svc, &caller.scope, &id).await?;
    let q = parse_query(raw.as_deref(), &headers)?;
    if sb.is_terminated() {
        return Err(ServiceError::Terminated(format!(
            "Sandbox {} is terminated: its container and logs are gone",
            sb.id
        ))
        .into());
    }
    let stream = sse::wants_event_stream(&headers) || q.follow == Some(true);
    let follow = stream && q.follow != Some(false);
    let resume = q.after.map(ResumeFilter::new);
    let options = LogsOptions {
        tail: resume.is_none().then_some(q.tail),
        since: resume.as_ref().map(ResumeFilter::since),
        follow,
    };
    let rt = state.svc.runtime_for(&sb).await?;
    let lines = rt.logs(&sb.id, options).await?;
    if stream {
        let events = LogEvents {
            lines,
            ids: IdAssigner::default(),
            resume,
            seek_until: tokio::time::Instant::now() + SEEK_WAIT,
            follow,
            runtime: rt,
            sandbox_id: sb.id.clone(),
            svc: state.svc.clone(),
        };
        return Ok(sse::response(
            sse::stepped(events),
            state.config.sse_keep_alive,
            state.svc.shutdown(),
        ));
    }
    let (lines, has_more, truncated) = collect(lines, resume, q.tail, MAX_JSON_BYTES).await?;
    let text: String = lines
        .iter()
        .flat_map(|(_, l)| [l.text.as_str(), "\n"])
        .collect();
    Ok(Json(LogsResponse {
        sandbox_id: sb.id.to_string(),
        last_event_id: lines.last().map(|(id, _)| id.to_string()),
        lines: lines.into_iter().map(to_response).collect(),
        has_more,
        truncated,
        logs: text,
    })
    .into_response())
}

/// The last `tail` lines of a sandbox's main process (at most
/// `MAX_JSON_BYTES` of text), oldest first: for the compatibility APIs.
pub(crate) async fn recent_lines(
    state: &AppState,
    sb: &stockade_core::Sandbox,
    tail: usize,
) -> ApiResult<Vec<stockade_runtime::LogLine>> {
    let options = LogsOptions {
        tail: Some(tail.min(MAX_TAIL)),
        since: None,
        follow: false,
    };
    let lines = state
        .svc
        .runtime_for(sb)
        .await?
        .logs(&sb.id, options)
        .await?;
    let (lines, _, _) = collect(lines, None, tail.min(MAX_TAIL), MAX_JSON_BYTES).await?;
    Ok(lines.into_iter().map(|(_, l)| l).collect())
}

fn to_response((id, line): IdLine) -> LogLineResponse {
    LogLineResponse {
        id: id.to_string(),
        stream: line.stream.as_str().to_owned(),
        text: line.text,
        timestamp: line.timestamp,
    }
}

/// The lines of a JSON answer: the last `tail`, or the first `tail` after
/// the cursor. Returns them with `has_more` and `truncated`.
async fn collect(
    mut lines: LogLines,
    resume: Option<ResumeFilter>,
    tail: usize,
    max_bytes: usize,
) -> ApiResult<(Vec<IdLine>, bool, bool)> {
    let mut ids = IdAssigner::default();
    let mut kept: VecDeque<IdLine> = VecDeque::new();
    let mut bytes = 0usize;
    let Some(mut resume) = resume else {
        let mut truncated = false;
        while let Some(line) = lines.next().await {
            let line = line?;
            bytes += line.text.len();
            kept.push_back((ids.assign(line.timestamp), line));
            while kept.len() > tail || (bytes > max_bytes && kept.len() > 1) {
                // Beyond `tail` is not asked for; beyond the size, cut.
                truncated |= kept.len() <= tail;
                if let Some((_, old)) = kept.pop_front() {
                    bytes -= old.text.len();
                }
            }
        }
        return Ok((kept.into(), false, truncated));
    };
    let mut out = Vec::new();
    let mut take = |batch: Vec<IdLine>, out: &mut Vec<IdLine>| -> bool {
        for l in batch {
            if out.len() >= tail || bytes + l.1.text.len() > max_bytes {
                return true;
            }
            bytes += l.1.text.len();
            out.push(l);
        }
        false
    };
    while let Some(line) = lines.next().await {
        let line = line?;
        let batch = resume.push((ids.assign(line.timestamp), line));
        if take(batch, &mut out) {
            return Ok((out, true, false));
        }
    }
    let has_more = take(resume.give_up(), &mut out);
    Ok((out, has_more, false))
}

/// The state of one SSE log stream.
struct LogEvents {
    lines: LogLines,
    ids: IdAssigner,
    resume: Option<ResumeFilter>,
    seek_until: tokio::time::Instant,
    follow: bool,
    runtime: Arc<dyn Runtime>,
    sandbox_id: SandboxId,
    svc: stockade_service::Service,
}

impl sse::Steps for LogEvents {
    async fn step(&mut self, queue: &mut VecDeque<Bytes>) -> bool {
        let seeking = self.resume.as_ref().is_some_and(ResumeFilter::seeking);
        let item = if seeking {
            match tokio::time::timeout_at(self.seek_until, self.lines.next()).await {
                Ok(item) => item,
                Err(_) => {
                    let held = self.resume.as_mut().map(ResumeFilter::give_up);
                    send_lines(queue, held.unwrap_or_default());
                    return false;
                }
            }
        } else {
            self.lines.next().await
        };
        let reason = match item {
            Some(Ok(line)) => {
                let id = self.ids.assign(line.timestamp);
                let out = match &mut self.resume {
                    Some(r) => r.push((id, line)),
                    None => vec![(id, line)],
                };
                send_lines(queue, out);
                return false;
            }
            Some(Err(e)) => {
                tracing::warn!(sandbox.id = %self.sandbox_id, error = %e, "log stream failed");
                queue.push_back(sse::json_event(
                    "error",
                    &serde_json::json!({ "message": e.to_string() }),
                ));
                "error"
            }
            None => {
                let held = self.resume.as_mut().map(ResumeFilter::give_up);
                send_lines(queue, held.unwrap_or_default());
                if !self.follow {
                    "end of log"
                } else {
                    match self.runtime.inspect(&self.sandbox_id).await {
                        Ok(Some(c)) if c.running => "the log stream ended; reconnect to go on",
                        _ => {
                            // Its record says so now, not at the next pass.
                            stockade_service::reconcile::reconcile_sandbox(
                                &self.svc,
                                &self.sandbox_id,
                            )
                            .await;
                            "sandbox stopped"
                        }
                    }
                }
            }
        };
        let end = LogsEndEvent {
            reason: reason.to_owned(),
        };
        queue.push_back(sse::json_event("end", &end));
        true
    }
}

/// One event per line: its stream, its id and its text.
fn send_lines(queue: &mut VecDeque<Bytes>, lines: Vec<IdLine>) {
    for (id, line) in lines {
        queue.push_back(sse::event(
            line.stream.as_str(),
            Some(&id.to_string()),
            &line.text,
        ));
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use futures_util::stream;

    use crate::error::ApiError;

    use super::*;

    fn lines(texts: &[&str]) -> LogLines {
        let base = chrono::DateTime::from_timestamp_nanos(1_000_000_000);
        let lines: Vec<_> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                Ok(stockade_runtime::LogLine {
                    stream: stockade_runtime::LogStream::Stdout,
                    timestamp: base + chrono::Duration::milliseconds(i as i64),
                    text: (*t).to_owned(),
                })
            })
            .collect();
        stream::iter(lines).boxed()
    }

    fn texts(lines: &[IdLine]) -> Vec<&str> {
        lines.iter().map(|(_, l)| l.text.as_str()).collect()
    }

    #[tokio::test]
    async fn json_answers_keep_the_last_lines_within_their_size() {
        let (out, more, cut) = collect(lines(&["a", "b", "c"]), None, 2, 100)
            .await
            .unwrap();
        assert_eq!((texts(&out), more, cut), (vec!["b", "c"], false, false));
        // Over the size: the oldest go, and it says so.
        let (out, more, cut) = collect(lines(&["aaaa", "bbbb", "cccc"]), None, 3, 9)
            .await
            .unwrap();
        assert_eq!(
            (texts(&out), more, cut),
            (vec!["bbbb", "cccc"], false, true)
        );

        // After a cursor: the first lines after it, and whether more follow.
        let all = lines(&["a", "b", "c", "d"]);
        let mut ids = IdAssigner::default();
        let first = ids.assign(chrono::DateTime::from_timestamp_nanos(1_000_000_000));
        let (out, more, _) = collect(all, Some(ResumeFilter::new(first)), 2, 100)
            .await
            .unwrap();
        assert_eq!((texts(&out), more), (vec!["b", "c"], true));
        let (out, more, _) = collect(lines(&["a", "b"]), Some(ResumeFilter::new(first)), 2, 100)
            .await
            .unwrap();
        assert_eq!((texts(&out), more), (vec!["b"], false));
    }

    #[test]
    fn queries_parse_and_name_bad_fields() {
        let h = HeaderMap::new();
        let q = parse_query(None, &h).unwrap();
        assert_eq!((q.tail, q.follow, q.after), (100, None, None));
        let q = parse_query(Some("tail=0&follow=true&lastEventId=5-1"), &h).unwrap();
        assert_eq!(q.tail, 0);
        assert_eq!(q.follow, Some(true));
        assert_eq!(q.after, Some(LogEventId { nanos: 5, seq: 1 }));
        let mut h = HeaderMap::new();
        h.insert("last-event-id", HeaderValue::from_static("7-0"));
        let q = parse_query(Some("lastEventId=5-1"), &h).unwrap();
        assert_eq!(
            q.after,
            Some(LogEventId { nanos: 7, seq: 0 }),
            "the header wins"
        );

        let fields = |raw: &str, h: &HeaderMap| match parse_query(Some(raw), h) {
            Err(ApiError::Validation(e)) => e.0.into_iter().map(|f| f.field).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        let none = HeaderMap::new();
        assert_eq!(fields("tail=10001", &none), ["tail"]);
        assert_eq!(fields("tail=-1", &none), ["tail"]);
        assert_eq!(fields("follow=maybe", &none), ["follow"]);
        assert_eq!(fields("lastEventId=abc", &none), ["lastEventId"]);
        assert_eq!(fields("bogus=1", &none), ["bogus"]);
        let mut bad = HeaderMap::new();
        bad.insert("last-event-id", HeaderValue::from_static("x-y"));
        assert_eq!(fields("", &bad), ["Last-Event-ID"]);
    }
}
