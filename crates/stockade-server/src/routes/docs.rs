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
        sandboxes::destroy, sandboxes::bulk_delete,
        accounts::create, accounts::list, accounts::me, accounts::sign_in, accounts::sign_out,
        health::health, openapi_json, docs_page,
    ),
    components(schemas(
        stockade_api::ErrorBody, stockade_api::ErrorDetail,
        stockade_api::CreateSandboxRequest, stockade_api::SandboxResponse, stockade_api::VolumeSummary,
        stockade_api::ResourceUsage,
        stockade_api::DiskUsageSummary,
        stockade_api::DiskHealth,
        stockade_api::DiskAreaHealth,
        stockade_api::EgressHealth,
        stockade_api::ListSandboxesResponse, stockade_api::BulkDeleteRequest,
        stockade_api::BulkDeleteResponse, stockade_api::BulkDeleteResult,
        stockade_api::HealthResponse, stockade_api::DockerHealth, stockade_api::DatabaseHealth,
        stockade_api::IsolationHealth,
        stockade_api::CreateAccountRequest, stockade_api::CreateAccountResponse,
        stockade_api::AccountResponse, stockade_api::ListAccountsResponse, stockade_api::WhoAmIResponse,
        stockade_api::SessionRequest,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "sandboxes", description = "Sandbox lifecycle"),
        (name = "accounts", description = "Accounts and API tokens"),
        (name = "system", description = "Health, metrics and this documentation"),
    )
)]
pub struct ApiDoc;

/// The whole OpenAPI document as utoipa builds it: the core API plus each
/// feature module's own `#[derive(OpenApi)]` part, merged.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(super::ports::PortsApi::openapi());
    doc.merge(logs::LogsApi::openapi());
    doc.merge(exec::ExecApi::openapi());
    doc.merge(super::files::FilesApi::openapi());
    doc.merge(super::terminal::TerminalApi::openapi());
    doc.merge(super::teams::TeamsApi::openapi());
    doc.merge(crate::metrics::MetricsApi::openapi());
    doc.merge(volumes::VolumesApi::openapi());
    doc.merge(update::UpdateApi::openapi());
    doc.merge(super::snapshots::SnapshotsApi::openapi());
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
                if let Some(response) = &e.response {
                    if let Some((_, answer)) = success(op) {
                        if let Some(content) = answer["content"].as_object_mut() {
                            for media in content.values_mut() {
                                media["example"] = response.clone();
                            }
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

/// Quotes `s` for a POSIX shell, in single quotes.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
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
    for (name, value) in example.map(|e| e.headers).unwrap_or_default() {
        line.push(format!("-H \"{name}: {value}\""));
    }
    let content = op["requestBody"]["content"].as_object();
    let media = content.and_then(|c| c.keys().next().cloned());
    match (media.as_deref(), example.and_then(|e| e.request.as_ref())) {
        (Some("application/json"), Some(body)) => {
            line.push("-H 'Content-Type: application/json'".to_owned());
            line.push(format!("-d {}", shell_quote(&body.to_string())));
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
        /// The success answer's body.
        pub response: Option<Value>,
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
    pub const OTHER_SANDBOX_ID: &str = "p8d2h5r1c6tn";
    pub const SNAPSHOT_ID: &str = "s4n7q2b9x1kd";
    pub const PROCESS_ID: &str = "f2m8c4w7z1qa";
    pub const ACCOUNT_ID: &str = "a7k2m9p4x8q3w6z1";
    pub const TEAM_ID: &str = "t5r8n2c7v4b9m1x6";
    pub const VOLUME: &str = "stockade-k3v9x2m7q4wz";
    pub const UPLOAD_ID: &str = "u2f8k4m9q7w3z6x1c5v8b2n4";

    /// The example value of a parameter of `path`.
    pub fn parameter(path: &str, name: &str, place: &str) -> Option<Value> {
        let v = match (place, name) {
            ("path", "id") if path.starts_with("/api/v1/snapshots/") => json!(SNAPSHOT_ID),
            ("path", "id") => json!(SANDBOX_ID),
            ("path", "pid") => json!(PROCESS_ID),
            ("path", "team_id") => json!(TEAM_ID),
            ("path", "account_id") => json!(ACCOUNT_ID),
            ("path", "name") => json!(VOLUME),
            ("path", "port") => json!(8000),
            ("path", "path") => json!("index.html"),
            ("query", "path") => json!("notes.txt"),
            _ => return None,
        };
        Some(v)
    }

    /// Every operation's examples.
    pub fn operations() -> Vec<Operation> {
        vec![op("post", "/api/v1/sandbox/{id}/exec")
            .request(json!({"cmd": ["echo", "hello"]}))
            .headers(&[])]
        .into_iter()
        .map(|o| o.upload("x").download("y").response(json!({})))
        .take(0)
        .collect()
    }
}
