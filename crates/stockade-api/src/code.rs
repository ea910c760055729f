//! The code interpreter: cells of code run in a sandbox's Jupyter kernels
//! (`POST /api/v1/sandbox/{id}/code` and its contexts), the events a run
//! streams, and the agent's own snake_case wire format (E2B's
//! code-interpreter protocol, one JSON object a line) with its mapping onto
//! the camelCase types of Stockade's API.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_with::skip_serializing_none;
use utoipa::ToSchema;

/// `POST /api/v1/sandbox/{id}/code`: one cell of code. At most one of
/// `language` and `contextId`; neither runs it in the default Python context.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCodeRequest {
    /// The code of the cell (at most 1 MiB; may be empty).
    pub code: String,
    /// Run it in this language's default context, made on first use:
    /// `python` (the default), `javascript` (or `js`), `typescript`, `bash`,
    /// or any language the sandbox's image has a Jupyter kernel for.
    pub language: Option<String>,
    /// Run it in this context (from `POST …/code/contexts`).
    pub context_id: Option<String>,
    /// Environment variables set for this cell only; they are back to the
    /// sandbox's values once it ends.
    pub env_vars: Option<BTreeMap<String, String>>,
    /// Interrupt the cell after this many seconds (the context keeps its
    /// state); by default the server's exec timeout (300 s).
    pub timeout_seconds: Option<f64>,
}

/// The whole outcome of a cell (the JSON answer of `POST …/code`).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// What the cell displayed and its value, in order.
    #[serde(default)]
    pub results: Vec<CodeResult>,
    /// What it wrote to stdout and stderr, chunk by chunk.
    #[serde(default)]
    pub logs: CodeLogs,
    /// The exception that ended it, if one did.
    pub error: Option<CodeError>,
    /// The kernel's count of the cell (`In [3]`).
    pub execution_count: Option<u64>,
}

impl Execution {
    /// Adds one event of a streamed run to the outcome.
    pub fn apply(&mut self, event: CodeEvent) {
        match event {
            CodeEvent::ExecutionCount(n) => self.execution_count = Some(n),
            CodeEvent::Stdout(o) => self.logs.stdout.push(o.text),
            CodeEvent::Stderr(o) => self.logs.stderr.push(o.text),
            CodeEvent::Result(r) => self.results.push(*r),
            CodeEvent::Error(e) => self.error = Some(e),
            CodeEvent::End(_) => {}
        }
    }

    /// The main result's text (`execute_result`, the cell's value).
    pub fn text(&self) -> Option<&str> {
        self.results
            .iter()
            .find(|r| r.is_main_result)
            .and_then(|r| r.text.as_deref())
    }
}

/// A cell's output streams, each as the chunks the kernel sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeLogs {
    #[serde(default)]
    pub stdout: Vec<String>,
    #[serde(default)]
    pub stderr: Vec<String>,
}

/// One thing a cell displayed or returned, in every form the kernel gave it
/// (absent forms are left out).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeResult {
    /// The cell's value (`execute_result`), not something it displayed.
    #[serde(default)]
    pub is_main_result: bool,
    /// `text/plain`, one pair of surrounding quotes removed.
    pub text: Option<String>,
    pub html: Option<String>,
    pub markdown: Option<String>,
    pub svg: Option<String>,
    /// A PNG image, base64.
    pub png: Option<String>,
    /// A JPEG image, base64.
    pub jpeg: Option<String>,
    /// A PDF document, base64.
    pub pdf: Option<String>,
    pub latex: Option<String>,
    /// `application/json`.
    #[schema(value_type = Option<Object>)]
    pub json: Option<Value>,
    pub javascript: Option<String>,
    /// Tabular data (a pandas DataFrame as a dict of columns).
    #[schema(value_type = Option<Object>)]
    pub data: Option<Value>,
    /// A chart's data (a matplotlib figure's type, title, axes and elements).
    #[schema(value_type = Option<Object>)]
    pub chart: Option<Value>,
    /// Other MIME types, by type.
    #[schema(value_type = Option<Object>)]
    pub extra: Option<Value>,
}

/// The exception that ended a cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeError {
    /// `ZeroDivisionError`; `TimeoutError` for a cell interrupted by its
    /// timeout; `KernelDied` when the kernel exited mid-cell.
    pub name: String,
    pub value: String,
    /// As the kernel wrote it, lines joined, ANSI colours kept.
    #[serde(default)]
    pub traceback: String,
}

/// A code context: one running kernel with its own state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeContext {
    pub id: String,
    /// The kernel's language (`python`, `javascript`, `bash`, …).
    pub language: String,
    /// The kernel's working directory.
    pub cwd: String,
}

/// `GET /api/v1/sandbox/{id}/code/contexts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CodeContexts {
    /// Oldest first, the languages' default contexts included.
    pub contexts: Vec<CodeContext>,
}

