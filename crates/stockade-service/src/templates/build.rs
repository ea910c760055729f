//! One template build: a build sandbox — an ordinary sandbox of the
//! account, with the account's isolation, egress policy and quota — from
//! the base image or the deepest cached step, each remaining step through
//! its agent (`RUN` as a command, `COPY` as an unpacked archive, `ENV`,
//! `ARG`, `WORKDIR`, `USER` into the settings), an image committed after
//! each step that changes files (the cache), the start and ready commands
//! tried once, and the final image committed, stored in the object store
//! for other hosts, and recorded. Whatever fails, the build sandbox goes
//! and the build says which step failed and why.
//!
//! The cache: each step's key is the SHA-256 of the key before it and the
//! step (its files by their hash), the first key of the account and the
//! base image's id; a step whose key has a layer on the build's host is not
//! run again, unless it or a step before it is forced.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use chrono::Utc;
use sha2::{Digest, Sha256};
use stockade_core::spec::SpecInput;
use stockade_core::template::{
    BuildBase, BuildLogLine, BuildRecipe, BuildStatus, ImageConfig, LogLevel, StepKind, Template,
    TemplateBuild, TemplateLayer, TemplateUse,
};
use stockade_core::{Sandbox, Scope, TimeoutAction};
use stockade_runtime::{
    labels, own_image_labels, ExecEvent, ExecSpec, TEMPLATE_LABEL, TEMPLATE_LAYER_LABEL,
};
use tracing::{info, warn};

use crate::error::ServiceError;
use crate::ops::operations::OpGuard;
use crate::sandbox::request::NewSandbox;
use crate::Service;

/// Lines of a failing step's output its error quotes.
const LAST_LINES: usize = 12;
/// How often a running step's output goes to the log.
const LOG_FLUSH: Duration = Duration::from_millis(250);

/// A build's log as it is written: lines numbered on, stored in batches.
struct BuildLog {
    svc: Service,
    build: stockade_core::template::BuildId,
    next: u64,
    pending: Vec<BuildLogLine>,
    flushed: Instant,
}

impl BuildLog {
    fn line(&mut self, level: LogLevel, step: Option<&str>, message: impl Into<String>) {
        self.pending.push(BuildLogLine {
            offset: self.next,
            at: Utc::now(),
            level,
            step: step.map(str::to_owned),
            message: message.into(),
        });
        self.next += 1;
    }

    async fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let lines = std::mem::take(&mut self.pending);
        if let Err(e) = self.svc.store.append_build_logs(&self.build, &lines).await {
            warn!(build.id = %self.build, error = %e, "build log lines lost");
        }
        self.flushed = Instant::now();
    }

    async fn flush_now_and_then(&mut self) {
        if self.flushed.elapsed() >= LOG_FLUSH || self.pending.len() >= 200 {
            self.flush().await;
        }
    }
}

/// Why a build failed: the step (`base`, `1`…, `finalize`) and what
/// happened.
struct Failure {
    step: String,
    message: String,
}

fn fail(step: &str, message: impl Into<String>) -> Failure {
    Failure {
        step: step.to_owned(),
        message: message.into(),
    }
}

