//! The code interpreter: cells of code run in a sandbox's stateful
//! contexts (Jupyter kernels), collected into an [`Execution`] or streamed
//! as [`CodeEvent`]s, and the contexts themselves. The types of a cell's
//! outcome are the API's ([`stockade_api::code`]).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::Error;
use crate::sandbox::Sandbox;
use crate::sse::SseReader;
use futures_util::stream::{self, StreamExt};
use reqwest::Method;
use stockade_api::code::{
    CodeContext, CodeContexts, CodeEvent, CreateCodeContextRequest, Execution, RunCodeRequest,
};

/// Most bytes of code one cell may hold (the server refuses more).
pub const MAX_CODE_BYTES: usize = 1024 * 1024;

/// A cell of code to run, with where and how: the language (whose default
/// context runs it) or a context of [`Sandbox::create_code_context`],
/// environment variables for this cell only, and a timeout after which
/// the cell is interrupted (the context keeps its state).
///
/// ```
/// use std::time::Duration;
/// use stockade_sdk::RunCode;
///
/// let cell = RunCode::new("import os; os.environ['MODE']")
///     .env("MODE", "test")
///     .timeout(Duration::from_secs(30));
/// let js = RunCode::new("[1, 2, 3].map(x => x * 2)").language("javascript");
/// let plain: RunCode = "1 + 1".into(); // the default Python context
/// # let _ = (cell, js, plain);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunCode {
    code: String,
    language: Option<String>,
    context: Option<String>,
    env: BTreeMap<String, String>,
    timeout: Option<Duration>,
}

impl RunCode {
    pub fn new(code: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            ..Self::default()
        }
    }

    /// An environment variable set for this cell only (then restored).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    setters! {
        /// Runs in this language's default context (`python`, `javascript`
        /// or `js`, `typescript`, `bash`, …), made on first use.
        language(language: impl Into<String>) => language = language.into();
        /// Runs in this context (its id); not together with a language.
        context(id: impl Into<String>) => context = id.into();
        /// Interrupts the cell after this long; the context keeps its state.
        timeout(timeout: Duration) => timeout = timeout;
    }

    pub(crate) fn to_request(&self) -> Result<RunCodeRequest, Error> {
        if self.code.len() > MAX_CODE_BYTES {
            return Err(Error::invalid(
                "code",
                format!(
                    "at most {MAX_CODE_BYTES} bytes (got {}); copy a large program into the \
                     sandbox and run it from there",
                    self.code.len()
                ),
            ));
        }
        if self.language.is_some() && self.context.is_some() {
            return Err(Error::invalid(
                "language",
                "give a language or a context, not both (a context has its language)",
            ));
        }
        if let Some(id) = &self.context {
            check_context_id(id)?;
        }
        let timeout_seconds = match self.timeout {
            Some(t) if t.is_zero() => {
                return Err(Error::invalid("timeout", "must be more than zero"))
            }
            Some(t) => Some(t.as_secs_f64()),
            None => None,
        };
        Ok(RunCodeRequest {
            code: self.code.clone(),
            language: self.language.clone(),
            context_id: self.context.clone(),
            env_vars: (!self.env.is_empty()).then(|| self.env.clone()),
            timeout_seconds,
        })
    }
}

impl From<&str> for RunCode {
    fn from(code: &str) -> Self {
        Self::new(code)
    }
}

impl From<String> for RunCode {
    fn from(code: String) -> Self {
        Self::new(code)
    }
}

impl From<&String> for RunCode {
    fn from(code: &String) -> Self {
        Self::new(code.clone())
    }
}

/// A context id is the last segment of a path: refused before any request
/// when it could be read as more than one.
fn check_context_id(id: &str) -> Result<(), Error> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "contextId",
            format!("'{id}' is not a context id (letters, digits, - and _)"),
        ))
    }
}

boxed_stream! {
    /// The live events of a cell: a [`Stream`](futures_util::Stream) of
    /// [`CodeEvent`]s. Dropping it before its end closes the connection,
    /// which interrupts the cell; the context keeps its state.
    pub struct CodeStream of CodeEvent;
}

