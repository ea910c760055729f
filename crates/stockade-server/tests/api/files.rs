//! Files inside a sandbox — binary round trips, listings, stat,
//! delete, tar archives in and out, stopped sandboxes, size limits, and the
//! traversal and symlink attacks that must never reach the host.

use std::io::Read;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::*;

/// Deterministic noise with plenty of NULs and every byte value.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 7 == 0 {
                0
            } else {
                (x >> 24) as u8
            }
        })
        .collect()
}

fn files_url(app: &TestApp, id: &str, rest: &str) -> String {
    format!("{}/api/v1/sandbox/{id}/files{rest}", app.base)
}

struct Raw {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    bytes: Vec<u8>,
}

impl Raw {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }

    /// Asserts the error's message contains `needle` (showing the body if
    /// not).
    #[track_caller]
    fn assert_message_contains(&self, needle: &str) {
        let body = self.json();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{needle:?} not in {body}");
    }

    fn error_fields(&self) -> Vec<String> {
        Resp {
            status: self.status,
            body: self.json(),
        }
        .error_fields()
    }
}

async fn send(req: reqwest::RequestBuilder) -> Raw {
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.expect("body").to_vec();
    Raw {
        status,
        headers,
        bytes,
    }
}

/// The file routes of one sandbox, called with one token.
struct Files<'a> {
    app: &'a TestApp,
    token: &'a str,
    id: &'a str,
}

/// The file routes of sandbox `id` for the administrator.
fn files<'a>(app: &'a TestApp, id: &'a str) -> Files<'a> {
    Files {
        app,
        token: &app.admin_token,
        id,
    }
}

impl Files<'_> {
    /// `METHOD /files{rest}?query` with an optional body.
    async fn call(
        &self,
        method: Method,
        rest: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Raw {
        let mut req = self
            .app
            .http
            .request(method, files_url(self.app, self.id, rest))
            .bearer_auth(self.token)
            .query(query);
        if let Some(b) = body {
            req = req.body(b);
        }
        send(req).await
    }

    async fn get(&self, rest: &str, query: &[(&str, &str)]) -> Raw {
        self.call(Method::GET, rest, query, None).await
    }

    async fn put(&self, rest: &str, query: &[(&str, &str)], body: Vec<u8>) -> Raw {
        self.call(Method::PUT, rest, query, Some(body)).await
    }
}

async fn put_file(app: &TestApp, id: &str, path: &str, bytes: &[u8]) -> Raw {
    files(app, id)
        .put("", &[("path", path)], bytes.to_vec())
        .await
}

async fn get_file(app: &TestApp, id: &str, path: &str) -> Raw {
    files(app, id).get("", &[("path", path)]).await
}

/// A file's bytes as the container itself sees them.
fn bytes_in(id: &str, path: &str) -> Vec<u8> {
    let out = docker(&["exec", &format!("stockade-{id}"), "cat", path]);
    succeeded(out, format!("cat {path}"))
}

/// An app with a running sandbox of the administrator's named `name`: the
/// app and the sandbox's id.
async fn sandbox(name: &str) -> (TestApp, String) {
    spawn_with_sandbox_id(json!({ "name": name })).await
}

/// [`sandbox`] in which `script` laid out files first.
async fn sandbox_with_files(name: &str, script: &str) -> (TestApp, String) {
    let (app, id) = sandbox(name).await;
    sh_in(&id, script);
    (app, id)
}

