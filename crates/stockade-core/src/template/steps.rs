//! The steps of a template build and the image settings they leave.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::FieldError;

/// The most steps one build may have.
pub const MAX_STEPS: usize = 256;
/// The longest command a `RUN` step may hold.
const MAX_RUN_LEN: usize = 64 * 1024;

/// One step of a build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildStep {
    #[serde(flatten)]
    pub kind: StepKind,
    /// Run it (and every step after it) whatever the cache holds.
    #[serde(default)]
    pub force: bool,
}

/// What one step does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "UPPERCASE")]
pub enum StepKind {
    /// A shell command (`/bin/sh -c`), as the step's user (else the
    /// current one), in the current working directory with the current
    /// environment and build arguments.
    Run {
        command: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
    },
    /// Files of the build context (`src`, relative; a directory copies its
    /// contents) to `dest` (relative to the working directory), owned by
    /// `user`, with `mode` when given. `files_hash` is the SHA-256 the
    /// context archive of this step was stored under.
    Copy {
        src: String,
        dest: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
        #[serde(rename = "filesHash")]
        files_hash: String,
    },
    /// Variables of the image from here on (and of its sandboxes).
    Env { vars: Vec<(String, String)> },
    /// A variable of the build's later steps only, never of the image.
    Arg {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
    },
    /// The working directory from here on, made when missing.
    Workdir { path: String },
    /// The user later steps and the sandboxes run as.
    User { user: String },
}

impl StepKind {
    /// The Dockerfile word of the step.
    pub fn word(&self) -> &'static str {
        match self {
            Self::Run { .. } => "RUN",
            Self::Copy { .. } => "COPY",
            Self::Env { .. } => "ENV",
            Self::Arg { .. } => "ARG",
            Self::Workdir { .. } => "WORKDIR",
            Self::User { .. } => "USER",
        }
    }
}

impl BuildStep {
    /// Checks the step; errors name `field` (`steps[2]`) and its part.
    pub fn validate(&self, field: &str) -> Result<(), FieldError> {
        let at = |part: &str| format!("{field}.{part}");
        match &self.kind {
            StepKind::Run { command, user } => {
                check_command(command, &at("command"), MAX_RUN_LEN)?;
                if let Some(u) = user {
                    check_user(u, &at("user"))?;
                }
            }
            StepKind::Copy {
                src,
                dest,
                user,
                mode,
                files_hash,
            } => {
                check_context_path(src, &at("src"))?;
                check_path(dest, &at("dest"))?;
                if let Some(u) = user {
                    check_user(u, &at("user"))?;
                }
                if mode.is_some_and(|m| m > 0o7777) {
                    return Err(FieldError::new(
                        at("mode"),
                        "must be a file mode of at most 0o7777",
                    ));
                }
                if files_hash.len() != 64 || !files_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(FieldError::new(
                        at("filesHash"),
                        "must be the SHA-256 of the step's files, 64 hex digits",
                    ));
                }
            }
            StepKind::Env { vars } => {
                if vars.is_empty() {
                    return Err(FieldError::new(at("vars"), "must set one variable or more"));
                }
                for (k, v) in vars {
                    check_variable(k, v, &at(&format!("vars.{k}")))?;
                }
            }
            StepKind::Arg { name, value } => {
                check_variable(name, value.as_deref().unwrap_or(""), &at("name"))?;
            }
            StepKind::Workdir { path } => check_path(path, &at("path"))?,
            StepKind::User { user } => check_user(user, &at("user"))?,
        }
        Ok(())
    }
}

/// A shell command: not blank, at most `max` bytes, no NUL.
pub(super) fn check_command(cmd: &str, field: &str, max: usize) -> Result<(), FieldError> {
    if cmd.trim().is_empty() {
        return Err(FieldError::new(field, "must not be empty"));
    }
    if cmd.len() > max || cmd.contains('\0') {
        return Err(FieldError::new(
            field,
            format!("must be at most {max} bytes, without NUL bytes"),
        ));
    }
    Ok(())
}

/// A user as `USER` takes it: a name or uid, with an optional `:group`.
pub(super) fn check_user(user: &str, field: &str) -> Result<(), FieldError> {
    let part = |p: &str| {
        !p.is_empty()
            && p.len() <= 32
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            && !p.starts_with('-')
    };
    let ok = match user.split_once(':') {
        Some((u, g)) => part(u) && part(g),
        None => part(user),
    };
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("'{user}' is not a user: give a name or uid, optionally with :group"),
        ))
    }
}

/// A path in the image: at most 4096 bytes, no NUL, no newline.
fn check_path(path: &str, field: &str) -> Result<(), FieldError> {
    if path.trim().is_empty() || path.len() > 4096 || path.contains(['\0', '\n']) {
        return Err(FieldError::new(
            field,
            "must be a path of 1 to 4096 bytes, without NUL or newline",
        ));
    }
    Ok(())
}

