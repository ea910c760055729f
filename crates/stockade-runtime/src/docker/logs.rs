//! Container logs from Docker as lines: the logs request on a
//! socket of its own, its frames taken apart and handed to [`LineSplitter`].

use std::collections::VecDeque;

use std::time::Duration;

use async_trait::async_trait;
use futures_util::stream::{self, StreamExt};
use stockade_core::SandboxId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::docker::{container_name, engine_answer, Endpoint};
use crate::logs::LineSplitter;
use crate::{
    DockerRuntime, LogLine, LogLines, LogStream, Logs, LogsOptions, RuntimeError, RuntimeResult,
    MAX_LOG_LINE_BYTES,
};

/// The engine's answer to a logs request: the HTTP/1.0 body, a sequence of
/// frames (stream byte, three zero bytes, payload length as u32 BE).
trait LogConn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> LogConn for T {}

/// Bytes read from the engine at a time.
const READ_CHUNK: usize = 64 * 1024;
/// A frame longer than this is not Docker's (it cuts messages at 16 KiB).
const MAX_FRAME: usize = 1 << 20;
/// How long the engine may take to answer a logs request.
const HEAD_TIMEOUT: Duration = Duration::from_secs(120);

struct LinesState {
    conn: Box<dyn LogConn>,
    /// Bytes read and not yet taken apart, from `pos` on.
    buf: Vec<u8>,
    pos: usize,
    splitter: LineSplitter,
    ready: VecDeque<LogLine>,
    done: bool,
}

impl LinesState {
    /// Takes every complete frame out of the buffer.
    fn split_frames(&mut self) -> Result<(), RuntimeError> {
        while self.buf.len() - self.pos >= 8 {
            let head = &self.buf[self.pos..self.pos + 8];
            let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
            if len > MAX_FRAME {
                return Err(RuntimeError::Other(format!(
                    "read logs: a frame of {len} bytes: the engine's stream is corrupt"
                )));
            }
            if self.buf.len() - self.pos < 8 + len {
                break;
            }
            let stream = match head[0] {
                1 => Some(LogStream::Stdout),
                2 => Some(LogStream::Stderr),
                _ => None, // stdin: never in a log
            };
            let payload = &self.buf[self.pos + 8..self.pos + 8 + len];
            if let Some(stream) = stream {
                self.splitter.push(stream, payload, &mut self.ready);
            }
            self.pos += 8 + len;
        }
        if self.pos > 0 && (self.pos == self.buf.len() || self.pos >= READ_CHUNK) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        Ok(())
    }
}

