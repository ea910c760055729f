//! The API documentation against the server: every route the router serves
//! is in the OpenAPI document (or on a short list of routes of other
//! products' APIs), every operation has a curl line and examples that fit its
//! schemas, no public text carries an internal requirement id, the page
//! renders Markdown with nothing from outside, and every request example is
//! accepted by a real server over Docker and SQLite as it is.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::*;

/// One route as the router registers it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Route {
    /// Lower case; `any` for a route of every method.
    method: String,
    /// The full path, axum's `{*rest}` written `{rest}`.
    path: String,
}

/// Where the router's routes are registered: (file, function, prefix the
/// router mounts it under). `lib.rs`'s `router()` is read on its own below.
const ROUTE_SOURCES: &[(&str, &str, &str)] = &[
    ("src/routes/ports.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/logs.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/exec.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/code.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/files.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/teams.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/volumes.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/update.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/snapshots.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/shared_volumes.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/templates.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/terminal.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/accounts.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/tokens.rs", "pub fn routes()", "/api/v1"),
    ("src/routes/events.rs", "pub fn routes()", "/api/v1"),
    ("src/compat/prime.rs", "pub fn api_routes()", "/api/v1"),
    ("src/compat/prime_volumes.rs", "pub fn routes()", "/api/v1"),
    ("src/compat/prime.rs", "pub fn gateway_routes()", ""),
    ("src/proxy.rs", "pub fn routes()", ""),
];

/// What `router()` merges and nests besides its own `.route`s; each is read
/// through [`ROUTE_SOURCES`] or left out on purpose (the E2B API).
const ROUTER_PARTS: &[&str] = &[
    ".merge(routes::ports::routes())",
    ".merge(routes::logs::routes())",
    ".merge(routes::exec::routes())",
    ".merge(routes::code::routes())",
    ".merge(routes::files::routes())",
    ".merge(routes::teams::routes())",
    ".merge(routes::volumes::routes())",
    ".merge(routes::update::routes())",
    ".merge(routes::snapshots::routes())",
    ".merge(routes::shared_volumes::routes())",
    ".merge(routes::templates::routes())",
    ".merge(routes::terminal::routes())",
    ".merge(accounts::routes())",
    ".merge(routes::tokens::routes())",
    ".merge(routes::events::routes())",
    ".merge(compat::prime::api_routes())",
    ".nest(\"/api/v1\", api)",
    ".nest(compat::envd::E2B_PREFIX, compat::e2b_routes())",
    ".merge(compat::prime::gateway_routes())",
    ".merge(proxy::routes())",
];

/// Routes the document leaves out, as its introduction says: the web
/// dashboard, and what `prime-sandboxes` calls beyond Stockade's API (its
/// gateway and 501 answers included). The E2B API is not read at all.
fn left_out(r: &Route) -> bool {
    let prime = [
        "/api/v1/sandbox/{id}/auth",
        "/api/v1/sandbox/status:batchGet",
        "/api/v1/sandbox/{id}/error-context",
        "/api/v1/sandbox/{id}/checkpoints",
        "/api/v1/sandbox/checkpoints/{cid}",
        "/api/v1/sandbox/checkpoints:batchGet",
        "/api/v1/sandbox/networks",
        "/api/v1/sandbox/networks/{rest}",
        "/api/v1/sandbox/{id}/ssh-session",
        "/api/v1/sandbox/{id}/ssh-session/{session}",
        "/api/v1/sandbox/{id}/egress-policy",
        "/api/v1/sandbox/volumes",
        "/api/v1/sandbox/volumes/{name}",
        "/api/v1/sandbox/{id}/volumes/{name}/publish",
        "/api/v1/images",
        "/api/v1/images/{rest}",
    ];
    prime.contains(&r.path.as_str())
        || r.path.starts_with("/gateway/")
        || (r.method == "delete" && r.path == "/api/v1/sandbox")
        || r.path == "/"
        || r.path == "/dashboard/{file}"
}

/// Routes documented under another path of the same handler.
fn documented_as(r: &Route) -> Route {
    let path = match r.path.as_str() {
        "/proxy/{id}/{port}" | "/proxy/{id}/{port}/" => "/proxy/{id}/{port}/{path}",
        p => p,
    };
    Route {
        method: r.method.clone(),
        path: path.to_owned(),
    }
}

