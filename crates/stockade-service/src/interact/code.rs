//! The code interpreter from the service's side: cells of code and the
//! contexts (Jupyter kernels) that run them, in the sandbox's agent under
//! `/code`. A cell's answer is the agent's NDJSON, read line by line as it
//! arrives into typed events; a line has a bound, so a misbehaving agent
//! costs an error, never the server's memory. Dropping a run drops its
//! request to the agent, which then interrupts the cell.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use stockade_agent::body::{self, BoxBody};
use stockade_agent::client::AgentClient;
use stockade_api::code::{
    AgentCodeEvent, AgentCreateContextRequest, AgentExecuteRequest, CodeContext, CodeEvent,
    CodeOutput, CreateCodeContextRequest, Execution, RunCodeRequest,
};
use stockade_core::{Sandbox, SandboxId, ValidationErrors};

use crate::error::{ServiceError, ServiceResult};
use crate::interact::exec::agent_error;
use crate::Service;

/// The most bytes of a cell's code.
pub const MAX_CODE_BYTES: usize = 1024 * 1024;
/// The longest line of the agent's answer (one result with its images).
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;
/// The most bytes of output and results a collected cell keeps.
pub const MAX_COLLECTED_BYTES: usize = 64 * 1024 * 1024;
/// The agent writes a line at least every 5 s (a keep-alive); a stream
/// silent for this long is a lost connection.
const SILENCE: Duration = Duration::from_secs(30);
/// The longest language name and context id taken.
const MAX_NAME: usize = 128;
const MAX_CWD_BYTES: usize = 4096;
/// The most bytes of an agent's error text read.
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// How to get kernels when the sandbox's image has none for a language.
pub const KERNEL_HINT: &str =
    "run code in the code-interpreter-v1 image (scripts/build-image code-interpreter)";

/// What a call to the agent was about, for the errors it may answer.
struct Call<'a> {
    sandbox: &'a SandboxId,
    context_id: Option<&'a str>,
}

impl Service {
    /// Runs one cell in a running sandbox of the caller's: its events as the
    /// kernel produces them. Every field is checked before the agent is
    /// asked; dropping the run interrupts the cell.
    pub async fn run_code(&self, sb: &Sandbox, req: RunCodeRequest) -> ServiceResult<CodeRun> {
        let body = self.execute_request(req)?;
        let agent = self.code_agent(sb).await?;
        let call = Call {
            sandbox: &sb.id,
            context_id: body.context_id.as_deref(),
        };
        let resp = send(
            &agent,
            Method::POST,
            "/code/execute",
            Some(json(&body)),
            &call,
        )
        .await?;
        Ok(CodeRun::new(resp))
    }

    /// The code contexts of a running sandbox of the caller's, oldest first.
    pub async fn code_contexts(&self, sb: &Sandbox) -> ServiceResult<Vec<CodeContext>> {
        let agent = self.code_agent(sb).await?;
        let call = Call {
            sandbox: &sb.id,
            context_id: None,
        };
        let resp = send(&agent, Method::GET, "/code/contexts", None, &call).await?;
        read_json(resp).await
    }

    /// Starts a new context (a kernel of `language`, default Python).
    pub async fn create_code_context(
        &self,
        sb: &Sandbox,
        req: CreateCodeContextRequest,
    ) -> ServiceResult<CodeContext> {
        let mut errs = ValidationErrors::default();
        let language = req.language.and_then(|l| check_language(&mut errs, l));
        let cwd = match req.cwd {
            None => None,
            Some(c) if !c.starts_with('/') || c.len() > MAX_CWD_BYTES || c.contains('\0') => {
                errs.push(
                    "cwd",
                    format!("must be an absolute path of at most {MAX_CWD_BYTES} bytes without NUL bytes"),
                );
                None
            }
            Some(c) => Some(c),
        };
        errs.into_result()?;
        let agent = self.code_agent(sb).await?;
        let body = AgentCreateContextRequest { language, cwd };
        let call = Call {
            sandbox: &sb.id,
            context_id: None,
        };
        let resp = send(
            &agent,
            Method::POST,
            "/code/contexts",
            Some(json(&body)),
            &call,
        )
        .await?;
        read_json(resp).await
    }

    /// Restarts a context's kernel: same id, language and directory; its
    /// state is gone.
    pub async fn restart_code_context(&self, sb: &Sandbox, context_id: &str) -> ServiceResult<()> {
        self.context_call(sb, context_id, Method::POST, "/restart")
            .await
    }

