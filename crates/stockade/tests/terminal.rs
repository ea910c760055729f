//! `stockade shell`, `stockade exec -it` and `stockade files` as a person
//! uses them: the binary runs in a pseudo-terminal (under a `/bin/sh` that
//! prints `stty -g` before and after), keystrokes are typed into it and the
//! screen is read back. Checked: the echo and the output of a typed
//! command, `cd` sticking, the remote size following a resize of the local
//! terminal, Ctrl-C stopping a remote `sleep`, the remote exit code as the
//! CLI's, SIGTERM and SIGINT ending a session, and the local terminal's
//! settings restored every time; `-t` without a terminal is refused.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod support;
use support::{instance_of, lines_of, server_cmd, shut_down, spawn_piped};

const ADMIN_TOKEN: &str = "stk_terminal_tests_admin_token_0001";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_stockade")
}

/// `stockade server` on a fresh data directory; on drop its sandboxes are
/// removed, then the server, then whatever its instance left in Docker.
struct Server {
    child: Child,
    url: String,
    instance: std::cell::RefCell<Option<String>>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let instance = self.instance.borrow().clone();
        let token = Some(ADMIN_TOKEN);
        shut_down(
            &mut self.child,
            &self.url,
            token,
            instance.as_deref(),
            false,
        );
    }
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let (child, stdout) = spawn_piped(&mut server_cmd(dir.path(), ADMIN_TOKEN, &[], &[]));
        let rx = lines_of(stdout);
        let mut server = Server {
            child,
            url: String::new(),
            instance: std::cell::RefCell::new(None),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.url.is_empty() {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the server starts and says where it listens");
            if let Some(rest) = line.split(" listening on ").nth(1) {
                server.url = rest.trim().to_owned();
            }
        }
        server
    }

    fn cli(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .env("STOCKADE_URL", &self.url)
            .env("STOCKADE_TOKEN", ADMIN_TOKEN);
        cmd
    }

    /// Runs the CLI with `args`: its stdout; the test fails if it does.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A server with one sandbox, `name`.
    fn with_sandbox(name: &str) -> Server {
        let server = Server::start();
        server.create(name);
        server
    }

    /// Creates a sandbox and learns this server's instance from it.
    fn create(&self, name: &str) -> String {
        let out = self.ok(&["create", "--name", name, "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let id = v["id"].as_str().unwrap().to_owned();
        if let Some(instance) = instance_of(&id) {
            *self.instance.borrow_mut() = Some(instance);
        }
        id
    }
}

/// A shell script running in a fresh pseudo-terminal, as if typed into a
/// terminal emulator: what it prints is read back, keys are typed into it.
struct Session {
    pty: Arc<pty_process::blocking::Pty>,
    child: Child,
    output: Receiver<Vec<u8>>,
    seen: String,
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Session {
    /// Runs `script` with `/bin/sh` on a `rows`×`cols` terminal; `$STOCKADE`
    /// is the binary, pointed at `server`.
    fn spawn(server: &Server, script: &str, rows: u16, cols: u16) -> Session {
        let (pty, pts) = pty_process::blocking::open().unwrap();
        pty.resize(pty_process::Size::new(rows, cols)).unwrap();
        let child = pty_process::blocking::Command::new("/bin/sh")
            .args(["-c", script])
            .env("STOCKADE", bin())
            .env("STOCKADE_URL", &server.url)
            .env("STOCKADE_TOKEN", ADMIN_TOKEN)
            .env("TERM", "xterm")
            .spawn(pts)
            .unwrap();
        let pty = Arc::new(pty);
        let reader = pty.clone();
        let (tx, output) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once nothing holds the terminal any more.
            while let Ok(n) = (&*reader).read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Session {
            pty,
            child,
            output,
            seen: String::new(),
        }
    }

    fn type_keys(&self, keys: &str) {
        (&*self.pty).write_all(keys.as_bytes()).unwrap();
    }

    /// Types `keys`, then waits for `needle` on the screen.
    fn type_until(&mut self, keys: &str, needle: &str) {
        self.type_keys(keys);
        self.expect(needle);
    }

    /// Fails the test, saying `what`, unless the screen so far shows `text`.
    fn shows(&self, text: &str, what: &str) {
        assert!(self.seen.contains(text), "{what}:\n{}", self.seen);
    }

    /// Reads until the screen so far contains `needle`; false after `limit`.
    fn wait_for(&mut self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.seen.contains(needle) {
            match self
                .output
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(bytes) => self.seen.push_str(&String::from_utf8_lossy(&bytes)),
                Err(RecvTimeoutError::Timeout) => return false,
                Err(RecvTimeoutError::Disconnected) => {
                    return self.seen.contains(needle);
                }
            }
        }
        true
    }

    /// Like `wait_for`, failing the test with the screen after 20 s.
    fn expect(&mut self, needle: &str) {
        if !self.wait_for(needle, Duration::from_secs(20)) {
            panic!("waited for {needle:?}; the screen so far:\n{}", self.seen);
        }
    }

    /// The line printed right after the line holding `marker`.
    fn line_after(&self, marker: &str) -> String {
        let mut lines = self.seen.lines().map(|l| l.trim_end_matches('\r'));
        lines.by_ref().find(|l| l.contains(marker));
        lines.next().unwrap_or_default().to_owned()
    }

    /// The line printed right before the line holding `marker`.
    fn line_before(&self, marker: &str) -> String {
        let lines: Vec<&str> = self
            .seen
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .collect();
        let at = lines.iter().position(|l| l.contains(marker)).unwrap();
        lines[at.saturating_sub(1)].to_owned()
    }

    /// Waits (bounded) for the outer shell to end.
    fn finish(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the session did not end");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the framed command to end: it exited with `code` and the
    /// terminal's settings are as before it; `what` names the case.
    fn ended_with(&mut self, code: i32, what: &str) {
        self.expect("==end");
        self.finish();
        let seen = &self.seen;
        assert!(seen.contains(&format!("==exit:{code}")), "{what}:\n{seen}");
        assert_eq!(
            self.line_before("==start"),
            self.line_after("==exit:"),
            "{what}: the terminal's settings were not restored:\n{seen}"
        );
    }

    /// The `stockade` process the outer shell runs.
    fn stockade_pid(&self) -> u32 {
        let parent = self.child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                    continue;
                };
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    continue;
                };
                // pid (comm) state ppid …
                let Some((comm, rest)) = stat.split_once(") ") else {
                    continue;
                };
                let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
                if ppid == Some(parent) && comm.ends_with("(stockade") {
                    return pid;
                }
            }
            assert!(Instant::now() < deadline, "no stockade under the shell");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The outer script: the terminal's settings before, the command, its exit
/// code, the settings after.
fn framed(command: &str) -> String {
    format!("stty -g; echo '=''=start'; {command}; echo \"==exit:$?\"; stty -g; echo '=''=end'")
}

/// Waits for the remote shell's first prompt (any output after the start).
fn wait_for_prompt(s: &mut Session) {
    s.expect("==start");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let after = s.seen.split("==start").nth(1).unwrap_or_default();
        if !after.trim().is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "no prompt:\n{}", s.seen);
        s.wait_for("\u{0}never", Duration::from_millis(100));
    }
}

