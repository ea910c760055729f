//! Which images a tenant may name in `dockerImage`.
//!
//! - Stockade's own images — snapshots and forks (`stockade-snapshot:…`),
//!   template builds and their cached layers (`stockade-template:…`,
//!   `stockade-template-layer:…`), and any image named by its content id —
//!   are never usable by name: a tenant reaches them only through an owned
//!   `source` or `template`, which checks the owner. (Without this,
//!   `{"dockerImage":"stockade-snapshot:<id>"}` would boot another
//!   account's snapshot.) Docker reads any all-hex reference
//!   without a tag as an id *prefix* (`9f3c1a`, even `1e7`), so every such
//!   reference is refused, whatever its length; the runtime refuses, too, an
//!   image that carries a snapshot label under any name but its snapshot's.
//! - An administrator may restrict images to patterns (`--allowed-images`):
//!   `node`, `python:3.*`, `ghcr.io/acme/*`, `*`. A pattern is matched
//!   against the image's full reference (`docker.io/library/node:20`); one
//!   without a tag allows every tag.
//! - An image whose registry is an internal address (`localhost:5000/x`,
//!   `10.0.0.5/x`) is refused unless the range is allowed: Docker would
//!   otherwise fetch from there on the tenant's behalf.

use stockade_core::net::AddressPolicy;
use stockade_core::FieldError;

use crate::error::ConfigError;

/// The repository of Stockade's snapshot images.
pub const SNAPSHOT_REPOSITORY: &str = "stockade-snapshot";

/// Every repository of Stockade's own images: snapshots, template builds
/// and the build cache's layers, each reached only through its owner.
const OWN_REPOSITORIES: [&str; 3] = [
    SNAPSHOT_REPOSITORY,
    stockade_core::template::Template::IMAGE_REPO,
    stockade_core::template::Template::LAYER_REPO,
];

/// The images tenants may name. No patterns: every image but Stockade's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImagePolicy {
    patterns: Vec<String>,
}

impl ImagePolicy {
    /// Parses `--allowed-images` patterns; the error names the bad one.
    pub fn parse(patterns: &[String]) -> Result<Self, ConfigError> {
        let mut out = Vec::new();
        for raw in patterns.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
            let ok = raw.len() <= 255
                && raw.bytes().all(|b| {
                    b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || matches!(b, b'.' | b'_' | b'-' | b'/' | b':' | b'@' | b'*')
                })
                && !raw.starts_with(['/', ':', '@', '.', '-'])
                && !raw.contains("//");
            if !ok {
                return Err(ConfigError(format!(
                    "'{raw}' is not an image pattern: use an image reference in lower case, \
                     with * for any characters (e.g. node, python:3.*, ghcr.io/acme/*)"
                )));
            }
            out.push(if raw == "*" {
                "*".to_owned()
            } else {
                normalize_pattern(raw)
            });
        }
        Ok(Self { patterns: out })
    }

    /// The patterns, normalized (empty: any image).
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether a tenant may name `image` (its syntax already checked).
    pub fn check(&self, image: &str, field: &str) -> Result<(), FieldError> {
        let lower = image.to_ascii_lowercase();
        if lower.starts_with("sha256:") || could_be_an_id(&lower) {
            return Err(FieldError::new(
                field,
                format!(
                    "'{image}' reads as an image id, and images are named, never taken by id: \
                     give the image's name with a tag (e.g. '{image}:latest'), or start from a \
                     snapshot or fork with `source`"
                ),
            ));
        }
        if is_internal(image) {
            return Err(FieldError::new(
                field,
                format!(
                    "'{image}' is one of Stockade's own images; start from a snapshot or fork \
                     with `source` instead"
                ),
            ));
        }
        if self.patterns.is_empty() {
            return Ok(());
        }
        let full = normalize(image);
        if self.patterns.iter().any(|p| glob(p, &full)) {
            return Ok(());
        }
        Err(FieldError::new(
            field,
            format!(
                "image '{image}' is not allowed on this server (allowed: {})",
                self.patterns.join(", ")
            ),
        ))
    }
}

/// Whether `image` names one of Stockade's own images: a snapshot, or any
/// image by its content id or a prefix of it (which could be a snapshot's).
pub fn is_internal(image: &str) -> bool {
    let lower = image.to_ascii_lowercase();
    if lower.starts_with("sha256:") || could_be_an_id(&lower) {
        return true;
    }
    let full = normalize(&lower);
    let repo = repository(&full);
    OWN_REPOSITORIES
        .iter()
        .any(|own| repo == format!("docker.io/library/{own}") || repo.ends_with(&format!("/{own}")))
}

/// Whether Docker could read `image` as an image id or a prefix of one: an
/// all-hex reference without a tag or digest. (`cafe:1` is a name; `cafe`
/// is a name only if such an image exists, else the first image whose id
/// starts with `cafe`.)
fn could_be_an_id(image: &str) -> bool {
    !image.is_empty() && image.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The registry host a reference names explicitly (`ghcr.io`,
/// `localhost:5000`, `10.0.0.5`), without its port; `None` for Docker Hub.
pub fn registry_host(image: &str) -> Option<(String, u16)> {
    let (first, rest) = image.split_once('/')?;
    if rest.is_empty() || !(first.contains('.') || first.contains(':') || first == "localhost") {
        return None;
    }
    let (host, port) = match first.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            (h, p.parse().unwrap_or(443))
        }
        _ => (first, 443),
    };
    Some((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        port,
    ))
}