    /// Interrupts the cell a context runs (if any); the context keeps its state.
    pub async fn interrupt_code_context(
        &self,
        sb: &Sandbox,
        context_id: &str,
    ) -> ServiceResult<()> {
        self.context_call(sb, context_id, Method::POST, "/interrupt")
            .await
    }

    /// Deletes a context and ends its kernel.
    pub async fn delete_code_context(&self, sb: &Sandbox, context_id: &str) -> ServiceResult<()> {
        self.context_call(sb, context_id, Method::DELETE, "").await
    }

    async fn context_call(
        &self,
        sb: &Sandbox,
        context_id: &str,
        method: Method,
        action: &str,
    ) -> ServiceResult<()> {
        check_context_id(context_id).map_err(|m| ServiceError::field("contextId", m))?;
        let agent = self.code_agent(sb).await?;
        let call = Call {
            sandbox: &sb.id,
            context_id: Some(context_id),
        };
        let path = format!("/code/contexts/{context_id}{action}");
        send(&agent, method, &path, None, &call).await?;
        Ok(())
    }

    /// The agent's body of a cell, every field checked.
    fn execute_request(&self, req: RunCodeRequest) -> ServiceResult<AgentExecuteRequest> {
        let mut errs = ValidationErrors::default();
        if req.code.len() > MAX_CODE_BYTES {
            errs.push(
                "code",
                format!(
                    "at most {} MiB of code ({} bytes given); put larger programs in a file and run that",
                    MAX_CODE_BYTES >> 20,
                    req.code.len()
                ),
            );
        }
        if req.language.is_some() && req.context_id.is_some() {
            for field in ["language", "contextId"] {
                errs.push(
                    field,
                    "give language or contextId, not both: a context has its language already",
                );
            }
        }
        let language = req.language.and_then(|l| check_language(&mut errs, l));
        let context_id = req.context_id.and_then(|c| match check_context_id(&c) {
            Ok(()) => Some(c),
            Err(m) => {
                errs.push("contextId", m);
                None
            }
        });
        let env_vars = match req.env_vars {
            Some(env) => errs.check(stockade_core::spec::parse_env(&env, "envVars")),
            None => None,
        };
        let max = self.config.max_exec_timeout.as_secs_f64();
        let timeout = match req.timeout_seconds {
            Some(t) if !t.is_finite() || t <= 0.0 || t > max => {
                errs.push(
                    "timeoutSeconds",
                    format!("must be more than 0 and at most {max} seconds, got {t}"),
                );
                None
            }
            Some(t) => Some(Duration::from_secs_f64(t)),
            None => Some(self.config.default_exec_timeout),
        };
        errs.into_result()?;
        Ok(AgentExecuteRequest {
            code: req.code,
            context_id,
            language,
            env_vars,
            timeout_ms: timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)),
        })
    }

    /// The agent of a sandbox that can run code now.
    async fn code_agent(&self, sb: &Sandbox) -> ServiceResult<AgentClient> {
        if sb.is_paused() {
            return Err(ServiceError::paused(&sb.id));
        }
        if !sb.can_exec() {
            return Err(ServiceError::NotRunning(format!(
                "sandbox is not running (status {}): start it with POST /api/v1/sandbox/{}/start",
                sb.status, sb.id
            )));
        }
        self.agent(sb).await?.ok_or_else(|| {
            ServiceError::Conflict(format!(
                "Sandbox {} runs without Stockade's in-sandbox agent (it was created before \
                 agents existed), which runs code: create a new sandbox",
                sb.id
            ))
        })
    }
}

/// A language name: what the agent looks kernels up by.
fn check_language(errs: &mut ValidationErrors, language: String) -> Option<String> {
    let l = language.trim();
    if l.is_empty() || l.len() > MAX_NAME || l.chars().any(char::is_control) {
        errs.push(
            "language",
            format!("must be a language name of 1 to {MAX_NAME} characters, e.g. python, javascript, bash"),
        );
        return None;
    }
    Some(l.to_owned())
}

/// A context id: one path segment of the agent's routes, so only letters,
/// digits, `-` and `_`.
fn check_context_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= MAX_NAME
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{}' is not a context id (letters, digits, - and _, as POST …/code/contexts returns)",
            id.chars().take(MAX_NAME).collect::<String>()
        ))
    }
}

fn json(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).expect("plain data serialises")
}