#[tokio::test(flavor = "multi_thread")]
async fn binary_files_round_trip_byte_for_byte() {
    let (app, id) = sandbox("files-binary").await;

    for (path, len, seed) in [
        ("blob.bin", 3 * 1024 * 1024 + 17, 1),
        ("/workspace/deep/nested/dir/five.bin", 5 * 1024 * 1024, 2),
        ("/tmp/one-mb.bin", 1024 * 1024, 3),
        ("empty", 0, 4),
        ("one", 1, 5),
    ] {
        let data = noise(len, seed);
        let r = put_file(&app, &id, path, &data).await;
        assert_eq!(r.status, StatusCode::CREATED, "{path}: {:?}", r.json());
        let entry = r.json();
        assert_eq!(entry["type"], "file");
        assert_eq!(entry["size"], len as u64);
        assert_eq!(entry["mode"], "0644");

        let got = get_file(&app, &id, path).await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
        assert_eq!(
            got.headers["content-type"], "application/octet-stream",
            "{path}"
        );
        assert_eq!(got.headers["content-length"], len.to_string().as_str());
        assert!(got.bytes == data, "{path}: the bytes read differ");
        let abs = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/workspace/{path}")
        };
        assert!(
            bytes_in(&id, &abs) == data,
            "{path}: the bytes on disk differ"
        );
    }
    // Parents were made as directories.
    assert_eq!(
        sh_in(&id, "ls -ld /workspace/deep/nested/dir | cut -c1"),
        "d"
    );

    // Replacing keeps the file's mode unless one is given; `mode` sets it.
    sh_in(&id, "chmod 750 /workspace/blob.bin");
    let r = put_file(&app, &id, "blob.bin", b"#!/bin/sh\necho replaced\n").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_eq!(r.json()["mode"], "0750");
    assert_eq!(sh_in(&id, "/workspace/blob.bin"), "replaced");
    let r = files(&app, &id)
        .put(
            "",
            &[("path", "run.sh"), ("mode", "0755")],
            b"#!/bin/sh\necho ran\n".to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.json()["mode"], "0755");
    assert_eq!(sh_in(&id, "/workspace/run.sh"), "ran");

    // Names with spaces, `+`, `%` and non-ASCII characters, and long ones.
    let long = format!("n{}", "x".repeat(200));
    for name in ["dir with space/ünïcødé ✓.txt", "a+b%20c.txt", long.as_str()] {
        let r = put_file(&app, &id, name, name.as_bytes()).await;
        assert_eq!(r.status, StatusCode::CREATED, "{name}: {:?}", r.json());
        assert_eq!(r.json()["path"], format!("/workspace/{name}"));
        assert_eq!(get_file(&app, &id, name).await.bytes, name.as_bytes());
    }
    assert_eq!(
        sh_in(&id, "cat '/workspace/dir with space/ünïcødé ✓.txt'"),
        "dir with space/ünïcødé ✓.txt"
    );

    // A body without Content-Length (chunked) is written as well.
    let data = noise(2 * 1024 * 1024 + 3, 9);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        data.chunks(100_000).map(|c| Ok(c.to_vec())).collect();
    let r = send(
        app.http
            .put(files_url(&app, &id, ""))
            .bearer_auth(&app.admin_token)
            .query(&[("path", "chunked.bin")])
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            ))),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert!(bytes_in(&id, "/workspace/chunked.bin") == data);

    // Writing over a directory, or below a file, is a conflict.
    let r = put_file(&app, &id, "deep", b"x").await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.json());
    let r = put_file(&app, &id, "one/below", b"x").await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.json());
    r.assert_message_contains("/workspace/one");
}

