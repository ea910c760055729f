//! The OpenAPI document generated from the handlers, finished with examples
//! (path and query parameters, a request body the server accepts as it is, a
//! success answer) and a curl line (`x-codeSamples`) for every operation; and
//! the page that renders it, with Markdown descriptions rendered by the
//! vendored `marked` and sanitised by the vendored DOMPurify, all served from
//! the binary.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use serde_json::{json, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{accounts, exec, health, logs, sandboxes};
use super::{update, volumes};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The introduction of the document, Markdown.
const INTRO: &str = "Create, run and tear down isolated Docker sandboxes.\n\n\
Every path below is relative to the server's address (`$STOCKADE_URL`, e.g. \
`http://127.0.0.1:7433`). Requests and answers are JSON in camelCase unless an \
operation says otherwise; send the API token as `Authorization: Bearer $STOCKADE_TOKEN`. \
An error answers `{\"error\": {\"code\", \"message\", \"details\"}}`, and a validation \
error names each bad field in `details.fields[]`.\n\n\
Not described here, because they belong to other products' APIs and are documented \
by them: the E2B-compatible API under `/e2b/` (E2B's own API, for E2B's SDKs), and \
what Prime Intellect's `prime-sandboxes` SDK calls beyond this API \
(`DELETE /api/v1/sandbox`, `/api/v1/sandbox/status:batchGet`, \
`/api/v1/sandbox/{id}/auth`, `/api/v1/sandbox/{id}/error-context`, checkpoints, and \
the sandbox gateway under `/gateway/`). The web dashboard is served at `/`.";

#[derive(OpenApi)]
#[openapi(
    info(title = "Stockade API", description = "Create, run and tear down isolated Docker sandboxes."),
    paths(
        sandboxes::create, sandboxes::list, sandboxes::get, sandboxes::start, sandboxes::stop,
        sandboxes::pause, sandboxes::resume,
        sandboxes::destroy, sandboxes::usage_history, sandboxes::bulk_delete,
        accounts::create, accounts::list, accounts::me, accounts::sign_in, accounts::sign_out,
        health::health, openapi_json, docs_page,
    ),
    components(schemas(
        stockade_api::ErrorBody, stockade_api::ErrorDetail,
        stockade_api::CreateSandboxRequest, stockade_api::SandboxResponse, stockade_api::VolumeSummary,
        stockade_api::ResourceUsage,
        stockade_api::UsageSample, stockade_api::UsageHistoryResponse, stockade_api::SandboxOrigin,
        stockade_api::DiskUsageSummary,
        stockade_api::DiskHealth,
        stockade_api::DiskAreaHealth,
        stockade_api::EgressHealth,
        stockade_api::ListSandboxesResponse, stockade_api::BulkDeleteRequest,
        stockade_api::BulkDeleteResponse, stockade_api::BulkDeleteResult,
        stockade_api::HealthResponse, stockade_api::DockerHealth, stockade_api::DatabaseHealth,
        stockade_api::IsolationHealth, stockade_api::LeaderHealth,
        stockade_api::CreateAccountRequest, stockade_api::CreateAccountResponse,
        stockade_api::AccountResponse, stockade_api::ListAccountsResponse, stockade_api::WhoAmIResponse,
        stockade_api::SessionRequest,
    )),
    modifiers(&BearerAuth),
    // The order of the reference page: what a user does first, the
    // administration last.
    tags(
        (name = "sandboxes", description = "Sandbox lifecycle: create, list, start, stop, pause, resume, delete"),
        (name = "exec", description = "Commands and background processes in a sandbox"),
        (name = "code", description = "The code interpreter: cells and contexts"),
        (name = "files", description = "Files of a sandbox"),
        (name = "logs", description = "The main process's output"),
        (name = "ports", description = "Exposed ports and the proxy's tokens"),
        (name = "snapshots", description = "Snapshots, forks and uploads"),
        (name = "templates", description = "Templates: sandbox images built from steps or a Dockerfile"),
        (name = "volumes", description = "Volumes and orphan cleanup"),
        (name = "shared-volumes", description = "Named volumes that sandboxes share, and their files"),
        (name = "events", description = "Lifecycle events, webhooks and the audit log"),
        (name = "teams", description = "Teams and their members"),
        (name = "accounts", description = "Accounts, quotas and API tokens (mostly for administrators)"),
        (name = "hosts", description = "Docker hosts (administrators)"),
        (name = "system", description = "Health, metrics and this documentation"),
    )
)]
pub struct ApiDoc;

/// The whole OpenAPI document as utoipa builds it: the core API plus each
/// feature module's own `#[derive(OpenApi)]` part, merged, every operation
/// but the public ones marked as needing the bearer token.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(super::ports::PortsApi::openapi());
    doc.merge(logs::LogsApi::openapi());
    doc.merge(exec::ExecApi::openapi());
    doc.merge(super::code::CodeApi::openapi());
    doc.merge(super::files::FilesApi::openapi());
    doc.merge(super::terminal::TerminalApi::openapi());
    doc.merge(super::teams::TeamsApi::openapi());
    doc.merge(super::hosts::HostsApi::openapi());
    doc.merge(accounts::QuotasApi::openapi());
    doc.merge(super::tokens::TokensApi::openapi());
    doc.merge(crate::metrics::MetricsApi::openapi());
    doc.merge(volumes::VolumesApi::openapi());
    doc.merge(update::UpdateApi::openapi());
    doc.merge(super::snapshots::SnapshotsApi::openapi());
    doc.merge(super::shared_volumes::SharedVolumesApi::openapi());
    doc.merge(super::templates::TemplatesApi::openapi());
    doc.merge(super::events::EventsApi::openapi());
    super::apidoc::require_bearer(&mut doc);
    doc
}

/// The document as served: [`openapi`] with the examples of
/// [`examples::operations`] and a curl line per operation. Built once.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = serde_json::to_value(openapi()).expect("an OpenAPI document serialises");
        finish(&mut doc);
        doc
    })
}

/// The HTTP methods an OpenAPI path item may hold, in the order the curl
/// lines and the page list them.
pub const METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

