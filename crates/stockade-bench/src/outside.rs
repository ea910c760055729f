//! "Outside" hosts for the egress scenarios: network namespaces on a Linux
//! bridge of the benchmark's own (`stkbench0`, 10.251.71.0/24; the host is
//! .1), routed by the host, each running `outside_hosts.py` (DNS and HTTP
//! servers). Sandboxes reach neither other Docker networks nor the host, so
//! an outside host must sit behind a bridge that is neither. Everything is
//! removed on drop (also on a panic or an interrupted run) and, at start,
//! whatever a killed earlier run left.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};

/// The servers of an outside host. The egress tests' script, shared rather
/// than copied so that the benchmark and the tests exercise the very same
/// DNS and HTTP servers (and a fix to one reaches both).
const SCRIPT: &str = include_str!("../../stockade-server/tests/api/outside_hosts.py");

/// The bridge; its namespaces are `stkbench0-N`, their host ends `stkbench0vN`.
pub const BRIDGE: &str = "stkbench0";
/// The third octet of 10.251.X.0/24 (the egress tests use 61).
pub const SUBNET: u8 = 71;
/// Host numbers an earlier run may have used (cleaned up at start).
const HOSTS: std::ops::RangeInclusive<u8> = 2..=9;
/// Holds the pid of the run that owns the bridge, so that a second run at
/// the same time does not tear down the first's hosts.
const OWNER_FILE: &str = "stockade-bench-egress.pid";

fn owner_file() -> PathBuf {
    std::env::temp_dir().join(OWNER_FILE)
}

/// Why this machine cannot make outside hosts, or `None` when it can.
pub fn unavailable() -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        return Some("the outside hosts need root (network namespaces and a bridge)".into());
    }
    if !ip(&["-V"]) {
        return Some("the `ip` command (iproute2) is missing".into());
    }
    let python = Command::new("python3")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        return Some("`python3` is missing (it runs the outside hosts' servers)".into());
    }
    if let Some(pid) = live_owner() {
        return Some(format!(
            "another stockade-bench run (pid {pid}) is using the outside hosts on {BRIDGE}"
        ));
    }
    None
}

/// The pid in the owner file, when it is another live `stockade-bench`.
fn live_owner() -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(owner_file())
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if pid == std::process::id() {
        return None;
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    comm.trim().starts_with("stockade-bench").then_some(pid)
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ip_ok(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("could not run `ip`")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn namespace(n: u8) -> String {
    format!("{BRIDGE}-{n}")
}

/// Removes the bridge and the namespaces, ending the processes still in them
/// (a killed earlier run's servers).
fn remove_all() {
    for n in HOSTS {
        let ns = namespace(n);
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill")
                    .args(["-KILL", pid])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = ip(&["netns", "del", &ns]);
    }
    let _ = ip(&["link", "del", BRIDGE]);
}

/// The outside hosts of one run.
pub struct Outside {
    children: Vec<Child>,
    _dir: tempfile::TempDir,
}

impl Outside {
    /// Makes the bridge and one namespace per host `(n, servers)` at
    /// 10.251.71.n, each running `outside_hosts.py` with `servers` as its
    /// arguments, and waits until every server listens. Call
    /// [`unavailable`] first.
    pub fn start(hosts: &[(u8, Vec<String>)]) -> anyhow::Result<Self> {
        remove_all();
        std::fs::write(owner_file(), std::process::id().to_string())
            .context("could not write the owner file of the outside hosts")?;
        let dir = tempfile::tempdir().context("could not create a temporary directory")?;
        let script = dir.path().join("outside_hosts.py");
        std::fs::write(&script, SCRIPT).context("could not write outside_hosts.py")?;
        // From here on, drop cleans up whatever was made.
        let mut outside = Self {
            children: Vec::new(),
            _dir: dir,
        };
        ip_ok(&["link", "add", BRIDGE, "type", "bridge"])?;
        ip_ok(&["addr", "add", &format!("{}/24", addr(1)), "dev", BRIDGE])?;
        ip_ok(&["link", "set", BRIDGE, "up"])?;
        for (n, servers) in hosts {
            if !HOSTS.contains(n) {
                bail!("outside host number {n} is outside {HOSTS:?}");
            }
            outside.host(*n, servers, &script)?;
        }
        Ok(outside)
    }

    fn host(&mut self, n: u8, servers: &[String], script: &Path) -> anyhow::Result<()> {
        let ns = namespace(n);
        let veth = format!("{BRIDGE}v{n}");
        ip_ok(&["netns", "add", &ns])?;
        ip_ok(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ])?;
        ip_ok(&["link", "set", &veth, "master", BRIDGE, "up"])?;
        ip_ok(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}/24", addr(n)),
            "dev",
            "eth0",
        ])?;
        ip_ok(&["-n", &ns, "link", "set", "eth0", "up"])?;
        ip_ok(&["-n", &ns, "link", "set", "lo", "up"])?;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns, "python3"])
            .arg(script)
            .args(servers)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("could not start python3 in the namespace")?;
        let stdout = child.stdout.take();
        self.children.push(child);
        let mut line = String::new();
        if let Some(out) = stdout {
            std::io::BufReader::new(out)
                .read_line(&mut line)
                .context("outside host: reading its first line")?;
        }
        if line.trim() != "ready" {
            bail!("outside host {n} did not start (it said {line:?})");
        }
        Ok(())
    }
}

/// The address of outside host `n` (1: the host's end of the bridge).
pub fn addr(n: u8) -> String {
    format!("10.251.{SUBNET}.{n}")
}

impl Drop for Outside {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        remove_all();
        if std::fs::read_to_string(owner_file())
            .is_ok_and(|p| p.trim() == std::process::id().to_string())
        {
            let _ = std::fs::remove_file(owner_file());
        }
    }
}