#[tokio::test(flavor = "multi_thread")]
async fn directories_list_and_paths_stat() {
    let (app, id) = sandbox_with_files(
        "files-list",
        "mkdir -p /workspace/proj/src/inner && printf 12345 > /workspace/proj/a.txt \
         && printf x > /workspace/proj/src/inner/deep.txt && ln -s a.txt /workspace/proj/link \
         && chmod 4755 /workspace/proj/a.txt && mkfifo /workspace/proj/pipe",
    )
    .await;

    let r = get_file(&app, &id, "proj").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let listing = r.json();
    assert_eq!(listing["path"], "/workspace/proj");
    assert_eq!(listing["truncated"], false);
    let entries = listing["entries"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["a.txt", "link", "pipe", "src"],
        "not recursive, sorted"
    );
    let by_name = |n: &str| entries.iter().find(|e| e["name"] == n).unwrap().clone();
    let a = by_name("a.txt");
    assert_eq!(a["type"], "file");
    assert_eq!(a["size"], 5);
    assert_eq!(a["mode"], "4755");
    assert_eq!(a["path"], "/workspace/proj/a.txt");
    assert!(a["modifiedAt"].is_string());
    let link = by_name("link");
    assert_eq!(link["type"], "symlink");
    assert_eq!(link["linkTarget"], "a.txt");
    assert_eq!(by_name("src")["type"], "dir");
    assert_eq!(by_name("pipe")["type"], "other");

    // The default path is /workspace.
    let r = files(&app, &id).get("", &[]).await;
    assert_eq!(r.json()["path"], "/workspace");
    assert!(r.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "proj"));

    // Reading a symlink reads what it points at.
    let r = get_file(&app, &id, "proj/link").await;
    assert_eq!(r.bytes, b"12345");
    // A FIFO is neither a file nor a directory.
    let r = get_file(&app, &id, "proj/pipe").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), ["path"]);

    let stat = |p: &'static str| {
        let app = &app;
        let id = id.clone();
        async move { files(app, &id).get("/stat", &[("path", p)]).await }
    };
    let s = stat("proj/a.txt").await.json();
    assert_eq!(s["name"], "a.txt");
    assert_eq!(s["path"], "/workspace/proj/a.txt");
    assert_eq!(s["type"], "file");
    assert_eq!(s["size"], 5);
    assert_eq!(s["mode"], "4755");
    let s = stat("/workspace/proj/link").await.json();
    assert_eq!(s["type"], "symlink");
    assert_eq!(s["linkTarget"], "a.txt");
    let s = stat("/").await.json();
    assert_eq!(
        (s["name"].as_str(), s["type"].as_str()),
        (Some("/"), Some("dir"))
    );
    let s = stat("proj/src").await.json();
    assert_eq!(s["type"], "dir");

    // Missing paths are 404s naming the path.
    for r in [
        stat("proj/nope").await,
        get_file(&app, &id, "proj/nope").await,
        files(&app, &id)
            .get("/archive", &[("path", "proj/nope")])
            .await,
    ] {
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert_eq!(r.json()["error"]["code"], "not_found");
        r.assert_message_contains("/workspace/proj/nope");
    }
    // A dangling symlink is a 404 too.
    sh_in(&id, "ln -s /nowhere /workspace/dangling");
    let r = get_file(&app, &id, "dangling").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.json());
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_files_and_directories() {
    let (app, id) = sandbox_with_files(
        "files-delete",
        "mkdir -p /workspace/full/sub /workspace/empty && echo x > /workspace/full/sub/f \
         && echo y > /workspace/file && ln -s /workspace/full /workspace/link",
    )
    .await;
    let del = |path: &'static str, recursive: Option<&'static str>| {
        let app = &app;
        let id = id.clone();
        async move {
            let mut q = vec![("path", path)];
            if let Some(r) = recursive {
                q.push(("recursive", r));
            }
            files(app, &id).call(Method::DELETE, "", &q, None).await
        }
    };
    assert_eq!(del("file", None).await.status, StatusCode::NO_CONTENT);
    assert_eq!(del("empty", None).await.status, StatusCode::NO_CONTENT);
    // Deleting a symlink removes the link, not its target.
    assert_eq!(del("link", None).await.status, StatusCode::NO_CONTENT);
    assert_eq!(sh_in(&id, "cat /workspace/full/sub/f"), "x");
    let r = del("full", None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.json());
    r.assert_message_contains("recursive=true");
    assert_eq!(
        del("full", Some("true")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(sh_in(&id, "ls -A /workspace"), "");

    let r = del("full", Some("true")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    for (path, recursive) in [
        ("/", Some("true")),
        ("/workspace", Some("true")),
        ("x", Some("maybe")),
    ] {
        let r = del(path, recursive).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}");
    }
    let r = files(&app, &id).call(Method::DELETE, "", &[], None).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_fields(), ["path"]);
}

/// A tar with a binary file, a directory, a nested file and a symlink.
fn sample_tar(big: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_mtime(1_700_000_000);
        b.append_data(&mut h, path, data).unwrap();
    };
    add("bin/tool", b"#!/bin/sh\necho tool\n", 0o755);
    add("data/big.bin", big, 0o600);
    add(&format!("data/{}", "long".repeat(40)), b"long name", 0o644);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o700);
    h.set_size(0);
    b.append_data(&mut h, "emptydir", std::io::empty()).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "data/latest", "big.bin").unwrap();
    b.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A tar entry whose name the tar crate would refuse to write (`..`).