/// Sends one request to the agent; any answer but 200 is a [`ServiceError`].
async fn send(
    agent: &AgentClient,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
    call: &Call<'_>,
) -> ServiceResult<BoxBody> {
    let mut req = Request::builder().method(method).uri(path);
    if body.is_some() {
        req = req.header(http::header::CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(body.map(body::full).unwrap_or_else(body::empty))
        .map_err(|e| ServiceError::Internal(format!("a request to the agent: {e}")))?;
    let resp = agent.forward(req).await.map_err(agent_error)?;
    let status = resp.status();
    let body = resp
        .into_body()
        .map_err(|e| std::io::Error::other(e.to_string()))
        .boxed_unsync();
    if status == StatusCode::OK {
        return Ok(body);
    }
    let text = Limited::new(body, MAX_ERROR_BYTES)
        .collect()
        .await
        .map(|c| String::from_utf8_lossy(&c.to_bytes()).trim().to_owned())
        .unwrap_or_default();
    Err(refused(status, text, call))
}

/// An agent's refusal in the service's terms.
fn refused(status: StatusCode, text: String, call: &Call<'_>) -> ServiceError {
    let sb = call.sandbox;
    if text.contains("no Jupyter kernel") {
        return ServiceError::field("language", format!("{text}; {KERNEL_HINT}"));
    }
    match status {
        StatusCode::BAD_REQUEST => ServiceError::field(field_of(&text), text),
        StatusCode::NOT_FOUND if text.starts_with("no route") => ServiceError::Conflict(format!(
            "Sandbox {sb} runs an agent older than the code interpreter: create a new sandbox \
             to run code"
        )),
        StatusCode::NOT_FOUND => ServiceError::NotFound(match call.context_id {
            Some(c) => format!(
                "contextId: sandbox {sb} has no code context '{c}': list them with GET \
                 /api/v1/sandbox/{sb}/code/contexts"
            ),
            None => format!("contextId: {text}"),
        }),
        StatusCode::CONFLICT => ServiceError::Conflict(text),
        StatusCode::PAYLOAD_TOO_LARGE => ServiceError::PayloadTooLarge(text),
        s => ServiceError::Docker(format!(
            "the code interpreter in sandbox {sb} failed ({}): {text}",
            s.as_u16()
        )),
    }
}

/// The API field an agent's 400 is about: its messages start with or
/// name the (snake_case) field.
fn field_of(text: &str) -> &'static str {
    const FIELDS: [(&str, &str); 6] = [
        ("context_id", "contextId"),
        ("env_vars", "envVars"),
        ("timeout_ms", "timeoutSeconds"),
        ("language", "language"),
        ("cwd", "cwd"),
        ("code", "code"),
    ];
    let head = text.split(':').next().unwrap_or_default().trim();
    FIELDS
        .iter()
        .find(|(agent, _)| head == *agent)
        .or_else(|| FIELDS.iter().find(|(agent, _)| text.contains(agent)))
        .map(|(_, api)| *api)
        .unwrap_or("body")
}

async fn read_json<T: serde::de::DeserializeOwned>(body: BoxBody) -> ServiceResult<T> {
    let bytes = Limited::new(body, MAX_LINE_BYTES)
        .collect()
        .await
        .map_err(|e| agent_failed(format!("reading its answer failed: {e}")))?
        .to_bytes();
    serde_json::from_slice(&bytes).map_err(|e| {
        agent_failed(format!(
            "its answer is not what the code interpreter sends: {e}"
        ))
    })
}

fn agent_failed(why: String) -> ServiceError {
    ServiceError::Docker(format!("the sandbox's agent failed: {why}"))
}

/// A running cell: its events in order, read from the agent's answer one
/// line at a time. Dropping it ends the request, and the agent interrupts
/// the cell.
pub struct CodeRun {
    body: BoxBody,
    buf: BytesMut,
    /// How far `buf` is known to hold no line break.
    scanned: usize,
    /// The body has ended.
    eof: bool,
    /// The last event (or an error) was handed out.
    finished: bool,
    /// The length of the line of the last event.
    last_len: usize,
}

impl CodeRun {
    fn new(body: BoxBody) -> Self {
        Self {
            body,
            buf: BytesMut::new(),
            scanned: 0,
            eof: false,
            finished: false,
            last_len: 0,
        }
    }

    /// The next event; `None` after the end. An error (the agent went
    /// away, a line too long or not an event) is the last item.
    pub async fn next(&mut self) -> Option<ServiceResult<CodeEvent>> {
        if self.finished {
            return None;
        }
        let next = self.read().await;
        match &next {
            Ok(CodeEvent::End(_)) | Err(_) => self.finished = true,
            Ok(_) => {}
        }
        Some(next)
    }

    /// Collects the rest of the cell. Output and results beyond `max_bytes`
    /// are dropped (one note on stderr says so); counts and the error are
    /// always kept.
    pub async fn collect(mut self, max_bytes: usize) -> ServiceResult<Execution> {
        let mut out = Execution::default();
        let mut kept = 0usize;
        let mut cut = false;
        while let Some(event) = self.next().await {
            let event = event?;
            let size = match &event {
                CodeEvent::Stdout(o) | CodeEvent::Stderr(o) => o.text.len(),
                CodeEvent::Result(_) => self.last_len,
                _ => 0,
            };
            if size > 0 && kept + size > max_bytes {
                if !cut {
                    cut = true;
                    out.apply(CodeEvent::Stderr(CodeOutput {
                        text: format!(
                            "[output cut: this cell's output and results passed {} MiB; the rest is dropped]\n",
                            max_bytes >> 20
                        ),
                        timestamp: chrono::Utc::now().to_rfc3339(),
                    }));
                }
                continue;
            }
            kept += size;
            out.apply(event);
        }
        Ok(out)
    }

    async fn read(&mut self) -> ServiceResult<CodeEvent> {
        loop {
            if let Some(line) = self.line()? {
                self.last_len = line.len();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let parsed: AgentCodeEvent = serde_json::from_slice(&line).map_err(|e| {
                    agent_failed(format!(
                        "it sent a line that is not a code event ({e}): {}",
                        String::from_utf8_lossy(&line[..line.len().min(200)])
                    ))
                })?;
                if let Some(event) = parsed.into_event() {
                    return Ok(event);
                }
                continue;
            }
            if self.eof {
                return Err(agent_failed(
                    "it ended the cell's stream before the cell's end (was the sandbox stopped?)"
                        .into(),
                ));
            }
            let frame = tokio::time::timeout(SILENCE, self.body.frame())
                .await
                .map_err(|_| {
                    agent_failed(format!(
                        "it sent nothing for {} s while running a cell",
                        SILENCE.as_secs()
                    ))
                })?;
            match frame {
                None => self.eof = true,
                Some(Err(e)) => {
                    return Err(agent_failed(format!(
                        "the cell's stream broke off: {e} (was the sandbox stopped?)"
                    )))
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.push(data)?;
                    }
                }
            }
        }
    }

    fn push(&mut self, data: Bytes) -> ServiceResult<()> {
        self.buf.extend_from_slice(&data);
        let unbroken = self.buf.len() - self.scanned;
        let has_break = self.buf[self.scanned..].contains(&b'\n');
        if !has_break && unbroken > MAX_LINE_BYTES {
            return Err(agent_failed(format!(
                "it sent a line of more than {} MiB",
                MAX_LINE_BYTES >> 20
            )));
        }
        Ok(())
    }

    /// The next whole line of the buffer (the last one may lack its break
    /// once the body ended).
    fn line(&mut self) -> ServiceResult<Option<Bytes>> {
        if let Some(at) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
            let line = self.buf.split_to(self.scanned + at + 1).freeze();
            self.scanned = 0;
            if line.len() > MAX_LINE_BYTES {
                return Err(agent_failed(format!(
                    "it sent a line of more than {} MiB",
                    MAX_LINE_BYTES >> 20
                )));
            }
            return Ok(Some(line.slice(..line.len() - 1)));
        }
        self.scanned = self.buf.len();
        if self.eof && !self.buf.is_empty() {
            self.scanned = 0;
            return Ok(Some(self.buf.split().freeze()));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockade_api::code::{CodeEndEvent, CodeError};

    /// A run over an answer arriving in these chunks.
    fn run(chunks: Vec<&'static [u8]>) -> CodeRun {
        let (tx, body) = body::ChannelBody::new(chunks.len().max(1));
        for c in chunks {
            tx.try_send(Ok(Bytes::from_static(c)))
                .expect("room for every chunk");
        }
        CodeRun::new(body.boxed_unsync())
    }

    #[tokio::test]
    async fn lines_split_across_chunks_become_events_in_order() {
        let mut r = run(vec![
            b"{\"type\":\"number_of_exec",
            b"utions\",\"execution_count\":2}\n{\"type\":\"keepalive\"}\n\n{\"type\":\"stdout\",",
            b"\"text\":\"a\\n\",\"timestamp\":\"t\"}\n{\"type\":\"error\",\"name\":\"E\",\"value\":\"v\",\"traceback\":\"tb\"}\n",
            b"{\"type\":\"end_of_execution\"}",
        ]);
        assert_eq!(
            r.next().await.unwrap().unwrap(),
            CodeEvent::ExecutionCount(2)
        );
        assert_eq!(
            r.next().await.unwrap().unwrap(),
            CodeEvent::Stdout(CodeOutput {
                text: "a\n".into(),
                timestamp: "t".into()
            })
        );
        assert_eq!(
            r.next().await.unwrap().unwrap(),
            CodeEvent::Error(CodeError {
                name: "E".into(),
                value: "v".into(),
                traceback: "tb".into()
            })
        );
        assert_eq!(
            r.next().await.unwrap().unwrap(),
            CodeEvent::End(CodeEndEvent { unexpected: false })
        );
        assert!(r.next().await.is_none());
    }

    #[tokio::test]
    async fn a_stream_without_its_end_or_with_garbage_is_an_error() {
        let mut r = run(vec![
            b"{\"type\":\"number_of_executions\",\"execution_count\":1}\n",
        ]);
        assert!(r.next().await.unwrap().is_ok());
        let e = r.next().await.unwrap().unwrap_err();
        assert!(e.to_string().contains("before the cell's end"), "{e}");
        assert!(r.next().await.is_none(), "an error is the last item");

        let mut r = run(vec![b"<html>\n"]);
        let e = r.next().await.unwrap().unwrap_err();
        assert!(e.to_string().contains("not a code event"), "{e}");
    }

    #[tokio::test]
    async fn collecting_keeps_within_its_bound() {
        let r = run(vec![
            b"{\"type\":\"stdout\",\"text\":\"0123456789\"}\n",
            b"{\"type\":\"stdout\",\"text\":\"0123456789\"}\n",
            b"{\"type\":\"result\",\"is_main_result\":true,\"text\":\"x\"}\n",
            b"{\"type\":\"error\",\"name\":\"E\",\"value\":\"v\"}\n",
            b"{\"type\":\"end_of_execution\"}\n",
        ]);
        let out = r.collect(15).await.unwrap();
        assert_eq!(out.logs.stdout, ["0123456789"]);
        assert_eq!(out.logs.stderr.len(), 1, "one note: {:?}", out.logs.stderr);
        assert!(out.logs.stderr[0].starts_with("[output cut"));
        assert!(out.results.is_empty(), "the result did not fit");
        assert_eq!(out.error.unwrap().name, "E");
    }

    #[test]
    fn agent_refusals_name_their_field() {
        let sb = SandboxId::generate();
        let call = Call {
            sandbox: &sb,
            context_id: Some("abc"),
        };
        let field = |e: ServiceError| match e {
            ServiceError::Validation(v) => v.0[0].field.clone(),
            other => panic!("{other:?}"),
        };
        let e = refused(
            StatusCode::BAD_REQUEST,
            "language: no Jupyter kernel for language 'r' in this image; kernels found: python3"
                .into(),
            &call,
        );
        assert!(e.to_string().contains(KERNEL_HINT), "{e}");
        assert_eq!(field(e), "language");
        let e = refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "the python kernel failed to start: x; no Jupyter kernelspec is installed".into(),
            &call,
        );
        assert_eq!(field(e), "language");
        let e = refused(
            StatusCode::BAD_REQUEST,
            "Only one of context_id or language can be provided".into(),
            &call,
        );
        assert_eq!(field(e), "contextId");
        let e = refused(
            StatusCode::BAD_REQUEST,
            "cwd: not a directory".into(),
            &call,
        );
        assert_eq!(field(e), "cwd");
        let e = refused(StatusCode::NOT_FOUND, "Context abc not found".into(), &call);
        assert!(
            matches!(&e, ServiceError::NotFound(m) if m.contains("contextId")),
            "{e:?}"
        );
        let e = refused(
            StatusCode::NOT_FOUND,
            "no route /code/execute".into(),
            &call,
        );
        assert!(matches!(e, ServiceError::Conflict(_)), "{e:?}");
        let e = refused(StatusCode::CONFLICT, "16 contexts".into(), &call);
        assert!(matches!(e, ServiceError::Conflict(_)), "{e:?}");
    }

    #[test]
    fn context_ids_are_one_path_segment() {
        assert!(check_context_id("0f8c2e1a-1b2c-4d5e-8f90-123456789abc").is_ok());
        for bad in ["", "../x", "a/b", "a%2Fb", "a b", &"x".repeat(129)] {
            assert!(check_context_id(bad).is_err(), "{bad}");
        }
    }
}
