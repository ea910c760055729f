//! Pause and resume: the round trips of `POST …/pause` and `POST …/resume`
//! on a sandbox with a background process against `docker pause` and
//! `docker unpause` of a container made the same way, resume → first
//! command, and the CPU a paused sandbox uses (read from its container's
//! cgroup) against the same sandbox running a busy loop.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bollard::container::InspectContainerOptions;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::{container_of, ms, Bench};
use crate::raw::RawSandbox;
use crate::report::{Better, Row, Target};

/// The goal for a resume, in ms.
const RESUME_GOAL_MS: f64 = 50.0;
/// The background process of both sides while they are paused and resumed.
const BACKGROUND: &str = "while :; do sleep 1; done";
/// The process whose CPU a pause must stop.
const BUSY_LOOP: &str = "while :; do :; done";
/// How long each CPU figure is read over, in slices of equal length (each
/// slice one sample).
const CPU_WINDOW: Duration = Duration::from_secs(3);
const CPU_SLICES: u32 = 6;
/// Below this much CPU (ns per s) while a busy loop runs, the cgroup file
/// read is not the sandbox's: 5 % of one CPU, far below what a busy loop
/// gets even on a loaded machine.
const BUSY_AT_LEAST: f64 = 0.05e9;

/// The lifecycle and process calls of the API, over a client of its own
/// (its own keep-alive connection pool, like the shared one).
struct Calls {
    api: crate::client::Api,
}

impl Calls {
    fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        Ok(Self {
            api: crate::client::Api::new(base, token)?,
        })
    }

    /// `method` on `path` below `/api/v1` with `body`; the status and the
    /// JSON answer.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        self.api
            .answer(method, &format!("/api/v1{path}"), body)
            .await
    }

    /// `method` on `path`, which must answer `expect`.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        expect: StatusCode,
    ) -> anyhow::Result<Value> {
        let (status, v) = self.send(method.clone(), path, body).await?;
        if status != expect {
            bail!("{method} {path}: expected {expect}, got {status}: {v}");
        }
        Ok(v)
    }

    /// `POST /sandbox/{id}/{verb}`, which must leave the sandbox `status`.
    async fn lifecycle(&self, id: &str, verb: &str, status: &str) -> anyhow::Result<()> {
        let v = self
            .call(
                Method::POST,
                &format!("/sandbox/{id}/{verb}"),
                None,
                StatusCode::OK,
            )
            .await?;
        if v["status"] != status {
            bail!(
                "{verb} of {id} answered status {} instead of {status}",
                v["status"]
            );
        }
        Ok(())
    }

    async fn pause(&self, id: &str) -> anyhow::Result<()> {
        self.lifecycle(id, "pause", "PAUSED").await
    }

    async fn resume(&self, id: &str) -> anyhow::Result<()> {
        self.lifecycle(id, "resume", "RUNNING").await
    }

    /// Starts the shell command line `cmd` in the background; its process id.
    async fn background(&self, id: &str, cmd: &str) -> anyhow::Result<String> {
        let v = self
            .call(
                Method::POST,
                &format!("/sandbox/{id}/exec"),
                Some(json!({ "shell": cmd, "background": true })),
                StatusCode::ACCEPTED,
            )
            .await?;
        v["processId"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("background exec in {id}: no processId in {v}"))
    }

    /// The status of background process `pid` (`running`, `exited`, …).
    async fn process_status(&self, id: &str, pid: &str) -> anyhow::Result<String> {
        let v = self
            .call(
                Method::GET,
                &format!("/sandbox/{id}/processes/{pid}"),
                None,
                StatusCode::OK,
            )
            .await?;
        Ok(v["status"].as_str().unwrap_or_default().to_owned())
    }

    /// Fails unless an exec in the paused sandbox `id` is refused with
    /// `sandbox_paused` (and so never reached its frozen agent).
    async fn exec_refused(&self, id: &str) -> anyhow::Result<()> {
        let (status, v) = self
            .send(
                Method::POST,
                &format!("/sandbox/{id}/exec"),
                Some(json!({ "cmd": ["true"] })),
            )
            .await?;
        if status != StatusCode::CONFLICT || v["error"]["code"] != "sandbox_paused" {
            bail!(
                "exec in the paused sandbox {id}: expected 409 sandbox_paused, got {status}: {v}"
            );
        }
        Ok(())
    }
}

/// A file of a container's cgroup that counts its CPU time.
#[derive(Debug, Clone, PartialEq)]
enum CpuFile {
    /// cgroup v1 `cpuacct.usage`: nanoseconds.
    Usage(PathBuf),
    /// cgroup v2 `cpu.stat`: its `usage_usec` line.
    Stat(PathBuf),
}

