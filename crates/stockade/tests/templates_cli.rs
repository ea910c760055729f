//! `stockade template` as a user runs it against `stockade server`: a
//! template built from a Dockerfile and a context directory (its log
//! streamed, its id printed), listed, its log read back, a sandbox created
//! from it that sees the Dockerfile's effects; a failing build says why and
//! exits non-zero; `rm` deletes.

mod support;
use support::CliServer;

const TOKEN: &str = "stk_templatesclitesttemplatesclitest0001";

struct Server(CliServer);

impl std::ops::Deref for Server {
    type Target = CliServer;
    fn deref(&self) -> &CliServer {
        &self.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        support::remove_sandboxes(&self.0.url, TOKEN);
        for name in ["cli-tpl", "cli-broken"] {
            let _ = self.0.command(&["template", "rm", name]).output();
        }
        self.0.stop(None);
        // The server's cache layers stay after their templates go.
        if let Some(instance) = &self.0.instance {
            support::remove_by_filter(&format!("label=io.stockade.instance-id={instance}"), true);
        }
    }
}

#[test]
fn a_dockerfile_is_built_listed_logged_run_and_removed() {
    let mut s = Server(CliServer::start(TOKEN, &[], &[]));
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(ctx.path().join("hello.txt"), "hello from the context\n").unwrap();
    std::fs::write(ctx.path().join("secret.log"), "left out\n").unwrap();
    std::fs::write(ctx.path().join(".dockerignore"), "*.log\n").unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!(
            "FROM {}\nWORKDIR /app\nCOPY . .\nRUN cat hello.txt > copied.txt\nENV MODE=cli\n",
            support::image()
        ),
    )
    .unwrap();
    let dir = ctx.path().to_str().unwrap();

    let out = s.run(&["template", "build", dir, "--name", "cli-tpl"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(id.len(), 12, "the template's id on stdout: {id}");
    assert!(stderr.contains("COPY . ."), "the log streamed: {stderr}");

    let table = s.ok(&["template", "ls"]);
    assert!(
        table
            .lines()
            .any(|l| l.contains("cli-tpl") && l.contains("ready")),
        "{table}"
    );
    let log = s.ok(&["template", "logs", "cli-tpl"]);
    assert!(log.contains("RUN cat hello.txt > copied.txt"), "{log}");

    let made = s.json(&[
        "create",
        "--name",
        "from-tpl",
        "--template",
        "cli-tpl",
        "--json",
    ]);
    s.0.instance = support::instance_of(made["id"].as_str().unwrap());
    let said = s.ok(&[
        "exec",
        "from-tpl",
        "--",
        "sh",
        "-c",
        "pwd; cat copied.txt; echo $MODE; test -e secret.log || echo ignored",
    ]);
    assert_eq!(said, "/app\nhello from the context\ncli\nignored\n");

    // Tags: the newest ready build gets `stable`, which a create names.
    let tagged = s.ok(&["template", "tag", "cli-tpl", "stable"]);
    assert!(tagged.contains("stable"), "{tagged}");
    s.ok(&[
        "create",
        "--name",
        "from-tag",
        "--template",
        "cli-tpl:stable",
    ]);
    s.ok(&["rm", "from-tag"]);
    s.ok(&["template", "untag", "cli-tpl", "stable"]);
    let err = s.fails(&[
        "create",
        "--name",
        "untagged",
        "--template",
        "cli-tpl:stable",
    ]);
    assert!(err.contains("stable"), "{err}");

    // A failing build: its reason, a non-zero exit.
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!("FROM {}\nRUN echo nope >&2; exit 4\n", support::image()),
    )
    .unwrap();
    let err = s.fails(&["template", "build", dir, "--name", "cli-broken"]);
    assert!(err.contains("exit code 4") && err.contains("nope"), "{err}");

    s.ok(&["rm", "from-tpl"]);
    s.ok(&["template", "rm", "cli-tpl"]);
    let table = s.ok(&["template", "ls"]);
    assert!(!table.contains("cli-tpl"), "{table}");
}
