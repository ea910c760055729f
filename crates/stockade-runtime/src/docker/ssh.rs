//! Docker hosts reached over ssh (`ssh://[user@]host[:port]`), the
//! way the Docker CLI reaches them: every connection to the engine is an
//! `ssh … -- host docker system dial-stdio` whose standard input and output
//! carry the engine's API. The runtime talks to a private unix socket (in a
//! directory of mode 0700, removed on drop); each connection accepted there
//! starts one such ssh and copies bytes both ways, so the rest of the
//! runtime speaks to a unix socket as it does for a local engine.
//!
//! A `tcp://` host with TLS client certificates goes through the same kind
//! of socket: each connection there is a TLS connection of its own to the
//! engine (rustls), so the requests the runtime speaks raw (the archive
//! HEAD, logs) are encrypted like bollard's.
//!
//! ssh runs with `BatchMode=yes` (keys only, never a prompt) and a connect
//! timeout; its extra options (identity file, known hosts, …) come from
//! [`DockerConfig::ssh_options`](super::DockerConfig::ssh_options) or
//! `STOCKADE_SSH_OPTS`. When ssh fails (not installed, refused, host key
//! unknown) the connection is closed and what ssh said is kept, so the
//! runtime's error for that request says it ([`SshTunnel::last_error`]).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::process::Command;
use tokio::task::JoinHandle;

/// The environment variable with extra ssh options (split at whitespace).
pub const SSH_OPTS_ENV: &str = "STOCKADE_SSH_OPTS";
/// How long ssh may take to open its TCP connection.
const CONNECT_TIMEOUT_SECS: u64 = 10;
/// How long a finished ssh is waited for, and its last words read.
const EXIT_WAIT: Duration = Duration::from_secs(3);
/// The most of ssh's standard error kept for a message.
const STDERR_MAX: usize = 2048;

/// An ssh address that is not `ssh://[user@]host[:port]`; the message
/// quotes it and says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SshUrlError(String);

/// A tunnel's socket that could not be made or served; the message names it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TunnelError(String);

/// Where an ssh host is: `ssh://[user@]host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SshTarget {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

impl SshTarget {
    /// Parses `ssh://[user@]host[:port]` (an IPv6 address in brackets).
    pub fn parse(url: &str) -> Result<Self, SshUrlError> {
        let rest = url
            .strip_prefix("ssh://")
            .ok_or_else(|| SshUrlError(format!("'{url}' does not start with ssh://")))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('?') || rest.contains('#') {
            return Err(SshUrlError(format!(
                "'{url}': expected ssh://[user@]host[:port] without a path"
            )));
        }
        let (user, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        if let Some(u) = user {
            let ok = !u.is_empty()
                && u.len() <= 64
                && !u.starts_with('-')
                && u.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !ok {
                return Err(SshUrlError(format!(
                    "'{url}': the user must be 1 to 64 letters, digits, '.', '_', '-' (not starting with '-')"
                )));
            }
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| SshUrlError(format!("'{url}': unclosed '[' in the address")))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| {
                    SshUrlError(format!(
                        "'{url}': expected :port after the bracketed address"
                    ))
                })?),
            };
            if h.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(SshUrlError(format!(
                    "'{url}': '{h}' is not an IPv6 address"
                )));
            }
            (h, port)
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        let host_ok = !host.is_empty()
            && host.len() <= 253
            && !host.starts_with('-')
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-_:".contains(&b));
        if !host_ok {
            return Err(SshUrlError(format!(
                "'{url}': the host must be a name or an address (letters, digits, '.', '-', '_')"
            )));
        }
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                SshUrlError(format!("'{url}': the port must be 1 to 65535, not '{p}'"))
            })?),
        };
        Ok(Self {
            user: user.map(str::to_owned),
            host: host.to_owned(),
            port,
        })
    }

    /// Whether the host is this machine (the packet filter applies here).
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// The ssh command line that reaches the engine's API.
    fn command(&self, options: &[String]) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(["-o", "BatchMode=yes", "-o"])
            .arg(format!("ConnectTimeout={CONNECT_TIMEOUT_SECS}"))
            .args(options);
        if let Some(port) = self.port {
            cmd.arg("-p").arg(port.to_string());
        }
        if let Some(user) = &self.user {
            cmd.arg("-l").arg(user);
        }
        cmd.arg("--")
            .arg(&self.host)
            .args(["docker", "system", "dial-stdio"]);
        cmd
    }
}