fn read_source(file: &str) -> String {
    std::fs::read_to_string(manifest_dir().join(file))
        .unwrap_or_else(|e| panic!("cannot read {file}: {e}"))
}

/// The text of the function that starts with `signature` in `source`, up to
/// its closing brace at the start of a line.
fn function<'a>(source: &'a str, signature: &str, file: &str) -> &'a str {
    let start = source
        .find(signature)
        .unwrap_or_else(|| panic!("{file} has no `{signature}`"));
    let rest = &source[start..];
    let end = rest.find("\n}\n").map_or(rest.len(), |e| e + 3);
    &rest[..end]
}

/// Where in `text` the parenthesis stands that closes when `depth` of them
/// are open before `text` begins.
fn closing_paren(text: &str, mut depth: i32) -> Option<usize> {
    text.char_indices()
        .find(|(_, c)| {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            *c == ')' && depth == 0
        })
        .map(|(i, _)| i)
}

/// The `.route(path, methods)` calls in `code`, prefixed.
fn routes_in(code: &str, prefix: &str) -> Vec<Route> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(".route(") {
        rest = &rest[at + ".route(".len()..];
        // The call's arguments, up to its closing parenthesis.
        let end = closing_paren(rest, 1).expect("a .route( call is closed");
        let args = &rest[..end];
        let open = args.find('"').expect("a route's path is a literal");
        let close = open + 1 + args[open + 1..].find('"').expect("a closed literal");
        let path = format!("{prefix}{}", &args[open + 1..close]).replace("{*", "{");
        let methods = &args[close + 1..];
        let mut found = Vec::new();
        for word in ["get", "post", "put", "patch", "delete", "any"] {
            let needle = format!("{word}(");
            let mut from = 0;
            while let Some(i) = methods[from..].find(&needle) {
                let i = from + i;
                let before = methods[..i].chars().next_back();
                if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    found.push(word);
                }
                from = i + needle.len();
            }
        }
        assert!(!found.is_empty(), "no method found for route {path}");
        for m in found {
            out.push(Route {
                method: m.to_owned(),
                path: path.clone(),
            });
        }
        rest = &rest[end..];
    }
    out
}

/// Every route the router registers, read from its source.
fn router_routes() -> Vec<Route> {
    let lib = read_source("src/lib.rs");
    let router = function(&lib, "pub fn router(", "src/lib.rs");
    let (api, root) = router
        .split_once("let limiter")
        .expect("router() builds `api`, then the limiter");
    let mut routes = routes_in(api, "/api/v1");
    routes.extend(routes_in(root, ""));
    // Every merge and nest of router() is one this test reads (or leaves out).
    for (i, _) in router
        .match_indices(".merge(")
        .chain(router.match_indices(".nest("))
    {
        let call = &router[i..];
        let end = closing_paren(call, 0).map_or(call.len(), |e| e + 1);
        let call = &call[..end];
        assert!(
            ROUTER_PARTS.contains(&call),
            "router() has `{call}`, which this test does not read: add its routes to ROUTE_SOURCES"
        );
    }
    for (file, signature, prefix) in ROUTE_SOURCES {
        let source = read_source(file);
        routes.extend(routes_in(function(&source, signature, file), prefix));
    }
    routes.sort();
    routes.dedup();
    routes
}