fn raw_entry(name: &str, data: &[u8]) -> Vec<u8> {
    let mut h = tar::Header::new_old();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn tar_archives_round_trip() {
    let (app, id) = sandbox("files-tar").await;
    let big = noise(1024 * 1024 + 5, 7);

    // Into a directory that does not exist yet.
    let r = files(&app, &id)
        .put("/archive", &[("path", "up/target")], sample_tar(&big))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_eq!(r.json()["path"], "/workspace/up/target");
    assert_eq!(r.json()["entries"], 5);
    assert_eq!(r.json()["bytes"], big.len() as u64 + 20 + 9);
    assert!(bytes_in(&id, "/workspace/up/target/data/big.bin") == big);
    assert_eq!(sh_in(&id, "/workspace/up/target/bin/tool"), "tool");
    assert_eq!(
        sh_in(&id, "readlink /workspace/up/target/data/latest"),
        "big.bin"
    );
    assert_eq!(
        sh_in(&id, "ls -ld /workspace/up/target/emptydir | cut -c1-10"),
        "drwx------"
    );
    assert_eq!(
        sh_in(
            &id,
            &format!("cat /workspace/up/target/data/{}", "long".repeat(40))
        ),
        "long name"
    );

    // Out again: the archive is named from the path's last component.
    let r = files(&app, &id)
        .get("/archive", &[("path", "up/target")])
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["content-type"], "application/x-tar");
    assert_eq!(
        r.headers["content-disposition"],
        "attachment; filename=\"target.tar\""
    );
    let mut ar = tar::Archive::new(&r.bytes[..]);
    let mut found = std::collections::BTreeMap::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().display().to_string();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        found.insert(name, data);
    }
    assert!(found["target/data/big.bin"] == big);
    assert_eq!(found["target/bin/tool"], b"#!/bin/sh\necho tool\n");
    assert!(found.contains_key("target/emptydir/") || found.contains_key("target/emptydir"));

    // A gzip-compressed archive (POST works like PUT), into /workspace by default.
    let r = files(&app, &id)
        .call(Method::POST, "/archive", &[], Some(gzip(&sample_tar(&big))))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_eq!(r.json()["path"], "/workspace");
    assert!(bytes_in(&id, "/workspace/data/big.bin") == big);

    // Anything else is a 400 naming the body, and so is `..` in an entry.
    for (what, body) in [
        ("garbage", noise(4096, 3)),
        ("empty", Vec::new()),
        ("dotdot", raw_entry("../escaped.txt", b"x")),
        ("dotdot deep", raw_entry("a/../../escaped.txt", b"x")),
    ] {
        let r = files(&app, &id)
            .put("/archive", &[("path", "up")], body)
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{what}: {:?}", r.json());
        assert_eq!(r.error_fields(), ["body"], "{what}");
    }
    assert_eq!(
        sh_in(
            &id,
            "ls /workspace/escaped.txt /escaped.txt 2>/dev/null | wc -l"
        ),
        "0"
    );

    // A hard link to nothing: the engine refuses the archive, and that is
    // the caller's input (400), not a server failure.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Link);
    h.set_size(0);
    h.set_mode(0o644);
    b.append_link(&mut h, "link.txt", "missing.txt").unwrap();
    let dangling = b.into_inner().unwrap();
    let r = files(&app, &id)
        .put("/archive", &[("path", "up")], dangling)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.json());
    assert_eq!(r.error_fields(), ["body"]);

    // Uploading into a file is a conflict.
    let r = files(&app, &id)
        .put("/archive", &[("path", "data/big.bin")], sample_tar(b"x"))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.json());
}