impl CpuFile {
    /// The CPU time the cgroup has used so far, in ns.
    fn read_ns(&self) -> anyhow::Result<u64> {
        let (path, text) = match self {
            CpuFile::Usage(p) | CpuFile::Stat(p) => (
                p,
                std::fs::read_to_string(p)
                    .with_context(|| format!("could not read {}", p.display()))?,
            ),
        };
        let ns = match self {
            CpuFile::Usage(_) => text.trim().parse().ok(),
            CpuFile::Stat(_) => usage_usec(&text).map(|us| us * 1000),
        };
        ns.with_context(|| format!("{}: no CPU usage in {text:?}", path.display()))
    }

    fn path(&self) -> &std::path::Path {
        match self {
            CpuFile::Usage(p) | CpuFile::Stat(p) => p,
        }
    }
}

/// The `usage_usec` of a cgroup v2 `cpu.stat`.
fn usage_usec(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
}

/// Where the CPU time of the container `full_id` may be counted, best
/// first, from its init process's `/proc/PID/cgroup` (`proc_cgroup`): the
/// cgroup v1 `cpuacct` hierarchy (mounted alone or with `cpu`), Docker's
/// default cgroupfs place for it, then the cgroup v2 `cpu.stat`.
fn cpu_files(proc_cgroup: &str, full_id: &str) -> Vec<CpuFile> {
    let root = PathBuf::from("/sys/fs/cgroup");
    let (mut v1, mut v2) = (Vec::new(), Vec::new());
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(hierarchy), Some(controllers), Some(path)) =
            (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "cpuacct") {
            let mut mounts = vec!["cpuacct".to_owned(), controllers.to_owned()];
            mounts.extend(["cpu,cpuacct".to_owned(), "cpuacct,cpu".to_owned()]);
            for m in mounts {
                let file = CpuFile::Usage(root.join(m).join(relative).join("cpuacct.usage"));
                if !v1.contains(&file) {
                    v1.push(file);
                }
            }
        } else if hierarchy == "0" && controllers.is_empty() {
            v2.push(CpuFile::Stat(root.join(relative).join("cpu.stat")));
        }
    }
    v1.push(CpuFile::Usage(
        root.join("cpuacct/docker")
            .join(full_id)
            .join("cpuacct.usage"),
    ));
    v1.extend(v2);
    v1
}

/// The CPU the cgroup of `file` uses, in ns per second: one sample per
/// slice of [`CPU_WINDOW`].
async fn cpu_rate(file: &CpuFile) -> anyhow::Result<Vec<f64>> {
    let slice = CPU_WINDOW / CPU_SLICES;
    let mut last = (Instant::now(), file.read_ns()?);
    let mut samples = Vec::new();
    for _ in 0..CPU_SLICES {
        tokio::time::sleep(slice).await;
        let now = (Instant::now(), file.read_ns()?);
        let used = now.1.saturating_sub(last.1) as f64;
        samples.push(used / (now.0 - last.0).as_secs_f64());
        last = now;
    }
    Ok(samples)
}

/// The samples of the scenario.
#[derive(Default)]
struct Figures {
    pause: Vec<f64>,
    raw_pause: Vec<f64>,
    resume: Vec<f64>,
    raw_resume: Vec<f64>,
    first: Vec<f64>,
    raw_first: Vec<f64>,
    /// The reason instead when the container's cgroup cannot be read here.
    cpu: Option<Result<CpuFigures, String>>,
}

/// The CPU of one sandbox in ns per s, one sample per slice.
struct CpuFigures {
    /// Running with only its background process (and its agent).
    idle: Vec<f64>,
    /// Running a busy loop as well.
    busy: Vec<f64>,
    /// Paused with the busy loop in it.
    paused: Vec<f64>,
    /// The cgroup file read.
    file: PathBuf,
}

impl Bench {
    /// The pause scenario: one sandbox and one raw container of the same
    /// image, each with a background process, paused and resumed in turns.
    pub(super) async fn pause(&mut self) -> anyhow::Result<()> {
        let app = self.app()?;
        let calls = Calls::new(&app.base, &app.token)?;
        let id = self.api.create(json!({})).await?;
        let raw = match self.raw.create().await {
            Ok(r) => r,
            Err(e) => {
                let _ = self.api.delete(&id).await;
                return Err(e);
            }
        };
        let outcome = self.pause_measure(&calls, &id, &raw).await;
        // Thawed first, in case a failure left it paused.
        let _ = self.raw.docker.unpause_container(&raw.name).await;
        let removed = self.api.delete(&id).await;
        let destroyed = self.raw.destroy(&raw).await;
        let f = outcome?;
        removed?;
        destroyed?;
        self.pause_rows(f);
        Ok(())
    }

