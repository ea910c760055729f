//! Templates: an account's own sandbox images, built by the server from a
//! base and steps or from a Dockerfile, and the files their `COPY` steps
//! take (uploaded under their SHA-256). Sandboxes are made from a template
//! with [`crate::CreateParams::template`].

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE};
use reqwest::Method;
use sha2::{Digest, Sha256};
use stockade_api::templates::{
    BuildLogEntry, BuildResponse, BuildStatusResponse, CreateTemplateRequest,
    ListTemplatesResponse, StartBuildRequest, TagBuildRequest, TemplateFilesResponse,
    TemplateResponse, TemplateTagsResponse,
};

use crate::client::Client;
use crate::error::Error;
use crate::shared_volumes::segment;

/// How often [`Client::wait_for_build`] asks for the build's status.
const POLL_EVERY: Duration = Duration::from_millis(300);

/// The most log lines the server returns in one page.
pub const MAX_BUILD_LOG_PAGE: u32 = 1000;

/// The URL of `template` (an id or a name) with `rest` after it; an empty
/// name is refused before any request.
fn template_url(template: &str, rest: &str) -> Result<String, Error> {
    if matches!(template, "" | "." | "..") {
        return Err(Error::invalid(
            "template",
            "name a template (its name or id)",
        ));
    }
    Ok(format!("/api/v1/templates/{}{rest}", segment(template)))
}

/// The hash files are uploaded under: the SHA-256 of their bytes, in
/// lowercase hex.
pub fn files_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether a build's status is final (`ready` or `error`).
fn is_final(status: &str) -> bool {
    matches!(status, "ready" | "error")
}

impl Client {
    /// Makes a template — or, when you have one of that name, a new build
    /// of it. With a base (`from_image`, `from_template`) or a `dockerfile`
    /// the build starts at once; without, it waits (`builds[0]` is
    /// `waiting`) for [`Client::start_build`], so that files can be
    /// uploaded first.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::CreateTemplateRequest;
    /// let t = client
    ///     .create_template(&CreateTemplateRequest {
    ///         name: "py-tools".into(),
    ///         from_image: Some("python:3.13".into()),
    ///         steps: Some(vec![serde_json::json!({"type": "RUN", "command": "pip install httpx"})]),
    ///         ..Default::default()
    ///     })
    ///     .await?;
    /// println!("{} build {}", t.template_id, t.builds.unwrap_or_default()[0].build_id);
    /// # Ok(()) }
    /// ```
    pub async fn create_template(
        &self,
        req: &CreateTemplateRequest,
    ) -> Result<TemplateResponse, Error> {
        self.send(self.request(Method::POST, "/api/v1/templates").json(req))
            .await
    }

