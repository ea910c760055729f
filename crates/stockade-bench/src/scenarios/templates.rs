//! Templates: a three-step Dockerfile built by Stockade (a build sandbox,
//! each step through its agent, a layer committed after each, the image
//! stored) against `docker build` of the same Dockerfile through the Engine
//! API, first with no cache, then again unchanged (everything cached), then
//! with its last step edited; and a create from the template against a
//! create from the plain image it was built on.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bollard::image::{BuildImageOptions, ListImagesOptions, RemoveImageOptions};
use futures_util::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::{ms, Bench};
use crate::report::{Better, Row, Target};

/// Builds of each kind per side (one in a quick run).
const ROUNDS: usize = 3;
/// How often a build's status is read while it runs.
const POLL: Duration = Duration::from_millis(50);
/// The longest one build may take.
const BUILD_LIMIT: Duration = Duration::from_secs(300);

/// The Dockerfile: three `RUN` steps, the first unique to the round (so
/// neither side has it cached), the last one changed by `last`.
fn dockerfile(image: &str, round: &str, last: &str) -> String {
    format!(
        "FROM {image}\n\
         RUN mkdir -p /srv && echo {round} > /srv/round.txt\n\
         RUN echo second > /srv/second.txt\n\
         RUN echo {last} > /srv/last.txt\n"
    )
}

/// A tar holding one file, `Dockerfile`: what `docker build` sends.
fn context_of(dockerfile: &str) -> anyhow::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(dockerfile.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder
        .append_data(&mut header, "Dockerfile", dockerfile.as_bytes())
        .context("tar the Dockerfile")?;
    builder.into_inner().context("tar the Dockerfile")
}

