//! `SandboxPath`: a validated, absolute, normalised path inside a sandbox.
//! Relative input is taken relative to `/workspace`; `..` is
//! rejected (also percent-encoded, once or twice), never normalised away.

use crate::error::FieldError;
use crate::spec::VolumeName;

/// An absolute path inside a sandbox: starts with `/`, no empty, `.` or `..`
/// components, no trailing slash (except the root `/` itself).
///
/// It is only ever handed to Docker, which resolves it (symlinks included)
/// inside the container's own filesystem; rejecting `..` keeps requests
/// honest and their errors clear.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxPath(String);

/// How often percent-decoding is re-applied when looking for a hidden `..`.
const DECODE_ROUNDS: usize = 3;

impl SandboxPath {
    /// The longest path accepted, in bytes (Linux `PATH_MAX`).
    pub const MAX_LEN: usize = 4096;
    /// The longest single component, in bytes (Linux `NAME_MAX`).
    pub const MAX_COMPONENT: usize = 255;

    /// Parses user input; `field` names it in the error. Relative paths are
    /// resolved against `/workspace`.
    pub fn parse_field(raw: &str, field: &str) -> Result<Self, FieldError> {
        let err = |msg: &str| FieldError::new(field, msg.to_owned());
        if raw.is_empty() {
            return Err(err("must not be empty"));
        }
        if raw.len() > Self::MAX_LEN {
            return Err(err(&format!(
                "must be at most {} bytes long, got {}",
                Self::MAX_LEN,
                raw.len()
            )));
        }
        if raw.contains('\0') {
            return Err(err("must not contain NUL bytes"));
        }
        // A `..` hidden behind (possibly double) percent-encoding is as
        // suspicious as a plain one: reject, whatever the client meant.
        let mut decoded = raw.as_bytes().to_vec();
        for _ in 0..=DECODE_ROUNDS {
            if decoded.contains(&0) {
                return Err(err("must not contain NUL bytes (also percent-encoded)"));
            }
            if decoded.split(|b| *b == b'/').any(|c| c == b"..") {
                return Err(err(
                    "must not contain `..` components (also percent-encoded); give the path without them",
                ));
            }
            match percent_decode(&decoded) {
                Some(next) if next != decoded => decoded = next,
                _ => break,
            }
        }
        let absolute = if raw.starts_with('/') {
            raw.to_owned()
        } else {
            format!("{}/{raw}", VolumeName::MOUNT_PATH)
        };
        let mut parts: Vec<&str> = Vec::new();
        for part in absolute.split('/') {
            if part.is_empty() || part == "." {
                continue;
            }
            if part.len() > Self::MAX_COMPONENT {
                return Err(err(&format!(
                    "each path component must be at most {} bytes long",
                    Self::MAX_COMPONENT
                )));
            }
            parts.push(part);
        }
        let normalised = format!("/{}", parts.join("/"));
        if normalised.len() > Self::MAX_LEN {
            return Err(err(&format!(
                "must be at most {} bytes long",
                Self::MAX_LEN
            )));
        }
        Ok(Self(normalised))
    }

    /// The root directory `/`.
    pub fn root() -> Self {
        Self("/".to_owned())
    }

    /// `/workspace`, the sandbox's volume.
    pub fn workspace() -> Self {
        Self(VolumeName::MOUNT_PATH.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The last component; `None` for `/`.
    pub fn file_name(&self) -> Option<&str> {
        if self.is_root() {
            None
        } else {
            self.0.rsplit('/').next()
        }
    }

    /// The directory holding this path; `None` for `/`.
    pub fn parent(&self) -> Option<SandboxPath> {
        if self.is_root() {
            return None;
        }
        match self.0.rfind('/') {
            Some(0) => Some(Self::root()),
            Some(i) => Some(Self(self.0[..i].to_owned())),
            None => None,
        }
    }

    /// This path with `name` (one component, no `/`) appended.
    pub fn child(&self, name: &str) -> SandboxPath {
        if self.is_root() {
            Self(format!("/{name}"))
        } else {
            Self(format!("{}/{name}", self.0))
        }
    }
}

impl std::fmt::Display for SandboxPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Decodes `%XX` escapes; `None` when there is nothing to decode.
fn percent_decode(input: &[u8]) -> Option<Vec<u8>> {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    if !input.contains(&b'%') {
        return None;
    }
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] == b'%' && i + 2 < input.len() {
            if let (Some(h), Some(l)) = (hex(input[i + 1]), hex(input[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(input[i]);
        i += 1;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        SandboxPath::parse_field(raw, "path")
            .unwrap_or_else(|e| panic!("{raw}: {}", e.message))
            .to_string()
    }

    fn bad(raw: &str) -> String {
        let e = SandboxPath::parse_field(raw, "path").expect_err(raw);
        assert_eq!(e.field, "path");
        e.message
    }

    #[test]
    fn relative_paths_live_in_the_workspace() {
        assert_eq!(ok("a.txt"), "/workspace/a.txt");
        assert_eq!(ok("./dir/b/"), "/workspace/dir/b");
        assert_eq!(ok("."), "/workspace");
        assert_eq!(ok("/etc//hostname"), "/etc/hostname");
        assert_eq!(ok("/"), "/");
        assert_eq!(ok("/workspace/./x"), "/workspace/x");
        // Three dots and dotted names are ordinary names.
        assert_eq!(ok("/a/.../b"), "/a/.../b");
        assert_eq!(ok("..foo/bar.."), "/workspace/..foo/bar..");
        assert_eq!(ok("/a/100%/b"), "/a/100%/b");
    }

    #[test]
    fn traversal_is_rejected_in_every_spelling() {
        for raw in [
            "..",
            "../etc/passwd",
            "/workspace/../etc",
            "a/..",
            "%2e%2e/etc",
            "%2E%2E",
            ".%2e/x",
            "%252e%252e/etc",
            "%25252e%25252e",
            "..%2fetc",
        ] {
            assert!(bad(raw).contains(".."), "{raw}");
        }
    }

    #[test]
    fn other_bad_input() {
        assert!(bad("").contains("empty"));
        assert!(bad("a\0b").contains("NUL"));
        assert!(bad("a%00b").contains("NUL"));
        assert!(bad(&"a".repeat(4097)).contains("4096"));
        assert!(bad(&format!("/{}", "x".repeat(256))).contains("255"));
        assert_eq!(ok(&format!("/{}", "x".repeat(255))).len(), 256);
    }

    #[test]
    fn parents_and_names() {
        let p = SandboxPath::parse_field("/workspace/a/b", "path").unwrap();
        assert_eq!(p.file_name(), Some("b"));
        assert_eq!(p.parent().unwrap().as_str(), "/workspace/a");
        let top = SandboxPath::parse_field("/etc", "path").unwrap();
        assert_eq!(top.parent().unwrap(), SandboxPath::root());
        assert_eq!(SandboxPath::root().parent(), None);
        assert_eq!(SandboxPath::root().file_name(), None);
        assert_eq!(SandboxPath::root().child("x").as_str(), "/x");
        assert_eq!(p.child("c").as_str(), "/workspace/a/b/c");
    }
}