impl DockerRuntime {
    /// Sends one GET over a connection of its own (HTTP/1.0: the body is
    /// not chunked and ends when the connection does) and reads the head.
    /// Returns the connection and the body bytes read with the head, or
    /// the engine's error.
    async fn open_logs(
        &self,
        id: &SandboxId,
        uri: &str,
    ) -> RuntimeResult<(Box<dyn LogConn>, Vec<u8>)> {
        let unreachable = |e: std::io::Error| {
            self.unavailable(
                &e.to_string(),
                e.kind() == std::io::ErrorKind::PermissionDenied,
            )
        };
        let mut conn: Box<dyn LogConn> = match &self.endpoint {
            Endpoint::Unix(socket) => Box::new(
                tokio::net::UnixStream::connect(socket)
                    .await
                    .map_err(unreachable)?,
            ),
            Endpoint::Tcp(addr) => Box::new(
                tokio::net::TcpStream::connect(addr)
                    .await
                    .map_err(unreachable)?,
            ),
        };
        let request = format!("GET {uri} HTTP/1.0\r\nHost: docker\r\n\r\n");
        conn.write_all(request.as_bytes())
            .await
            .map_err(|e| RuntimeError::Other(format!("read logs: {e}")))?;
        let mut buf = vec![0u8; READ_CHUNK];
        let mut have = 0;
        let head_end = loop {
            let n = engine_answer("read logs", HEAD_TIMEOUT, conn.read(&mut buf[have..])).await?;
            if n == 0 {
                return Err(RuntimeError::Other(
                    "read logs: the engine closed the connection without an answer".into(),
                ));
            }
            have += n;
            if let Some(i) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if have == buf.len() {
                return Err(RuntimeError::Other(
                    "read logs: the engine's answer has no end of headers".into(),
                ));
            }
        };
        let status = std::str::from_utf8(&buf[..head_end])
            .ok()
            .and_then(|h| h.split_whitespace().nth(1))
            .and_then(|code| code.parse::<u16>().ok())
            .unwrap_or(0);
        if status != 200 {
            // The error body is a small JSON document: read it whole.
            let mut body = buf[head_end..have].to_vec();
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                (&mut conn).take(64 * 1024).read_to_end(&mut body),
            )
            .await;
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_owned());
            return Err(match status {
                404 => RuntimeError::NotFound(format!("no container for sandbox {id}: {message}")),
                _ => RuntimeError::Other(format!(
                    "read logs: the engine answered {status}: {message}"
                )),
            });
        }
        buf.truncate(have);
        buf.drain(..head_end);
        Ok((conn, buf))
    }

    /// [`crate::Runtime::logs`] for Docker.
    ///
    /// The logs request is read straight off its own connection, 64 KiB at
    /// a time, in the task that consumes the lines: through the HTTP client
    /// every few frames crossed to another task and thread, which capped a
    /// log read at a third of what the engine delivers (stockade-bench).
    pub(crate) async fn logs_lines(
        &self,
        id: &SandboxId,
        options: LogsOptions,
    ) -> RuntimeResult<LogLines> {
        let docker = self.client().await?;
        let name = container_name(id);
        // The log stream reports a missing container only as its first item,
        // which may never come when following: ask first.
        self.inspect_existing(&docker, id).await?;
        let version = docker.client_version();
        let uri = format!(
            "/v{}.{}/containers/{name}/logs?stdout=1&stderr=1&timestamps=1&follow={}&since={}&tail={}",
            version.major_version,
            version.minor_version,
            u8::from(options.follow),
            options.since.map_or(0, |t| t.timestamp().max(0)),
            options
                .tail
                .map_or_else(|| "all".to_owned(), |n| n.to_string()),
        );
        let (conn, buf) = self.open_logs(id, &uri).await?;
        let state = LinesState {
            conn,
            buf,
            pos: 0,
            splitter: LineSplitter::new(MAX_LOG_LINE_BYTES),
            ready: VecDeque::new(),
            done: false,
        };
        Ok(stream::unfold(state, |mut st| async move {
            loop {
                if let Some(line) = st.ready.pop_front() {
                    return Some((Ok(line), st));
                }
                if st.done {
                    return None;
                }
                if let Err(e) = st.split_frames() {
                    st.done = true;
                    return Some((Err(e), st));
                }
                if !st.ready.is_empty() {
                    continue;
                }
                // Into the spare capacity: nothing is zeroed per read.
                st.buf.reserve(READ_CHUNK);
                match st.conn.read_buf(&mut st.buf).await {
                    Ok(0) => {
                        st.done = true;
                        if st.buf.len() > st.pos {
                            return Some((
                                Err(RuntimeError::Other(
                                    "read logs: the engine's stream ended inside a frame".into(),
                                )),
                                st,
                            ));
                        }
                        st.splitter.finish(&mut st.ready);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        st.done = true;
                        return Some((Err(RuntimeError::Other(format!("read logs: {e}"))), st));
                    }
                }
            }
        })
        .boxed())
    }
}

#[async_trait]
impl Logs for DockerRuntime {
    #[tracing::instrument(skip_all, fields(sandbox.id = %id))]
    async fn logs(&self, id: &SandboxId, options: LogsOptions) -> RuntimeResult<LogLines> {
        self.logs_lines(id, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::tests::{frame, texts, T1, T2};

    fn engine_frame(stream: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![stream, 0, 0, 0];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn lines_state() -> LinesState {
        let (conn, _) = tokio::io::duplex(64);
        LinesState {
            conn: Box::new(conn),
            buf: Vec::new(),
            pos: 0,
            splitter: LineSplitter::new(1024),
            ready: VecDeque::new(),
            done: false,
        }
    }

    #[tokio::test]
    async fn engine_frames_are_taken_apart_however_the_reads_cut_them() {
        let mut body = Vec::new();
        body.extend(engine_frame(1, &frame(T1, b"one\n")));
        body.extend(engine_frame(0, b"stdin is ignored"));
        body.extend(engine_frame(2, &frame(T2, b"two\nthr")));
        body.extend(engine_frame(1, &frame(T2, b"out\n")));
        body.extend(engine_frame(2, &frame(T2, b"ee\n")));
        for step in [1, 3, 7, 8, 9, 64, body.len()] {
            let mut st = lines_state();
            for chunk in body.chunks(step) {
                st.buf.extend_from_slice(chunk);
                st.split_frames().unwrap();
            }
            assert_eq!(st.buf.len(), st.pos, "step {step}: a frame was left over");
            let got: Vec<_> = st.ready.drain(..).collect();
            assert_eq!(
                texts(&got),
                [
                    ("stdout", "one"),
                    ("stderr", "two"),
                    ("stdout", "out"),
                    ("stderr", "three")
                ],
                "step {step}"
            );
        }
        let mut st = lines_state();
        st.buf.extend_from_slice(&[1, 0, 0, 0, 0xff, 0, 0, 0]);
        assert!(st
            .split_frames()
            .unwrap_err()
            .to_string()
            .contains("corrupt"));
    }
}