    async fn pause_measure(
        &self,
        calls: &Calls,
        id: &str,
        raw: &RawSandbox,
    ) -> anyhow::Result<Figures> {
        let n = self.plan.creates;
        let docker = &self.raw.docker;
        let container = container_of(id)?;
        let pid = calls.background(id, BACKGROUND).await?;
        let (code, _) = self
            .raw
            .exec(
                &raw.name,
                &[
                    "/bin/sh",
                    "-c",
                    &format!("({BACKGROUND}) >/dev/null 2>&1 &"),
                ],
            )
            .await?;
        if code != 0 {
            bail!("raw: starting the background process exited {code}");
        }

        // One cycle on each side before anything is timed (connections),
        // checking that a pause really freezes the container and that the
        // API refuses to reach into it meanwhile.
        calls.pause(id).await?;
        docker
            .pause_container(&raw.name)
            .await
            .context("raw: pause")?;
        for name in [&container, &raw.name] {
            if !self.paused_in_docker(name).await? {
                bail!("container {name} is not paused in Docker after its pause");
            }
        }
        calls.exec_refused(id).await?;
        calls.resume(id).await?;
        docker
            .unpause_container(&raw.name)
            .await
            .context("raw: unpause")?;
        if self.paused_in_docker(&container).await? {
            bail!("container {container} is still paused in Docker after the resume");
        }

        let mut f = Figures::default();
        for _ in 0..n {
            let t = Instant::now();
            calls.pause(id).await?;
            f.pause.push(ms(t.elapsed()));
            let t = Instant::now();
            docker
                .pause_container(&raw.name)
                .await
                .context("raw: pause")?;
            f.raw_pause.push(ms(t.elapsed()));
            let t = Instant::now();
            calls.resume(id).await?;
            f.resume.push(ms(t.elapsed()));
            let t = Instant::now();
            docker
                .unpause_container(&raw.name)
                .await
                .context("raw: unpause")?;
            f.raw_resume.push(ms(t.elapsed()));
        }

        // Resume → the answer of a trivial command; raw: unpause, then
        // `docker exec true`.
        for _ in 0..n {
            calls.pause(id).await?;
            let t = Instant::now();
            calls.resume(id).await?;
            let (code, _) = self.api.exec(id, &["true"]).await?;
            f.first.push(ms(t.elapsed()));
            if code != 0 {
                bail!("exec true after a resume of {id}: exit {code}");
            }
            docker
                .pause_container(&raw.name)
                .await
                .context("raw: pause")?;
            let t = Instant::now();
            docker
                .unpause_container(&raw.name)
                .await
                .context("raw: unpause")?;
            let (code, _) = self.raw.exec(&raw.name, &["true"]).await?;
            f.raw_first.push(ms(t.elapsed()));
            if code != 0 {
                bail!("raw: exec true after an unpause: exit {code}");
            }
        }
        let status = calls.process_status(id, &pid).await?;
        if status != "running" {
            bail!(
                "the background process {pid} of {id} is {status:?} after {} pauses",
                2 * n + 1
            );
        }

        f.cpu = Some(self.cpu_figures(calls, id, &container).await?);
        Ok(f)
    }

    /// Whether Docker shows the container `name` paused.
    async fn paused_in_docker(&self, name: &str) -> anyhow::Result<bool> {
        let c = self
            .raw
            .docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
            .with_context(|| format!("inspect {name}"))?;
        Ok(c.state.and_then(|s| s.paused).unwrap_or(false))
    }

    /// The CPU of sandbox `id` (container `container`) running idle,
    /// running a busy loop, and paused with the loop in it; the reason
    /// instead when its cgroup cannot be read from here.
    async fn cpu_figures(
        &self,
        calls: &Calls,
        id: &str,
        container: &str,
    ) -> anyhow::Result<Result<CpuFigures, String>> {
        if !self.docker_host.starts_with("unix://") {
            return Ok(Err(format!(
                "the Docker engine ({}) is not on this machine, so its cgroups cannot be read",
                self.docker_host
            )));
        }
        let c = self
            .raw
            .docker
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .with_context(|| format!("inspect {container}"))?;
        let full_id = c.id.unwrap_or_default();
        let init = c.state.and_then(|s| s.pid).unwrap_or_default();
        let proc_cgroup =
            std::fs::read_to_string(format!("/proc/{init}/cgroup")).unwrap_or_default();
        let Some(file) = cpu_files(&proc_cgroup, &full_id)
            .into_iter()
            .find(|f| f.read_ns().is_ok())
        else {
            return Ok(Err(format!(
                "no CPU accounting file of container {full_id} was found under /sys/fs/cgroup"
            )));
        };
        let idle = cpu_rate(&file).await?;
        calls.background(id, BUSY_LOOP).await?;
        let busy = cpu_rate(&file).await?;
        let busy_p50 = crate::report::summarize(&busy).map_or(0.0, |s| s.p50);
        if busy_p50 < BUSY_AT_LEAST {
            bail!(
                "{} counted {busy_p50:.0} ns/s while a busy loop ran in sandbox {id}: \
                 it is not that sandbox's CPU",
                file.path().display()
            );
        }
        calls.pause(id).await?;
        let paused = cpu_rate(&file).await?;
        Ok(Ok(CpuFigures {
            idle,
            busy,
            paused,
            file: file.path().to_owned(),
        }))
    }

