//! The body `POST /api/v1/sandbox` accepts: Stockade's camelCase fields and,
//! for Prime Intellect's `prime-sandboxes` SDK, their snake_case spellings
//! and the fields that SDK sends. [`CreateSandboxBody::into_parts`]
//! turns it into the [`CreateSandboxRequest`] the service validates, or says
//! which field cannot be honoured and what Stockade offers instead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{CreateSandboxRequest, SandboxSource};

/// A start command: a shell string, or prime-sandboxes' program
/// and arguments (run without a shell's word splitting).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StartCommandJson {
    /// Run with `/bin/sh -c`.
    Shell(String),
    /// Run as is: `executable` with `args`.
    Argv(StartCommandArgv),
}

/// A program and its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartCommandArgv {
    pub executable: String,
    #[serde(default)]
    pub args: Vec<String>,
}

impl StartCommandArgv {
    /// The shell command line that runs exactly this argv: `exec` and each
    /// word single-quoted. [`StartCommandArgv::from_shell`] reads it back.
    pub fn to_shell(&self) -> String {
        let mut out = String::from("exec");
        for word in std::iter::once(&self.executable).chain(&self.args) {
            out.push(' ');
            out.push_str(&stockade_core::shell::quote(word));
        }
        out
    }

    /// The argv of a command line [`StartCommandArgv::to_shell`] wrote;
    /// `None` for any other command line.
    pub fn from_shell(line: &str) -> Option<Self> {
        let mut rest = line.strip_prefix("exec ")?;
        let mut words = Vec::new();
        loop {
            let (word, after) = unquote(rest)?;
            words.push(word);
            match after.strip_prefix(' ') {
                Some(next) => rest = next,
                None if after.is_empty() => break,
                None => return None,
            }
        }
        let mut words = words.into_iter();
        let executable = words.next()?;
        Some(Self {
            executable,
            args: words.collect(),
        })
    }
}

/// One word as [`quote`] writes it, and what follows it.
fn unquote(s: &str) -> Option<(String, &str)> {
    let mut word = String::new();
    let mut rest = s.strip_prefix('\'')?;
    loop {
        let end = rest.find('\'')?;
        word.push_str(&rest[..end]);
        rest = &rest[end + 1..];
        match rest.strip_prefix(r"\''") {
            Some(more) => {
                word.push('\'');
                rest = more;
            }
            None => return Some((word, rest)),
        }
    }
}