impl Bench {
    /// Starts a build of template `name` from `dockerfile` and waits until
    /// it is ready; the time from the request to the first `ready` read.
    async fn stockade_build(&self, name: &str, dockerfile: &str) -> anyhow::Result<f64> {
        let t = Instant::now();
        let (status, made) = self
            .api
            .answer(
                Method::POST,
                "/api/v1/templates",
                Some(json!({ "name": name, "dockerfile": dockerfile })),
            )
            .await?;
        if status != StatusCode::ACCEPTED {
            bail!("template build: {status} {made}");
        }
        let id = made["templateId"].as_str().context("no templateId")?;
        let build = made["builds"][0]["buildId"]
            .as_str()
            .context("no buildId")?;
        let path = format!("/api/v1/templates/{id}/builds/{build}?limit=1");
        loop {
            let (status, v) = self.api.answer(Method::GET, &path, None).await?;
            if status != StatusCode::OK {
                bail!("build status: {status} {v}");
            }
            match v["build"]["status"].as_str() {
                Some("ready") => return Ok(ms(t.elapsed())),
                Some("error") => bail!("the template build failed: {}", v["build"]["reason"]),
                _ if t.elapsed() > BUILD_LIMIT => bail!("the template build took too long"),
                _ => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// `docker build` of `dockerfile` tagged `tag`, through the Engine API.
    async fn docker_build(&self, tag: &str, dockerfile: &str) -> anyhow::Result<f64> {
        let context = context_of(dockerfile)?;
        let t = Instant::now();
        let options = BuildImageOptions {
            dockerfile: "Dockerfile".to_owned(),
            t: tag.to_owned(),
            rm: true,
            forcerm: true,
            ..Default::default()
        };
        let mut stream = self
            .raw
            .docker
            .build_image(options, None, Some(context.into()));
        while let Some(info) = stream.next().await {
            let info = info.context("raw: docker build")?;
            if let Some(e) = info.error {
                bail!("raw: docker build: {e}");
            }
        }
        Ok(ms(t.elapsed()))
    }

    pub(super) async fn templates(&mut self) -> anyhow::Result<()> {
        let run = stockade_core::SandboxId::generate().to_string();
        let name = format!("bench-{run}");
        let image = self.cli_image.clone();
        let mut tags = Vec::new();
        let result = async {
            let rounds = if self.plan.quick { 1 } else { ROUNDS };
            let (mut s_cold, mut r_cold) = (vec![], vec![]);
            let (mut s_cached, mut r_cached) = (vec![], vec![]);
            let (mut s_edit, mut r_edit) = (vec![], vec![]);
            for i in 0..rounds {
                let round = format!("{run}-{i}");
                let first = dockerfile(&image, &round, "last");
                let edited = dockerfile(&image, &round, "edited");
                for (file, s, r) in [
                    (&first, &mut s_cold, &mut r_cold),
                    (&first, &mut s_cached, &mut r_cached),
                    (&edited, &mut s_edit, &mut r_edit),
                ] {
                    s.push(self.stockade_build(&name, file).await?);
                    let tag = format!("stockade-bench-template:{round}-{}", tags.len());
                    tags.push(tag.clone());
                    r.push(self.docker_build(&tag, file).await?);
                }
            }
            let first_note = "Stockade: POST /api/v1/templates with the Dockerfile until the build \
                reads `ready` (a build sandbox, each RUN through its agent, a layer committed \
                after each step, the final image committed and stored in the object store); \
                baseline: `docker build` of the same Dockerfile through the Engine API (the \
                classic builder).";
            let cached_note = "Even with every step cached a build makes its build sandbox from \
                the last cached layer, commits the final image and stores it in the object \
                store; `docker build` only looks its cache up.";
            for (id, title, s, r, note) in [
                ("template_build", "Template build, 3 RUN steps, nothing cached", &s_cold, &r_cold, first_note),
                ("template_rebuild", "Template rebuild, unchanged (every step cached)", &s_cached, &r_cached, cached_note),
                ("template_rebuild_last", "Template rebuild after editing its last step", &s_edit, &r_edit, "The first two steps from the cache, the last one run."),
            ] {
                self.rows.push(
                    Row::new(id, title, "ms", Better::Lower, s, Some(r), Target::None)
                        .baseline("docker build")
                        .note(note),
                );
            }

            // Creates: from the template, and from the image it was built on.
            let (mut s, mut r) = (vec![], vec![]);
            for _ in 0..self.plan.creates.max(3) {
                let t = Instant::now();
                let id = self.api.create(json!({ "template": name })).await?;
                s.push(ms(t.elapsed()));
                self.api.delete(&id).await?;
                let t = Instant::now();
                let id = self.api.create(json!({})).await?;
                r.push(ms(t.elapsed()));
                self.api.delete(&id).await?;
            }
            self.rows.push(
                Row::new(
                    "create_template",
                    "Create → RUNNING from a template",
                    "ms",
                    Better::Lower,
                    &s,
                    Some(&r),
                    Target::RatioAtMost(1.05),
                )
                .baseline("create from the plain image")
                .note("both through POST /api/v1/sandbox, one at a time, each deleted before the next: `template` (its newest build, its environment and working directory) against the image the template was built on."),
            );
            anyhow::Ok(())
        }
        .await;
        let (status, v) = self
            .api
            .answer(Method::DELETE, &format!("/api/v1/templates/{name}"), None)
            .await
            .unwrap_or((StatusCode::OK, Value::Null));
        if !status.is_success() && status != StatusCode::NOT_FOUND {
            self.notes.push(format!(
                "the benchmark's template was not deleted: {status} {v}"
            ));
        }
        // The cache's layers (which outlive a template, for the account's
        // next builds) are this server instance's: labelled with it.
        let instance = self.app()?.instance_id();
        let filters = std::collections::HashMap::from([(
            "label".to_owned(),
            vec![format!("io.stockade.instance-id={instance}")],
        )]);
        let layers = self
            .raw
            .docker
            .list_images(Some(ListImagesOptions {
                filters,
                ..Default::default()
            }))
            .await
            .unwrap_or_default();
        let layers = layers.into_iter().flat_map(|i| i.repo_tags);
        for tag in tags.into_iter().chain(layers) {
            let _ = self
                .raw
                .docker
                .remove_image(
                    &tag,
                    Some(RemoveImageOptions {
                        force: true,
                        ..Default::default()
                    }),
                    None,
                )
                .await;
        }
        result
    }
}
