//! Running commands in a sandbox: buffered, streamed as events, or
//! in the background as a [`Process`] that can be waited for and killed.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use reqwest::Method;
use stockade_api::{
    ExecExitEvent, ExecRequest, ExecResponse, ListProcessesResponse, ProcessResponse, ProcessStatus,
};

use crate::client::Client;
use crate::error::Error;
use crate::sandbox::Sandbox;
use crate::sse::SseReader;

/// A command to run in a sandbox: a program with arguments (no shell) or a
/// shell command line, with its working directory, environment, timeout and
/// stdin.
///
/// ```
/// use std::time::Duration;
/// use stockade_sdk::Command;
///
/// let build = Command::new("npm").arg("run").arg("build").cwd("app").env("CI", "1");
/// let piped = Command::shell("ls -l | wc -l").timeout(Duration::from_secs(10));
/// let same: Command = "ls -l | wc -l".into(); // a &str is a shell line
/// let argv: Command = ["echo", "hi"].into(); // an array is argv
/// # let _ = (build, piped, same, argv);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Command {
    argv: Vec<String>,
    shell: Option<String>,
    cwd: Option<String>,
    env: BTreeMap<String, String>,
    timeout: Option<Duration>,
    stdin: Option<String>,
}

impl Command {
    /// Runs `program` itself, with the arguments added by [`Command::arg`].
    pub fn new(program: impl Into<String>) -> Self {
        Self {
            argv: vec![program.into()],
            ..Self::default()
        }
    }

    /// Runs a command line with `/bin/sh -c`.
    pub fn shell(line: impl Into<String>) -> Self {
        Self {
            shell: Some(line.into()),
            ..Self::default()
        }
    }

    /// Adds one argument (ignored for a shell line).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.argv.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// An environment variable, added to (and overriding) the sandbox's.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    setters! {
        /// Working directory; a relative one is under `/workspace` (the default).
        cwd(dir: impl Into<String>) => cwd = dir.into();
        /// Kill the command (and its children) after this long; rounded up to
        /// whole seconds. Default: the server's (300 s), none in the background.
        timeout(timeout: Duration) => timeout = timeout;
        /// Text written to the command's stdin, which is then closed.
        stdin(input: impl Into<String>) => stdin = input.into();
    }

    pub(crate) fn to_request(&self, background: bool) -> Result<ExecRequest, Error> {
        let (cmd, shell) = match &self.shell {
            Some(line) => (None, Some(line.clone())),
            None if self.argv.first().is_some_and(|p| !p.is_empty()) => {
                (Some(self.argv.clone()), None)
            }
            None => {
                return Err(Error::invalid(
                    "cmd",
                    "name a program (Command::new) or a shell line (Command::shell)",
                ))
            }
        };
        let timeout_seconds = match self.timeout {
            Some(t) if t.is_zero() => {
                return Err(Error::invalid("timeout", "must be at least one second"))
            }
            Some(t) => Some(t.as_secs() + u64::from(t.subsec_nanos() > 0)),
            None => None,
        };
        Ok(ExecRequest {
            cmd,
            shell,
            cwd: self.cwd.clone(),
            env: (!self.env.is_empty()).then(|| self.env.clone()),
            timeout_seconds,
            stdin: self.stdin.clone(),
            background,
        })
    }
}

impl From<&str> for Command {
    /// A shell command line.
    fn from(line: &str) -> Self {
        Self::shell(line)
    }
}

impl From<String> for Command {
    /// A shell command line.
    fn from(line: String) -> Self {
        Self::shell(line)
    }
}

impl From<Vec<String>> for Command {
    /// A program and its arguments.
    fn from(argv: Vec<String>) -> Self {
        Self {
            argv,
            ..Self::default()
        }
    }
}

impl<const N: usize> From<[&str; N]> for Command {
    /// A program and its arguments.
    fn from(argv: [&str; N]) -> Self {
        Self {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            ..Self::default()
        }
    }
}