/// `POST /api/v1/sandbox`: every documented field (camelCase), the
/// same fields in snake_case, and the fields `prime-sandboxes` sends.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSandboxBody {
    /// Unique among the account's active sandboxes; defaults to the id.
    pub name: Option<String>,
    /// Defaults to the server's default image. One of the caller's
    /// templates (`name[:tag]`, or a template's id) runs that template.
    #[serde(alias = "docker_image")]
    pub docker_image: Option<String>,
    /// A preset name the server maps to an image (e.g. `node22`).
    pub runtime: Option<String>,
    /// A template to run, by id or name (`name:tag` for a tagged build).
    pub template: Option<String>,
    /// A shell command line, or `{"executable": …, "args": […]}`.
    #[serde(alias = "start_command")]
    pub start_command: Option<StartCommandJson>,
    #[serde(alias = "cpu_cores")]
    pub cpu_cores: Option<f64>,
    #[serde(rename = "memoryGB", alias = "memory_gb")]
    pub memory_gb: Option<f64>,
    #[serde(rename = "diskSizeGB", alias = "disk_size_gb")]
    pub disk_size_gb: Option<f64>,
    #[serde(alias = "gpu_count")]
    pub gpu_count: Option<f64>,
    /// `false` cuts all egress.
    #[serde(alias = "network_access")]
    pub network_access: Option<bool>,
    /// Egress policy: `"allow-all"`, `"deny-all"` or `{"allow":[…],"deny":[…]}`.
    #[serde(alias = "network_policy")]
    pub network_policy: Option<serde_json::Value>,
    /// Session timeout in minutes; 0 = never.
    #[serde(alias = "timeout_minutes")]
    pub timeout_minutes: Option<f64>,
    #[serde(alias = "environment_vars")]
    pub environment_vars: Option<BTreeMap<String, String>>,
    pub labels: Option<Vec<String>>,
    /// At most 5.
    pub tags: Option<BTreeMap<String, String>>,
    /// At most 4.
    pub ports: Option<Vec<i64>>,
    /// Filesystem survives session timeouts (default true).
    pub persistent: Option<bool>,
    #[serde(alias = "team_id")]
    pub team_id: Option<String>,
    /// What `/workspace` starts from.
    pub source: Option<SandboxSource>,
    /// The Docker host to run on, by name; any host with room when absent.
    pub server: Option<String>,
    /// Labels the Docker host must carry, e.g. `{"zone": "b"}`.
    #[serde(alias = "host_selector")]
    pub host_selector: Option<BTreeMap<String, String>>,
    /// What the end of a session does, an idle timeout, auto-resume.
    pub lifecycle: Option<crate::LifecycleRequest>,
    /// Shared volumes to mount.
    #[serde(alias = "volume_mounts")]
    pub volume_mounts: Option<Vec<crate::shared_volumes::VolumeMountRequest>>,
    /// `prime-sandboxes`: asks for a virtual machine. Accepted and ignored:
    /// Stockade runs every sandbox as a container.
    pub vm: Option<bool>,
    /// `prime-sandboxes`: the `Idempotency-Key`, in the body.
    #[serde(alias = "idempotency_key")]
    pub idempotency_key: Option<String>,
    /// `prime-sandboxes`: only with `gpuCount` > 0.
    #[serde(alias = "gpu_type")]
    pub gpu_type: Option<String>,
    /// `prime-sandboxes`: `[]` means no egress, `["*"]` all of it.
    #[serde(alias = "network_allowlist")]
    pub network_allowlist: Option<Vec<String>>,
    /// `prime-sandboxes`: `[]` means all egress, `["*"]` none.
    #[serde(alias = "network_denylist")]
    pub network_denylist: Option<Vec<String>>,
    /// `prime-sandboxes`: variables the sandbox's processes get, like
    /// `environmentVars` (a name in both is an error).
    pub secrets: Option<BTreeMap<String, String>>,
    /// `prime-sandboxes`: a checkpoint (a Stockade snapshot) to start from.
    #[serde(alias = "checkpoint_id")]
    pub checkpoint_id: Option<String>,
    /// `prime-sandboxes`: minutes without use after which the session
    /// ends, as `lifecycle.idleTimeoutMinutes`.
    #[serde(alias = "idle_timeout_minutes")]
    pub idle_timeout_minutes: Option<f64>,
    /// `prime-sandboxes`: not supported (placement is by free capacity).
    pub region: Option<String>,
    /// `prime-sandboxes`: `amd64` or `arm64`; must be the Docker host's.
    pub arch: Option<String>,
    /// `prime-sandboxes`: only `{}`.
    #[serde(alias = "advanced_configs")]
    #[schema(value_type = Option<Object>)]
    pub advanced_configs: Option<serde_json::Value>,
    /// `prime-sandboxes`: shared volumes to mount, by name (as
    /// `volumeMounts`).
    pub volumes: Option<Vec<PrimeVolumeMount>>,
}

/// One of `prime-sandboxes`' `volumes`: a shared volume by name, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PrimeVolumeMount {
    pub name: String,
    pub mount_path: String,
    #[serde(default)]
    pub read_only: bool,
}

/// A create field Stockade cannot honour, with what it offers instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateBodyError {
    /// A bad value: 400 naming the field.
    Invalid { field: String, message: String },
    /// Something Stockade does not do: 501 with a sentence.
    Unsupported(String),
}

/// What the body asks for beyond [`CreateSandboxRequest`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CreateExtras {
    /// The body's `idempotency_key`.
    pub idempotency_key: Option<String>,
    /// The start command was given as a program and arguments.
    pub argv_start_command: bool,
}