/// Runs the build to its end and writes how it ended.
pub(super) async fn run(
    svc: Service,
    scope: Scope,
    template: Template,
    mut build: TemplateBuild,
    guard: OpGuard,
) {
    let mut log = BuildLog {
        svc: svc.clone(),
        build: build.id.clone(),
        next: 0,
        pending: Vec::new(),
        flushed: Instant::now(),
    };
    log.line(
        LogLevel::Info,
        None,
        format!("Building template {}", template.id),
    );
    let mut sandbox: Option<Sandbox> = None;
    let deadline = Instant::now() + svc.config.template_build_timeout;
    let outcome = tokio::time::timeout_at(
        deadline.into(),
        steps(&svc, &scope, &template, &mut build, &mut log, &mut sandbox),
    )
    .await
    .unwrap_or_else(|_| {
        Err(fail(
            "finalize",
            format!(
                "the build took longer than its {} s",
                svc.config.template_build_timeout.as_secs()
            ),
        ))
    });
    if svc.crashed() {
        // This process is gone as far as anyone can tell: recovery ends
        // the build.
        return;
    }
    if let Some(sb) = sandbox.take() {
        if let Err(e) = crate::sandbox::lifecycle::destroy(&svc, sb, false).await {
            warn!(build.id = %build.id, error = %e, "a build sandbox was not removed; recovery will");
        }
    }
    build.sandbox_id = None;
    build.finished_at = Some(Utc::now());
    match outcome {
        Ok(()) => {
            build.status = BuildStatus::Ready;
            log.line(LogLevel::Info, Some("finalize"), "Build finished");
            info!(build.id = %build.id, template.id = %template.id, "template built");
        }
        Err(f) => {
            build.status = BuildStatus::Error;
            build.failed_step = f.step.parse().ok();
            log.line(LogLevel::Error, Some(&f.step), f.message.clone());
            build.reason = Some(f.message);
            if let Some(image) = build.image_ref.take() {
                for (_, rt) in svc.host_runtimes().await {
                    let _ = rt.remove_image(&image).await;
                }
                let _ = svc
                    .blobs
                    .delete(&TemplateBuild::image_blob_key_for(&build.id))
                    .await;
            }
            info!(build.id = %build.id, reason = ?build.reason, "template build failed");
        }
    }
    log.flush().await;
    if let Err(e) = svc.store.update_build(&build).await {
        warn!(build.id = %build.id, error = %e, "the end of a build was not written; recovery fails it");
        guard.abandon().await;
        return;
    }
    guard.release().await;
    if build.status == BuildStatus::Ready {
        super::collect::collect_older_builds(&svc, &template, &build).await;
    }
}

/// The base image, its settings and its part of the cache key.
async fn base(
    svc: &Service,
    scope: &Scope,
    recipe: &BuildRecipe,
) -> Result<(String, ImageConfig, String), Failure> {
    let err = |e: ServiceError| fail("base", e.to_string());
    match &recipe.base {
        BuildBase::Image(image) => {
            let image = stockade_core::spec::parse_image(image, "fromImage")
                .map_err(|e| fail("base", e.message))?;
            svc.config
                .images
                .check(&image, "fromImage")
                .map_err(|e| fail("base", e.message))?;
            crate::content::images::check_registry(
                &image,
                "fromImage",
                &svc.config.sources.addresses,
            )
            .await
            .map_err(|e| fail("base", e.message))?;
            Ok((
                image.clone(),
                ImageConfig::default(),
                format!("image {image}"),
            ))
        }
        BuildBase::Template(reference) => {
            let (_, from) =
                crate::content::templates::resolve(svc, scope, reference, "fromTemplate")
                    .await
                    .map_err(err)?;
            let mut config = from.config.clone().unwrap_or_default();
            // A template's start and ready commands are its own.
            config.start_cmd = None;
            config.ready_cmd = None;
            Ok((from.image_name(), config, format!("build {}", from.id)))
        }
    }
}

/// The cache keys of every step (the state after it).
fn step_keys(account: &str, base: &str, base_id: &str, recipe: &BuildRecipe) -> Vec<String> {
    let mut key = hex::encode(Sha256::digest(format!("{account}\n{base}\n{base_id}")));
    recipe
        .steps
        .iter()
        .map(|step| {
            // Without `force`: forcing runs the step, it does not change it.
            let text = serde_json::to_string(&step.kind).unwrap_or_default();
            key = hex::encode(Sha256::digest(format!("{key}\n{text}")));
            key.clone()
        })
        .collect()
}