    /// Your templates (without their builds; [`Client::template`] has
    /// them), then other accounts' public ones.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// for t in client.templates().await?.templates {
    ///     println!("{} {}", t.template_id, t.names.join(", "));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn templates(&self) -> Result<ListTemplatesResponse, Error> {
        self.send(self.request(Method::GET, "/api/v1/templates"))
            .await
    }

    /// One template by id or name, with its builds, newest first.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let t = client.template("py-tools").await?;
    /// let newest = t.builds.as_deref().and_then(|b| b.first());
    /// println!("{:?}", newest.map(|b| &b.status));
    /// # Ok(()) }
    /// ```
    pub async fn template(&self, name_or_id: &str) -> Result<TemplateResponse, Error> {
        self.send(self.request(Method::GET, &template_url(name_or_id, "")?))
            .await
    }

    /// Deletes a template: its names are free at once; sandboxes made from
    /// it keep running.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let gone = client.delete_template("py-tools").await?;
    /// println!("deleted {}", gone.template_id);
    /// # Ok(()) }
    /// ```
    pub async fn delete_template(&self, name_or_id: &str) -> Result<TemplateResponse, Error> {
        self.send(self.request(Method::DELETE, &template_url(name_or_id, "")?))
            .await
    }

    /// Whether the files with this hash (see [`files_hash`]) are stored
    /// already, so that an upload can be skipped.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let hash = stockade_sdk::files_hash(b"...");
    /// println!("{}", client.template_files("py-tools", &hash).await?.present);
    /// # Ok(()) }
    /// ```
    pub async fn template_files(
        &self,
        template: &str,
        hash: &str,
    ) -> Result<TemplateFilesResponse, Error> {
        let url = template_url(template, &format!("/files/{}", segment(hash)))?;
        self.send(self.request(Method::GET, &url)).await
    }

    /// Uploads files for `COPY` steps (or a Dockerfile's build context): a
    /// tar or tar.gz archive stored under `hash`, the SHA-256 of its bytes
    /// in hex (see [`files_hash`]).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let archive = std::fs::read("context.tar.gz").expect("read the archive");
    /// let hash = stockade_sdk::files_hash(&archive);
    /// let stored = client.upload_template_files("py-tools", &hash, archive).await?;
    /// println!("{:?} bytes", stored.bytes);
    /// # Ok(()) }
    /// ```
    pub async fn upload_template_files(
        &self,
        template: &str,
        hash: &str,
        archive: impl Into<Bytes>,
    ) -> Result<TemplateFilesResponse, Error> {
        let archive = archive.into();
        let url = template_url(template, &format!("/files/{}", segment(hash)))?;
        let req = self
            .request(Method::PUT, &url)
            .header(CONTENT_TYPE, "application/octet-stream")
            .header(CONTENT_LENGTH, archive.len() as u64)
            .body(archive);
        self.send(req).await
    }

    /// Starts a waiting build with its base and steps, or a Dockerfile.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::StartBuildRequest;
    /// let b = client
    ///     .start_build("py-tools", "b1c2d3", &StartBuildRequest {
    ///         dockerfile: Some("FROM python:3.13\nRUN pip install httpx\n".into()),
    ///         ..Default::default()
    ///     })
    ///     .await?;
    /// println!("{}", b.status);
    /// # Ok(()) }
    /// ```
    pub async fn start_build(
        &self,
        template: &str,
        build_id: &str,
        req: &StartBuildRequest,
    ) -> Result<BuildResponse, Error> {
        let url = template_url(template, &format!("/builds/{}", segment(build_id)))?;
        self.send(self.request(Method::POST, &url).json(req)).await
    }

    /// Gives `tags` to a build of a template (whatever its status;
    /// `name:tag` runs it once it is ready); the template's other builds
    /// lose them.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let b = client.tag_build("py-tools", "b1c2d3", &["stable"]).await?;
    /// println!("{:?}", b.tags);
    /// # Ok(()) }
    /// ```
    pub async fn tag_build(
        &self,
        template: &str,
        build_id: &str,
        tags: &[&str],
    ) -> Result<BuildResponse, Error> {
        let url = template_url(template, &format!("/builds/{}/tags", segment(build_id)))?;
        let body = TagBuildRequest {
            tags: tags.iter().map(|t| t.to_string()).collect(),
        };
        self.send(self.request(Method::PUT, &url).json(&body)).await
    }

    /// A template's tags, each with the ready build it points at.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// for t in client.template_tags("py-tools").await?.tags {
    ///     println!("{} -> {}", t.tag, t.build_id);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn template_tags(&self, template: &str) -> Result<TemplateTagsResponse, Error> {
        self.send(self.request(Method::GET, &template_url(template, "/tags")?))
            .await
    }

    /// Takes a tag from a template's builds (no error when none has it).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// client.remove_template_tag("py-tools", "stable").await?;
    /// # Ok(()) }
    /// ```
    pub async fn remove_template_tag(&self, template: &str, tag: &str) -> Result<(), Error> {
        let url = template_url(template, &format!("/tags/{}", segment(tag)))?;
        self.send_empty(self.request(Method::DELETE, &url)).await
    }

    /// A build's status and its log lines from `logs_offset` on (at most
    /// `limit`, the server's 100 when `None`, up to
    /// [`MAX_BUILD_LOG_PAGE`]).
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let st = client.build_status("py-tools", "b1c2d3", 0, None).await?;
    /// for line in &st.log_entries {
    ///     println!("{}", line.message);
    /// }
    /// println!("{}", st.build.status);
    /// # Ok(()) }
    /// ```
    pub async fn build_status(
        &self,
        template: &str,
        build_id: &str,
        logs_offset: u64,
        limit: Option<u32>,
    ) -> Result<BuildStatusResponse, Error> {
        let url = template_url(template, &format!("/builds/{}", segment(build_id)))?;
        let mut query = vec![("logsOffset", logs_offset.to_string())];
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        self.send(self.request(Method::GET, &url).query(&query))
            .await
    }

    /// Makes the template `name` (or a new build of it) from a Dockerfile:
    /// the build context (a tar.gz, or a plain tar) is uploaded under its
    /// SHA-256 unless the server has it already, then the build is started.
    /// Returns the started build; [`Client::wait_for_build`] follows it.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// let dockerfile = "FROM python:3.13\nCOPY . /app\nRUN pip install -r /app/requirements.txt\n";
    /// let context = std::fs::read("context.tar.gz").expect("read the context");
    /// let build = client
    ///     .build_template_from_dockerfile("py-app", dockerfile, Some(context))
    ///     .await?;
    /// let done = client
    ///     .wait_for_build(&build.template_id, &build.build_id, |l| println!("{}", l.message))
    ///     .await?;
    /// println!("{:?}", done.image);
    /// # Ok(()) }
    /// ```
    pub async fn build_template_from_dockerfile(
        &self,
        name: &str,
        dockerfile: &str,
        context_tar_gz: Option<Vec<u8>>,
    ) -> Result<BuildResponse, Error> {
        let req = CreateTemplateRequest {
            name: name.to_owned(),
            ..Default::default()
        };
        self.build_template_from_dockerfile_with(&req, dockerfile, context_tar_gz)
            .await
    }

    /// [`Client::build_template_from_dockerfile`] with the template's other
    /// settings (aliases, tags, CPUs, memory, start and ready commands,
    /// `force`) from `req`. `req` must not name a base, steps, a Dockerfile
    /// or a context hash: the Dockerfile and the context give them.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// use stockade_sdk::CreateTemplateRequest;
    /// let req = CreateTemplateRequest { name: "web".into(), cpu_count: Some(2), ..Default::default() };
    /// let build = client
    ///     .build_template_from_dockerfile_with(&req, "FROM node:20\nRUN npm -v\n", None)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn build_template_from_dockerfile_with(
        &self,
        req: &CreateTemplateRequest,
        dockerfile: &str,
        context_tar_gz: Option<Vec<u8>>,
    ) -> Result<BuildResponse, Error> {
        for (given, field) in [
            (req.from_image.is_some(), "fromImage"),
            (req.from_template.is_some(), "fromTemplate"),
            (req.steps.is_some(), "steps"),
            (req.dockerfile.is_some(), "dockerfile"),
            (req.context_hash.is_some(), "contextHash"),
        ] {
            if given {
                return Err(Error::invalid(
                    field,
                    "the Dockerfile and its build context give it: leave it unset",
                ));
            }
        }
        // Made without a base, the build waits until its context is stored.
        let template = self.create_template(req).await?;
        let build = template
            .builds
            .as_deref()
            .and_then(|b| b.first())
            .ok_or_else(|| Error::Decode("the new template came without its build".into()))?;
        let context_hash = match context_tar_gz {
            Some(archive) => {
                let hash = files_hash(&archive);
                let stored = self
                    .template_files(&template.template_id, &hash)
                    .await?
                    .present;
                if !stored {
                    self.upload_template_files(&template.template_id, &hash, archive)
                        .await?;
                }
                Some(hash)
            }
            None => None,
        };
        let start = StartBuildRequest {
            dockerfile: Some(dockerfile.to_owned()),
            context_hash,
            start_cmd: req.start_cmd.clone(),
            ready_cmd: req.ready_cmd.clone(),
            force: req.force,
            ..Default::default()
        };
        self.start_build(&template.template_id, &build.build_id, &start)
            .await
    }

    /// Follows a build until it is `ready` or fails: every ~300 ms it reads
    /// the log lines not seen yet, handing each to `on_log` in order, and
    /// once the build is over reads the rest of its log. Returns the ready
    /// build; a failed one is [`Error::BuildFailed`] with its reason.
    ///
    /// ```no_run
    /// # async fn demo(client: stockade_sdk::Client) -> Result<(), stockade_sdk::Error> {
    /// match client.wait_for_build("py-tools", "b1c2d3", |l| eprintln!("{}", l.message)).await {
    ///     Ok(build) => println!("ready: {:?}", build.image),
    ///     Err(stockade_sdk::Error::BuildFailed { reason, .. }) => eprintln!("failed: {reason}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_for_build(
        &self,
        template: &str,
        build_id: &str,
        mut on_log: impl FnMut(&BuildLogEntry),
    ) -> Result<BuildResponse, Error> {
        let mut offset = 0u64;
        loop {
            let page = self
                .build_status(template, build_id, offset, Some(MAX_BUILD_LOG_PAGE))
                .await?;
            let lines = page.log_entries.len();
            for line in &page.log_entries {
                on_log(line);
                offset = offset.max(line.offset + 1);
            }
            let build = page.build;
            if is_final(&build.status) {
                // The status was read with this page: lines written before
                // the build ended may still follow it.
                if lines > 0 {
                    continue;
                }
                return match build.status.as_str() {
                    "ready" => Ok(build),
                    _ => Err(Error::BuildFailed {
                        reason: build
                            .reason
                            .clone()
                            .unwrap_or_else(|| "the build failed".into()),
                        failed_step: build.failed_step,
                        template_id: build.template_id,
                        build_id: build.build_id,
                    }),
                };
            }
            // A full page means more is waiting: read it at once.
            if lines < MAX_BUILD_LOG_PAGE as usize {
                tokio::time::sleep(POLL_EVERY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_hashed_as_hex_sha256() {
        assert_eq!(
            files_hash(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(files_hash(b"abc").len(), 64);
    }

    #[test]
    fn template_urls_encode_names_and_refuse_empty_ones() {
        assert_eq!(
            template_url("web:v1", "/builds/b1").unwrap(),
            "/api/v1/templates/web%3Av1/builds/b1"
        );
        assert!(template_url("", "").is_err());
        assert!(template_url("..", "").is_err());
        assert!(is_final("ready") && is_final("error"));
        assert!(!is_final("building") && !is_final("waiting"));
    }
}