/// What a finished command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// `None` when it was killed (timeout, kill) or its status is unknown.
    pub exit_code: Option<i64>,
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
    /// Killed by its timeout.
    pub timed_out: bool,
    /// Output beyond the server's limit was dropped.
    pub truncated: bool,
    /// What happened, when it is not a plain exit.
    pub message: Option<String>,
}

impl CommandOutput {
    /// It exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    fn from_response(r: ExecResponse) -> Self {
        Self {
            exit_code: r.exit_code,
            stdout: r.stdout,
            stderr: r.stderr,
            duration: Duration::from_millis(r.duration_ms),
            timed_out: r.timed_out,
            truncated: r.truncated,
            message: r.message,
        }
    }

    fn from_process(p: &ProcessResponse) -> Self {
        Self {
            exit_code: p.exit_code,
            stdout: p.stdout.clone().unwrap_or_default(),
            stderr: p.stderr.clone().unwrap_or_default(),
            duration: Duration::from_millis(p.duration_ms),
            timed_out: p.status == ProcessStatus::TimedOut,
            truncated: p.truncated,
            message: p.message.clone(),
        }
    }
}

/// How a streamed command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandExit {
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    pub duration: Duration,
    pub message: Option<String>,
}

/// One event of [`Sandbox::run_command_stream`]: output as it comes, then
/// the exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandEvent {
    /// A chunk of stdout (UTF-8; a character split between chunks is kept whole).
    Stdout(String),
    Stderr(String),
    /// The last event.
    Exit(CommandExit),
}

boxed_stream! {
    /// The live output of a command: a [`Stream`] of [`CommandEvent`]s.
    /// Dropping it closes the connection, which kills the command.
    pub struct CommandStream of CommandEvent;
}

impl CommandStream {
    /// Reads the rest of the stream into one [`CommandOutput`].
    pub async fn collect_output(mut self) -> Result<CommandOutput, Error> {
        let mut out = CommandOutput {
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            duration: Duration::ZERO,
            timed_out: false,
            truncated: false,
            message: None,
        };
        while let Some(event) = self.next().await {
            match event? {
                CommandEvent::Stdout(s) => out.stdout.push_str(&s),
                CommandEvent::Stderr(s) => out.stderr.push_str(&s),
                CommandEvent::Exit(exit) => {
                    out.exit_code = exit.exit_code;
                    out.timed_out = exit.timed_out;
                    out.duration = exit.duration;
                    out.message = exit.message;
                    return Ok(out);
                }
            }
        }
        Err(Error::Decode(
            "the command's stream ended without its exit event".into(),
        ))
    }
}

/// A command running in the background; see [`Sandbox::spawn`].
#[derive(Debug, Clone)]
pub struct Process {
    client: Client,
    sandbox_id: String,
    info: ProcessResponse,
}

/// The server waits at most this long per request.
const WAIT_STEP: Duration = Duration::from_secs(30);

impl Process {
    pub fn id(&self) -> &str {
        &self.info.process_id
    }

    /// What the server said when last asked.
    pub fn info(&self) -> &ProcessResponse {
        &self.info
    }

    /// Still running, as of the last answer.
    pub fn is_running(&self) -> bool {
        self.info.status == ProcessStatus::Running
    }

    fn path(&self, rest: &str) -> String {
        format!(
            "/api/v1/sandbox/{}/processes/{}{rest}",
            self.sandbox_id, self.info.process_id
        )
    }

    /// Its output so far (at most the server's limit per stream) and state.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let mut server = sb.spawn("python3 -m http.server 8000").await?;
    /// let so_far = server.output().await?;
    /// println!("{}", so_far.stderr);
    /// # Ok(()) }
    /// ```
    pub async fn output(&mut self) -> Result<CommandOutput, Error> {
        self.state_after(Method::GET).await
    }