/// A concrete path for a route: every parameter filled with a well-formed
/// value that names nothing.
fn concrete(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = open + rest[open..].find('}').unwrap();
        let value = match &rest[open + 1..close] {
            "port" => "8000",
            "team_id" | "account_id" | "ns" => "abcdefghijklmnop",
            "name" => "stockade-abcdefghijkl",
            "file" => "app.js",
            _ => "abcdefghijkl",
        };
        out.push_str(value);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Whether the router answered from a route (not its 404 fallback, nor a
/// 405 for a method the path lacks).
async fn routed(app: &TestApp, method: &str, path: &str) -> Result<(), String> {
    let m = if method == "any" { "get" } else { method };
    let m = Method::from_bytes(m.to_ascii_uppercase().as_bytes()).unwrap();
    if path.ends_with("/events/stream") {
        // An event stream that is routed answers at once and never ends:
        // its status is the answer.
        let r = app
            .http
            .get(format!("{}{}", app.base, concrete(path)))
            .bearer_auth(&app.admin_token)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        return match r.status() {
            StatusCode::OK => Ok(()),
            other => Err(format!("{m} {path}: {other}")),
        };
    }
    let r = app
        .call(m.clone(), &concrete(path), Some(&app.admin_token), None)
        .await;
    let fallback = r.status == StatusCode::NOT_FOUND
        && r.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("No route for"));
    if fallback || r.status == StatusCode::METHOD_NOT_ALLOWED {
        return Err(format!("{m} {path}: {} {}", r.status, r.body));
    }
    Ok(())
}

async fn document(app: &TestApp) -> Value {
    app.openapi().await
}

/// Every (method, path, operation) of the document.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            out.push((method.clone(), path.clone(), op.clone()));
        }
    }
    out
}

#[tokio::test]
async fn every_route_of_the_router_is_documented() {
    let app = spawn_app().await;
    let routes = router_routes();
    // The reading of the source finds what is known to be there.
    for known in [
        ("post", "/api/v1/sandbox"),
        ("delete", "/api/v1/sandbox/{id}/processes/{pid}"),
        ("post", "/api/v1/sandbox/{id}/processes/{pid}/kill"),
        ("patch", "/api/v1/sandbox/{id}"),
        ("get", "/metrics"),
        ("any", "/proxy/{id}/{port}/{path}"),
        ("post", "/api/v1/uploads"),
    ] {
        assert!(
            routes
                .iter()
                .any(|r| r.method == known.0 && r.path == known.1),
            "the router's source was not read right: {known:?} missing from {routes:#?}"
        );
    }
    assert!(routes.len() > 60, "only {} routes found", routes.len());
    // Each route read is one the router really serves.
    let unrouted = not_routed(&app, &routes).await;
    assert!(
        unrouted.is_empty(),
        "routes read from the source that the router does not serve: {unrouted:#?}"
    );

    let doc = document(&app).await;
    let documented: BTreeSet<Route> = operations(&doc)
        .into_iter()
        .map(|(method, path, _)| Route { method, path })
        .collect();
    let missing: Vec<&Route> = routes
        .iter()
        .filter(|r| !left_out(r))
        .filter(|r| {
            let d = documented_as(r);
            if d.method == "any" {
                !documented.iter().any(|x| x.path == d.path)
            } else {
                !documented.contains(&d)
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "routes missing from the OpenAPI document: {missing:#?}"
    );
    // And every documented operation is served.
    let wrong = not_routed(&app, &documented).await;
    assert!(
        wrong.is_empty(),
        "documented operations the router does not serve: {wrong:#?}"
    );
}

/// What `routed` says of each of `routes` the router does not serve.
async fn not_routed<'a>(app: &TestApp, routes: impl IntoIterator<Item = &'a Route>) -> Vec<String> {
    let mut errors = Vec::new();
    for r in routes {
        if let Err(e) = routed(app, &r.method, &r.path).await {
            errors.push(e);
        }
    }
    errors
}

/// A requirement id like `API-11`, outside the few standard names of the
/// same shape.
fn requirement_ids(text: &str) -> Vec<String> {
    const STANDARD: &[&str] = &["UTF-8", "SHA-256", "ISO-8601", "RFC-3339", "HTTP-1"];
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts = bytes[i].is_ascii_uppercase()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && bytes[j].is_ascii_uppercase() {
            j += 1;
        }
        if j + 1 < bytes.len() && bytes[j] == b'-' && bytes[j + 1].is_ascii_digit() {
            let mut k = j + 1;
            while k < bytes.len() && bytes[k].is_ascii_digit() {
                k += 1;
            }
            let id = &text[i..k];
            if !STANDARD.contains(&id) {
                found.push(id.to_owned());
            }
            i = k;
        } else {
            i = j;
        }
    }
    found
}

#[test]
fn requirement_ids_are_recognised() {
    assert_eq!(
        requirement_ids("as API-11 says (SEC-9, LC-3)"),
        ["API-11", "SEC-9", "LC-3"]
    );
    assert_eq!(requirement_ids("UTF-8, x-API-1b, MY_SEC-9"), ["API-1"]);
    assert!(requirement_ids("UTF-8 text, a SHA-256 digest").is_empty());
}