fn invalid(field: &str, message: impl Into<String>) -> CreateBodyError {
    CreateBodyError::Invalid {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// `network_allowlist`/`network_denylist` as Stockade's network settings:
/// "everything" and "nothing" as `networkAccess`, any other list as the
/// allow or deny list of `networkPolicy`.
type NetworkFromLists = (Option<bool>, Option<serde_json::Value>);

fn network_from_lists(
    allow: Option<&[String]>,
    deny: Option<&[String]>,
) -> Result<NetworkFromLists, CreateBodyError> {
    let everything =
        |l: &[String]| l.len() == 1 && matches!(l[0].trim(), "*" | "0.0.0.0/0" | "::/0");
    match (allow, deny) {
        (None, None) => Ok((None, None)),
        (Some(_), Some(_)) => Err(invalid(
            "network_allowlist",
            "network_allowlist and network_denylist are mutually exclusive; give at most one",
        )),
        (Some([]), None) => Ok((Some(false), None)),
        (Some(a), None) if everything(a) => Ok((Some(true), None)),
        (None, Some([])) => Ok((Some(true), None)),
        (None, Some(d)) if everything(d) => Ok((Some(false), None)),
        (Some(a), None) => Ok((None, Some(serde_json::json!({ "allow": a })))),
        (None, Some(d)) => Ok((None, Some(serde_json::json!({ "deny": d })))),
    }
}

impl CreateSandboxBody {
    /// The request the service validates, and the extras.
    pub fn into_parts(
        self,
        host_arch: &str,
    ) -> Result<(CreateSandboxRequest, CreateExtras), CreateBodyError> {
        // prime-sandboxes' idle timeout is the lifecycle's.
        let mut lifecycle = self.lifecycle;
        if let Some(m) = self.idle_timeout_minutes {
            let l = lifecycle.get_or_insert_with(Default::default);
            if l.idle_timeout_minutes.is_some() {
                return Err(invalid(
                    "idle_timeout_minutes",
                    "give the idle timeout once: here or as lifecycle.idleTimeoutMinutes",
                ));
            }
            l.idle_timeout_minutes = Some(m);
        }
        if let Some(r) = &self.region {
            return Err(CreateBodyError::Unsupported(format!(
                "region '{r}' is not supported: Stockade places sandboxes on its Docker hosts \
                 by free capacity; leave region out"
            )));
        }
        let volume_mounts = match (self.volume_mounts, self.volumes) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "volumes",
                    "give the mounts once: as volumeMounts or as volumes",
                ))
            }
            (Some(m), None) => Some(m),
            (None, Some(v)) => Some(
                v.into_iter()
                    .map(|m| crate::shared_volumes::VolumeMountRequest {
                        volume: m.name,
                        path: m.mount_path,
                        read_only: Some(m.read_only),
                    })
                    .collect(),
            ),
            (None, None) => None,
        };
        if let Some(a) = &self.arch {
            if a != host_arch {
                return Err(CreateBodyError::Unsupported(format!(
                    "arch '{a}' is not available: this Stockade server runs {host_arch} sandboxes"
                )));
            }
        }
        match &self.advanced_configs {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Object(o)) if o.is_empty() => {}
            Some(_) => {
                return Err(CreateBodyError::Unsupported(
                    "advanced_configs are not supported; leave them out".into(),
                ))
            }
        }
        if self.gpu_type.is_some() && self.gpu_count.unwrap_or(0.0) == 0.0 {
            return Err(invalid("gpu_type", "gpu_type needs gpu_count above 0"));
        }
        let (network, listed_policy) = network_from_lists(
            self.network_allowlist.as_deref(),
            self.network_denylist.as_deref(),
        )?;
        if self.network_policy.is_some() && listed_policy.is_some() {
            return Err(invalid(
                "networkPolicy",
                "give networkPolicy or network_allowlist/network_denylist, not both",
            ));
        }
        let network_policy = self.network_policy.or(listed_policy);
        let network_access = match (self.network_access, network) {
            (Some(a), Some(b)) if a != b => {
                return Err(invalid(
                    "networkAccess",
                    "networkAccess contradicts network_allowlist/network_denylist",
                ))
            }
            (a, b) => a.or(b),
        };
        let mut env = self.environment_vars;
        if let Some(secrets) = self.secrets {
            let vars = env.get_or_insert_with(BTreeMap::new);
            for (k, v) in secrets {
                if vars.contains_key(&k) {
                    return Err(invalid(
                        "secrets",
                        format!("'{k}' is both a secret and an environment variable"),
                    ));
                }
                vars.insert(k, v);
            }
        }
        let source = match (self.source, self.checkpoint_id) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "checkpoint_id",
                    "give either source or checkpoint_id, not both",
                ))
            }
            (s, None) => s,
            (None, Some(id)) => Some(SandboxSource::Snapshot { snapshot_id: id }),
        };
        let argv = matches!(self.start_command, Some(StartCommandJson::Argv(_)));
        let start_command = match self.start_command {
            None => None,
            Some(StartCommandJson::Shell(s)) => Some(s),
            Some(StartCommandJson::Argv(a)) => {
                if a.executable.is_empty() {
                    return Err(invalid("startCommand.executable", "must not be empty"));
                }
                Some(a.to_shell())
            }
        };
        let req = CreateSandboxRequest {
            name: self.name,
            docker_image: self.docker_image,
            runtime: self.runtime,
            template: self.template,
            start_command,
            cpu_cores: self.cpu_cores,
            memory_gb: self.memory_gb,
            disk_size_gb: self.disk_size_gb,
            gpu_count: self.gpu_count,
            network_access,
            network_policy,
            timeout_minutes: self.timeout_minutes,
            environment_vars: env,
            labels: self.labels,
            tags: self.tags,
            ports: self.ports,
            persistent: self.persistent,
            team_id: self.team_id,
            source,
            server: self.server,
            host_selector: self.host_selector,
            lifecycle,
            volume_mounts,
        };
        Ok((
            req,
            CreateExtras {
                idempotency_key: self.idempotency_key,
                argv_start_command: argv,
            },
        ))
    }
}