#[test]
fn shell_and_exec_it_are_real_terminals_and_the_local_one_is_restored() {
    let server = Server::with_sandbox("tty");
    for command in [
        "\"$STOCKADE\" shell tty",
        "\"$STOCKADE\" exec -it tty -- sh",
    ] {
        let mut s = Session::spawn(&server, &framed(command), 30, 100);
        wait_for_prompt(&mut s);

        // Typed keys come back as the remote PTY's echo, then the output.
        s.type_until("cd /tmp && echo marker-$((6*7))\r", "marker-42");
        let no_echo = format!("{command}: no echo of the typed command");
        s.shows("echo marker-$((6*7))", &no_echo);
        s.type_until("echo \"dir=$(pwd)\"; stty size\r", "30 100");
        s.shows("dir=/tmp", &format!("{command}: cd did not stick"));

        // Resizing the local terminal resizes the remote one.
        s.pty.resize(pty_process::Size::new(40, 120)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            s.type_keys("stty size\r");
            if s.wait_for("40 120", Duration::from_millis(700)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{command}: the remote size never followed:\n{}",
                s.seen
            );
        }

        // Ctrl-C reaches the remote program, not stockade.
        s.type_keys("sleep 100\r");
        std::thread::sleep(Duration::from_millis(700));
        s.type_keys("\x03");
        s.type_until("echo still-$((1+1))\r", "still-2");

        s.type_keys("exit 5\r");
        s.ended_with(5, command);
    }
}

