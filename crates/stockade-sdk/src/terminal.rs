//! Terminals: a shell or a command on a PTY in a sandbox, over a
//! WebSocket. Keystrokes and resizes go in, the terminal's bytes come out,
//! and the process's exit code ends it; dropping the [`Terminal`] closes it,
//! which ends its process.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::stream::Stream;
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::client::Socket;
use crate::error::Error;
use crate::sandbox::Sandbox;

/// The largest terminal side the server takes, in columns or rows.
pub const MAX_TERMINAL_SIDE: u16 = 1000;

/// The longest command line a terminal takes, in bytes.
const MAX_COMMAND: usize = 16 * 1024;

/// Output chunks waiting to be read; the server waits when they are not.
const OUTPUT_BUFFER: usize = 256;

/// What a terminal runs and how big it starts.
///
/// ```
/// use stockade_sdk::TerminalOptions;
///
/// let shell = TerminalOptions::default(); // a login shell, 80×24, in /workspace
/// let top = TerminalOptions::new().size(120, 40).command("top").cwd("/tmp");
/// let same = TerminalOptions { cols: 120, rows: 40, command: Some("top".into()), cwd: Some("/tmp".into()) };
/// assert_eq!(top, same);
/// # let _ = shell;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalOptions {
    /// Columns, 1 to 1000 (default 80).
    pub cols: u16,
    /// Rows, 1 to 1000 (default 24).
    pub rows: u16,
    /// A shell command line run with `/bin/sh -c`; `None` for a login shell
    /// (bash where the image has it).
    pub command: Option<String>,
    /// Working directory; a relative one is under `/workspace` (the default).
    pub cwd: Option<String>,
}

impl Default for TerminalOptions {
    fn default() -> Self {
        Self {
            cols: 80,
            rows: 24,
            command: None,
            cwd: None,
        }
    }
}

impl TerminalOptions {
    /// A login shell on an 80×24 terminal in `/workspace`.
    ///
    /// ```
    /// let o = stockade_sdk::TerminalOptions::new();
    /// assert_eq!((o.cols, o.rows, o.command, o.cwd), (80, 24, None, None));
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The terminal's size.
    ///
    /// ```
    /// let o = stockade_sdk::TerminalOptions::new().size(132, 50);
    /// assert_eq!((o.cols, o.rows), (132, 50));
    /// ```
    pub fn size(mut self, cols: u16, rows: u16) -> Self {
        self.cols = cols;
        self.rows = rows;
        self
    }

    setters! {
        /// Run this shell command line instead of a login shell.
        ///
        /// ```
        /// let o = stockade_sdk::TerminalOptions::new().command("htop || top");
        /// assert_eq!(o.command.as_deref(), Some("htop || top"));
        /// ```
        command(line: impl Into<String>) => command = line.into();
        /// Start in this directory.
        ///
        /// ```
        /// let o = stockade_sdk::TerminalOptions::new().cwd("app"); // /workspace/app
        /// assert_eq!(o.cwd.as_deref(), Some("app"));
        /// ```
        cwd(dir: impl Into<String>) => cwd = dir.into();
    }

    /// The query of the terminal request, or the first parameter that is
    /// out of range.
    fn to_query(&self) -> Result<Vec<(&'static str, String)>, Error> {
        check_size(self.cols, self.rows)?;
        let mut query = vec![
            ("cols", self.cols.to_string()),
            ("rows", self.rows.to_string()),
        ];
        if let Some(line) = &self.command {
            if line.trim().is_empty() || line.len() > MAX_COMMAND || line.contains('\0') {
                return Err(Error::invalid(
                    "command",
                    format!("must be 1 to {MAX_COMMAND} bytes, not blank, without NUL"),
                ));
            }
            query.push(("cmd", line.clone()));
        }
        if let Some(dir) = &self.cwd {
            if dir.is_empty() || dir.contains('\0') {
                return Err(Error::invalid(
                    "cwd",
                    "must be a directory path without NUL",
                ));
            }
            query.push(("cwd", dir.clone()));
        }
        Ok(query)
    }
}