#[tokio::test(flavor = "multi_thread")]
async fn files_of_a_stopped_sandbox() {
    let (app, id) = sandbox("files-stopped").await;
    let data = noise(300_000, 11);
    assert_eq!(
        put_file(&app, &id, "kept.bin", &data).await.status,
        StatusCode::CREATED
    );
    let r = app.act(&app.admin_token, &id, "stop?timeout=1").await;
    assert_eq!(r.body["status"], "STOPPED");

    // Reading, listing, stat and archives work without a running container.
    let r = get_file(&app, &id, "kept.bin").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert!(r.bytes == data);
    let r = get_file(&app, &id, "/workspace").await;
    assert_eq!(r.json()["entries"][0]["name"], "kept.bin");
    let r = files(&app, &id).get("/stat", &[("path", "kept.bin")]).await;
    assert_eq!(r.json()["size"], 300_000);
    // So does writing.
    let r = put_file(&app, &id, "while-stopped.txt", b"written while stopped").await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    // Deleting runs `rm` in the sandbox: it must be running.
    let r = files(&app, &id)
        .call(Method::DELETE, "", &[("path", "kept.bin")], None)
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.json());
    assert_eq!(r.json()["error"]["code"], "sandbox_unavailable");

    let r = app.act(&app.admin_token, &id, "start").await;
    assert_eq!(r.body["status"], "RUNNING");
    assert_eq!(
        sh_in(&id, "cat /workspace/while-stopped.txt"),
        "written while stopped"
    );

    // A terminated sandbox has no files left.
    app.delete(&format!("/api/v1/sandbox/{id}"), &app.admin_token)
        .await;
    let r = get_file(&app, &id, "kept.bin").await;
    assert_eq!(r.status, StatusCode::CONFLICT);
}