impl CodeStream {
    /// Reads the rest of the stream into one [`Execution`].
    pub async fn collect_execution(mut self) -> Result<Execution, Error> {
        let mut execution = Execution::default();
        while let Some(event) = self.next().await {
            let event = event?;
            let last = matches!(event, CodeEvent::End(_));
            execution.apply(event);
            if last {
                return Ok(execution);
            }
        }
        Err(ended_early())
    }
}

fn ended_early() -> Error {
    Error::Decode("the cell's stream ended without its end event".into())
}

/// One SSE event of a streamed cell as a [`CodeEvent`]; `None` for an
/// event this SDK does not know (a newer server's).
fn code_event(event: &str, data: &str) -> Option<Result<CodeEvent, Error>> {
    CodeEvent::from_sse(event, data)
        .map_err(|e| Error::Decode(format!("bad `{event}` event of a cell: {e}")))
        .transpose()
}

impl Sandbox {
    fn code_path(&self, rest: &str) -> String {
        format!("/api/v1/sandbox/{}/code{rest}", self.id())
    }

    fn code_request(&self, code: RunCode) -> Result<reqwest::RequestBuilder, Error> {
        let body = code.to_request()?;
        Ok(self
            .client()
            .request(Method::POST, &self.code_path(""))
            .json(&body))
    }