/// Adds the introduction, the examples and the curl lines.
fn finish(doc: &mut Value) {
    doc["info"]["description"] = Value::String(INTRO.to_owned());
    add_aliases(doc);
    let table = examples::operations();
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        for method in METHODS {
            let Some(op) = item.get_mut(*method) else {
                continue;
            };
            let example = table
                .iter()
                .find(|e| e.method.eq_ignore_ascii_case(method) && e.path == path);
            for p in op["parameters"].as_array_mut().into_iter().flatten() {
                let name = p["name"].as_str().unwrap_or_default();
                let place = p["in"].as_str().unwrap_or_default();
                if let Some(v) = examples::parameter(path, name, place) {
                    p["example"] = v;
                }
            }
            if let Some(e) = example {
                if let Some(request) = &e.request {
                    if let Some(content) = op["requestBody"]["content"].as_object_mut() {
                        for media in content.values_mut() {
                            media["example"] = request.clone();
                        }
                    }
                }
                if let Some((_, answer)) = success(op) {
                    for (media, c) in answer["content"].as_object_mut().into_iter().flatten() {
                        // JSON answers take the JSON example, others the text.
                        let text = e.text.map(|t| json!(t));
                        let example = match &e.response {
                            Some(v) if media.contains("json") && !v.is_string() => Some(v.clone()),
                            Some(v) if !media.contains("json") && v.is_string() => Some(v.clone()),
                            _ if !media.contains("json") => text,
                            _ => None,
                        };
                        if let Some(example) = example {
                            c["example"] = example;
                        }
                    }
                }
            }
            let sample = curl(method, path, op, example);
            op["x-codeSamples"] = json!([{ "lang": "Shell", "label": "curl", "source": sample }]);
        }
    }
}

/// Routes that run the same handler as another documented route: (method,
/// path, the route it repeats, what to add to its description).
const ALIASES: &[(&str, &str, (&str, &str), &str)] = &[(
    "post",
    "/api/v1/sandbox/{id}/processes/{pid}/kill",
    ("delete", "/api/v1/sandbox/{id}/processes/{pid}"),
    "The same as `DELETE /api/v1/sandbox/{id}/processes/{pid}`, for clients that cannot send DELETE.",
)];

/// Documents each of [`ALIASES`] as a copy of the operation it repeats.
fn add_aliases(doc: &mut Value) {
    for (method, path, (of_method, of_path), note) in ALIASES {
        let mut op = doc["paths"][*of_path][*of_method].clone();
        if op.is_null() {
            continue;
        }
        let described = op["description"].as_str().unwrap_or_default();
        op["description"] = Value::String(format!("{described}\n\n{note}").trim().to_owned());
        let id = op["operationId"].as_str().unwrap_or("operation");
        op["operationId"] = Value::String(format!("{id}_by_{method}"));
        if let Some(paths) = doc["paths"].as_object_mut() {
            let item = paths.entry(path.to_string()).or_insert_with(|| json!({}));
            item[*method] = op;
        }
    }
}

/// The operation's first success answer (2xx, or 101 for a WebSocket).
fn success(op: &mut Value) -> Option<(String, &mut Value)> {
    let responses = op["responses"].as_object_mut()?;
    let code = responses
        .keys()
        .filter(|c| c.starts_with('2') || c.as_str() == "101")
        .min()
        .cloned()?;
    let answer = responses.get_mut(&code)?;
    Some((code, answer))
}

/// A curl line for the operation: method, the path with its path and
/// required query parameters filled from their examples, the token when the
/// operation needs one, and the request example.
fn curl(method: &str, path: &str, op: &Value, example: Option<&examples::Operation>) -> String {
    let params: Vec<&Value> = op["parameters"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut url = path.to_owned();
    let mut query = Vec::new();
    let mut headers = Vec::new();
    for p in &params {
        let name = p["name"].as_str().unwrap_or_default();
        let value = match &p["example"] {
            Value::String(s) => s.clone(),
            Value::Null => continue,
            other => other.to_string(),
        };
        match p["in"].as_str() {
            Some("path") => url = url.replace(&format!("{{{name}}}"), &value),
            Some("query") if p["required"] == Value::Bool(true) => {
                query.push(format!("{name}={}", query_escape(&value)))
            }
            Some("header") if p["required"] == Value::Bool(true) => {
                headers.push(format!("-H \"{name}: {value}\""))
            }
            _ => {}
        }
    }
    if !query.is_empty() {
        url = format!("{url}?{}", query.join("&"));
    }
    let mut line = vec!["curl -sS".to_owned()];
    let streams = op["responses"]
        .as_object()
        .into_iter()
        .flat_map(|r| r.values())
        .any(|r| r["content"].get("text/event-stream").is_some());
    if streams {
        line[0].push_str(" -N");
    }
    if method != "get" {
        line[0].push_str(&format!(" -X {}", method.to_ascii_uppercase()));
    }
    line[0].push_str(&format!(" \"$STOCKADE_URL{url}\""));
    if op.get("security").is_some() {
        line.push("-H \"Authorization: Bearer $STOCKADE_TOKEN\"".to_owned());
    }
    line.extend(headers);
    for (name, value) in example.map(|e| e.headers).unwrap_or_default() {
        line.push(format!("-H \"{name}: {value}\""));
    }
    let content = op["requestBody"]["content"].as_object();
    let media = content.and_then(|c| c.keys().next().cloned());
    match (media.as_deref(), example.and_then(|e| e.request.as_ref())) {
        (Some("application/json"), Some(body)) => {
            line.push("-H 'Content-Type: application/json'".to_owned());
            line.push(format!(
                "-d {}",
                stockade_core::shell::quote(&body.to_string())
            ));
        }
        (Some(media), _) => {
            let file = example.and_then(|e| e.upload).unwrap_or("body.bin");
            line.push(format!("-H 'Content-Type: {media}'"));
            line.push(format!("--data-binary @{file}"));
        }
        (None, _) => {}
    }
    if let Some(file) = example.and_then(|e| e.download) {
        line.push(format!("-o {file}"));
    }
    line.join(" \\\n  ")
}

/// Percent-encodes a query value (what curl would send as typed).
fn query_escape(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Serve the OpenAPI document (JSON) that this page and the SDKs read.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "system",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
pub async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(document()).expect("a JSON value serialises"),
    )
        .into_response()
}

/// Serve this documentation as a web page (works offline: everything it
/// needs comes from the server).
#[utoipa::path(get, path = "/api/v1/docs", tag = "system",
    responses((status = 200, description = "The page", content_type = "text/html")))]
pub async fn docs_page() -> Html<&'static str> {
    Html(page())
}

/// The page with the Markdown renderer and the sanitiser inlined.
fn page() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| {
        // A `</script` inside an inlined script would end it early; `<\/`
        // means the same in JavaScript strings, templates and patterns.
        // Source-map comments are dropped: the maps are not served.
        let inline = |js: &str| {
            js.lines()
                .filter(|l| !l.starts_with("//# sourceMappingURL="))
                .collect::<Vec<_>>()
                .join("\n")
                .replace("</script", r"<\/script")
        };
        include_str!("../../assets/api-docs.html")
            .replace(
                "/*MARKED*/",
                &inline(include_str!(
                    "../../assets/vendor/node_modules/marked/lib/marked.umd.js"
                )),
            )
            .replace(
                "/*DOMPURIFY*/",
                &inline(include_str!(
                    "../../assets/vendor/node_modules/dompurify/dist/purify.min.js"
                )),
            )
    })
}