    /// Waits until it ends and returns what it did.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let mut job = sb.spawn("sleep 2; echo done").await?;
    /// let out = job.wait().await?;
    /// assert_eq!(out.stdout, "done\n");
    /// # Ok(()) }
    /// ```
    pub async fn wait(&mut self) -> Result<CommandOutput, Error> {
        loop {
            if let Some(out) = self.wait_for(WAIT_STEP).await? {
                return Ok(out);
            }
        }
    }

    /// Waits at most `limit` (whole seconds, up to an hour per call);
    /// `None` when it is still running then.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use std::time::Duration;
    /// let mut job = sb.spawn("sleep 60").await?;
    /// if job.wait_for(Duration::from_secs(1)).await?.is_none() {
    ///     job.kill().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_for(&mut self, limit: Duration) -> Result<Option<CommandOutput>, Error> {
        let secs = limit.as_secs().min(3600);
        self.info = self
            .client
            .send(
                self.client
                    .request(Method::POST, &self.path("/wait"))
                    .query(&[("timeout", secs.to_string())]),
            )
            .await?;
        Ok((!self.is_running()).then(|| CommandOutput::from_process(&self.info)))
    }

    /// Kills it and its children (SIGKILL) and returns what it did; one
    /// that has ended is returned as it is.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let mut job = sb.spawn("sleep 600").await?;
    /// let out = job.kill().await?;
    /// println!("{:?}", out.exit_code); // Some(137): killed by SIGKILL
    /// # Ok(()) }
    /// ```
    pub async fn kill(&mut self) -> Result<CommandOutput, Error> {
        self.state_after(Method::DELETE).await
    }

    /// Sends `method` to the process itself, keeps the state it answers
    /// with and returns what it did so far.
    async fn state_after(&mut self, method: Method) -> Result<CommandOutput, Error> {
        self.info = self
            .client
            .send(self.client.request(method, &self.path("")))
            .await?;
        Ok(CommandOutput::from_process(&self.info))
    }
}

impl Sandbox {
    fn exec_request(
        &self,
        cmd: &Command,
        background: bool,
    ) -> Result<reqwest::RequestBuilder, Error> {
        let body = cmd.to_request(background)?;
        Ok(self
            .client()
            .request(Method::POST, &format!("/api/v1/sandbox/{}/exec", self.id()))
            .json(&body))
    }

    /// Runs a command and waits for it to end: exit code, stdout, stderr.
    /// A non-zero exit is an `Ok`; look at [`CommandOutput::exit_code`].
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::Command;
    /// let out = sb.run_command(Command::new("ls").arg("-la").cwd("/tmp")).await?;
    /// println!("{} exited with {:?}", out.stdout, out.exit_code);
    /// let out = sb.run_command("echo $GREETING | tr a-z A-Z").await?;
    /// assert!(out.success());
    /// # Ok(()) }
    /// ```
    pub async fn run_command(&self, cmd: impl Into<Command>) -> Result<CommandOutput, Error> {
        let req = self.exec_request(&cmd.into(), false)?;
        let resp: ExecResponse = self.client().send(req).await?;
        Ok(CommandOutput::from_response(resp))
    }