impl std::fmt::Display for SshTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ssh://")?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// The extra ssh options: the configured ones, else `STOCKADE_SSH_OPTS`.
pub(crate) fn ssh_options(configured: Option<&[String]>) -> Vec<String> {
    match configured {
        Some(opts) => opts.to_vec(),
        None => std::env::var(SSH_OPTS_ENV)
            .map(|v| v.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default(),
    }
}

/// How a tunnel reaches the engine for each connection.
#[derive(Clone)]
pub(crate) enum Dial {
    Ssh {
        target: SshTarget,
        options: Arc<Vec<String>>,
    },
    Tls {
        addr: String,
        config: Arc<rustls::ClientConfig>,
        server_name: ServerName<'static>,
    },
}

impl Dial {
    /// The engine's address, for messages.
    pub fn address(&self) -> String {
        match self {
            Self::Ssh { target, .. } => target.to_string(),
            Self::Tls { addr, .. } => format!("tcp://{addr}"),
        }
    }

    /// Whether the engine is on this machine.
    pub fn is_loopback(&self) -> bool {
        match self {
            Self::Ssh { target, .. } => target.is_loopback(),
            Self::Tls { server_name, .. } => match server_name {
                ServerName::DnsName(n) => n.as_ref() == "localhost",
                ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).is_loopback(),
                _ => false,
            },
        }
    }
}

/// The private socket of one ssh or TLS host and the task serving it.
pub(crate) struct SshTunnel {
    dial: Dial,
    dir: PathBuf,
    socket: PathBuf,
    /// The bound socket until the serving task takes it.
    listener: Mutex<Option<std::os::unix::net::UnixListener>>,
    task: Mutex<Option<JoinHandle<()>>>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for SshTunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshTunnel")
            .field("engine", &self.dial.address())
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

/// A directory of mode 0700 of its own under the temporary directory.
fn private_dir() -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!(
            "stockade-ssh-{}-{n}-{nanos:08x}",
            std::process::id()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

impl SshTunnel {
    /// Makes the private directory and binds its socket (no ssh yet: the
    /// first connection starts the first one).
    pub fn new(dial: Dial) -> Result<Self, TunnelError> {
        let target = dial.address();
        let dir = private_dir().map_err(|e| {
            TunnelError(format!(
                "could not make a private directory for {target}: {e}"
            ))
        })?;
        let socket = dir.join("docker.sock");
        let listener = match bind(&socket) {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(TunnelError(format!(
                    "could not listen on {} for {target}: {e}",
                    socket.display()
                )));
            }
        };
        Ok(Self {
            dial,
            dir,
            socket,
            listener: Mutex::new(Some(listener)),
            task: Mutex::new(None),
            last_error: Arc::default(),
        })
    }

    /// The socket the runtime connects to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn dial(&self) -> &Dial {
        &self.dial
    }