/// The examples of the document, in one place: a request body for every
/// operation that takes one (the server accepts each as it is: the API tests
/// send them), an answer for every success that has a body, and the values of
/// path and query parameters.
mod examples {
    use serde_json::{json, Value};

    /// The examples of one operation.
    pub struct Operation {
        pub method: &'static str,
        pub path: &'static str,
        /// The request body (JSON, or the text of a file).
        pub request: Option<Value>,
        /// The success answer's body: JSON, or the text of a non-JSON one.
        pub response: Option<Value>,
        /// The text of a non-JSON answer, for an operation whose answer is
        /// JSON or not depending on what it reads.
        pub text: Option<&'static str>,
        /// Headers the curl line sends besides the token.
        pub headers: &'static [(&'static str, &'static str)],
        /// The file a non-JSON request body is read from.
        pub upload: Option<&'static str>,
        /// The file a non-JSON answer is saved to.
        pub download: Option<&'static str>,
    }

    fn op(method: &'static str, path: &'static str) -> Operation {
        Operation {
            method,
            path,
            request: None,
            response: None,
            text: None,
            headers: &[],
            upload: None,
            download: None,
        }
    }

    impl Operation {
        fn request(mut self, v: Value) -> Self {
            self.request = Some(v);
            self
        }
        fn response(mut self, v: Value) -> Self {
            self.response = Some(v);
            self
        }
        fn text(mut self, t: &'static str) -> Self {
            self.text = Some(t);
            self
        }
        fn headers(mut self, h: &'static [(&'static str, &'static str)]) -> Self {
            self.headers = h;
            self
        }
        fn upload(mut self, file: &'static str) -> Self {
            self.upload = Some(file);
            self
        }
        fn download(mut self, file: &'static str) -> Self {
            self.download = Some(file);
            self
        }
    }

    pub const SANDBOX_ID: &str = "k3v9x2m7q4wz";
    pub const FORK_ID: &str = "p8d2h5r1c6tn";
    pub const SNAPSHOT_ID: &str = "s4n7q2b9x1kd";
    pub const PROCESS_ID: &str = "f2m8c4w7z1qa";
    pub const ACCOUNT_ID: &str = "a7k2m9p4x8q3w6z1";
    pub const ADMIN_ID: &str = "h3j8d2k5n9w4q7r1";
    pub const TEAM_ID: &str = "t5r8n2c7v4b9m1x6";
    pub const VOLUME: &str = "agent-sandbox-k3v9x2m7q4wz";
    pub const SHARED_VOLUME: &str = "datasets";
    pub const SHARED_VOLUME_ID: &str = "v6n2k8q4m1z7";
    pub const UPLOAD_ID: &str = "u2f8k4m9q7w3z6x1c5v8b2n4";
    pub const HOST_NAME: &str = "docker-2";
    pub const TOKEN_ID: &str = "k4t9w2m7q3x8";
    pub const CONTEXT_ID: &str = "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f";
    pub const WEBHOOK_ID: &str = "w7h2k9m4q1x8z3c6";
    pub const DELIVERY_ID: &str = "d8q3w6z1x4c7v2b5n9m3k6j1";
    pub const TEMPLATE_ID: &str = "m2t8p4w9k1x6";
    pub const BUILD_ID: &str = "0b6c5a43-7c1e-4d2a-9f3e-2b8d1c0a9e11";
    pub const FILES_HASH: &str = "9f2c4b1a7e3d8c6f5a0b2d4e6f8a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d1f2a";
    const CREATED: &str = "2026-01-15T09:30:00Z";
    const STARTED: &str = "2026-01-15T09:30:02Z";

    /// The example value of a parameter of `path`.
    pub fn parameter(path: &str, name: &str, place: &str) -> Option<Value> {
        let v = match (place, name) {
            ("path", "id") if path.starts_with("/api/v1/snapshots/") => json!(SNAPSHOT_ID),
            ("path", "id") if path.starts_with("/api/v1/webhooks/") => json!(WEBHOOK_ID),
            ("path", "id") if path.starts_with("/api/v1/templates/") => json!(TEMPLATE_ID),
            ("path", "build") => json!(BUILD_ID),
            ("path", "tag") => json!("stable"),
            ("path", "hash") => json!(FILES_HASH),
            ("query", "logsOffset") => json!(0),
            ("query", "limit") => json!(100),
            ("path", "id") => json!(SANDBOX_ID),
            ("path", "pid") => json!(PROCESS_ID),
            ("path", "context_id") => json!(CONTEXT_ID),
            ("path", "team_id") => json!(TEAM_ID),
            ("path", "account_id") => json!(ACCOUNT_ID),
            ("path", "token_id") => json!(TOKEN_ID),
            ("path", "delivery_id") => json!(DELIVERY_ID),
            ("path", "name") if path.starts_with("/api/v1/hosts/") => json!(HOST_NAME),
            ("path", "name") => json!(VOLUME),
            ("path", "volume") => json!(SHARED_VOLUME),
            ("query", "path") if path.ends_with("/files/mkdir") => json!("/results"),
            ("query", "path") if path.starts_with("/api/v1/shared-volumes/") => {
                json!("/datasets/train.csv")
            }
            ("path", "port") => json!(8000),
            ("path", "path") => json!("index.html"),
            ("query", "path") if path.ends_with("/mkdir") => json!("archive"),
            ("query", "path") if path.ends_with("/watch") => json!("."),
            ("query", "path") if path.ends_with("/archive") => json!("."),
            ("query", "path") => json!("notes.txt"),
            ("query", "confirm") => json!(true),
            ("query", "server") => json!(HOST_NAME),
            ("header", "X-Stockade-CSRF") => json!("1"),
            _ => return None,
        };
        Some(v)
    }

    /// A shared volume as the API shows it.
    fn shared_volume(mounted: bool) -> Value {
        json!({
            "id": SHARED_VOLUME_ID,
            "name": SHARED_VOLUME,
            "server": "local",
            "sizeGB": 20,
            "labels": {"team": "ml"},
            "status": "READY",
            "createdAt": CREATED,
            "mounts": if mounted {
                json!([{"sandboxId": SANDBOX_ID, "path": "/data", "readOnly": true}])
            } else {
                json!([])
            },
        })
    }

    /// An entry of a shared volume as the API shows it.
    fn volume_entry(path: &str, kind: &str, size: u64) -> Value {
        json!({
            "name": path.rsplit('/').next().unwrap_or_default(),
            "path": path,
            "type": kind,
            "size": size,
            "mode": if kind == "directory" { 493 } else { 420 },
            "uid": 0,
            "gid": 0,
            "atime": STARTED,
            "mtime": STARTED,
            "ctime": STARTED,
        })
    }