/// The schema `s` points at.
fn resolve<'a>(doc: &'a Value, s: &'a Value) -> &'a Value {
    match s["$ref"].as_str() {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap();
            &doc["components"]["schemas"][name]
        }
        None => s,
    }
}

/// Where `v` does not fit `schema`: unknown fields, missing required
/// fields, wrong types.
fn misfits(doc: &Value, schema: &Value, v: &Value, at: &str, out: &mut Vec<String>) {
    let s = resolve(doc, schema);
    if let Some(alternatives) = s["oneOf"].as_array().or(s["anyOf"].as_array()) {
        let fits = alternatives.iter().any(|a| {
            let mut e = Vec::new();
            misfits(doc, a, v, at, &mut e);
            e.is_empty()
        });
        if !fits {
            out.push(format!("{at}: fits none of the alternatives"));
        }
        return;
    }
    if let Some(all) = s["allOf"].as_array() {
        all.iter().for_each(|a| misfits(doc, a, v, at, out));
        return;
    }
    let types: Vec<&str> = match &s["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let ok = types.is_empty()
        || types.contains(&kind)
        || (kind == "integer" && types.contains(&"number"));
    if !ok {
        out.push(format!("{at}: a {kind}, the schema says {types:?}"));
        return;
    }
    if let Some(values) = s["enum"].as_array() {
        if !values.contains(v) {
            out.push(format!("{at}: {v} is not one of {values:?}"));
        }
    }
    match v {
        Value::Object(o) => {
            let props = s["properties"].as_object();
            for (k, x) in o {
                match props.and_then(|p| p.get(k)) {
                    Some(p) => misfits(doc, p, x, &format!("{at}.{k}"), out),
                    None => match &s["additionalProperties"] {
                        Value::Object(_) => misfits(
                            doc,
                            &s["additionalProperties"],
                            x,
                            &format!("{at}.{k}"),
                            out,
                        ),
                        Value::Bool(true) => {}
                        _ if props.is_none() => {}
                        _ => out.push(format!("{at}.{k}: not a field of the schema")),
                    },
                }
            }
            for r in s["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap();
                if !o.contains_key(r) {
                    out.push(format!("{at}.{r}: required, missing"));
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                misfits(doc, &s["items"], x, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[tokio::test]
async fn every_operation_has_a_curl_line_examples_and_no_requirement_ids() {
    let app = spawn_app().await;
    let doc = document(&app).await;
    let mut problems = Vec::new();
    for (method, path, op) in operations(&doc) {
        let name = format!("{} {path}", method.to_uppercase());
        // A curl line that names the method and the path.
        let samples = op["x-codeSamples"].as_array().cloned().unwrap_or_default();
        let curl = samples
            .iter()
            .find(|s| s["label"] == "curl")
            .and_then(|s| s["source"].as_str());
        match curl {
            None => problems.push(format!("{name}: no curl line")),
            Some(c) => {
                let first = path.split('{').next().unwrap();
                if !c.starts_with("curl ") || !c.contains(&format!("\"$STOCKADE_URL{first}")) {
                    problems.push(format!("{name}: the curl line does not call it: {c}"));
                }
                if method != "get" && !c.contains(&format!("-X {}", method.to_uppercase())) {
                    problems.push(format!("{name}: the curl line has another method: {c}"));
                }
                if op.get("security").is_some()
                    && !c.contains("Authorization: Bearer $STOCKADE_TOKEN")
                {
                    problems.push(format!("{name}: the curl line sends no token: {c}"));
                }
                if c.contains('{') && !c.contains("-d '") {
                    problems.push(format!(
                        "{name}: the curl line has a path parameter left: {c}"
                    ));
                }
            }
        }
        // Path parameters and required query parameters have examples.
        for p in op["parameters"].as_array().into_iter().flatten() {
            let required = p["in"] == "path" || p["required"] == true;
            if required && p.get("example").is_none() {
                problems.push(format!("{name}: parameter {} has no example", p["name"]));
            }
        }
        // A request example that fits the request's schema.
        if let Some(content) = op["requestBody"]["content"].as_object() {
            for (media, c) in content {
                match c.get("example") {
                    Some(e) if media == "application/json" => {
                        let mut m = Vec::new();
                        misfits(&doc, &c["schema"], e, "request", &mut m);
                        problems.extend(m.into_iter().map(|m| format!("{name}: {m}")));
                    }
                    Some(e) if e.is_string() => {}
                    Some(e) => {
                        problems.push(format!("{name}: a {media} example that is not text: {e}"))
                    }
                    // A tar archive cannot be written as an example; the curl
                    // line reads it from a file.
                    None if media == "application/x-tar" => {}
                    None => problems.push(format!("{name}: no request example ({media})")),
                }
            }
        }
        // A response example for the success answer, when it has a body.
        let responses = op["responses"].as_object().expect("responses");
        let success = responses
            .keys()
            .filter(|c| c.starts_with('2') || *c == "101")
            .min()
            .unwrap_or_else(|| panic!("{name} has no success answer"));
        for (media, c) in responses[success]["content"]
            .as_object()
            .into_iter()
            .flatten()
        {
            match c.get("example") {
                // An archive is saved to a file by the curl line.
                None if media == "application/x-tar" => {}
                None => problems.push(format!(
                    "{name}: no example of its {success} answer ({media})"
                )),
                Some(e) if media == "application/json" && c.get("schema").is_some() => {
                    let mut m = Vec::new();
                    misfits(&doc, &c["schema"], e, "answer", &mut m);
                    problems.extend(m.into_iter().map(|m| format!("{name}: {m}")));
                }
                Some(_) => {}
            }
        }
    }
    // No requirement id anywhere in the public text (keys and values).
    let mut texts = Vec::new();
    strings(&doc, &mut texts);
    for t in texts {
        let ids = requirement_ids(&t);
        if !ids.is_empty() {
            problems.push(format!("requirement ids {ids:?} in: {t}"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.iter().for_each(|(k, x)| {
            out.push(k.clone());
            strings(x, out);
        }),
        _ => {}
    }
}

#[tokio::test]
async fn the_page_renders_markdown_with_nothing_from_outside() {
    let app = spawn_app().await;
    let r = app.get_raw("/api/v1/docs").await;
    assert_eq!(r.status(), StatusCode::OK);
    let page = r.text().await.unwrap();
    // marked and DOMPurify are inlined, and used together.
    assert!(page.contains("marked"), "marked is not in the page");
    assert!(page.contains("DOMPurify"), "DOMPurify is not in the page");
    assert!(page.contains("DOMPurify.sanitize(html)"));
    assert!(!page.contains("/*MARKED*/") && !page.contains("/*DOMPURIFY*/"));
    // Nothing is loaded from anywhere else.
    for attr in [
        "src=\"http",
        "src='http",
        "href=\"http",
        "@import",
        "src=\"//",
    ] {
        assert!(!page.contains(attr), "the page loads from outside: {attr}");
    }
    // One </script> per <script>: the inlined libraries do not end early.
    assert_eq!(
        page.matches("<script").count(),
        page.matches("</script>").count()
    );
    assert_eq!(page.matches("</script>").count(), 3);
}

/// Replaces the documented example ids (in a path or anywhere in a body)
/// with the ids of the real objects made for them.
fn substitute(v: &Value, ids: &BTreeMap<String, String>) -> Value {
    match v {
        Value::String(s) => Value::String(ids.get(s).cloned().unwrap_or_else(|| s.clone())),
        Value::Array(a) => Value::Array(a.iter().map(|x| substitute(x, ids)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), substitute(x, ids)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A documented operation, ready to be sent.
struct Documented {
    op: Value,
}

impl Documented {
    fn find(doc: &Value, method: &str, path: &str) -> Self {
        let op = doc["paths"][path][method].clone();
        assert!(!op.is_null(), "{method} {path} is not documented");
        Self { op }
    }

    /// The path with its path and required query parameters from their
    /// examples, the example ids replaced by real ones.
    fn url(&self, path: &str, ids: &BTreeMap<String, String>) -> String {
        let mut url = path.to_owned();
        let mut query = Vec::new();
        for p in self.op["parameters"].as_array().into_iter().flatten() {
            let example = substitute(&p["example"], ids);
            let value = match &example {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            let name = p["name"].as_str().unwrap();
            if p["in"] == "path" {
                url = url.replace(&format!("{{{name}}}"), &value);
            } else if p["in"] == "query" && p["required"] == true {
                query.push(format!("{name}={value}"));
            }
        }
        if query.is_empty() {
            url
        } else {
            format!("{url}?{}", query.join("&"))
        }
    }

    /// The required header parameters with their examples.
    fn headers(&self) -> Vec<(String, String)> {
        self.op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["in"] == "header" && p["required"] == true)
            .map(|p| {
                let name = p["name"].as_str().unwrap().to_owned();
                let value = p["example"]
                    .as_str()
                    .unwrap_or_else(|| panic!("header {name} has no example"));
                (name, value.to_owned())
            })
            .collect()
    }

    /// The request example and its media type.
    fn request(&self) -> Option<(String, Value)> {
        let content = self.op["requestBody"]["content"].as_object()?;
        content
            .iter()
            .find_map(|(media, c)| c.get("example").map(|e| (media.clone(), e.clone())))
    }
}

/// The request examples the test below sends, in this order: each step is
/// (method, path). Every operation of the document that has a request
/// example is one of them.
const STEPS: &[(&str, &str)] = &[
    ("post", "/api/v1/accounts"),
    ("put", "/api/v1/accounts/{account_id}/quota"),
    ("post", "/api/v1/accounts/{account_id}/tokens"),
    ("post", "/api/v1/accounts/{account_id}/disable"),
    ("post", "/api/v1/accounts/{account_id}/enable"),
    ("post", "/api/v1/session"),
    ("post", "/api/v1/teams"),
    ("post", "/api/v1/teams/{team_id}/members"),
    ("post", "/api/v1/sandbox"),
    ("patch", "/api/v1/sandbox/{id}"),
    ("put", "/api/v1/sandbox/{id}/files"),
    ("post", "/api/v1/sandbox/{id}/files/move"),
    ("post", "/api/v1/sandbox/{id}/exec"),
    ("post", "/api/v1/sandbox/{id}/code"),
    ("post", "/api/v1/sandbox/{id}/code/contexts"),
    ("post", "/api/v1/sandbox/{id}/ports"),
    ("post", "/api/v1/sandbox/{id}/auth-token"),
    ("post", "/api/v1/sandbox/{id}/snapshots"),
    ("post", "/api/v1/sandbox/{id}/fork"),
    ("delete", "/api/v1/sandbox/bulk"),
    ("post", "/api/v1/webhooks"),
    ("patch", "/api/v1/webhooks/{id}"),
    ("post", "/api/v1/hosts"),
    ("patch", "/api/v1/hosts/{name}"),
    ("post", "/api/v1/shared-volumes"),
    ("put", "/api/v1/shared-volumes/{volume}/files/content"),
    ("post", "/api/v1/shared-volumes/{volume}/files/rename"),
    ("post", "/api/v1/templates"),
    ("patch", "/api/v1/templates/{id}"),
    ("put", "/api/v1/templates/{id}/files/{hash}"),
    ("post", "/api/v1/templates/{id}/builds/{build}"),
    ("put", "/api/v1/templates/{id}/builds/{build}/tags"),
];

/// Sends every request example of the document as it is, to a real server
/// over Docker and SQLite, with real objects in place of the example ids
/// (the examples name no image: the test server's default image is the test
/// image). None may be refused as invalid; the one answer allowed besides
/// success is the 401 of signing in with the example's made-up token.
#[tokio::test]
async fn every_request_example_is_accepted_as_it_is() {
    let app = spawn_app().await;
    let doc = document(&app).await;
    let with_examples: BTreeSet<(String, String)> = operations(&doc)
        .into_iter()
        .filter(|(m, p, _)| Documented::find(&doc, m, p).request().is_some())
        .map(|(m, p, _)| (m, p))
        .collect();
    let steps: BTreeSet<(String, String)> = STEPS
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        with_examples, steps,
        "operations with request examples vs the steps of this test"
    );

    // The example ids, as the document's path parameters show them.
    let example_of = |path: &str, method: &str, name: &str| -> String {
        let op = &doc["paths"][path][method];
        op["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .and_then(|p| p["example"].as_str())
            .unwrap_or_else(|| panic!("{method} {path}: no example of {name}"))
            .to_owned()
    };
    let sandbox_example = example_of("/api/v1/sandbox/{id}", "get", "id");
    let team_example = example_of("/api/v1/teams/{team_id}", "get", "team_id");
    let account_example = example_of(
        "/api/v1/teams/{team_id}/members/{account_id}",
        "delete",
        "account_id",
    );
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    // The code interpreter's examples run in a sandbox of its image.
    let code_sandbox = app
        .create(
            &app.admin_token,
            serde_json::json!({ "dockerImage": crate::code_interpreter::code_image() }),
        )
        .await;
    let code_ids = BTreeMap::from([(
        sandbox_example.clone(),
        code_sandbox["id"].as_str().unwrap().to_owned(),
    )]);

    for (method, path) in STEPS {
        let d = Documented::find(&doc, method, path);
        let (media, example) = d.request().expect("a request example");
        let ids_here = if path.contains("/code") {
            &code_ids
        } else {
            &ids
        };
        let url = d.url(path, ids_here);
        let body = substitute(&example, ids_here);
        let m = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
        let mut req = app
            .http
            .request(m, format!("{}{url}", app.base))
            .bearer_auth(&app.admin_token)
            .header("content-type", &media);
        for (name, value) in d.headers() {
            req = req.header(name, value);
        }
        req = match &body {
            Value::String(s) if media != "application/json" => req.body(s.clone()),
            other => req.body(other.to_string()),
        };
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        let allowed = status.is_success()
            || (*path == "/api/v1/session" && status == StatusCode::UNAUTHORIZED);
        assert!(allowed, "{method} {url} with {body}: {status} {answer}");
        // The real objects stand in for the example ids from here on.
        match (*method, *path) {
            ("post", "/api/v1/accounts") => {
                ids.insert(
                    account_example.clone(),
                    answer["account"]["id"].as_str().unwrap().into(),
                );
            }
            ("post", "/api/v1/teams") => {
                ids.insert(team_example.clone(), answer["id"].as_str().unwrap().into());
            }
            ("post", "/api/v1/templates") => {
                let template = example_of("/api/v1/templates/{id}", "get", "id");
                let build = example_of("/api/v1/templates/{id}/builds/{build}", "get", "build");
                ids.insert(template, answer["templateId"].as_str().unwrap().into());
                ids.insert(
                    build,
                    answer["builds"][0]["buildId"].as_str().unwrap().into(),
                );
            }
            ("post", "/api/v1/webhooks") => {
                let example = example_of("/api/v1/webhooks/{id}", "patch", "id");
                ids.insert(example, answer["id"].as_str().unwrap().into());
            }
            ("post", "/api/v1/sandbox") => {
                assert_eq!(answer["status"], "RUNNING", "{answer}");
                ids.insert(
                    sandbox_example.clone(),
                    answer["id"].as_str().unwrap().into(),
                );
                // What the move example moves into.
                let made = app
                    .call(
                        Method::POST,
                        &format!(
                            "/api/v1/sandbox/{}/files/mkdir?path=archive",
                            answer["id"].as_str().unwrap()
                        ),
                        Some(&app.admin_token),
                        None,
                    )
                    .await;
                assert_eq!(made.status, StatusCode::CREATED, "{:?}", made.body);
            }
            ("post", "/api/v1/sandbox/{id}/exec") => {
                assert_eq!(answer["exitCode"], 0, "{answer}");
            }
            ("post", "/api/v1/sandbox/{id}/code") => {
                assert_eq!(answer["results"][0]["text"], "42", "{answer}");
                assert_eq!(answer["logs"]["stdout"][0], "hello\n", "{answer}");
            }
            ("delete", "/api/v1/sandbox/bulk") => {
                let results = answer["results"].as_array().expect("results");
                assert!(results.iter().all(|r| r["deleted"] == true), "{answer}");
            }
            _ => {}
        }
    }
    // The bulk delete removed the sandbox; the fork goes with the app.
}

/// This crate's directory as `cargo test` says when it runs the test: a
/// test binary that another checkout sharing the target directory built
/// would otherwise look in that checkout.
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    )
}