fn check_size(cols: u16, rows: u16) -> Result<(), Error> {
    for (field, n) in [("cols", cols), ("rows", rows)] {
        if !(1..=MAX_TERMINAL_SIDE).contains(&n) {
            return Err(Error::invalid(
                field,
                format!("must be from 1 to {MAX_TERMINAL_SIDE}, got {n}"),
            ));
        }
    }
    Ok(())
}

/// What goes to the server.
enum Outgoing {
    Input(Bytes),
    Resize { cols: u16, rows: u16 },
}

/// What came from the server.
enum Incoming {
    Output(Bytes),
    Exit(Option<i64>),
    Failed(Error),
}

/// The server's last text frame.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Control {
    Exit {
        #[serde(rename = "exitCode")]
        exit_code: Option<i64>,
    },
}

/// A live terminal in a sandbox; see [`Sandbox::terminal`]. A [`Stream`] of
/// the terminal's output bytes, which ends when its process does (then
/// [`Terminal::exit_code`] says how). Dropping it closes the terminal and
/// ends its process.
pub struct Terminal {
    incoming: mpsc::Receiver<Incoming>,
    writer: TerminalWriter,
    exit: Option<Option<i64>>,
    done: bool,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal")
            .field("exit", &self.exit)
            .finish()
    }
}

/// Writes to and resizes a [`Terminal`] from anywhere (it is cheap to
/// clone), for example from a task that reads keystrokes while another
/// reads the output. It stops working once the terminal ended or was
/// dropped.
#[derive(Debug, Clone)]
pub struct TerminalWriter {
    tx: mpsc::Sender<Outgoing>,
}

impl TerminalWriter {
    async fn send(&self, out: Outgoing) -> Result<(), Error> {
        self.tx
            .send(out)
            .await
            .map_err(|_| Error::Closed("the terminal has ended".into()))
    }

    /// Sends keystrokes (or any bytes: pasted text, `\x03` for Ctrl-C).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let term = sb.terminal(Default::default()).await?;
    /// let keys = term.writer();
    /// tokio::spawn(async move { keys.write(b"ls\n").await });
    /// # Ok(()) }
    /// ```
    pub async fn write(&self, bytes: &[u8]) -> Result<(), Error> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.send(Outgoing::Input(Bytes::copy_from_slice(bytes)))
            .await
    }

    /// Changes the terminal's size (the program in it gets `SIGWINCH`).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let term = sb.terminal(Default::default()).await?;
    /// term.writer().resize(120, 40).await?;
    /// # Ok(()) }
    /// ```
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), Error> {
        check_size(cols, rows)?;
        self.send(Outgoing::Resize { cols, rows }).await
    }
}

