//! Code contexts: Jupyter kernels the agent starts and talks to over
//! ZeroMQ (the `/code/...` routes). This is the registry of contexts, the
//! default context of each language, and the limits.

pub mod context;
pub mod spec;
pub mod wire;

use crate::reaper::Reaper;
use context::Context;
use http::StatusCode;
use spec::KernelSpec;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Contexts one sandbox may have.
pub const MAX_CONTEXTS: usize = 16;
/// Bytes of output (stdout, stderr, results as NDJSON lines) one cell may
/// send; the rest is dropped with a note.
pub const OUTPUT_CAP: usize = 16 << 20;
/// A keepalive line after this long without another.
pub const KEEPALIVE: Duration = Duration::from_secs(5);
/// How long a kernel may take to start and answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A refusal of a `/code` request: its status and its plain-text reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeError {
    pub status: StatusCode,
    pub message: String,
}

impl CodeError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

/// How kernels are started right now: the sandbox's environment (PATH,
/// HOME, its variables), the default user's ids and home. Built afresh for
/// each start, so `/init`'s changes reach later kernels.
#[derive(Clone, Debug)]
pub struct Launch {
    pub env: Vec<(String, String)>,
    pub ids: Option<(u32, u32)>,
    pub home: String,
}

impl Launch {
    fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The kernels installed for the user.
    pub fn kernelspecs(&self) -> Vec<KernelSpec> {
        spec::discover(&spec::search_dirs(self.var("JUPYTER_PATH"), &self.home))
    }
}

/// Every context of the sandbox.
pub struct Kernels {
    reaper: Arc<Reaper>,
    /// Oldest first.
    contexts: Mutex<Vec<Arc<Context>>>,
    /// The default context of each language (canonical name → id).
    defaults: Mutex<HashMap<String, String>>,
    /// Held while a context starts: the limit and the one default per
    /// language hold under concurrent requests.
    creating: tokio::sync::Mutex<()>,
}

impl Kernels {
    pub fn new(reaper: Arc<Reaper>) -> Arc<Self> {
        Arc::new(Self {
            reaper,
            contexts: Mutex::new(Vec::new()),
            defaults: Mutex::new(HashMap::new()),
            creating: tokio::sync::Mutex::new(()),
        })
    }

    /// Every context, oldest first.
    pub fn list(&self) -> Vec<Arc<Context>> {
        self.contexts.lock().expect("contexts").clone()
    }

    /// A context by id, or 404.
    pub fn get(&self, id: &str) -> Result<Arc<Context>, CodeError> {
        self.contexts
            .lock()
            .expect("contexts")
            .iter()
            .find(|c| c.id == id)
            .cloned()
            .ok_or_else(|| CodeError::new(StatusCode::NOT_FOUND, format!("Context {id} not found")))
    }

    /// A new context for a (raw) language, its kernel started.
    pub async fn create(
        &self,
        language: &str,
        cwd: String,
        launch: &Launch,
    ) -> Result<Arc<Context>, CodeError> {
        let _one_at_a_time = self.creating.lock().await;
        self.create_locked(&spec::normalize(language), cwd, launch)
            .await
    }

    /// The default context of a (raw) language, made on first use.
    pub async fn default_for(
        &self,
        language: &str,
        cwd: String,
        launch: &Launch,
    ) -> Result<Arc<Context>, CodeError> {
        let language = spec::normalize(language);
        let _one_at_a_time = self.creating.lock().await;
        let known = self
            .defaults
            .lock()
            .expect("defaults")
            .get(&language)
            .cloned();
        if let Some(ctx) = known.and_then(|id| self.get(&id).ok()) {
            return Ok(ctx);
        }
        let ctx = self.create_locked(&language, cwd, launch).await?;
        self.defaults
            .lock()
            .expect("defaults")
            .insert(language, ctx.id.clone());
        Ok(ctx)
    }

    async fn create_locked(
        &self,
        language: &str,
        cwd: String,
        launch: &Launch,
    ) -> Result<Arc<Context>, CodeError> {
        if language.is_empty() {
            return Err(CodeError::bad_request("language must not be empty"));
        }
        if self.contexts.lock().expect("contexts").len() >= MAX_CONTEXTS {
            return Err(CodeError::new(
                StatusCode::CONFLICT,
                format!(
                    "this sandbox has {MAX_CONTEXTS} code contexts, the most it may have: delete one"
                ),
            ));
        }
        let specs = launch.kernelspecs();
        let spec = match spec::pick(&specs, language) {
            Some(s) => s.clone(),
            None if language == "python" => KernelSpec::python_fallback(),
            None => {
                return Err(CodeError::bad_request(format!(
                    "language: no Jupyter kernel for language '{language}' in this image; kernels found: {}",
                    found(&specs)
                )))
            }
        };
        let ctx = Context::start(
            new_id(),
            language.to_owned(),
            cwd,
            spec,
            launch,
            &self.reaper,
        )
        .await
        .map_err(|why| {
            let hint = if specs.is_empty() {
                "; no Jupyter kernelspec is installed in this image (python needs ipykernel)"
            } else {
                ""
            };
            CodeError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the {language} kernel failed to start: {why}{hint}"),
            )
        })?;
        self.contexts.lock().expect("contexts").push(ctx.clone());
        Ok(ctx)
    }

    /// Restarts a context's kernel (same id, language, cwd; state gone).
    pub async fn restart(&self, id: &str, launch: &Launch) -> Result<(), CodeError> {
        let ctx = self.get(id)?;
        ctx.restart(launch, &self.reaper).await.map_err(|why| {
            CodeError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the {} kernel failed to restart: {why}", ctx.language),
            )
        })
    }

    /// Deletes a context and ends its kernel.
    pub async fn delete(&self, id: &str) -> Result<(), CodeError> {
        let ctx = {
            let mut all = self.contexts.lock().expect("contexts");
            let at = all.iter().position(|c| c.id == id).ok_or_else(|| {
                CodeError::new(StatusCode::NOT_FOUND, format!("Context {id} not found"))
            })?;
            all.remove(at)
        };
        self.defaults
            .lock()
            .expect("defaults")
            .retain(|_, v| v != id);
        ctx.stop().await;
        Ok(())
    }

    /// Kills every kernel (the agent is leaving).
    pub fn kill_all(&self) {
        for c in self.list() {
            c.kill();
        }
    }
}

/// The kernels found, for an error message.
fn found(specs: &[KernelSpec]) -> String {
    if specs.is_empty() {
        "none".into()
    } else {
        specs
            .iter()
            .map(|s| format!("{} ({})", s.name, s.language))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Random bytes from the operating system.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    let mut filled = 0;
    while filled < n {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(k) => filled += k,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => panic!("the kernel's random source failed: {e}"),
        }
    }
    buf
}

/// A random (version 4) UUID.
pub fn new_id() -> String {
    let mut b = random_bytes(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = wire::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Now, as `2026-11-28T05:00:00.123456Z`.
pub fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_micros())
}

fn rfc3339(secs: i64, micros: u32) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_ids_are_well_formed() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339(1_795_842_000, 123_456),
            "2026-11-28T05:00:00.123456Z"
        );
        assert_eq!(rfc3339(951_782_400, 1), "2000-02-29T00:00:00.000001Z");
        let id = new_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, new_id());
    }
}