#[tokio::test(flavor = "multi_thread")]
async fn traversal_and_bad_paths_are_rejected() {
    let (app, id) = sandbox("files-traversal").await;
    let long = "a".repeat(5000);
    // Raw query strings, exactly as a client would send them.
    let bad = [
        "..",
        "../../etc/passwd",
        "/workspace/../../etc/shadow",
        "..%2f..%2fetc%2fpasswd",
        "%2e%2e/%2e%2e/etc/passwd",
        "%2E%2E%2Fetc",
        "%252e%252e/etc/passwd",
        "%25252e%25252e%25252fetc",
        "a%00b",
        "%2500",
        "",
        long.as_str(),
    ];
    for raw in bad {
        for (method, rest) in [
            (Method::GET, ""),
            (Method::PUT, ""),
            (Method::DELETE, ""),
            (Method::GET, "/stat"),
            (Method::GET, "/archive"),
            (Method::PUT, "/archive"),
        ] {
            let url = format!("{}?path={raw}", files_url(&app, &id, rest));
            let r = send(
                app.http
                    .request(method.clone(), url)
                    .bearer_auth(&app.admin_token)
                    .body(b"x".to_vec()),
            )
            .await;
            assert_eq!(
                r.status,
                StatusCode::BAD_REQUEST,
                "{method} {rest}?path={}: {:?}",
                &raw[..raw.len().min(40)],
                r.json()
            );
            assert_eq!(r.error_fields(), ["path"], "{method} {rest}");
        }
    }
    // Nothing was written anywhere.
    assert_eq!(sh_in(&id, "ls -A /workspace"), "");
    // Unknown parameters and bad modes are 400s too.
    let r = files(&app, &id)
        .get("", &[("path", "x"), ("follow", "1")])
        .await;
    assert_eq!(r.error_fields(), ["follow"]);
    let r = files(&app, &id)
        .put("", &[("path", "x"), ("mode", "999")], vec![])
        .await;
    assert_eq!(r.error_fields(), ["mode"]);
    let r = files(&app, &id).put("", &[("path", "/")], vec![]).await;
    assert_eq!(r.error_fields(), ["path"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn symlinks_resolve_inside_the_sandbox_never_on_the_host() {
    let (app, id) = sandbox_with_files(
        "files-symlink",
        "ln -s / /workspace/evil && ln -s /etc /workspace/etc-link",
    )
    .await;
    let container_hostname = sh_in(&id, "cat /etc/hostname");
    assert_eq!(container_hostname, "files-symlink");
    let host_hostname = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    assert_ne!(host_hostname.trim(), container_hostname);

    // Reading through a symlink to / reads the container's files.
    let r = get_file(&app, &id, "evil/etc/hostname").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_eq!(String::from_utf8_lossy(&r.bytes).trim(), "files-symlink");
    let r = get_file(&app, &id, "etc-link").await;
    let names: Vec<String> = r.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"hostname".to_owned()), "{names:?}");
    // The host's own files are not the container's.
    let r = get_file(&app, &id, "evil/etc/os-release").await;
    if std::path::Path::new("/etc/os-release").exists() {
        assert!(
            r.status == StatusCode::NOT_FOUND
                || r.bytes != std::fs::read("/etc/os-release").unwrap(),
            "the host's /etc/os-release was readable"
        );
    }

    // Writing through it creates the file in the container, not on the host.
    let marker = format!("stockade-escape-{id}");
    let r = put_file(&app, &id, &format!("evil/tmp/{marker}"), b"inside").await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert_eq!(sh_in(&id, &format!("cat /tmp/{marker}")), "inside");
    assert!(!std::path::Path::new(&format!("/tmp/{marker}")).exists());

    // A write below a symlink to a directory lands in the container's directory.
    let r = put_file(&app, &id, &format!("etc-link/{marker}"), b"in etc").await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert_eq!(sh_in(&id, &format!("cat /etc/{marker}")), "in etc");
    assert!(!std::path::Path::new(&format!("/etc/{marker}")).exists());

    // The same through an uploaded archive, also with the symlink inside it.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "root", "/").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(6);
    h.set_mode(0o644);
    b.append_data(&mut h, format!("root/tmp/{marker}-tar"), &b"in tar"[..])
        .unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(6);
    h.set_mode(0o644);
    b.append_data(&mut h, format!("evil/tmp/{marker}-tar2"), &b"in tar"[..])
        .unwrap();
    let r = files(&app, &id)
        .put(
            "/archive",
            &[("path", "/workspace")],
            b.into_inner().unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    for name in [format!("{marker}-tar"), format!("{marker}-tar2")] {
        assert_eq!(sh_in(&id, &format!("cat /tmp/{name}")), "in tar");
        assert!(!std::path::Path::new(&format!("/tmp/{name}")).exists());
    }

    // Downloading the symlink's archive archives the container's directory.
    let r = files(&app, &id)
        .get("/archive", &[("path", "etc-link")])
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let mut ar = tar::Archive::new(&r.bytes[..]);
    let mut hostname = None;
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().display().to_string() == "etc/hostname" {
            let mut s = String::new();
            e.read_to_string(&mut s).unwrap();
            hostname = Some(s);
        }
    }
    assert_eq!(hostname.as_deref().map(str::trim), Some("files-symlink"));
}

#[tokio::test(flavor = "multi_thread")]
async fn uploads_over_the_limit_are_413() {
    const LIMIT: u64 = 1024 * 1024;
    let app = spawn_configured(|c| {
        c.service.max_file_bytes = LIMIT;
        c.service.max_unpacked_bytes = LIMIT;
    })
    .await;
    let t = &app.admin_token;
    let id = app.create_id(t, json!({ "name": "files-limit" })).await;

    // Exactly the limit is fine.
    let r = put_file(&app, &id, "exact.bin", &noise(LIMIT as usize, 1)).await;
    assert_eq!(r.status, StatusCode::CREATED);

    // Announced as too large: refused before reading.
    let r = put_file(&app, &id, "big.bin", &noise(2 * LIMIT as usize, 2)).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{:?}", r.json());
    assert_eq!(r.json()["error"]["code"], "payload_too_large");
    r.assert_message_contains("1048576");

    // Not announced (chunked): cut off while streaming.
    let data = noise(3 * LIMIT as usize, 3);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        data.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let r = send(
        app.http
            .put(files_url(&app, &id, ""))
            .bearer_auth(t)
            .query(&[("path", "chunked.bin")])
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            ))),
    )
    .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);

    // Archives: as sent, and as unpacked (a small tar.gz of 3 MB of zeros).
    let r = files(&app, &id)
        .put("/archive", &[], noise(2 * LIMIT as usize, 4))
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(3 * LIMIT);
    h.set_mode(0o644);
    b.append_data(&mut h, "zeros.bin", std::io::repeat(0).take(3 * LIMIT))
        .unwrap();
    let bomb = gzip(&b.into_inner().unwrap());
    assert!((bomb.len() as u64) < LIMIT / 10);
    let r = files(&app, &id)
        .put("/archive", &[("path", "bomb")], bomb)
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{:?}", r.json());
    r.assert_message_contains("unpacked size exceeds the limit of 1 MiB");

    // Nothing of the refused uploads is left.
    assert_eq!(sh_in(&id, "ls /workspace"), "exact.bin");

    // A tar.gz whose content is exactly the limit unpacks (its tar is a bit
    // larger than the limit, its gzip much smaller).
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(LIMIT);
    h.set_mode(0o644);
    b.append_data(&mut h, "zeros.bin", std::io::repeat(0).take(LIMIT))
        .unwrap();
    let fits = gzip(&b.into_inner().unwrap());
    let r = files(&app, &id)
        .put("/archive", &[("path", "fits")], fits)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_eq!(r.json()["bytes"], LIMIT);
    assert_eq!(
        sh_in(&id, "wc -c < /workspace/fits/zeros.bin"),
        LIMIT.to_string()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn another_accounts_sandbox_is_forbidden_for_every_file_verb() {
    let (app, [alice, bob]) = spawn_with_accounts(["alice", "bob"]).await;
    let id = app.create_id(&alice, json!({ "name": "alices" })).await;
    let as_alice = Files {
        app: &app,
        token: &alice,
        id: &id,
    };
    let alice_put = as_alice.put("", &[("path", "secret")], b"s".to_vec()).await;
    assert_eq!(alice_put.status, StatusCode::CREATED);

    for (method, rest, query) in [
        (Method::GET, "", vec![("path", "secret")]),
        (Method::GET, "", vec![]),
        (Method::PUT, "", vec![("path", "x")]),
        (Method::DELETE, "", vec![("path", "secret")]),
        (Method::GET, "/stat", vec![("path", "secret")]),
        (Method::GET, "/archive", vec![]),
        (Method::PUT, "/archive", vec![]),
        (Method::POST, "/archive", vec![]),
    ] {
        let r = Files {
            token: &bob,
            ..as_alice
        }
        .call(method.clone(), rest, &query, Some(sample_tar(b"x")))
        .await;
        assert_eq!(
            r.status,
            StatusCode::FORBIDDEN,
            "{method} files{rest}: {:?}",
            r.json()
        );
        assert_eq!(r.json()["error"]["code"], "forbidden");
    }
    // Unknown sandboxes are 404, malformed ids 400.
    for (id, status) in [
        ("abcdefghijkl", StatusCode::NOT_FOUND),
        // A name nobody has is not found; what cannot be a name is a 400.
        ("nope", StatusCode::NOT_FOUND),
        ("-nope", StatusCode::BAD_REQUEST),
    ] {
        let r = Files {
            token: &bob,
            id,
            ..as_alice
        }
        .get("", &[])
        .await;
        assert_eq!(r.status, status, "{id}");
    }
    // Nothing changed for Alice.
    assert_eq!(sh_in(&id, "ls /workspace"), "secret");
    assert_eq!(sh_in(&id, "cat /workspace/secret"), "s");
}

#[tokio::test(flavor = "multi_thread")]
async fn file_routes_are_documented() {
    let app = spawn_app().await;
    let doc = app.openapi().await;
    let paths = &doc["paths"];
    let files = &paths["/api/v1/sandbox/{id}/files"];
    for verb in ["get", "put", "delete"] {
        assert!(files[verb].is_object(), "files {verb}");
    }
    assert!(files["get"]["responses"]["200"]["content"]["application/octet-stream"].is_object());
    assert!(files["get"]["responses"]["200"]["content"]["application/json"].is_object());
    assert!(paths["/api/v1/sandbox/{id}/files/stat"]["get"].is_object());
    let archive = &paths["/api/v1/sandbox/{id}/files/archive"];
    for verb in ["get", "put", "post"] {
        assert!(archive[verb].is_object(), "archive {verb}");
    }
    assert!(doc["components"]["schemas"]["FileEntry"].is_object());
    assert!(doc["components"]["schemas"]["DirectoryListing"].is_object());
    assert_eq!(doc["components"]["schemas"]["Binary"]["format"], "binary");
    // The core API is still there.
    assert!(paths["/api/v1/sandbox"]["post"].is_object());
}