/// Refuses an image whose registry is an internal address.
pub async fn check_registry(
    image: &str,
    field: &str,
    policy: &AddressPolicy,
) -> Result<(), FieldError> {
    let Some((host, port)) = registry_host(image) else {
        return Ok(());
    };
    crate::net::outbound::resolve_allowed(&host, port, policy)
        .await
        .map(|_| ())
        .map_err(|e| FieldError::new(field, format!("image '{image}': {e}")))
}

/// `registry/path:tag` (or `@digest`) with Docker's defaults filled in:
/// `node` → `docker.io/library/node:latest`.
pub fn normalize(image: &str) -> String {
    let (name, suffix) = split_suffix(image);
    let suffix = if suffix.is_empty() { ":latest" } else { suffix };
    format!("{}{suffix}", full_name(name))
}

/// A pattern's full form; one without a tag or digest allows any tag.
fn normalize_pattern(pattern: &str) -> String {
    let (name, suffix) = split_suffix(pattern);
    let suffix = if suffix.is_empty() { ":*" } else { suffix };
    format!("{}{suffix}", full_name(name))
}

/// The name with its registry: Docker Hub names get `docker.io/` and, for
/// official images, `library/`.
fn full_name(name: &str) -> String {
    match name.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            name.to_owned()
        }
        Some(_) => format!("docker.io/{name}"),
        None => format!("docker.io/library/{name}"),
    }
}

/// Splits `name[:tag][@digest]` into the name and the rest (with its `:`
/// or `@`). A `:` before the last `/` belongs to a registry port.
fn split_suffix(image: &str) -> (&str, &str) {
    if let Some(at) = image.find('@') {
        return (&image[..at], &image[at..]);
    }
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].find(':') {
        Some(colon) => image.split_at(last_slash + colon),
        None => (image, ""),
    }
}

/// The reference without its tag or digest.
fn repository(full: &str) -> &str {
    split_suffix(full).0
}

/// Glob matching where `*` is any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|b| *b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_normalize_like_docker() {
        assert_eq!(normalize("node"), "docker.io/library/node:latest");
        assert_eq!(normalize("node:20"), "docker.io/library/node:20");
        assert_eq!(normalize("acme/app:1"), "docker.io/acme/app:1");
        assert_eq!(normalize("ghcr.io/acme/app"), "ghcr.io/acme/app:latest");
        assert_eq!(
            normalize("localhost:5000/x@sha256:ab"),
            "localhost:5000/x@sha256:ab"
        );
        assert_eq!(
            registry_host("localhost:5000/x"),
            Some(("localhost".into(), 5000))
        );
        assert_eq!(
            registry_host("127.0.0.1:9/x"),
            Some(("127.0.0.1".into(), 9))
        );
        assert_eq!(registry_host("ghcr.io/a/b"), Some(("ghcr.io".into(), 443)));
        assert_eq!(registry_host("acme/app"), None);
        assert_eq!(registry_host("node:20"), None);
    }

    #[test]
    fn stockades_own_images_are_never_allowed_by_name() {
        let any = ImagePolicy::default();
        for internal in [
            "stockade-snapshot:abc123",
            "stockade-snapshot",
            "docker.io/library/stockade-snapshot:x",
            "stockade-snapshot@sha256:0123",
            "stockade-template:0b6c5a43-7c1e-4d2a-9f3e-2b8d1c0a9e11",
            "docker.io/library/stockade-template-layer:k1",
            "sha256:0123456789abcdef",
            "0123456789abcdef0123",
            // Docker resolves id prefixes of any length.
            "1e7",
            "9f3c",
            "9f3c1a",
            "9f3c1a2b3c4",
            "ABC123",
            "cafe",
        ] {
            let e = any.check(internal, "dockerImage").unwrap_err();
            assert_eq!(e.field, "dockerImage");
        }
        for fine in [
            "node:20-bookworm",
            "python",
            "ghcr.io/acme/stockade-snapshots:1",
            "cafe:1",
            "acme/cafe",
            "face-app",
        ] {
            assert!(any.check(fine, "dockerImage").is_ok(), "{fine}");
        }
    }

    #[test]
    fn patterns_restrict_images() {
        let p = ImagePolicy::parse(&["node".into(), "python:3.*".into(), "ghcr.io/acme/*".into()])
            .unwrap();
        for ok in [
            "node",
            "node:20",
            "python:3.13",
            "ghcr.io/acme/app:1",
            "docker.io/library/node:1",
        ] {
            assert!(p.check(ok, "dockerImage").is_ok(), "{ok}");
        }
        for no in ["python:2.7", "ubuntu", "ghcr.io/other/app", "acme/node"] {
            let e = p.check(no, "dockerImage").unwrap_err();
            assert_eq!(e.field, "dockerImage");
        }
        assert!(p.check("stockade-snapshot:x", "dockerImage").is_err());
        assert!(ImagePolicy::parse(&["*".into()])
            .unwrap()
            .check("x", "f")
            .is_ok());
        for bad in ["Node", "/x", "a b", "ghcr.io//x"] {
            let e = ImagePolicy::parse(&[bad.into()]).unwrap_err();
            assert!(e.0.contains(bad), "{e}");
        }
    }
}