/// `POST /api/v1/sandbox/{id}/code/contexts`.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateCodeContextRequest {
    /// Default `python`.
    pub language: Option<String>,
    /// An absolute directory; default `/home/user` when the image has it,
    /// else the image's working directory.
    pub cwd: Option<String>,
}

/// The data of the SSE events `stdout` and `stderr`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeOutput {
    /// A chunk as the kernel sent it (lines keep their `\n`).
    pub text: String,
    /// When the kernel sent it (RFC 3339).
    #[serde(default)]
    pub timestamp: String,
}

/// The data of the SSE event `executionCount`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionCountEvent {
    pub execution_count: u64,
}

/// The data of the final SSE event `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeEndEvent {
    /// The kernel died mid-cell (the `error` event before says why);
    /// restart the context.
    pub unexpected: bool,
}

/// One event of a running cell, in order: the count once the kernel took
/// the cell, output and results as they come, at most one error, the end.
#[derive(Debug, Clone, PartialEq)]
pub enum CodeEvent {
    ExecutionCount(u64),
    Stdout(CodeOutput),
    Stderr(CodeOutput),
    Result(Box<CodeResult>),
    Error(CodeError),
    End(CodeEndEvent),
}

impl CodeEvent {
    /// The SSE event name: `executionCount`, `stdout`, `stderr`, `result`,
    /// `error`, `end`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::ExecutionCount(_) => "executionCount",
            Self::Stdout(_) => "stdout",
            Self::Stderr(_) => "stderr",
            Self::Result(_) => "result",
            Self::Error(_) => "error",
            Self::End(_) => "end",
        }
    }

    /// The SSE event's data.
    pub fn data(&self) -> Value {
        let json = match self {
            Self::ExecutionCount(n) => serde_json::to_value(ExecutionCountEvent {
                execution_count: *n,
            }),
            Self::Stdout(o) | Self::Stderr(o) => serde_json::to_value(o),
            Self::Result(r) => serde_json::to_value(r),
            Self::Error(e) => serde_json::to_value(e),
            Self::End(e) => serde_json::to_value(e),
        };
        json.unwrap_or(Value::Null)
    }

    /// An SSE event read back: `None` for a name this version does not know.
    pub fn from_sse(name: &str, data: &str) -> Result<Option<Self>, serde_json::Error> {
        Ok(Some(match name {
            "executionCount" => Self::ExecutionCount(
                serde_json::from_str::<ExecutionCountEvent>(data)?.execution_count,
            ),
            "stdout" => Self::Stdout(serde_json::from_str(data)?),
            "stderr" => Self::Stderr(serde_json::from_str(data)?),
            "result" => Self::Result(serde_json::from_str(data)?),
            "error" => Self::Error(serde_json::from_str(data)?),
            "end" => Self::End(serde_json::from_str(data)?),
            _ => return Ok(None),
        }))
    }
}

/// The body of the agent's `POST /code/execute` (snake_case, as E2B's
/// code-interpreter server reads it).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentExecuteRequest {
    pub code: String,
    pub context_id: Option<String>,
    pub language: Option<String>,
    pub env_vars: Option<BTreeMap<String, String>>,
    pub timeout_ms: Option<u64>,
}

/// The body of the agent's `POST /code/contexts`.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCreateContextRequest {
    pub language: Option<String>,
    pub cwd: Option<String>,
}

/// One line of the agent's answer to `POST /code/execute`
/// (`application/x-ndjson`), tagged by `type`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentCodeEvent {
    NumberOfExecutions {
        execution_count: u64,
    },
    Stdout {
        text: String,
        #[serde(default)]
        timestamp: String,
    },
    Stderr {
        text: String,
        #[serde(default)]
        timestamp: String,
    },
    Result(Box<AgentCodeResult>),
    Error {
        name: String,
        value: String,
        #[serde(default)]
        traceback: String,
    },
    /// Sent after 5 s without another line.
    Keepalive,
    EndOfExecution,
    /// The kernel died mid-cell.
    UnexpectedEndOfExecution,
    /// A type this version does not know.
    #[serde(other)]
    Unknown,
}

impl AgentCodeEvent {
    /// The event of Stockade's API; `None` for keep-alives and unknown types.
    pub fn into_event(self) -> Option<CodeEvent> {
        Some(match self {
            Self::NumberOfExecutions { execution_count } => {
                CodeEvent::ExecutionCount(execution_count)
            }
            Self::Stdout { text, timestamp } => CodeEvent::Stdout(CodeOutput { text, timestamp }),
            Self::Stderr { text, timestamp } => CodeEvent::Stderr(CodeOutput { text, timestamp }),
            Self::Result(r) => CodeEvent::Result(Box::new((*r).into())),
            Self::Error {
                name,
                value,
                traceback,
            } => CodeEvent::Error(CodeError {
                name,
                value,
                traceback,
            }),
            Self::EndOfExecution => CodeEvent::End(CodeEndEvent { unexpected: false }),
            Self::UnexpectedEndOfExecution => CodeEvent::End(CodeEndEvent { unexpected: true }),
            Self::Keepalive | Self::Unknown => return None,
        })
    }
}