impl Terminal {
    /// Sends keystrokes (or any bytes: pasted text, `\x03` for Ctrl-C).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let term = sb.terminal(Default::default()).await?;
    /// term.write(b"cd /tmp && ls\n").await?;
    /// term.write(b"exit\n").await?;
    /// let code = term.wait().await?;
    /// # let _ = code;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self, bytes: &[u8]) -> Result<(), Error> {
        self.writer.write(bytes).await
    }

    /// Changes the terminal's size (the program in it gets `SIGWINCH`).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// let term = sb.terminal(Default::default()).await?;
    /// term.resize(132, 50).await?;
    /// term.write(b"stty size\n").await?; // prints "50 132"
    /// # Ok(()) }
    /// ```
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), Error> {
        self.writer.resize(cols, rows).await
    }

    /// A handle that writes and resizes while this terminal's output is
    /// being read elsewhere.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::StreamExt;
    /// let mut term = sb.terminal(Default::default()).await?;
    /// let keys = term.writer();
    /// tokio::spawn(async move {
    ///     let _ = keys.write(b"echo hi; exit\n").await;
    /// });
    /// while let Some(chunk) = term.next().await {
    ///     print!("{}", String::from_utf8_lossy(&chunk?));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn writer(&self) -> TerminalWriter {
        self.writer.clone()
    }

    /// The next output, as it comes; `None` once the process ended (see
    /// [`Terminal::exit_code`]). The same as the [`Stream`]'s `next`.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::TerminalOptions;
    /// let mut term = sb.terminal(TerminalOptions::new().command("ls -l --color")).await?;
    /// while let Some(bytes) = term.read().await {
    ///     print!("{}", String::from_utf8_lossy(&bytes?));
    /// }
    /// println!("exit code {:?}", term.exit_code());
    /// # Ok(()) }
    /// ```
    pub async fn read(&mut self) -> Option<Result<Bytes, Error>> {
        self.next().await
    }

    /// The process's exit code once the output ended (128 + the signal
    /// when a signal ended it); `None` while it runs, or when the server
    /// could not tell.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{StreamExt, TerminalOptions};
    /// let mut term = sb.terminal(TerminalOptions::new().command("exit 3")).await?;
    /// while term.next().await.is_some() {}
    /// assert_eq!(term.exit_code(), Some(3));
    /// # Ok(()) }
    /// ```
    pub fn exit_code(&self) -> Option<i64> {
        self.exit.flatten()
    }

    /// Whether the process has ended (its output was read to the end).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{StreamExt, TerminalOptions};
    /// let mut term = sb.terminal(TerminalOptions::new().command("true")).await?;
    /// while term.next().await.is_some() {}
    /// assert!(term.has_exited());
    /// # Ok(()) }
    /// ```
    pub fn has_exited(&self) -> bool {
        self.exit.is_some()
    }

    /// Waits until the process ends, discarding output not read yet, and
    /// returns its exit code (`None` when the server could not tell).
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::TerminalOptions;
    /// let term = sb.terminal(TerminalOptions::new().command("make test")).await?;
    /// let code = term.wait().await?;
    /// println!("make exited with {code:?}");
    /// # Ok(()) }
    /// ```
    pub async fn wait(mut self) -> Result<Option<i64>, Error> {
        while let Some(item) = self.next().await {
            item?;
        }
        match self.exit {
            Some(code) => Ok(code),
            None => Err(Error::Closed(
                "the terminal's connection ended before its process did".into(),
            )),
        }
    }
}

impl Stream for Terminal {
    type Item = Result<Bytes, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.incoming.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Incoming::Output(b))) => Poll::Ready(Some(Ok(b))),
            Poll::Ready(Some(Incoming::Exit(code))) => {
                self.exit = Some(code);
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Incoming::Failed(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(Some(Err(Error::Closed(
                    "the terminal's connection ended before its process did".into(),
                ))))
            }
        }
    }
}