/// The Docker name of an architecture (`x86_64` → `amd64`).
pub fn docker_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> CreateSandboxBody {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn argv_round_trips_through_a_shell_line() {
        for argv in [
            StartCommandArgv {
                executable: "python".into(),
                args: vec!["-c".into(), "print('hi there')".into()],
            },
            StartCommandArgv {
                executable: "/bin/echo".into(),
                args: vec![],
            },
            StartCommandArgv {
                executable: "sh".into(),
                args: vec!["-c".into(), r#"echo "it's" '' $HOME"#.into(), "".into()],
            },
        ] {
            let line = argv.to_shell();
            assert_eq!(StartCommandArgv::from_shell(&line), Some(argv), "{line}");
        }
        for other in [
            "python main.py",
            "exec python",
            "exec 'a' b",
            "exec 'a'  'b'",
            "exec 'unterminated",
            "exec ",
            "",
        ] {
            assert_eq!(StartCommandArgv::from_shell(other), None, "{other}");
        }
    }

    #[test]
    fn seed_002_and_snake_case_bodies_mean_the_same() {
        let camel = body(
            r#"{"name":"a","dockerImage":"python:3.11","startCommand":"python main.py",
                "cpuCores":4,"memoryGB":8,"diskSizeGB":50,"gpuCount":0,"networkAccess":true,
                "timeoutMinutes":60,"environmentVars":{"K":"v"},"labels":["dev"]}"#,
        );
        let snake = body(
            r#"{"name":"a","docker_image":"python:3.11","start_command":"python main.py",
                "cpu_cores":4,"memory_gb":8,"disk_size_gb":50,"gpu_count":0,"network_access":true,
                "timeout_minutes":60,"environment_vars":{"K":"v"},"labels":["dev"]}"#,
        );
        let (a, _) = camel.into_parts("amd64").unwrap();
        let (b, _) = snake.into_parts("amd64").unwrap();
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap()
        );
        assert_eq!(a.memory_gb, Some(8.0));
        assert_eq!(a.start_command.as_deref(), Some("python main.py"));
    }

    #[test]
    fn prime_sandboxes_create_body_maps() {
        // What prime-sandboxes 0.5.1 sends for CreateSandboxRequest(name=…,
        // docker_image=…, start_command=StartCommand(…), secrets=…).
        let b = body(
            r#"{"name":"p","docker_image":"stockade-test-debian:latest",
                "start_command":{"executable":"sleep","args":["infinity"]},
                "cpu_cores":1.0,"memory_gb":1.0,"disk_size_gb":5.0,"gpu_count":0,
                "timeout_minutes":60,"environment_vars":{"A":"1"},"secrets":{"S":"2"},
                "labels":[],"vm":true,"idempotency_key":"0f3c"}"#,
        );
        let (req, extras) = b.into_parts("amd64").unwrap();
        assert_eq!(
            req.start_command.as_deref(),
            Some("exec 'sleep' 'infinity'")
        );
        assert!(extras.argv_start_command);
        assert_eq!(extras.idempotency_key.as_deref(), Some("0f3c"));
        let env = req.environment_vars.unwrap();
        assert_eq!(env["A"], "1");
        assert_eq!(env["S"], "2");
        let (req, _) = body(r#"{"checkpoint_id":"snap1"}"#)
            .into_parts("amd64")
            .unwrap();
        assert_eq!(
            req.source,
            Some(SandboxSource::Snapshot {
                snapshot_id: "snap1".into()
            })
        );
    }

    #[test]
    fn egress_lists_map_to_access_or_policy() {
        let access = |json: &str| {
            body(json)
                .into_parts("amd64")
                .map(|(r, _)| r.network_access)
        };
        assert_eq!(access(r#"{"network_allowlist":[]}"#), Ok(Some(false)));
        assert_eq!(access(r#"{"network_allowlist":["*"]}"#), Ok(Some(true)));
        assert_eq!(access(r#"{"network_denylist":[]}"#), Ok(Some(true)));
        assert_eq!(
            access(r#"{"network_denylist":["0.0.0.0/0"]}"#),
            Ok(Some(false))
        );
        let policy = |json: &str| {
            body(json)
                .into_parts("amd64")
                .map(|(r, _)| r.network_policy)
        };
        assert_eq!(
            policy(r#"{"network_allowlist":["example.com"]}"#),
            Ok(Some(serde_json::json!({"allow": ["example.com"]})))
        );
        assert_eq!(
            policy(r#"{"network_denylist":["10.0.0.0/8"]}"#),
            Ok(Some(serde_json::json!({"deny": ["10.0.0.0/8"]})))
        );
        assert_eq!(
            policy(r#"{"networkPolicy":"deny-all"}"#),
            Ok(Some(serde_json::json!("deny-all")))
        );
        assert!(matches!(
            policy(r#"{"networkPolicy":"deny-all","network_denylist":["x.test"]}"#),
            Err(CreateBodyError::Invalid { .. })
        ));
        assert!(matches!(
            access(r#"{"network_allowlist":[],"network_denylist":[]}"#),
            Err(CreateBodyError::Invalid { .. })
        ));
        assert!(matches!(
            access(r#"{"networkAccess":true,"network_allowlist":[]}"#),
            Err(CreateBodyError::Invalid { .. })
        ));
    }

    #[test]
    fn prime_volumes_are_volume_mounts() {
        let (req, _) = body(r#"{"volumes":[{"name":"v","mount_path":"/data","read_only":true}]}"#)
            .into_parts("amd64")
            .unwrap();
        assert_eq!(
            req.volume_mounts,
            Some(vec![crate::shared_volumes::VolumeMountRequest {
                volume: "v".into(),
                path: "/data".into(),
                read_only: Some(true),
            }])
        );
        assert!(matches!(
            body(r#"{"volumes":[{"name":"v","mount_path":"/a"}],"volumeMounts":[{"volume":"v","path":"/b"}]}"#)
                .into_parts("amd64"),
            Err(CreateBodyError::Invalid { .. })
        ));
    }

    #[test]
    fn what_cannot_map_says_so() {
        for json in [
            r#"{"region":"eu"}"#,
            r#"{"arch":"riscv64"}"#,
            r#"{"advanced_configs":{"x":1}}"#,
        ] {
            match body(json).into_parts("amd64") {
                Err(CreateBodyError::Unsupported(m)) => assert!(m.len() > 20, "{m}"),
                other => panic!("{json}: {other:?}"),
            }
        }
        assert!(body(r#"{"arch":"amd64","advanced_configs":{}}"#)
            .into_parts("amd64")
            .is_ok());
        assert!(matches!(
            body(r#"{"secrets":{"K":"1"},"environment_vars":{"K":"2"}}"#).into_parts("amd64"),
            Err(CreateBodyError::Invalid { field, .. }) if field == "secrets"
        ));
    }

    #[test]
    fn unknown_and_duplicate_fields_are_refused() {
        assert!(serde_json::from_str::<CreateSandboxBody>(r#"{"privileged":true}"#).is_err());
        assert!(serde_json::from_str::<CreateSandboxBody>(
            r#"{"dockerImage":"a","docker_image":"b"}"#
        )
        .is_err());
        assert!(serde_json::from_str::<CreateSandboxBody>(
            r#"{"start_command":{"executable":"x","shell":true}}"#
        )
        .is_err());
    }
}