async fn steps(
    svc: &Service,
    scope: &Scope,
    template: &Template,
    build: &mut TemplateBuild,
    log: &mut BuildLog,
    sandbox: &mut Option<Sandbox>,
) -> Result<(), Failure> {
    let recipe = build
        .recipe
        .clone()
        .ok_or_else(|| fail("base", "the build has no steps yet"))?;
    let (base_image, base_config, base_text) = base(svc, scope, &recipe).await?;
    log.line(LogLevel::Info, Some("base"), format!("FROM {base_image}"));
    log.flush().await;

    // The cache, on the host the build sandbox lands on: known once it is
    // placed, so the deepest cached layer is looked for on every host and
    // the sandbox asked onto that layer's host.
    let base_id = svc
        .runtime()
        .image_id(&base_image)
        .await
        .map_err(|e| fail("base", e.to_string()))?
        .unwrap_or_default();
    let base_text = match &recipe.provision_user {
        Some(user) => format!("{base_text}\nuser {user}"),
        None => base_text,
    };
    let keys = step_keys(scope.account_id.as_str(), &base_text, &base_id, &recipe);
    let mut start_at = 0usize;
    let mut start_image = base_image.clone();
    let mut config = base_config;
    let mut placed_on: Option<String> = None;
    if !recipe.force {
        for (i, step) in recipe.steps.iter().enumerate() {
            if step.force {
                break;
            }
            let layer = match svc.store.get_layer(&keys[i]).await {
                Ok(Some(l)) if l.account_id == scope.account_id => l,
                _ => break,
            };
            let Ok(rt) = svc.runtime_on(&layer.server).await else {
                break;
            };
            if !rt.image_present(&layer.image_ref).await.unwrap_or(false) {
                break;
            }
            start_at = i + 1;
            start_image = layer.image_ref.clone();
            config = layer.config.clone();
            placed_on = Some(layer.server.clone());
            // Used now: the cache keeps it for another while.
            let used = TemplateLayer {
                created_at: Utc::now(),
                ..layer
            };
            if let Err(e) = svc.store.put_layer(&used).await {
                warn!(build.id = %build.id, error = %e, "a cached step's use was not written");
            }
            log.line(
                LogLevel::Info,
                Some(&(i + 1).to_string()),
                format!(
                    "CACHED [{}/{}] {}",
                    i + 1,
                    recipe.steps.len(),
                    describe(&step.kind)
                ),
            );
        }
    }
    log.flush().await;

    // The build sandbox.
    let mut spec = SpecInput {
        name: Some(format!("template-build-{}", &build.id.as_str()[..8])),
        cpu_cores: template.cpu_count.map(f64::from),
        memory_gb: template.memory_mb.map(|mb| f64::from(mb) / 1024.0),
        disk_size_gb: template.disk_size_gb.map(f64::from),
        timeout_minutes: Some(svc.config.template_build_timeout.as_secs_f64() / 60.0 + 1.0),
        persistent: Some(false),
        server: placed_on,
        template: Some(TemplateUse {
            template_id: template.id.clone(),
            build_id: build.id.clone(),
            workdir: None,
            user: None,
            ready_cmd: None,
            building: true,
        }),
        ..SpecInput::default()
    };
    spec.lifecycle = Some(stockade_core::LifecycleInput {
        on_timeout: Some(TimeoutAction::Kill.as_str().to_owned()),
        ..Default::default()
    });
    let new = NewSandbox {
        spec,
        internal_image: Some(start_image.clone()),
        ..NewSandbox::default()
    };
    let created = svc
        .create_sandbox(scope, new, None)
        .await
        .map_err(|e| fail("base", format!("the build sandbox could not be made: {e}")))?;
    let sb = created.sandbox;
    *sandbox = Some(sb.clone());
    build.sandbox_id = Some(sb.id.clone());
    build.server = Some(sb.server.clone());
    svc.store
        .update_build(build)
        .await
        .map_err(|e| fail("base", e.to_string()))?;
    let rt = svc
        .runtime_for(&sb)
        .await
        .map_err(|e| fail("base", e.to_string()))?;

    // A cached layer has the user already.
    if let (Some(user), 0) = (&recipe.provision_user, start_at) {
        provision_user(svc, &sb, log, user).await?;
    }

    let mut args: BTreeMap<String, String> = BTreeMap::new();
    for (i, step) in recipe.steps.iter().enumerate().skip(start_at) {
        let name = (i + 1).to_string();
        log.line(
            LogLevel::Info,
            Some(&name),
            format!(
                "[{}/{}] {}",
                i + 1,
                recipe.steps.len(),
                describe(&step.kind)
            ),
        );
        log.flush().await;
        let changes_files = match &step.kind {
            StepKind::Run { command, user } => {
                let mut env = config.env.clone();
                for (k, v) in &args {
                    env.entry(k.clone()).or_insert_with(|| v.clone());
                }
                let user = user.as_deref().or(config.user.as_deref());
                run_command(
                    svc,
                    &sb,
                    log,
                    &name,
                    command,
                    env,
                    config.workdir.clone(),
                    user,
                )
                .await?;
                true
            }
            StepKind::Copy {
                src,
                dest,
                user,
                mode,
                files_hash,
            } => {
                let dest = clean_path(&config.resolve(dest));
                let owner = user.as_deref();
                copy_files(
                    svc, template, &sb, &name, src, &dest, owner, *mode, files_hash,
                )
                .await?;
                true
            }
            StepKind::Workdir { .. } => {
                config.apply(&step.kind);
                let dir = config.workdir.clone().unwrap_or_else(|| "/".into());
                let argv = vec!["mkdir".into(), "-p".into(), "--".into(), dir];
                let out = quiet(svc, &sb, &name, argv, None).await?;
                if out.exit_code != Some(0) {
                    return Err(fail(
                        &name,
                        format!(
                            "WORKDIR: the directory could not be made: {}",
                            String::from_utf8_lossy(&out.stderr).trim()
                        ),
                    ));
                }
                true
            }
            StepKind::Arg { name: arg, value } => {
                if let Some(v) = value {
                    args.insert(arg.clone(), v.clone());
                }
                false
            }
            StepKind::Env { .. } | StepKind::User { .. } => {
                config.apply(&step.kind);
                false
            }
        };
        // The state after the step, for later builds.
        let image = if changes_files {
            let image = format!("{}:{}", Template::LAYER_REPO, keys[i]);
            let mut labels: BTreeMap<String, String> =
                own_image_labels(TEMPLATE_LAYER_LABEL, &keys[i])
                    .into_iter()
                    .collect();
            labels.insert(labels::ACCOUNT_ID.to_owned(), scope.account_id.to_string());
            rt.commit_snapshot(&sb.id, &image, &labels)
                .await
                .map_err(|e| fail(&name, format!("the step's result could not be kept: {e}")))?;
            image
        } else {
            start_image.clone()
        };
        start_image = image.clone();
        let layer = TemplateLayer {
            key: keys[i].clone(),
            account_id: scope.account_id.clone(),
            server: sb.server.clone(),
            image_ref: image,
            config: config.clone(),
            created_at: Utc::now(),
        };
        if let Err(e) = svc.store.put_layer(&layer).await {
            warn!(build.id = %build.id, error = %e, "a build step was not cached");
        }
        svc.crash_point("template.step")
            .map_err(|e| fail(&name, e.to_string()))?;
    }

    // The start and ready commands, tried once as a sandbox would run them
    // (the start command runs until the build sandbox goes).
    let mut _started = None;
    config.start_cmd = recipe.start_cmd.clone();
    config.ready_cmd = recipe.ready_cmd.clone();
    if let Some(start) = &config.start_cmd {
        log.line(
            LogLevel::Info,
            Some("finalize"),
            format!("Starting `{start}`"),
        );
        log.flush().await;
        let spec = ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), start.clone()],
            cwd: config.workdir.clone(),
            env: config.env.clone(),
            ..Default::default()
        };
        let process = svc
            .exec_start_as(&sb, spec, config.user.as_deref())
            .await
            .map_err(|e| {
                fail(
                    "finalize",
                    format!("the start command could not start: {e}"),
                )
            })?;
        _started = Some(process);
    }
    if let Some(ready) = &config.ready_cmd {
        crate::content::templates::wait_until(
            svc,
            &sb,
            ready,
            crate::content::templates::READY_TIMEOUT,
        )
        .await
        .map_err(|e| fail("finalize", e.to_string()))?;
        log.line(LogLevel::Info, Some("finalize"), "Ready");
    }

    // The template's image.
    let image = build.image_name();
    let mut labels: BTreeMap<String, String> = own_image_labels(TEMPLATE_LABEL, build.id.as_str())
        .into_iter()
        .collect();
    labels.insert(labels::ACCOUNT_ID.to_owned(), scope.account_id.to_string());
    labels.insert("io.stockade.template-id".into(), template.id.to_string());
    rt.commit_snapshot(&sb.id, &image, &labels)
        .await
        .map_err(|e| fail("finalize", format!("the image could not be committed: {e}")))?;
    build.image_ref = Some(image.clone());
    svc.crash_point("template.committed")
        .map_err(|e| fail("finalize", e.to_string()))?;
    let archive = rt
        .export_image(&image)
        .await
        .map_err(|e| fail("finalize", format!("the image could not be read: {e}")))?;
    svc.blobs
        .put_stream(&TemplateBuild::image_blob_key_for(&build.id), archive)
        .await
        .map_err(|e| fail("finalize", format!("the image could not be stored: {e}")))?;
    build.config = Some(config);
    Ok(())
}

