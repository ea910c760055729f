//! The web dashboard: plain HTML, CSS and JavaScript modules
//! embedded in the binary, with xterm.js, DOMPurify and marked from npm
//! (fetched at build time by `build.rs`), so it works offline with no
//! toolchain at run time and loads nothing from anywhere but this server.

use axum::extract::Path;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use stockade_service::ServiceError;

/// What the dashboard's page may load and connect to: this server only.
/// xterm.js writes `<style>` elements for its cell sizes, hence inline styles.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; \
     connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The policy for a page served as `host`: browsers that do not count
/// `ws:`/`wss:` as 'self' get this server's own WebSocket origin named (the
/// terminal), and nothing else.
fn content_security_policy(host: Option<&str>) -> String {
    let valid = |h: &str| {
        !h.is_empty()
            && h.len() <= 255
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
    };
    match host.filter(|h| valid(h)) {
        Some(h) => CONTENT_SECURITY_POLICY.replace(
            "connect-src 'self'",
            &format!("connect-src 'self' ws://{h} wss://{h}"),
        ),
        None => CONTENT_SECURITY_POLICY.to_owned(),
    }
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

macro_rules! own {
    ($name:literal, $mime:expr) => {
        (
            $name,
            include_bytes!(concat!("../../assets/dashboard/", $name)) as &[u8],
            $mime,
        )
    };
}

macro_rules! vendored {
    ($name:literal, $path:literal, $mime:expr) => {
        (
            $name,
            include_bytes!(concat!("../../assets/vendor/node_modules/", $path)) as &[u8],
            $mime,
        )
    };
}

/// Every file under `/dashboard/`: its name, bytes and type.
const FILES: &[(&str, &[u8], &str)] = &[
    own!("app.css", CSS),
    own!("boot.js", JS),
    own!("app.js", JS),
    own!("api.js", JS),
    own!("ui.js", JS),
    own!("router.js", JS),
    own!("list.js", JS),
    own!("sandbox.js", JS),
    own!("terminal.js", JS),
    own!("commands.js", JS),
    own!("notebook.js", JS),
    own!("files.js", JS),
    own!("fileparts.js", JS),
    own!("details.js", JS),
    own!("chart.js", JS),
    own!("logs.js", JS),
    own!("create.js", JS),
    own!("snapshots.js", JS),
    own!("templates.js", JS),
    own!("volumes.js", JS),
    own!("sharedvolumes.js", JS),
    own!("admin.js", JS),
    own!("events.js", JS),
    own!("webhooks.js", JS),
    own!("audit.js", JS),
    vendored!("xterm.mjs", "@xterm/xterm/lib/xterm.mjs", JS),
    vendored!("xterm.css", "@xterm/xterm/css/xterm.css", CSS),
    vendored!("addon-fit.mjs", "@xterm/addon-fit/lib/addon-fit.mjs", JS),
    vendored!("purify.mjs", "dompurify/dist/purify.es.mjs", JS),
    vendored!("marked.mjs", "marked/lib/marked.esm.js", JS),
];

const INDEX: &str = include_str!("../../assets/dashboard/index.html");

/// `GET /`.
pub async fn index(headers: HeaderMap) -> Response {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_owned()),
            (header::CACHE_CONTROL, "no-cache".to_owned()),
            (
                header::CONTENT_SECURITY_POLICY,
                content_security_policy(host),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (header::REFERRER_POLICY, "no-referrer".to_owned()),
        ],
        INDEX,
    )
        .into_response()
}

/// `GET /dashboard/{file}`.
pub async fn asset(Path(file): Path<String>) -> Response {
    let Some((_, body, mime)) = FILES.iter().find(|(name, _, _)| *name == file) else {
        return ApiError::from(ServiceError::NotFound(format!(
            "No dashboard file '{file}'"
        )))
        .into_response();
    };
    (
        [
            (header::CONTENT_TYPE, *mime),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        *body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(name: &str) -> bool {
        FILES.iter().any(|(n, _, _)| *n == name)
    }

    /// Every module a script imports, and every file the page links, is
    /// served: a file added to `assets/dashboard/` but not to `FILES` fails
    /// here rather than in a browser.
    #[test]
    fn every_referenced_file_is_served() {
        let mut referenced = Vec::new();
        for (name, body, _) in FILES.iter().filter(|(n, _, _)| n.ends_with(".js")) {
            let text = std::str::from_utf8(body).unwrap();
            for part in text.split("from './").skip(1) {
                let file = part.split('\'').next().unwrap();
                referenced.push((name.to_string(), file.to_owned()));
            }
            for part in text.split("import('./").skip(1) {
                let file = part.split('\'').next().unwrap();
                referenced.push((name.to_string(), file.to_owned()));
            }
            for part in text.split("'/dashboard/").skip(1) {
                let file = part.split('\'').next().unwrap();
                referenced.push((name.to_string(), file.to_owned()));
            }
        }
        for part in INDEX.split("/dashboard/").skip(1) {
            let file = part.split('"').next().unwrap();
            referenced.push(("index.html".into(), file.to_owned()));
        }
        assert!(referenced.len() > 10, "{referenced:?}");
        for (from, file) in referenced {
            assert!(
                served(&file),
                "{from} refers to {file}, which is not served"
            );
        }
    }

    #[test]
    fn the_policy_names_only_this_servers_websocket_origin() {
        let csp = content_security_policy(Some("127.0.0.1:7433"));
        assert!(
            csp.contains("connect-src 'self' ws://127.0.0.1:7433 wss://127.0.0.1:7433;"),
            "{csp}"
        );
        assert!(csp.contains("default-src 'self'"));
        for odd in [
            None,
            Some(""),
            Some("evil.example; script-src *"),
            Some("a b"),
        ] {
            let csp = content_security_policy(odd);
            assert!(csp.contains("connect-src 'self';"), "{odd:?}: {csp}");
            assert!(!csp.contains('*'), "{odd:?}: {csp}");
        }
    }

    #[test]
    fn vendored_files_are_the_libraries() {
        let (_, xterm, _) = FILES.iter().find(|(n, _, _)| *n == "xterm.mjs").unwrap();
        let xterm = std::str::from_utf8(xterm).unwrap();
        assert!(xterm.contains("as Terminal"), "xterm.mjs exports Terminal");
        let (_, fit, _) = FILES
            .iter()
            .find(|(n, _, _)| *n == "addon-fit.mjs")
            .unwrap();
        assert!(std::str::from_utf8(fit).unwrap().contains("as FitAddon"));
        let (_, purify, _) = FILES.iter().find(|(n, _, _)| *n == "purify.mjs").unwrap();
        let purify = std::str::from_utf8(purify).unwrap();
        assert!(purify.contains("DOMPurify") && purify.contains("as default"));
        let (_, marked, _) = FILES.iter().find(|(n, _, _)| *n == "marked.mjs").unwrap();
        assert!(std::str::from_utf8(marked).unwrap().contains("as marked"));
    }
}