/// A path inside the build context: relative, never above its root.
fn check_context_path(path: &str, field: &str) -> Result<(), FieldError> {
    check_path(path, field)?;
    let mut depth: i32 = 0;
    for part in path.trim_start_matches('/').split('/') {
        match part {
            "" | "." => {}
            ".." => depth -= 1,
            _ => depth += 1,
        }
        if depth < 0 {
            return Err(FieldError::new(
                field,
                format!("'{path}' leaves the build context"),
            ));
        }
    }
    Ok(())
}

fn check_variable(name: &str, value: &str, field: &str) -> Result<(), FieldError> {
    let mut bytes = name.bytes();
    let name_ok = matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 255;
    if !name_ok {
        return Err(FieldError::new(
            field,
            format!("'{name}' is not a variable name: use [A-Za-z_][A-Za-z0-9_]*"),
        ));
    }
    if value.len() > 128 * 1024 || value.contains('\0') {
        return Err(FieldError::new(
            field,
            "the value must be at most 128 KiB, without NUL bytes",
        ));
    }
    Ok(())
}

/// What the steps leave for the sandboxes of a build: its environment,
/// working directory and user, on top of the base image's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageConfig {
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_cmd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_cmd: Option<String>,
}

impl ImageConfig {
    /// The settings after `step`: `ENV` adds variables, `WORKDIR` moves
    /// (relative to the current directory), `USER` changes the user.
    pub fn apply(&mut self, step: &StepKind) {
        match step {
            StepKind::Env { vars } => {
                self.env
                    .extend(vars.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            StepKind::Workdir { path } => self.workdir = Some(self.resolve(path)),
            StepKind::User { user } => self.user = Some(user.clone()),
            StepKind::Run { .. } | StepKind::Copy { .. } | StepKind::Arg { .. } => {}
        }
    }

    /// `path` as an absolute path: relative ones start at the working
    /// directory (`/` when none was set).
    pub fn resolve(&self, path: &str) -> String {
        if path.starts_with('/') {
            return path.to_owned();
        }
        let base = self.workdir.as_deref().unwrap_or("/");
        format!("{}/{path}", base.trim_end_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(kind: StepKind) -> BuildStep {
        BuildStep { kind, force: false }
    }

    #[test]
    fn steps_serialize_with_their_type() {
        let s = step(StepKind::Run {
            command: "apt-get update".into(),
            user: None,
        });
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"type": "RUN", "command": "apt-get update", "force": false})
        );
        let back: BuildStep = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn bad_steps_name_their_field() {
        let hash = "a".repeat(64);
        let cases = [
            (
                StepKind::Run {
                    command: " ".into(),
                    user: None,
                },
                "steps[0].command",
            ),
            (
                StepKind::Copy {
                    src: "../etc/passwd".into(),
                    dest: "/x".into(),
                    user: None,
                    mode: None,
                    files_hash: hash.clone(),
                },
                "steps[0].src",
            ),
            (
                StepKind::Copy {
                    src: "a/../../b".into(),
                    dest: "/x".into(),
                    user: None,
                    mode: None,
                    files_hash: hash.clone(),
                },
                "steps[0].src",
            ),
            (
                StepKind::Copy {
                    src: "a".into(),
                    dest: "/x".into(),
                    user: None,
                    mode: Some(0o17777),
                    files_hash: hash,
                },
                "steps[0].mode",
            ),
            (
                StepKind::Copy {
                    src: "a".into(),
                    dest: "/x".into(),
                    user: None,
                    mode: None,
                    files_hash: "xyz".into(),
                },
                "steps[0].filesHash",
            ),
            (
                StepKind::Env {
                    vars: vec![("1X".into(), "v".into())],
                },
                "steps[0].vars.1X",
            ),
            (
                StepKind::User {
                    user: "root; rm -rf /".into(),
                },
                "steps[0].user",
            ),
            (
                StepKind::Workdir {
                    path: "/a\nb".into(),
                },
                "steps[0].path",
            ),
        ];
        for (kind, field) in cases {
            let e = step(kind).validate("steps[0]").unwrap_err();
            assert_eq!(e.field, field, "{e:?}");
        }
        step(StepKind::User {
            user: "1000:1000".into(),
        })
        .validate("steps[0]")
        .unwrap();
    }

    #[test]
    fn settings_follow_the_steps() {
        let mut c = ImageConfig::default();
        c.apply(&StepKind::Workdir {
            path: "/app".into(),
        });
        c.apply(&StepKind::Workdir { path: "src".into() });
        c.apply(&StepKind::Env {
            vars: vec![("A".into(), "1".into())],
        });
        c.apply(&StepKind::Arg {
            name: "B".into(),
            value: Some("2".into()),
        });
        c.apply(&StepKind::User {
            user: "node".into(),
        });
        assert_eq!(c.workdir.as_deref(), Some("/app/src"));
        assert_eq!(c.env.get("A").map(String::as_str), Some("1"));
        assert!(!c.env.contains_key("B"));
        assert_eq!(c.user.as_deref(), Some("node"));
        assert_eq!(c.resolve("/abs"), "/abs");
    }
}