    /// Runs a command and streams its output as it comes (Server-Sent
    /// Events). Dropping the stream kills the command.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use futures_util::StreamExt;
    /// use stockade_sdk::CommandEvent;
    /// let mut events = sb.run_command_stream("for i in 1 2 3; do echo $i; sleep 1; done").await?;
    /// while let Some(event) = events.next().await {
    ///     match event? {
    ///         CommandEvent::Stdout(text) => print!("{text}"),
    ///         CommandEvent::Stderr(text) => eprint!("{text}"),
    ///         CommandEvent::Exit(exit) => println!("exit code {:?}", exit.exit_code),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run_command_stream(
        &self,
        cmd: impl Into<Command>,
    ) -> Result<CommandStream, Error> {
        let req = self
            .exec_request(&cmd.into(), false)?
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let client = self.client().clone();
        let resp = client.send_raw(req).await?;
        let reader = SseReader::new(resp);
        let inner = stream::unfold(Some((reader, client)), |state| async move {
            let (mut reader, client) = state?;
            loop {
                let event = match reader.next().await {
                    None => {
                        return Some((
                            Err(Error::Decode(
                                "the command's stream ended without its exit event".into(),
                            )),
                            None,
                        ))
                    }
                    Some(Err(e)) => return Some((Err(client.transport(e)), None)),
                    Some(Ok(event)) => event,
                };
                let text = || {
                    serde_json::from_str::<String>(&event.data).map_err(|e| {
                        Error::Decode(format!("an output chunk is not a JSON string: {e}"))
                    })
                };
                let item = match event.event.as_str() {
                    "stdout" => text().map(CommandEvent::Stdout),
                    "stderr" => text().map(CommandEvent::Stderr),
                    "exit" => {
                        let exit = serde_json::from_str::<ExecExitEvent>(&event.data)
                            .map_err(|e| Error::Decode(format!("bad exit event: {e}")))
                            .map(|x| {
                                CommandEvent::Exit(CommandExit {
                                    exit_code: x.exit_code,
                                    timed_out: x.timed_out,
                                    duration: Duration::from_millis(x.duration_ms),
                                    message: x.message,
                                })
                            });
                        return Some((exit, None));
                    }
                    _ => continue,
                };
                let done = item.is_err();
                return Some((item, (!done).then_some((reader, client))));
            }
        })
        .boxed();
        Ok(CommandStream { inner })
    }

    /// Starts a command in the background and returns at once. Without a
    /// [`Command::timeout`] it runs until it ends or is killed.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let mut server = sb.spawn("python3 -m http.server 8000").await?;
    /// println!("started {}", server.id());
    /// server.kill().await?;
    /// # Ok(()) }
    /// ```
    pub async fn spawn(&self, cmd: impl Into<Command>) -> Result<Process, Error> {
        let req = self.exec_request(&cmd.into(), true)?;
        let info: ProcessResponse = self.client().send(req).await?;
        Ok(self.process_of(info))
    }

    /// A handle on one of this sandbox's background processes.
    fn process_of(&self, info: ProcessResponse) -> Process {
        Process {
            client: self.client().clone(),
            sandbox_id: self.id().to_owned(),
            info,
        }
    }

    /// The background processes this server knows for the sandbox (ended
    /// ones stay listed for an hour), oldest first.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// for p in sb.processes().await? {
    ///     println!("{} {:?} {:?}", p.id(), p.info().status, p.info().command);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn processes(&self) -> Result<Vec<Process>, Error> {
        let list: ListProcessesResponse = self.get_json("/processes").await?;
        Ok(list
            .processes
            .into_iter()
            .map(|info| self.process_of(info))
            .collect())
    }

    /// One background process by id, with its output so far.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let mut p = sb.process("k3j4h5g6f7d8").await?;
    /// p.kill().await?;
    /// # Ok(()) }
    /// ```
    pub async fn process(&self, process_id: &str) -> Result<Process, Error> {
        let info = self.get_json(&format!("/processes/{process_id}")).await?;
        Ok(self.process_of(info))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_become_requests() {
        let r = Command::new("ls")
            .arg("-l")
            .cwd("src")
            .env("A", "1")
            .timeout(Duration::from_millis(1500))
            .to_request(false)
            .unwrap();
        assert_eq!(r.cmd, Some(vec!["ls".to_string(), "-l".to_string()]));
        assert_eq!(r.timeout_seconds, Some(2), "rounded up");
        assert_eq!(r.cwd.as_deref(), Some("src"));
        let r = Command::from("echo hi | wc").to_request(true).unwrap();
        assert_eq!(r.shell.as_deref(), Some("echo hi | wc"));
        assert!(r.cmd.is_none() && r.background);
        let r = Command::from(["echo", "a b"]).to_request(false).unwrap();
        assert_eq!(r.cmd.unwrap()[1], "a b");
        assert!(Command::default().to_request(false).is_err());
        assert!(Command::new("x")
            .timeout(Duration::ZERO)
            .to_request(false)
            .is_err());
    }
}
