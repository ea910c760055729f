//! The agent's life as PID 1: reaper first, listeners, the main process
//! with its env file, signals forwarded to it, and its exit status as ours.

use crate::config::{Config, TOKEN_ENV, USER_ENV, WORKDIR_ENV};
use crate::envfile;
use crate::procs::Processes;
use crate::reaper::{ExitStatus, Reaper};
use crate::server::{self, AgentState, Defaults};
use crate::users::Accounts;
use std::path::Path;
use tokio::signal::unix::{signal, SignalKind};

fn log(msg: impl std::fmt::Display) {
    eprintln!("stockade-agent: {msg}");
}

/// The environment of the main process: the agent's own (without the
/// token) with the env file applied.
pub fn main_env(env_file: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| !matches!(k.as_str(), TOKEN_ENV | USER_ENV | WORKDIR_ENV))
        .collect();
    if let Ok(text) = std::fs::read_to_string(env_file) {
        let (ops, errors) = envfile::parse(&text);
        for e in errors {
            log(format!("{}: {e} (skipped)", env_file.display()));
        }
        envfile::apply(&mut env, &ops);
        env.retain(|(k, _)| !matches!(k.as_str(), TOKEN_ENV | USER_ENV | WORKDIR_ENV));
    }
    env
}

/// What every started process inherits, as `docker exec` gives it: the
/// container's environment (the image's and the sandbox's variables), but
/// never the token, and not the user-specific HOME, USER, LOGNAME (set for
/// the user each process runs as).
fn inherited_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                TOKEN_ENV | USER_ENV | WORKDIR_ENV | "HOME" | "USER" | "LOGNAME"
            )
        })
        .collect()
}

/// Runs the agent until the main process exits (or, without one, until
/// SIGTERM/SIGINT, when it kills the processes it started); returns the
/// exit code.
pub async fn run(config: Config) -> i32 {
    let reaper = match Reaper::start() {
        Ok(r) => r,
        Err(e) => {
            log(format!("cannot handle SIGCHLD: {e}"));
            return 1;
        }
    };
    let me = rustix::process::getpid();
    if !me.is_init() {
        // Outside a container: orphans of our processes come back to us.
        let _ = rustix::process::set_child_subreaper(Some(me));
    }
    let volume = match &config.volume_root {
        Some(root) if !root.is_dir() => {
            log(format!(
                "the volume's directory {} ({}) is not a directory",
                root.display(),
                crate::config::VOLUME_ROOT_ENV
            ));
            return 1;
        }
        root => root.clone().map(crate::volume_fs::Volume::new),
    };
    let procs = Processes::new(reaper.clone());
    let state = AgentState::new(
        config.token.clone(),
        Accounts::default(),
        Defaults {
            user: config.user.clone(),
            workdir: config.workdir.clone(),
            env: inherited_env(),
        },
        procs.clone(),
        crate::kernel::Kernels::new(reaper.clone()),
        volume,
    );
    if let Some(addr) = config.listen {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                tokio::spawn(server::serve_tcp(l, state.clone()));
            }
            Err(e) => {
                log(format!("cannot listen on {addr}: {e}"));
                return 1;
            }
        }
    }
    if let Some(path) = &config.unix {
        let _ = std::fs::remove_file(path);
        match tokio::net::UnixListener::bind(path) {
            Ok(l) => {
                tokio::spawn(server::serve_unix(l, state.clone()));
            }
            Err(e) => {
                log(format!("cannot listen on {}: {e}", path.display()));
                return 1;
            }
        }
    }

    let mut signals = Vec::new();
    for kind in [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
        SignalKind::quit(),
        SignalKind::user_defined1(),
        SignalKind::user_defined2(),
    ] {
        match signal(kind) {
            Ok(s) => signals.push((kind, s)),
            Err(e) => {
                log(format!("cannot handle signal {}: {e}", kind.as_raw_value()));
                return 1;
            }
        }
    }

    let Some((program, args)) = config.main.split_first() else {
        // No main process: stop on SIGTERM or SIGINT.
        let [(_, term), (_, int), ..] = &mut signals[..] else {
            unreachable!("six signal streams")
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        // Outside a container nothing else would end them.
        procs.kill_all();
        state.kernels.kill_all();
        return 0;
    };

    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env_clear().envs(main_env(&config.main_env));
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            log(format!("cannot start the main process {program:?}: {e}"));
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let pid = child.id();
    let mut exit = reaper.watch(pid);
    drop(child);
    let main_pid = rustix::process::Pid::from_raw(pid as i32).expect("a child's pid is positive");

    loop {
        let forward = {
            let mut waits = Vec::new();
            for (kind, s) in signals.iter_mut() {
                let kind = *kind;
                waits.push(Box::pin(async move {
                    s.recv().await;
                    kind
                }));
            }
            futures_util::future::select_all(waits)
        };
        tokio::select! {
            status = &mut exit => {
                return status.unwrap_or(ExitStatus::Signaled(9)).shell_code();
            }
            (kind, _, _) = forward => {
                if let Some(sig) = rustix::process::Signal::from_named_raw(kind.as_raw_value()) {
                    let _ = rustix::process::kill_process(main_pid, sig);
                }
            }
        }
    }
}