    /// A code context as the API shows it.
    fn code_context() -> Value {
        json!({"id": CONTEXT_ID, "language": "python", "cwd": "/tmp"})
    }

    /// A sandbox as the API shows it.
    fn sandbox(id: &str, name: &str, status: &str) -> Value {
        let running = status == "RUNNING";
        let paused = status == "PAUSED";
        json!({
            "id": id,
            "name": name,
            "accountId": ADMIN_ID,
            "teamId": null,
            "dockerImage": "node:20-bookworm",
            "runtime": null,
            "startCommand": null,
            "cpuCores": 1,
            "memoryGB": 1,
            "diskSizeGB": 10,
            "gpuCount": 0,
            "networkAccess": true,
            "networkPolicy": "allow-all",
            "status": status,
            "timeoutMinutes": 60,
            "environmentVars": {"NODE_ENV": "production"},
            "labels": ["ci"],
            "tags": {"team": "platform"},
            "ports": [8000],
            "persistent": true,
            "server": "local",
            "createdAt": CREATED,
            "updatedAt": STARTED,
            "startedAt": STARTED,
            "stoppedAt": if running || paused { Value::Null } else { json!("2026-01-15T10:05:00Z") },
            "terminatedAt": null,
            "pausedAt": if paused { json!("2026-01-15T10:05:00Z") } else { Value::Null },
            "lifecycle": {"onTimeout": "pause", "autoResume": true, "idleTimeoutMinutes": 10},
            "diskMountPath": "/workspace",
            "volume": {"name": format!("agent-sandbox-{id}"), "mountPath": "/workspace"},
            "sessionExpiresAt": if running { json!("2026-01-15T10:30:02Z") } else { Value::Null },
            "logsUrl": format!("/api/v1/sandbox/{id}/logs"),
            "metadata": {"container_id": "0e588190fb0e2d29445ef096c6a347d64801341540a26e85c56cf9163347d97f", "volume_name": format!("agent-sandbox-{id}")},
        })
    }

    /// A sandbox's details: with its live usage and disk use.
    fn sandbox_details() -> Value {
        let mut v = sandbox(SANDBOX_ID, "build-worker", "RUNNING");
        v["uptimeSeconds"] = json!(42);
        v["volume"] =
            json!({"name": VOLUME, "mountPath": "/workspace", "sizeBytes": 6, "size": "6 B"});
        v["usage"] = json!({
            "cpuPercent": 0.4, "memoryBytes": 815104, "memoryLimitBytes": 1073741824,
            "memory": "815.1 KB / 1.1 GB", "networkRxBytes": 376, "networkTxBytes": 0,
            "pids": 3, "sampledAt": "2026-01-15T09:30:44Z"
        });
        v["disk"] = json!({"workspaceBytes": 6, "rootFsBytes": 0});
        v
    }

    fn account(id: &str, name: &str, admin: bool) -> Value {
        json!({"id": id, "name": name, "isAdmin": admin, "createdAt": CREATED})
    }

    /// An account's quota, as set and as read back.
    fn quota() -> Value {
        json!({"sandboxes": 10, "cpuCores": 4, "memoryGB": 8, "diskGB": 100,
               "snapshots": 20, "snapshotGB": 50, "uploads": 5, "uploadGB": 2,
               "volumes": 10, "volumeGB": 200})
    }

    fn team(members: bool) -> Value {
        let members = if members {
            json!([{"id": ACCOUNT_ID, "name": "ci-runner"}])
        } else {
            json!([])
        };
        json!({"id": TEAM_ID, "name": "research", "members": members, "createdAt": CREATED})
    }

    fn process(status: &str) -> Value {
        let mut v = json!({
            "processId": PROCESS_ID, "sandboxId": SANDBOX_ID, "command": ["python3", "-m", "http.server", "8000"],
            "status": status, "exitCode": null, "startedAt": STARTED, "durationMs": 1520,
            "stdout": "", "stderr": "", "truncated": false
        });
        if status == "killed" {
            v["exitCode"] = json!(137);
            v["finishedAt"] = json!("2026-01-15T09:30:04Z");
            v["message"] = json!("killed on request");
        }
        v
    }

    fn file(name: &str, path: &str, kind: &str, size: u64) -> Value {
        json!({"name": name, "path": path, "type": kind, "size": size,
               "mode": if kind == "dir" { "0755" } else { "0644" }, "modifiedAt": "2026-01-15T09:31:00Z"})
    }

    fn snapshot(status: &str) -> Value {
        let mut v = json!({
            "id": SNAPSHOT_ID, "name": "before-upgrade", "accountId": ADMIN_ID,
            "sourceSandboxId": SANDBOX_ID, "status": status, "image": format!("stockade-snapshot:{SNAPSHOT_ID}"),
            "workspaceKey": format!("snapshots/{SNAPSHOT_ID}/workspace.tar"),
            "workspaceBytes": 3584, "workspaceSize": "3.6 KB", "createdAt": CREATED
        });
        if status == "DELETED" {
            v["deletedAt"] = json!("2026-01-16T08:00:00Z");
        }
        v
    }

    fn build(status: &str) -> Value {
        let mut v = json!({
            "buildId": BUILD_ID, "templateId": TEMPLATE_ID, "status": status, "tags": ["v1"],
            "createdAt": CREATED
        });
        if status != "waiting" {
            v["startedAt"] = json!(STARTED);
        }
        if status == "ready" {
            v["finishedAt"] = json!("2026-01-15T09:31:12Z");
            v["image"] = json!(format!("stockade-template:{BUILD_ID}"));
            v["config"] = json!({"env": {"APP_ENV": "production"}, "workdir": "/app",
                                 "user": "node", "startCmd": "node server.js",
                                 "readyCmd": "curl -fs localhost:3000/health"});
        }
        v
    }

    fn template(builds: Option<Vec<Value>>) -> Value {
        let mut v = json!({
            "templateId": TEMPLATE_ID, "names": ["web-app"], "public": false, "shared": false,
            "cpuCount": 2, "memoryMB": 2048, "diskSizeGB": 20, "createdAt": CREATED, "updatedAt": CREATED
        });
        if let Some(b) = builds {
            v["builds"] = json!(b);
        }
        v
    }

    fn port(n: u16) -> Value {
        json!({"sandboxId": SANDBOX_ID, "port": n,
               "url": format!("https://stockade.example.com/proxy/{SANDBOX_ID}/{n}/"),
               "hostUrl": format!("https://{n}-{SANDBOX_ID}.sandboxes.example.com/")})
    }

    fn volume() -> Value {
        json!({"name": VOLUME, "sandboxId": SANDBOX_ID, "accountId": ADMIN_ID, "sandboxStatus": "RUNNING",
               "inUse": true, "orphaned": false, "sizeBytes": 6, "size": "6 B", "createdAt": CREATED})
    }