#[test]
fn exec_it_runs_a_program_with_its_environment_directory_and_exit_code() {
    let server = Server::with_sandbox("tty-exec");
    let remote = "printf ready-%s \"$((1+1))\"; read line; \
                  echo \"got:$line:$GREETING:$(pwd)\"; stty size; exit 7";
    let command = format!(
        "\"$STOCKADE\" exec -it -w /tmp -e 'GREETING=hi there' tty-exec -- sh -c '{remote}'"
    );
    let mut s = Session::spawn(&server, &framed(&command), 24, 90);
    s.expect("ready-2");
    s.type_until("typed words\r", "got:typed words:hi there:/tmp");
    s.expect("24 90");
    s.ended_with(7, "exec -it");
}

#[test]
fn exec_t_without_i_gives_a_terminal_but_keeps_the_keys() {
    let server = Server::with_sandbox("tty-only");
    let mut s = Session::spawn(
        &server,
        &framed(
            "\"$STOCKADE\" exec -t tty-only -- sh -c \
             'test -t 0 && test -t 1 && echo on-a-tty-$((3*3)); stty size; exit 4'",
        ),
        33,
        77,
    );
    s.expect("on-a-tty-9");
    s.expect("33 77");
    s.ended_with(4, "exec -t");
}

#[test]
fn signals_end_a_session_and_restore_the_local_terminal() {
    let server = Server::with_sandbox("tty-signals");
    for (signal, code) in [("TERM", 143), ("INT", 130)] {
        let mut s = Session::spawn(&server, &framed("\"$STOCKADE\" shell tty-signals"), 24, 80);
        wait_for_prompt(&mut s);
        s.type_until("echo up-$((2+2))\r", "up-4");
        let pid = s.stockade_pid();
        let killed = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        s.ended_with(code, &format!("SIG{signal}"));
    }
}

#[test]
fn without_a_terminal_t_is_refused_and_i_forwards_stdin() {
    let server = Server::with_sandbox("no-tty");
    for args in [
        &["exec", "-it", "no-tty", "--", "sh"][..],
        &["exec", "-t", "no-tty", "--", "ls"][..],
        &["shell", "no-tty"][..],
    ] {
        let out = server.cli(args).stdin(Stdio::piped()).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("needs a terminal on stdin"), "{args:?}: {err}");
        assert_eq!(err.matches("error:").count(), 1, "{err}");
    }
    let shout = "tr a-z A-Z; exit 3";
    let mut child = server
        .cli(&["exec", "-i", "no-tty", "--", "sh", "-c", shout])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"piped text\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "PIPED TEXT\n");
    assert_eq!(out.status.code(), Some(3));
    let out = server
        .cli(&["exec", "-d", "-t", "no-tty", "--", "ls"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "-d and -t do not combine");
}

#[test]
fn files_mkdir_mv_and_watch() {
    let server = Server::with_sandbox("files");
    let made = server.ok(&["files", "mkdir", "files", "a/b", "/workspace/c"]);
    assert_eq!(made, "/workspace/a/b\n/workspace/c\n");
    let (mut watch, stdout) = spawn_piped(&mut server.cli(&["files", "watch", "files", "-r"]));
    let lines = lines_of(stdout);
    std::thread::sleep(Duration::from_millis(800));
    server.ok(&["exec", "files", "--", "sh", "-c", "echo hi > a/b/new.txt"]);
    let moved = server.ok(&["files", "mv", "files", "a/b/new.txt", "c/moved.txt"]);
    assert_eq!(moved, "/workspace/c/moved.txt\n");
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !(seen
        .iter()
        .any(|l: &String| l.starts_with("create") && l.ends_with("/workspace/a/b/new.txt"))
        && seen.iter().any(|l| l.starts_with("rename")))
    {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => seen.push(line),
            Err(e) => panic!("watch lines missing ({e}): {seen:?}"),
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let out = server
        .cli(&["files", "mv", "files", "nope", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`nope` does not exist"), "{err}");
}