/// A result line of the agent (snake_case).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct AgentCodeResult {
    #[serde(default)]
    pub is_main_result: bool,
    pub text: Option<String>,
    pub html: Option<String>,
    pub markdown: Option<String>,
    pub svg: Option<String>,
    pub png: Option<String>,
    pub jpeg: Option<String>,
    pub pdf: Option<String>,
    pub latex: Option<String>,
    pub json: Option<Value>,
    pub javascript: Option<String>,
    pub data: Option<Value>,
    pub chart: Option<Value>,
    pub extra: Option<Value>,
}

impl From<AgentCodeResult> for CodeResult {
    fn from(r: AgentCodeResult) -> Self {
        Self {
            is_main_result: r.is_main_result,
            text: r.text,
            html: r.html,
            markdown: r.markdown,
            svg: r.svg,
            png: r.png,
            jpeg: r.jpeg,
            pdf: r.pdf,
            latex: r.latex,
            json: r.json,
            javascript: r.javascript,
            data: r.data,
            chart: r.chart,
            extra: r.extra,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(v: Value) -> Option<CodeEvent> {
        serde_json::from_value::<AgentCodeEvent>(v)
            .expect("an agent line")
            .into_event()
    }

    #[test]
    fn agent_lines_become_api_events() {
        assert_eq!(
            line(json!({"type": "number_of_executions", "execution_count": 3})),
            Some(CodeEvent::ExecutionCount(3))
        );
        assert_eq!(
            line(json!({"type": "stdout", "text": "hi\n", "timestamp": "2026-01-01T00:00:00Z"})),
            Some(CodeEvent::Stdout(CodeOutput {
                text: "hi\n".into(),
                timestamp: "2026-01-01T00:00:00Z".into()
            }))
        );
        let r = line(
            json!({"type": "result", "is_main_result": true, "text": "2",
                            "data": {"a": [1]}, "extra": {"x/y": "z"}}),
        )
        .unwrap();
        let CodeEvent::Result(r) = r else {
            panic!("{r:?}")
        };
        assert!(r.is_main_result);
        assert_eq!(r.text.as_deref(), Some("2"));
        let wire = serde_json::to_value(&r).unwrap();
        assert_eq!(
            wire,
            json!({"isMainResult": true, "text": "2", "data": {"a": [1]}, "extra": {"x/y": "z"}})
        );
        assert_eq!(
            line(json!({"type": "error", "name": "E", "value": "v", "traceback": "t"})),
            Some(CodeEvent::Error(CodeError {
                name: "E".into(),
                value: "v".into(),
                traceback: "t".into()
            }))
        );
        assert_eq!(line(json!({"type": "keepalive"})), None);
        assert_eq!(line(json!({"type": "something_new", "x": 1})), None);
        assert_eq!(
            line(json!({"type": "unexpected_end_of_execution"})),
            Some(CodeEvent::End(CodeEndEvent { unexpected: true }))
        );
        assert_eq!(
            line(json!({"type": "end_of_execution"})),
            Some(CodeEvent::End(CodeEndEvent { unexpected: false }))
        );
    }

    #[test]
    fn sse_events_round_trip_and_collect() {
        let events = [
            CodeEvent::ExecutionCount(1),
            CodeEvent::Stdout(CodeOutput {
                text: "a".into(),
                timestamp: String::new(),
            }),
            CodeEvent::Result(Box::new(CodeResult {
                is_main_result: true,
                text: Some("2".into()),
                ..Default::default()
            })),
            CodeEvent::End(CodeEndEvent { unexpected: false }),
        ];
        let mut exec = Execution::default();
        for e in events {
            let back = CodeEvent::from_sse(e.name(), &e.data().to_string())
                .unwrap()
                .unwrap();
            assert_eq!(back, e);
            exec.apply(back);
        }
        assert_eq!(exec.execution_count, Some(1));
        assert_eq!(exec.logs.stdout, ["a"]);
        assert_eq!(exec.text(), Some("2"));
        assert!(CodeEvent::from_sse("later", "{}").unwrap().is_none());
    }

    #[test]
    fn requests_refuse_unknown_fields() {
        let r = serde_json::from_value::<RunCodeRequest>(json!({"code": "1", "context": "x"}));
        assert!(r.is_err());
        let r = serde_json::from_value::<CreateCodeContextRequest>(json!({"lang": "x"}));
        assert!(r.is_err());
        let agent = AgentExecuteRequest {
            code: "1".into(),
            timeout_ms: Some(5),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(agent).unwrap(),
            json!({"code": "1", "timeout_ms": 5})
        );
    }
}