/// Carries the socket both ways until the process ends, the server goes
/// away, or the [`Terminal`] is dropped (then the socket is closed, which
/// ends the process).
async fn pump(
    mut ws: Socket,
    mut outgoing: mpsc::Receiver<Outgoing>,
    incoming: mpsc::Sender<Incoming>,
) {
    let mut exited = false;
    let mut writers_gone = false;
    loop {
        tokio::select! {
            _ = incoming.closed() => break,
            out = outgoing.recv(), if !writers_gone => {
                let msg = match out {
                    Some(Outgoing::Input(b)) => Message::Binary(b),
                    Some(Outgoing::Resize { cols, rows }) => Message::Text(
                        serde_json::json!({ "type": "resize", "cols": cols, "rows": rows })
                            .to_string()
                            .into(),
                    ),
                    None => {
                        writers_gone = true;
                        continue;
                    }
                };
                if let Err(e) = ws.send(msg).await {
                    report_unless_exited(&incoming, exited, format!(
                        "the terminal's connection failed: {e}"
                    ))
                    .await;
                    return;
                }
            }
            msg = ws.next() => {
                let item = match msg {
                    Some(Ok(Message::Binary(b))) => Incoming::Output(b),
                    Some(Ok(Message::Text(t))) => match serde_json::from_str::<Control>(&t) {
                        Ok(Control::Exit { exit_code }) => {
                            // Writes fail from now on, before the exit is seen.
                            exited = true;
                            outgoing.close();
                            Incoming::Exit(exit_code)
                        }
                        Err(_) => continue,
                    },
                    Some(Ok(Message::Close(_))) | None => {
                        report_unless_exited(
                            &incoming,
                            exited,
                            "the server closed the terminal before its process ended".into(),
                        )
                        .await;
                        return;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => {
                        report_unless_exited(&incoming, exited, format!(
                            "the terminal's connection failed: {e}"
                        ))
                        .await;
                        return;
                    }
                };
                if incoming.send(item).await.is_err() {
                    break;
                }
            }
        }
    }
    // The terminal was dropped: closing the socket ends its process.
    let _ = ws.close(None).await;
}

/// Tells the reader the connection broke, unless the process already ended
/// (then the break is the expected end of the socket).
async fn report_unless_exited(incoming: &mpsc::Sender<Incoming>, exited: bool, message: String) {
    if !exited {
        let _ = incoming
            .send(Incoming::Failed(Error::Closed(message)))
            .await;
    }
}

impl Sandbox {
    /// Opens a terminal: a login shell (or `options.command`) on a PTY in
    /// the sandbox, which must be running. Read its output as a [`Stream`],
    /// type with [`Terminal::write`], resize with [`Terminal::resize`];
    /// dropping it ends the process.
    ///
    /// ```no_run
    /// # async fn demo(sb: stockade_sdk::Sandbox) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::{StreamExt, TerminalOptions};
    /// let mut term = sb.terminal(TerminalOptions::new().size(100, 30).cwd("app")).await?;
    /// term.write(b"pwd; exit 7\n").await?;
    /// while let Some(bytes) = term.next().await {
    ///     print!("{}", String::from_utf8_lossy(&bytes?));
    /// }
    /// assert_eq!(term.exit_code(), Some(7));
    /// # Ok(()) }
    /// ```
    pub async fn terminal(&self, options: TerminalOptions) -> Result<Terminal, Error> {
        let query = options.to_query()?;
        let ws = self
            .client()
            .websocket(&format!("/api/v1/sandbox/{}/terminal", self.id()), &query)
            .await?;
        let (out_tx, out_rx) = mpsc::channel(64);
        let (in_tx, in_rx) = mpsc::channel(OUTPUT_BUFFER);
        tokio::spawn(pump(ws, out_rx, in_tx));
        Ok(Terminal {
            incoming: in_rx,
            writer: TerminalWriter { tx: out_tx },
            exit: None,
            done: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_the_query_or_name_the_bad_field() {
        let q = TerminalOptions::new()
            .size(100, 30)
            .command("ls -l")
            .cwd("app")
            .to_query()
            .unwrap();
        assert_eq!(
            q,
            [
                ("cols", "100".to_string()),
                ("rows", "30".to_string()),
                ("cmd", "ls -l".to_string()),
                ("cwd", "app".to_string())
            ]
        );
        let field = |o: TerminalOptions| match o.to_query().unwrap_err() {
            Error::InvalidParams { field, .. } => field,
            other => panic!("{other}"),
        };
        assert_eq!(field(TerminalOptions::new().size(0, 10)), "cols");
        assert_eq!(field(TerminalOptions::new().size(10, 1001)), "rows");
        assert_eq!(field(TerminalOptions::new().command("  ")), "command");
        assert_eq!(field(TerminalOptions::new().command("a\0b")), "command");
        assert_eq!(field(TerminalOptions::new().cwd("")), "cwd");
    }

    #[test]
    fn the_exit_frame_parses_with_and_without_a_code() {
        let c: Control = serde_json::from_str(r#"{"type":"exit","exitCode":5}"#).unwrap();
        assert!(matches!(c, Control::Exit { exit_code: Some(5) }));
        let c: Control = serde_json::from_str(r#"{"type":"exit","exitCode":null}"#).unwrap();
        assert!(matches!(c, Control::Exit { exit_code: None }));
    }
}