    /// A Docker host as the API shows it: the server's own engine registered
    /// a second time, as the examples do.
    fn host(state: &str, reason: Option<&str>) -> Value {
        json!({
            "name": HOST_NAME, "dockerHost": "unix:///var/run/docker.sock", "tls": null,
            "address": null, "labels": {"zone": "eu-1"},
            "capacity": {"cpus": 8, "memoryGB": 31.3},
            "state": state, "stateReason": reason, "autoCordoned": false, "own": false,
            "health": {"healthy": true, "reason": null, "checkedAt": STARTED, "failingSince": null,
                       "cpus": 8, "memoryBytes": 33607864320u64, "diskFreeBytes": 52613349376u64},
            "sandboxes": 2, "reserved": {"cpuCores": 2, "memoryGB": 2},
            "createdAt": CREATED, "updatedAt": STARTED
        })
    }

    /// A lifecycle event as the feed, the stream and deliveries carry it.
    fn event(kind: &str, cursor: u64, data: Value) -> Value {
        json!({"version": "v1", "id": "e4r8t2y6u1i5o9p3a7s1d5f9", "type": kind, "eventData": data,
               "sandboxBuildId": null, "sandboxExecutionId": format!("{SANDBOX_ID}-1768469402000"),
               "sandboxId": SANDBOX_ID, "sandboxTeamId": ADMIN_ID, "sandboxTemplateId": "node:20-bookworm",
               "timestamp": STARTED, "resourceType": "sandbox", "resourceId": SANDBOX_ID,
               "cursor": cursor.to_string()})
    }