    /// What ssh said when it last failed, if it has not worked since.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Starts serving the socket on the current tokio runtime unless a
    /// task already does (again after the runtime that ran it ended).
    pub fn ensure_serving(&self) -> Result<(), TunnelError> {
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if task.as_ref().is_some_and(|t| !t.is_finished()) {
            return Ok(());
        }
        let taken = self
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let std_listener = match taken {
            Some(l) => l,
            None => {
                let _ = std::fs::remove_file(&self.socket);
                bind(&self.socket).map_err(|e| {
                    TunnelError(format!(
                        "could not listen on {}: {e}",
                        self.socket.display()
                    ))
                })?
            }
        };
        let listener = UnixListener::from_std(std_listener)
            .map_err(|e| TunnelError(format!("could not serve {}: {e}", self.socket.display())))?;
        let dial = self.dial.clone();
        let last_error = self.last_error.clone();
        *task = Some(tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((conn, _)) => match &dial {
                        Dial::Ssh { target, options } => {
                            tokio::spawn(relay(
                                conn,
                                target.clone(),
                                options.clone(),
                                last_error.clone(),
                            ));
                        }
                        Dial::Tls {
                            addr,
                            config,
                            server_name,
                        } => {
                            tokio::spawn(relay_tls(
                                conn,
                                addr.clone(),
                                tokio_rustls::TlsConnector::from(config.clone()),
                                server_name.clone(),
                                last_error.clone(),
                            ));
                        }
                    },
                    Err(e) => {
                        tracing::warn!(engine = %dial.address(), error = %e, "tunnel: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }));
        Ok(())
    }
}

impl Drop for SshTunnel {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn bind(socket: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    let l = std::os::unix::net::UnixListener::bind(socket)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

fn set_error(slot: &Mutex<Option<String>>, value: Option<String>) {
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = value;
}

/// How long a TLS engine may take to accept a connection and finish the
/// handshake.
const TLS_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection to a TLS engine: TCP, the handshake, then bytes copied
/// both ways. Why it failed is kept before the connection is closed.
async fn relay_tls(
    mut conn: UnixStream,
    addr: String,
    connector: tokio_rustls::TlsConnector,
    server_name: ServerName<'static>,
    last_error: Arc<Mutex<Option<String>>>,
) {
    let connect = async {
        let tcp = TcpStream::connect(&addr)
            .await
            .map_err(|e| format!("TLS connection to tcp://{addr} failed: {e}"))?;
        connector
            .connect(server_name, tcp)
            .await
            .map_err(|e| format!("TLS handshake with tcp://{addr} failed: {e}"))
    };
    let mut tls = match tokio::time::timeout(TLS_CONNECT_TIMEOUT, connect).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(why)) => {
            set_error(&last_error, Some(why));
            return;
        }
        Err(_) => {
            set_error(
                &last_error,
                Some(format!(
                    "tcp://{addr} did not finish the TLS handshake within {} s",
                    TLS_CONNECT_TIMEOUT.as_secs()
                )),
            );
            return;
        }
    };
    match tokio::io::copy_bidirectional(&mut conn, &mut tls).await {
        Ok((_, from_engine)) if from_engine > 0 => set_error(&last_error, None),
        Ok(_) => {}
        // The engine checks the client certificate after the handshake: a
        // refusal arrives as the first read's error.
        Err(e) => set_error(
            &last_error,
            Some(format!(
                "the engine at tcp://{addr} refused the TLS connection (is the client \
                 certificate signed by the engine's CA?): {e}"
            )),
        ),
    }
}

/// One connection: an ssh of its own, bytes copied both ways until the
/// engine's side ends. What ssh said on failure is kept before the
/// connection is closed, so the request that fails can say it.
async fn relay(
    conn: UnixStream,
    target: SshTarget,
    options: Arc<Vec<String>>,
    last_error: Arc<Mutex<Option<String>>>,
) {
    let mut child = match target
        .command(&options)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                "ssh is not installed on this machine (install openssh-client)".to_owned()
            } else {
                format!("could not run ssh: {e}")
            };
            set_error(&last_error, Some(why));
            return;
        }
    };
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        set_error(&last_error, Some("ssh started without its pipes".into()));
        return;
    };
    // What ssh says, kept as it comes (a multiplexing master left in the
    // background may hold the pipe open: never wait for its end).
    let said = Arc::new(Mutex::new(Vec::<u8>::new()));
    let reader = {
        let said = said.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut s = said.lock().unwrap_or_else(|p| p.into_inner());
                let room = STDERR_MAX.saturating_sub(s.len());
                s.extend_from_slice(&buf[..n.min(room)]);
            }
        })
    };
    let (mut from_client, mut to_client) = conn.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_client, &mut stdin).await;
        let _ = stdin.shutdown().await;
    });
    let down = tokio::io::copy(&mut stdout, &mut to_client).await;
    let got_answer = matches!(down, Ok(n) if n > 0);
    let status = match tokio::time::timeout(EXIT_WAIT, child.wait()).await {
        Ok(Ok(status)) => Some(status),
        _ => {
            let _ = child.kill().await;
            None
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(300), reader).await;
    let said = String::from_utf8_lossy(&said.lock().unwrap_or_else(|p| p.into_inner()))
        .trim()
        .to_owned();
    if got_answer {
        set_error(&last_error, None);
    } else if status.is_some_and(|s| !s.success()) || !said.is_empty() {
        let code = status
            .and_then(|s| s.code())
            .map_or_else(|| "no exit status".to_owned(), |c| format!("exit {c}"));
        let said = if said.is_empty() {
            "nothing on its standard error".to_owned()
        } else {
            said
        };
        set_error(
            &last_error,
            Some(format!("ssh to {target} failed ({code}): {said}")),
        );
    }
    let _ = to_client.shutdown().await;
    up.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        let t = SshTarget::parse("ssh://root@127.0.0.1:2222").unwrap();
        assert_eq!(t.user.as_deref(), Some("root"));
        assert_eq!(t.host, "127.0.0.1");
        assert_eq!(t.port, Some(2222));
        assert!(t.is_loopback());
        assert_eq!(t.to_string(), "ssh://root@127.0.0.1:2222");
        let t = SshTarget::parse("ssh://docker-1.example.com").unwrap();
        assert_eq!((t.user.as_deref(), t.port), (None, None));
        assert!(!t.is_loopback());
        let t = SshTarget::parse("ssh://me@[::1]:22/").unwrap();
        assert_eq!(t.host, "::1");
        assert_eq!(t.to_string(), "ssh://me@[::1]:22");
        for bad in [
            "ssh://",
            "ssh://-oProxyCommand=x",
            "ssh://-l@host",
            "ssh://host:0",
            "ssh://host:70000",
            "ssh://host:abc",
            "ssh://host/path",
            "ssh://we ird@host",
            "ssh://[::1",
            "ssh://[nope]:22",
            "tcp://host",
        ] {
            assert!(SshTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_command_puts_options_before_the_host() {
        let t = SshTarget::parse("ssh://root@example.org:2200").unwrap();
        let cmd = t.command(&["-i".into(), "/k".into()]);
        let args: Vec<String> = cmd
            .as_std()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
                "-i",
                "/k",
                "-p",
                "2200",
                "-l",
                "root",
                "--",
                "example.org",
                "docker",
                "system",
                "dial-stdio"
            ]
        );
    }

    #[test]
    fn the_private_directory_is_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let t = SshTunnel::new(Dial::Ssh {
            target: SshTarget::parse("ssh://h").unwrap(),
            options: Arc::default(),
        })
        .unwrap();
        let dir = t.socket().parent().unwrap().to_owned();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(t.socket().exists());
        drop(t);
        assert!(!dir.exists());
    }
}