/// Makes `user` with a home directory when the build sandbox has no user
/// of that name: with `useradd` where the base has it, else BusyBox's
/// `adduser`, else by writing its lines into `/etc/passwd` and
/// `/etc/group` (the first free uid from 1000).
async fn provision_user(
    svc: &Service,
    sb: &Sandbox,
    log: &mut BuildLog,
    user: &str,
) -> Result<(), Failure> {
    let name = user.split(':').next().unwrap_or(user);
    let q = stockade_core::shell::quote(name);
    let script = format!(
        "id -u {q} >/dev/null 2>&1 && exit 0
         PATH=/usr/local/sbin:/usr/sbin:/sbin:$PATH
         if command -v useradd >/dev/null 2>&1; then exec useradd -m -s /bin/sh {q}; fi
         if command -v adduser >/dev/null 2>&1; then exec adduser -D -s /bin/sh {q}; fi
         uid=1000
         while cut -d: -f3 /etc/passwd | grep -qx $uid; do uid=$((uid + 1)); done
         echo {q}:x:$uid:$uid::/home/{q}:/bin/sh >> /etc/passwd &&
         echo {q}:x:$uid: >> /etc/group &&
         mkdir -p /home/{q} && chown $uid:$uid /home/{q}"
    );
    let argv = vec!["/bin/sh".into(), "-c".into(), script];
    let out = quiet(svc, sb, "base", argv, None).await?;
    if out.exit_code != Some(0) {
        return Err(fail(
            "base",
            format!(
                "the user {name} could not be made: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    log.line(LogLevel::Info, Some("base"), format!("User {name} ready"));
    Ok(())
}

/// `path` without `.` and empty components, its trailing `/` kept.
fn clean_path(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let mut out = format!("/{}", parts.join("/"));
    if path.ends_with('/') && out != "/" {
        out.push('/');
    }
    out
}

/// A step as its log shows it.
fn describe(step: &StepKind) -> String {
    match step {
        StepKind::Run { command, .. } => format!("RUN {command}"),
        StepKind::Copy { src, dest, .. } => format!("COPY {src} {dest}"),
        StepKind::Env { vars } => format!(
            "ENV {}",
            vars.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        StepKind::Arg { name, value } => match value {
            Some(v) => format!("ARG {name}={v}"),
            None => format!("ARG {name}"),
        },
        StepKind::Workdir { path } => format!("WORKDIR {path}"),
        StepKind::User { user } => format!("USER {user}"),
    }
}

/// Runs a `RUN` command, its output into the log line by line; anything
/// but exit 0 fails the step with the exit code and the last lines.
#[allow(clippy::too_many_arguments)]
async fn run_command(
    svc: &Service,
    sb: &Sandbox,
    log: &mut BuildLog,
    step: &str,
    command: &str,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    user: Option<&str>,
) -> Result<(), Failure> {
    let spec = ExecSpec {
        argv: vec!["/bin/sh".into(), "-c".into(), command.to_owned()],
        env,
        cwd,
        ..Default::default()
    };
    let mut process = svc
        .exec_start_as(sb, spec, user.map(|u| u.split(':').next().unwrap_or(u)))
        .await
        .map_err(|e| fail(step, format!("the command could not start: {e}")))?;
    let mut last: VecDeque<String> = VecDeque::new();
    let mut partial: HashMap<bool, Vec<u8>> = HashMap::new();
    let mut take = |err: bool, bytes: &[u8], log: &mut BuildLog, end: bool| {
        let buf = partial.entry(err).or_default();
        buf.extend_from_slice(bytes);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            push_line(log, step, err, text, &mut last);
        }
        if end && !buf.is_empty() {
            let text = String::from_utf8_lossy(buf).into_owned();
            buf.clear();
            push_line(log, step, err, text, &mut last);
        }
    };
    let exit = loop {
        match process.next().await {
            Some(ExecEvent::Stdout(b)) => take(false, &b, log, false),
            Some(ExecEvent::Stderr(b)) => take(true, &b, log, false),
            Some(ExecEvent::Exit(exit)) => break Some(exit),
            None => break None,
        }
        log.flush_now_and_then().await;
    };
    take(false, b"", log, true);
    take(true, b"", log, true);
    log.flush().await;
    let code = exit.and_then(|e| e.exit_code);
    if code == Some(0) {
        return Ok(());
    }
    let said = Vec::from(last).join("\n");
    Err(fail(
        step,
        format!(
            "step {step} (RUN {command}) failed with exit code {}{}",
            code.map_or_else(|| "unknown".to_owned(), |c| c.to_string()),
            if said.is_empty() {
                String::new()
            } else {
                format!(":\n{said}")
            }
        ),
    ))
}

fn push_line(log: &mut BuildLog, step: &str, err: bool, text: String, last: &mut VecDeque<String>) {
    let level = if err { LogLevel::Warn } else { LogLevel::Info };
    if last.len() == LAST_LINES {
        last.pop_front();
    }
    last.push_back(text.clone());
    log.line(level, Some(step), text);
}

/// Runs a command of the build itself (as root); its failure fails `step`.
async fn quiet(
    svc: &Service,
    sb: &Sandbox,
    step: &str,
    argv: Vec<String>,
    stdin: Option<Vec<u8>>,
) -> Result<stockade_runtime::ExecOutput, Failure> {
    let shown = argv.join(" ");
    let spec = ExecSpec {
        argv,
        stdin,
        max_output_bytes: 64 * 1024,
        ..Default::default()
    };
    svc.exec_as(sb, spec, "root")
        .await
        .map_err(|e| fail(step, format!("`{shown}` could not run: {e}")))
}

/// A `COPY` step: the step's files from the object store, laid out by
/// [`super::copy::copy`], unpacked at `/` by the engine and given to
/// `owner`.
#[allow(clippy::too_many_arguments)]
async fn copy_files(
    svc: &Service,
    template: &Template,
    sb: &Sandbox,
    step: &str,
    src: &str,
    dest: &str,
    owner: Option<&str>,
    mode: Option<u32>,
    files_hash: &str,
) -> Result<(), Failure> {
    let key = super::files_key(&template.account_id, files_hash);
    let (_, stream) = svc.blobs.get_stream(&key).await.map_err(|e| {
        fail(
            step,
            format!("the files of COPY {src} (hash {files_hash}) were never uploaded: {e}"),
        )
    })?;
    let archive = collect(stream, svc.config.max_file_bytes)
        .await
        .map_err(|e| fail(step, e))?;
    // Is the destination a directory in the sandbox?
    let dest_is_dir = dest.ends_with('/') || {
        let probe = vec!["test".into(), "-d".into(), dest.to_owned()];
        quiet(svc, sb, step, probe, None).await?.exit_code == Some(0)
    };
    let limit = svc.config.max_unpacked_bytes;
    let (src_owned, dest_owned) = (src.to_owned(), dest.to_owned());
    let laid_out = tokio::task::spawn_blocking(move || {
        let spec = super::copy::CopySpec {
            src: &src_owned,
            dest: &dest_owned,
            dest_is_dir,
            mode,
            limit,
        };
        let mut out = Vec::new();
        super::copy::copy(std::io::Cursor::new(archive), &spec, &mut out).map(|c| (c, out))
    })
    .await
    .map_err(|e| fail(step, format!("the copy failed: {e}")))?
    .map_err(|e| fail(step, format!("COPY {src}: {e}")))?;
    let (copied, tar) = laid_out;
    let rt = svc
        .runtime_for(sb)
        .await
        .map_err(|e| fail(step, e.to_string()))?;
    let root =
        stockade_core::SandboxPath::parse_field("/", "dest").map_err(|e| fail(step, e.message))?;
    let upload: stockade_runtime::ArchiveUpload =
        Box::pin(futures_util::stream::once(async move {
            bytes::Bytes::from(tar)
        }));
    rt.write_archive(&sb.id, &root, upload).await.map_err(|e| {
        fail(
            step,
            format!("COPY {src}: the files could not be written: {e}"),
        )
    })?;
    if let Some(owner) = owner {
        let mut list = Vec::new();
        for p in &copied.paths {
            list.extend_from_slice(p.as_bytes());
            list.push(0);
        }
        let argv = vec![
            "/bin/sh".into(),
            "-c".into(),
            "xargs -0 chown -h \"$0\" --".into(),
            owner.to_owned(),
        ];
        let out = quiet(svc, sb, step, argv, Some(list)).await?;
        if out.exit_code != Some(0) {
            return Err(fail(
                step,
                format!(
                    "COPY {src}: the files could not be given to '{owner}': {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ));
        }
    }
    Ok(())
}

/// A stream read whole, at most `limit` bytes.
async fn collect(mut stream: stockade_runtime::ByteStream, limit: u64) -> Result<Vec<u8>, String> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| format!("the files could not be read: {e}"))?;
        out.extend_from_slice(&chunk);
        if out.len() as u64 > limit {
            return Err(format!("the files hold more than {limit} bytes"));
        }
    }
    Ok(out)
}