    fn pause_rows(&mut self, f: Figures) {
        let n = f.pause.len();
        self.rows.push(
            Row::new(
                "pause",
                "Pause (`POST /pause`) vs `docker pause`, a background process running",
                "ms",
                Better::Lower,
                &f.pause,
                Some(&f.raw_pause),
                Target::None,
            )
            .note(format!(
                "{n} cycles, taking turns (Stockade pause, raw pause, Stockade resume, raw \
                 resume); both containers run `{BACKGROUND}` in the background and the same \
                 image and settings. Stockade records the operation, freezes the container \
                 (`docker pause`) and records PAUSED; raw: the Engine API's pause"
            )),
        );
        self.rows.push(Row::new(
            "resume",
            "Resume (`POST /resume`) vs `docker unpause`",
            "ms",
            Better::Lower,
            &f.resume,
            Some(&f.raw_resume),
            Target::P50AtMost(RESUME_GOAL_MS),
        ));
        self.rows.push(
            Row::new(
                "resume_exec",
                "Resume → first command (`POST /resume`, then exec `true`)",
                "ms",
                Better::Lower,
                &f.first,
                Some(&f.raw_first),
                Target::None,
            )
            .note(
                "from the resume request to the exec's answer through the agent; raw: \
                 `docker unpause`, then `docker exec true` (create, start attached, inspect)",
            ),
        );
        match f.cpu {
            Some(Ok(CpuFigures {
                idle,
                busy,
                paused,
                file,
            })) => {
                let idle = crate::report::summarize(&idle).map_or(0.0, |s| s.mean);
                self.rows.push(
                    Row::new(
                        "pause_cpu",
                        "CPU of a PAUSED sandbox, its busy loop frozen (ns of CPU per s)",
                        "ns/s",
                        Better::Lower,
                        &paused,
                        Some(&busy),
                        Target::None,
                    )
                    .baseline("the same sandbox RUNNING the busy loop")
                    .note(format!(
                        "the container's cgroup CPU time ({}), read every {} ms over {} s each \
                         way, one sample per read; the same sandbox running only its \
                         background process and idle agent used {idle:.0} ns/s on average",
                        file.display(),
                        (CPU_WINDOW / CPU_SLICES).as_millis(),
                        CPU_WINDOW.as_secs()
                    )),
                );
            }
            Some(Err(why)) => self
                .notes
                .push(format!("A paused sandbox's CPU was not measured: {why}.")),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpuacct_hierarchy_comes_first_then_dockers_place_then_v2() {
        let proc_cgroup = "9:name=systemd:/docker/abc\n\
                           2:cpuacct:/docker/abc\n\
                           1:cpu:/docker/abc\n\
                           0::/docker/abc\n";
        let files = cpu_files(proc_cgroup, "abc");
        assert_eq!(
            files[0],
            CpuFile::Usage("/sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage".into())
        );
        assert_eq!(
            files[1],
            CpuFile::Usage("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpuacct.usage".into())
        );
        assert_eq!(
            files.last(),
            Some(&CpuFile::Stat("/sys/fs/cgroup/docker/abc/cpu.stat".into()))
        );
        // A joint mount is tried under its own name too.
        let joint = cpu_files("4:cpuacct,cpu:/system.slice/docker-abc.scope\n", "abc");
        assert!(joint.contains(&CpuFile::Usage(
            "/sys/fs/cgroup/cpuacct,cpu/system.slice/docker-abc.scope/cpuacct.usage".into()
        )));
        // Without the process's cgroups: Docker's cgroupfs place alone.
        assert_eq!(
            cpu_files("", "abc"),
            vec![CpuFile::Usage(
                "/sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage".into()
            )]
        );
    }

    #[test]
    fn cgroup_v2_usage_is_read_from_cpu_stat() {
        let stat = "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n";
        assert_eq!(usage_usec(stat), Some(1500));
        assert_eq!(usage_usec("user_usec 3\n"), None);
    }
}