    /// Runs a cell and waits for it to end: its results, output, error and
    /// execution count. A cell that raised is an `Ok`; look at
    /// [`Execution::error`]. Variables stay for the next cell of the same
    /// context (by default: the sandbox's Python context).
    ///
    /// The sandbox's image needs a Jupyter kernel for the language
    /// (`--runtime code-interpreter-v1` has Python, JavaScript, TypeScript
    /// and bash).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::RunCode;
    /// sb.run_code("x = 6").await?;
    /// let ex = sb.run_code("print('hello'); x * 7").await?;
    /// assert_eq!(ex.text(), Some("42"));
    /// assert_eq!(ex.logs.stdout.concat(), "hello\n");
    /// let ex = sb.run_code(RunCode::new("1 / 0")).await?;
    /// if let Some(err) = &ex.error {
    ///     eprintln!("{}: {}\n{}", err.name, err.value, err.traceback);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run_code(&self, code: impl Into<RunCode>) -> Result<Execution, Error> {
        let req = self.code_request(code.into())?;
        self.client().send(req).await
    }

    /// Runs a cell and streams what it does as it happens (Server-Sent
    /// Events): output, results, the error, then the end. Dropping the
    /// stream interrupts the cell.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{CodeEvent, StreamExt};
    /// let code = "import time\nfor i in range(3):\n    print(i); time.sleep(1)";
    /// let mut events = sb.run_code_stream(code).await?;
    /// while let Some(event) = events.next().await {
    ///     match event? {
    ///         CodeEvent::Stdout(out) => print!("{}", out.text),
    ///         CodeEvent::Error(e) => eprintln!("{}: {}", e.name, e.value),
    ///         CodeEvent::End(_) => break,
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run_code_stream(&self, code: impl Into<RunCode>) -> Result<CodeStream, Error> {
        let req = self
            .code_request(code.into())?
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let client = self.client().clone();
        let resp = client.send_raw(req).await?;
        let reader = SseReader::new(resp);
        let inner = stream::unfold(Some((reader, client)), |state| async move {
            let (mut reader, client) = state?;
            loop {
                let event = match reader.next().await {
                    None => return Some((Err(ended_early()), None)),
                    Some(Err(e)) => return Some((Err(client.transport(e)), None)),
                    Some(Ok(event)) => event,
                };
                let Some(item) = code_event(&event.event, &event.data) else {
                    continue;
                };
                let last = matches!(item, Err(_) | Ok(CodeEvent::End(_)));
                return Some((item, (!last).then_some((reader, client))));
            }
        })
        .boxed();
        Ok(CodeStream { inner })
    }

    /// Makes a new context: a kernel of `language` (default Python) working
    /// in `cwd` (default the user's home), with state of its own.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::RunCode;
    /// let ctx = sb.create_code_context(Some("python"), Some("/tmp")).await?;
    /// let ex = sb.run_code(RunCode::new("import os; os.getcwd()").context(&ctx.id)).await?;
    /// assert_eq!(ex.text(), Some("/tmp"));
    /// sb.remove_code_context(&ctx.id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_code_context(
        &self,
        language: Option<&str>,
        cwd: Option<&str>,
    ) -> Result<CodeContext, Error> {
        let body = CreateCodeContextRequest {
            language: language.map(str::to_owned),
            cwd: cwd.map(str::to_owned),
        };
        self.client()
            .send(
                self.client()
                    .request(Method::POST, &self.code_path("/contexts"))
                    .json(&body),
            )
            .await
    }

    /// The sandbox's contexts, oldest first (the default ones included).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// for ctx in sb.code_contexts().await? {
    ///     println!("{} {} {}", ctx.id, ctx.language, ctx.cwd);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn code_contexts(&self) -> Result<Vec<CodeContext>, Error> {
        let list: CodeContexts = self.get_json("/code/contexts").await?;
        Ok(list.contexts)
    }

    /// Restarts a context's kernel: same id, language and directory; its
    /// variables are gone.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox, id: &str) -> Result<(), stockade_sdk::Error> {
    /// sb.restart_code_context(id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn restart_code_context(&self, id: &str) -> Result<(), Error> {
        self.context_call(Method::POST, id, "/restart").await
    }

    /// Interrupts the cell a context is running (as Ctrl-C in a notebook);
    /// the context keeps its state.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox, id: &str) -> Result<(), stockade_sdk::Error> {
    /// sb.interrupt_code_context(id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn interrupt_code_context(&self, id: &str) -> Result<(), Error> {
        self.context_call(Method::POST, id, "/interrupt").await
    }

    /// Removes a context and ends its kernel.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox, id: &str) -> Result<(), stockade_sdk::Error> {
    /// sb.remove_code_context(id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn remove_code_context(&self, id: &str) -> Result<(), Error> {
        self.context_call(Method::DELETE, id, "").await
    }

    async fn context_call(&self, method: Method, id: &str, rest: &str) -> Result<(), Error> {
        check_context_id(id)?;
        let path = self.code_path(&format!("/contexts/{id}{rest}"));
        self.client()
            .send_empty(self.client().request(method, &path))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_become_requests() {
        let r = RunCode::new("x")
            .language("js")
            .env("A", "1")
            .timeout(Duration::from_millis(1500))
            .to_request()
            .unwrap();
        assert_eq!(r.language.as_deref(), Some("js"));
        assert_eq!(r.timeout_seconds, Some(1.5));
        assert_eq!(r.env_vars.unwrap()["A"], "1");
        let r = RunCode::from("").to_request().unwrap();
        assert!(r.code.is_empty() && r.language.is_none() && r.env_vars.is_none());
        let both = RunCode::new("x").language("python").context("abc");
        assert!(matches!(
            both.to_request(),
            Err(Error::InvalidParams { field, .. }) if field == "language"
        ));
        let zero = RunCode::new("x").timeout(Duration::ZERO);
        assert!(zero.to_request().is_err());
        let big = RunCode::new("x".repeat(MAX_CODE_BYTES + 1));
        assert!(matches!(
            big.to_request(),
            Err(Error::InvalidParams { field, .. }) if field == "code"
        ));
        for bad in ["", "../x", "a/b", "a?b", "a b"] {
            assert!(
                RunCode::new("x").context(bad).to_request().is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn events_decode_and_collect() {
        let mut ex = Execution::default();
        let events = [
            ("executionCount", r#"{"executionCount":3}"#),
            (
                "stdout",
                r#"{"text":"hi\n","timestamp":"2026-11-28T05:00:00Z"}"#,
            ),
            ("result", r#"{"isMainResult":true,"text":"42"}"#),
            ("someday", r#"{}"#),
            ("error", r#"{"name":"E","value":"v","traceback":"tb"}"#),
            ("end", r#"{"unexpected":false}"#),
        ];
        for (name, data) in events {
            if let Some(event) = code_event(name, data) {
                ex.apply(event.unwrap());
            }
        }
        assert_eq!(ex.execution_count, Some(3));
        assert_eq!(ex.logs.stdout, ["hi\n"]);
        assert_eq!(ex.text(), Some("42"));
        assert_eq!(ex.error.as_ref().unwrap().name, "E");
        assert!(code_event("result", "{").unwrap().is_err());
    }
}