    fn webhook(enabled: bool) -> Value {
        json!({"id": WEBHOOK_ID, "teamID": ADMIN_ID, "name": "deploy-bot", "createdAt": CREATED,
               "enabled": enabled, "url": "https://hooks.example.com/stockade",
               "events": ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"]})
    }

    fn delivery(status: &str) -> Value {
        json!({"id": DELIVERY_ID, "webhookId": WEBHOOK_ID, "eventId": "e4r8t2y6u1i5o9p3a7s1d5f9",
        "eventType": "sandbox.lifecycle.created", "sandboxId": SANDBOX_ID, "status": status,
        "attempts": 2, "createdAt": STARTED, "deliveredAt": "2026-01-15T09:30:08Z",
        "attemptLog": [
            {"id": "a1s2d3f4g5h6j7k8l9z1x2c3", "at": "2026-01-15T09:30:08Z", "statusCode": 204, "durationMs": 41},
            {"id": "q1w2e3r4t5y6u7i8o9p1a2s3", "at": STARTED, "statusCode": 503,
             "error": "the receiver answered 503", "durationMs": 12}
        ]})
    }

    /// Every operation's examples.
    pub fn operations() -> Vec<Operation> {
        vec![
            // Sandboxes.
            op("post", "/api/v1/sandbox")
                .request(json!({
                    "name": "build-worker",
                    "cpuCores": 1,
                    "memoryGB": 1,
                    "timeoutMinutes": 60,
                    "environmentVars": {"NODE_ENV": "production"},
                    "labels": ["ci"],
                    "tags": {"team": "platform"},
                    "ports": [8000],
                    "lifecycle": {"onTimeout": "pause", "autoResume": true, "idleTimeoutMinutes": 10}
                }))
                .response(sandbox(SANDBOX_ID, "build-worker", "RUNNING")),
            op("get", "/api/v1/sandbox").response(json!({
                "sandboxes": [sandbox(SANDBOX_ID, "build-worker", "RUNNING")],
                "total": 1, "page": 1, "per_page": 50, "has_next": false,
                "perPage": 50, "hasNext": false
            })),
            op("get", "/api/v1/sandbox/{id}").response(sandbox_details()),
            op("get", "/api/v1/sandbox/{id}/usage/history").response(json!({"samples": [
                {"at": "2026-01-15T09:30:43Z", "cpuPercent": 0.6, "memoryBytes": 811008, "memoryLimitBytes": 1073741824},
                {"at": "2026-01-15T09:30:44Z", "cpuPercent": 0.4, "memoryBytes": 815104, "memoryLimitBytes": 1073741824}
            ]})),
            op("patch", "/api/v1/sandbox/{id}")
                .request(json!({"timeoutMinutes": 120, "labels": ["ci", "nightly"], "cpuCores": 2}))
                .response({
                    let mut s = sandbox(SANDBOX_ID, "build-worker", "RUNNING");
                    s["timeoutMinutes"] = json!(120);
                    s["labels"] = json!(["ci", "nightly"]);
                    s["cpuCores"] = json!(2);
                    json!({
                        "sandbox": s,
                        "applied": {"now": ["timeoutMinutes", "labels", "cpuCores"], "nextStart": []},
                        "notes": ["cpuCores/memoryGB: updated live on the running container"]
                    })
                }),
            op("post", "/api/v1/sandbox/{id}/start").response(sandbox(SANDBOX_ID, "build-worker", "RUNNING")),
            op("post", "/api/v1/sandbox/{id}/stop").response(sandbox(SANDBOX_ID, "build-worker", "STOPPED")),
            op("post", "/api/v1/sandbox/{id}/pause").response(sandbox(SANDBOX_ID, "build-worker", "PAUSED")),
            op("post", "/api/v1/sandbox/{id}/resume").response(sandbox(SANDBOX_ID, "build-worker", "RUNNING")),
            op("delete", "/api/v1/sandbox/{id}").response({
                let mut s = sandbox(SANDBOX_ID, "build-worker", "TERMINATED");
                s["terminatedAt"] = json!("2026-01-15T10:05:00Z");
                s
            }),
            op("delete", "/api/v1/sandbox/bulk")
                .request(json!({"ids": [SANDBOX_ID]}))
                .response(json!({"results": [{"id": SANDBOX_ID, "deleted": true}]})),
            // Events, webhooks, audit.
            op("get", "/api/v1/events").response(json!({
                "events": [event("sandbox.lifecycle.created", 41, Value::Null),
                           event("sandbox.lifecycle.stopped", 42, json!({"reason": "session timeout"}))],
                "nextCursor": "42"
            })),
            op("get", "/api/v1/events/stream").text(
                "event: sandbox.lifecycle.paused\nid: 43\ndata: {\"version\":\"v1\",\"type\":\"sandbox.lifecycle.paused\",\"sandboxId\":\"k3v9x2m7q4wz\",\"cursor\":\"43\"}\n\n",
            ),
            op("get", "/api/v1/webhooks").response(json!([webhook(true)])),
            op("post", "/api/v1/webhooks")
                .request(json!({"name": "deploy-bot", "url": "https://hooks.example.com/stockade",
                                "events": ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"]}))
                .response({
                    let mut w = webhook(true);
                    w["signatureSecret"] = json!("Zp4Qv8Lr2Tx6Wm1Kc9Hd3Jf7Bn5Gs0Ya8Ue2Ri4Ow");
                    w
                }),
            op("get", "/api/v1/webhooks/{id}").response(webhook(true)),
            op("patch", "/api/v1/webhooks/{id}")
                .request(json!({"enabled": false}))
                .response(webhook(false)),
            op("delete", "/api/v1/webhooks/{id}"),
            op("get", "/api/v1/webhooks/{id}/deliveries").response(json!({"deliveries": [delivery("delivered")]})),
            op("post", "/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver").response({
                let mut d = delivery("pending");
                d["nextAttemptAt"] = json!("2026-01-15T10:00:00Z");
                d.as_object_mut().map(|o| o.remove("deliveredAt"));
                d
            }),
            op("get", "/api/v1/audit").response(json!({
                "entries": [{"id": "z8x7c6v5b4n3m2l1k9j8h7g6", "accountId": ADMIN_ID, "tokenId": TOKEN_ID,
                             "clientIp": "203.0.113.7", "action": "DELETE /api/v1/sandbox/{id}",
                             "frontEnd": "cli", "resourceId": SANDBOX_ID, "status": 200,
                             "timestamp": "2026-01-15T10:05:00Z", "durationMs": 38, "cursor": "1207"}],
                "nextCursor": "1207"
            })),
            // Accounts.
            op("post", "/api/v1/accounts")
                .request(json!({"name": "ci-runner"}))
                .response(json!({"account": account(ACCOUNT_ID, "ci-runner", false),
                                 "token": "stk_WMi1CyK6HSTX91de5822zx39NW1FbcZOgEfF7ITi"})),
            op("get", "/api/v1/accounts/{account_id}/quota").response(json!({
                "accountId": ACCOUNT_ID,
                "quota": quota(),
                "usage": {"sandboxes": 3, "cpuCores": 2, "memoryGB": 4, "diskGB": 30,
                          "snapshots": 4, "snapshotGB": 3.25, "uploads": 1, "uploadGB": 0.02,
                          "volumes": 2, "volumeGB": 60}
            })),
            op("put", "/api/v1/accounts/{account_id}/quota")
                .request(quota())
                .response(json!({
                    "accountId": ACCOUNT_ID,
                    "quota": quota(),
                    "usage": {"sandboxes": 0, "cpuCores": 0, "memoryGB": 0, "diskGB": 0,
                              "snapshots": 0, "snapshotGB": 0, "uploads": 0, "uploadGB": 0,
                              "volumes": 0, "volumeGB": 0}
                })),
            op("post", "/api/v1/accounts/{account_id}/tokens")
                .request(json!({"name": "ci", "expiresInSeconds": 2_592_000}))
                .response(json!({
                    "id": TOKEN_ID, "name": "ci",
                    "token": "stk_Q8v2Lr5Xk1Tn7Wm3Pz9Hc4Jd6Fb0Ys2Ga8Ue5Ri1",
                    "createdAt": CREATED, "expiresAt": "2026-02-14T09:30:00Z"
                })),
            op("get", "/api/v1/accounts/{account_id}/tokens").response(json!({"tokens": [
                {"id": TOKEN_ID, "name": "ci", "kind": "api", "createdAt": CREATED,
                 "expiresAt": "2026-02-14T09:30:00Z", "lastUsedAt": STARTED},
                {"id": "s6p1v8n3k2w9", "name": "dashboard", "kind": "session",
                 "createdAt": STARTED, "expiresAt": "2026-01-15T21:30:02Z",
                 "lastUsedAt": STARTED, "parentId": TOKEN_ID}
            ]})),
            op("delete", "/api/v1/tokens/{token_id}"),
            op("post", "/api/v1/accounts/{account_id}/disable")
                .request(json!({}))
                .response({
                    let mut a = account(ACCOUNT_ID, "ci-runner", false);
                    a["disabledAt"] = json!("2026-01-15T10:00:00Z");
                    a
                }),
            op("post", "/api/v1/accounts/{account_id}/enable")
                .request(json!({}))
                .response(account(ACCOUNT_ID, "ci-runner", false)),
            op("get", "/api/v1/accounts").response(json!({"accounts": [
                account(ADMIN_ID, "admin", true), account(ACCOUNT_ID, "ci-runner", false)
            ]})),
            op("get", "/api/v1/me").response(json!({"account": account(ADMIN_ID, "admin", true), "teamIds": [TEAM_ID]})),
            op("post", "/api/v1/session")
                .request(json!({"token": "stk_WMi1CyK6HSTX91de5822zx39NW1FbcZOgEfF7ITi"}))
                .response(json!({"account": account(ADMIN_ID, "admin", true), "teamIds": []})),
            op("delete", "/api/v1/session"),
            // System.
            op("get", "/api/v1/health").response(json!({
                "status": "healthy", "version": "0.1.0",
                "docker": {"status": "healthy", "version": "20.10.24", "apiVersion": "1.41", "os": "linux",
                           "arch": "amd64", "runtimes": ["runc"]},
                "database": {"status": "healthy", "backend": "sqlite"},
                "isolation": {"status": "ok", "checkedAt": STARTED},
                "disk": {"enforced": true,
                         "workspace": {"enforced": true, "method": "volume-size"},
                         "rootFs": {"enforced": true, "method": "storage-opt"}},
                "egress": {"status": "running"},
                "leader": {"instance": "p4242-k3v9x2qa", "isLeader": true, "holder": "p4242-k3v9x2qa",
                           "expiresAt": STARTED}
            })),
            op("get", "/metrics").response(json!(
                "# TYPE stockade_sandboxes gauge\nstockade_sandboxes{status=\"RUNNING\"} 1\n"
            )),
            op("get", "/api/v1/openapi.json").response(json!({"openapi": "3.1.0", "info": {"title": "Stockade API"}, "paths": {}})),
            op("get", "/api/v1/docs").response(json!("<!doctype html>…")),
            // Commands and processes.
            op("post", "/api/v1/sandbox/{id}/exec")
                .request(json!({"shell": "echo hello; uname -s", "env": {"GREETING": "hi"}, "timeoutSeconds": 60}))
                .response(json!({"exitCode": 0, "stdout": "hello\nLinux\n", "stderr": "", "durationMs": 3,
                                 "timedOut": false, "truncated": false}))
                .text("event: stdout\ndata: hello\n\nevent: stdout\ndata: Linux\n\nevent: exit\ndata: {\"exitCode\":0,\"timedOut\":false,\"durationMs\":3}\n\n"),
            op("get", "/api/v1/sandbox/{id}/processes").response(json!({"processes": [process("running")]})),
            op("get", "/api/v1/sandbox/{id}/processes/{pid}").response(process("running")),
            op("post", "/api/v1/sandbox/{id}/processes/{pid}/wait").response(process("running")),
            op("delete", "/api/v1/sandbox/{id}/processes/{pid}").response(process("killed")),
            op("post", "/api/v1/sandbox/{id}/processes/{pid}/kill").response(process("killed")),
            // The code interpreter.
            op("post", "/api/v1/sandbox/{id}/code")
                .request(json!({"code": "import os\nprint(os.environ['GREETING'])\nx = 21\nx * 2",
                                "envVars": {"GREETING": "hello"}, "timeoutSeconds": 60}))
                .response(json!({"results": [{"isMainResult": true, "text": "42"}],
                                 "logs": {"stdout": ["hello\n"], "stderr": []}, "executionCount": 1}))
                .text("event: executionCount\ndata: {\"executionCount\":1}\n\nevent: stdout\ndata: {\"text\":\"hello\\n\",\"timestamp\":\"2026-01-15T09:31:00.123456Z\"}\n\nevent: result\ndata: {\"isMainResult\":true,\"text\":\"42\"}\n\nevent: end\ndata: {\"unexpected\":false}\n\n"),
            op("get", "/api/v1/sandbox/{id}/code/contexts").response(json!({"contexts": [code_context()]})),
            op("post", "/api/v1/sandbox/{id}/code/contexts")
                .request(json!({"language": "python", "cwd": "/tmp"}))
                .response(code_context()),
            op("delete", "/api/v1/sandbox/{id}/code/contexts/{context_id}"),
            op("post", "/api/v1/sandbox/{id}/code/contexts/{context_id}/restart"),
            op("post", "/api/v1/sandbox/{id}/code/contexts/{context_id}/interrupt"),
            op("get", "/api/v1/sandbox/{id}/terminal")
                .headers(&[("Connection", "Upgrade"), ("Upgrade", "websocket"),
                           ("Sec-WebSocket-Version", "13"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]),
            // Files.
            op("get", "/api/v1/sandbox/{id}/files")
                .response(json!({"path": "/workspace", "truncated": false, "entries": [
                    file("archive", "/workspace/archive", "dir", 0),
                    file("notes.txt", "/workspace/notes.txt", "file", 6)
                ]}))
                .text("hello\n")
                .download("notes.txt"),
            op("get", "/api/v1/sandbox/{id}/files/stat").response(file("notes.txt", "/workspace/notes.txt", "file", 6)),
            op("put", "/api/v1/sandbox/{id}/files")
                .request(json!("hello\n"))
                .upload("notes.txt")
                .response(file("notes.txt", "/workspace/notes.txt", "file", 6)),
            op("delete", "/api/v1/sandbox/{id}/files"),
            op("get", "/api/v1/sandbox/{id}/files/archive").download("workspace.tar.gz"),
            op("put", "/api/v1/sandbox/{id}/files/archive").upload("workspace.tar")
                .response(json!({"path": "/workspace", "entries": 12, "bytes": 48213})),
            op("post", "/api/v1/sandbox/{id}/files/archive").upload("workspace.tar")
                .response(json!({"path": "/workspace", "entries": 12, "bytes": 48213})),
            op("post", "/api/v1/sandbox/{id}/files/mkdir").response(file("archive", "/workspace/archive", "dir", 0)),
            op("post", "/api/v1/sandbox/{id}/files/move")
                .request(json!({"from": "notes.txt", "to": "archive/notes.txt"}))
                .response(file("notes.txt", "/workspace/archive/notes.txt", "file", 6)),
            op("get", "/api/v1/sandbox/{id}/files/watch").response(json!(
                "event: create\ndata: {\"path\":\"/workspace/notes.txt\",\"type\":\"file\"}\n\n"
            )),
            // Logs.
            op("get", "/api/v1/sandbox/{id}/logs").response(json!({
                "sandboxId": SANDBOX_ID, "logs": "listening on :8000\n",
                "lines": [{"id": "1768469402000000000-0", "timestamp": STARTED, "stream": "stdout", "text": "listening on :8000"}],
                "hasMore": false, "truncated": false
            }))
            .text("event: stdout\nid: 1768469402000000000-0\ndata: listening on :8000\n\n"),
            // Ports.
            op("get", "/api/v1/sandbox/{id}/ports").response(json!({"ports": [port(8000)]})),
            op("post", "/api/v1/sandbox/{id}/ports")
                .request(json!({"port": 3000}))
                .response(port(3000)),
            op("delete", "/api/v1/sandbox/{id}/ports/{port}").response(json!({"ports": []})),
            op("get", "/api/v1/sandbox/ports").response(json!({"ports": [port(8000)]})),
            op("post", "/api/v1/sandbox/{id}/auth-token")
                .request(json!({"ttlSeconds": 3600}))
                .response(json!({"token": format!("stkp_{SANDBOX_ID}.{ADMIN_ID}.1768473002.GRLkHxvJoD7fqP0z-9pJTWefLZVDHK4nhexl-Rkfn4s"),
                                 "expiresAt": "2026-01-15T10:30:02Z", "sandboxId": SANDBOX_ID})),
            op("get", "/proxy/{id}/{port}/{path}").headers(&[("X-Stockade-Token", "$SANDBOX_TOKEN")]),
            // Snapshots, forks, uploads.
            op("post", "/api/v1/sandbox/{id}/snapshots")
                .request(json!({"name": "before-upgrade"}))
                .response(snapshot("READY")),
            op("get", "/api/v1/sandbox/{id}/snapshots").response(json!({"snapshots": [snapshot("READY")]})),
            op("get", "/api/v1/snapshots").response(json!({"snapshots": [snapshot("READY")]})),
            op("get", "/api/v1/snapshots/{id}").response(snapshot("READY")),
            op("delete", "/api/v1/snapshots/{id}").response(snapshot("DELETED")),
            op("post", "/api/v1/sandbox/{id}/fork")
                .request(json!({"name": "build-worker-fork"}))
                .response({
                    let mut s = sandbox(FORK_ID, "build-worker-fork", "RUNNING");
                    s["dockerImage"] = json!("stockade-snapshot:s4n7q2b9x1kd");
                    s
                }),
            op("post", "/api/v1/uploads").upload("workspace.tar.gz")
                .response(json!({"uploadId": UPLOAD_ID, "bytes": 48213, "expiresAt": "2026-01-16T09:30:00Z"})),
            // Templates.
            op("post", "/api/v1/templates")
                .request(json!({"name": "web-app:v1", "cpuCount": 2, "memoryMB": 2048, "diskSizeGB": 20}))
                .response(template(Some(vec![build("waiting")]))),
            op("get", "/api/v1/templates").response(json!({"templates": [template(None)]})),
            op("get", "/api/v1/templates/{id}").response(template(Some(vec![build("ready")]))),
            op("patch", "/api/v1/templates/{id}")
                .request(json!({"public": true}))
                .response({
                    let mut t = template(None);
                    t["public"] = json!(true);
                    t
                }),
            op("delete", "/api/v1/templates/{id}").response(template(None)),
            op("get", "/api/v1/templates/{id}/files/{hash}")
                .response(json!({"present": false})),
            op("put", "/api/v1/templates/{id}/files/{hash}")
                .request(json!("(the bytes of context.tar.gz)"))
                .upload("context.tar.gz")
                .response(json!({"present": true, "bytes": 48213})),
            op("post", "/api/v1/templates/{id}/builds/{build}")
                .request(json!({"fromImage": "node:20-bookworm",
                                "steps": [
                                    {"type": "WORKDIR", "path": "/app"},
                                    {"type": "RUN", "command": "npm install -g serve"},
                                    {"type": "ENV", "vars": [["APP_ENV", "production"]]}
                                ],
                                "startCmd": "serve -l 3000",
                                "readyCmd": "curl -fs localhost:3000"}))
                .response(build("building")),
            op("get", "/api/v1/templates/{id}/builds/{build}")
                .response({
                    json!({"build": build("ready"), "logEntries": [
                        {"offset": 0, "timestamp": STARTED, "level": "info", "step": "base",
                         "message": "FROM node:20-bookworm"},
                        {"offset": 1, "timestamp": STARTED, "level": "info", "step": "1",
                         "message": "[1/3] WORKDIR /app"}
                    ]})
                })
                .text(
                    "event: log\ndata: {\"offset\":0,\"timestamp\":\"2026-01-15T09:30:02Z\",\"level\":\"info\",\"step\":\"base\",\"message\":\"FROM node:20-bookworm\"}\n\n\
                     event: build\ndata: {\"buildId\":\"0b6c5a43-7c1e-4d2a-9f3e-2b8d1c0a9e11\",\"templateId\":\"m2t8p4w9k1x6\",\"status\":\"ready\",\"tags\":[\"v1\"]}\n\n",
                ),
            op("put", "/api/v1/templates/{id}/builds/{build}/tags")
                .request(json!({"tags": ["stable"]}))
                .response({
                    let mut b = build("ready");
                    b["tags"] = json!(["v1", "stable"]);
                    b
                }),
            op("get", "/api/v1/templates/{id}/tags").response(json!({"tags": [
                {"tag": "stable", "buildId": BUILD_ID, "createdAt": CREATED},
                {"tag": "v1", "buildId": BUILD_ID, "createdAt": CREATED}
            ]})),
            op("delete", "/api/v1/templates/{id}/tags/{tag}"),
            // Teams.
            op("post", "/api/v1/teams").request(json!({"name": "research"})).response(team(false)),
            op("get", "/api/v1/teams").response(json!({"teams": [team(true)]})),
            op("get", "/api/v1/teams/{team_id}").response(team(true)),
            op("post", "/api/v1/teams/{team_id}/members")
                .request(json!({"accountId": ACCOUNT_ID}))
                .response(team(true)),
            op("delete", "/api/v1/teams/{team_id}/members/{account_id}").response(team(false)),
            // Hosts.
            op("post", "/api/v1/hosts")
                .request(json!({"name": HOST_NAME, "dockerHost": "unix:///var/run/docker.sock",
                                "labels": {"zone": "eu-1"}}))
                .response({
                    let mut h = host("active", None);
                    h["sandboxes"] = json!(0);
                    h["reserved"] = json!({"cpuCores": 0, "memoryGB": 0});
                    h["health"]["diskFreeBytes"] = Value::Null;
                    h
                }),
            op("get", "/api/v1/hosts").response(json!({"hosts": [host("active", None)]})),
            op("get", "/api/v1/hosts/{name}").response(host("active", None)),
            op("patch", "/api/v1/hosts/{name}")
                .request(json!({"state": "cordoned", "reason": "kernel upgrade"}))
                .response(host("cordoned", Some("kernel upgrade"))),
            op("delete", "/api/v1/hosts/{name}"),
            // Volumes.
            op("get", "/api/v1/volumes").response(json!({"volumes": [volume()], "total": 1, "totalBytes": 6, "totalSize": "6 B"})),
            op("get", "/api/v1/volumes/orphaned").response(json!({"volumes": [], "total": 0, "totalBytes": 0, "totalSize": "0 B"})),
            op("get", "/api/v1/volumes/{name}").response(volume()),
            op("delete", "/api/v1/volumes/{name}").response(json!({"name": VOLUME, "sandboxId": SANDBOX_ID, "sizeBytes": 6, "size": "6 B"})),
            op("delete", "/api/v1/volumes/orphaned").response(json!({"removed": [], "failed": [], "freedBytes": 0, "freed": "0 B"})),
            // Shared volumes.
            op("post", "/api/v1/shared-volumes")
                .request(json!({"name": SHARED_VOLUME, "sizeGB": 20, "labels": {"team": "ml"}}))
                .response(shared_volume(false)),
            op("get", "/api/v1/shared-volumes")
                .response(json!({"volumes": [shared_volume(true)], "total": 1})),
            op("get", "/api/v1/shared-volumes/{volume}").response(shared_volume(true)),
            op("delete", "/api/v1/shared-volumes/{volume}"),
            op("post", "/api/v1/shared-volumes/{volume}/move").response({
                let mut v = shared_volume(false);
                v["server"] = json!(HOST_NAME);
                v
            }),
            op("get", "/api/v1/shared-volumes/{volume}/usage").response(json!({
                "usedBytes": 1048576, "sizeGB": 20, "sizeEnforced": true,
                "enforcement": "enforced by a file system of its own in a loop file"})),
            op("get", "/api/v1/shared-volumes/{volume}/files").response(json!({
                "path": "/datasets/train.csv",
                "entries": [volume_entry("/datasets/train.csv", "file", 1048576)]})),
            op("get", "/api/v1/shared-volumes/{volume}/files/stat")
                .response(volume_entry("/datasets/train.csv", "file", 1048576)),
            op("get", "/api/v1/shared-volumes/{volume}/files/content")
                .text("id,label\n1,cat\n")
                .download("train.csv"),
            op("put", "/api/v1/shared-volumes/{volume}/files/content")
                .request(json!("id,label\n1,cat\n"))
                .upload("train.csv")
                .response(volume_entry("/datasets/train.csv", "file", 15)),
            op("post", "/api/v1/shared-volumes/{volume}/files/mkdir")
                .response(volume_entry("/results", "directory", 4096)),
            op("post", "/api/v1/shared-volumes/{volume}/files/rename")
                .request(json!({"from": "/datasets/train.csv", "to": "/datasets/old.csv"}))
                .response(volume_entry("/datasets/old.csv", "file", 1048576)),
            op("delete", "/api/v1/shared-volumes/{volume}/files"),
        ]
    }
}
