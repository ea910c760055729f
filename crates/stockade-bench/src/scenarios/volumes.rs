//! Shared volumes: a 100 MB file written and read through E2B's volume
//! content API (`PUT`/`GET /e2b/volumecontent/{id}/file`, the volume's
//! token), against `docker cp` of the same file into and out of a raw
//! container's volume (the Engine API's archive upload and download, which
//! is what `docker cp` calls).

use std::time::Instant;

use anyhow::{bail, Context};
use bollard::container::{DownloadFromContainerOptions, UploadToContainerOptions};
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;

use super::Bench;
use crate::report::{Better, Row, Target};

/// The file each side writes and reads back.
const FILE_BYTES: usize = 100 * 1_000_000;
/// Transfers per direction and side (one in a quick run).
const ROUNDS: usize = 5;

/// A tar archive of one file `name` holding `data`: what `docker cp` sends.
fn archive_of(name: &str, data: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::with_capacity(data.len() + 2048));
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder
        .append_data(&mut header, name, data)
        .context("tar the file")?;
    builder.into_inner().context("tar the file")
}

impl Bench {
    pub(super) async fn volumes(&mut self) -> anyhow::Result<()> {
        let app = self.app()?;
        let (base, token) = (app.base.clone(), app.token.clone());
        let http = reqwest::Client::new();
        let name = format!("bench-{}", stockade_core::SharedVolumeId::generate());
        let created: Value = http
            .post(format!("{base}/e2b/volumes"))
            .header("x-api-key", &token)
            .json(&serde_json::json!({ "name": name }))
            .send()
            .await?
            .json()
            .await?;
        let id = created["volumeID"]
            .as_str()
            .with_context(|| format!("volume create: {created}"))?
            .to_owned();
        let content = created["token"].as_str().unwrap_or_default().to_owned();
        let raw = self.raw.create().await?;
        let result = async {
            let data = bytes::Bytes::from(
                (0..FILE_BYTES).map(|i| (i % 251) as u8).collect::<Vec<u8>>(),
            );
            let archive = bytes::Bytes::from(archive_of("big.bin", &data)?);
            let url = format!("{base}/e2b/volumecontent/{id}/file");
            let mb = FILE_BYTES as f64 / 1e6;
            let (mut s_w, mut r_w, mut s_r, mut r_r) = (vec![], vec![], vec![], vec![]);
            let rounds = if self.plan.quick { 1 } else { ROUNDS };
            for _ in 0..rounds {
                let t = Instant::now();
                let resp = http
                    .put(&url)
                    .query(&[("path", "/big.bin")])
                    .bearer_auth(&content)
                    .body(data.clone())
                    .send()
                    .await?;
                if resp.status() != StatusCode::CREATED {
                    bail!("content write: {} {}", resp.status(), resp.text().await?);
                }
                s_w.push(mb / t.elapsed().as_secs_f64());

                let t = Instant::now();
                let resp = http
                    .get(&url)
                    .query(&[("path", "/big.bin")])
                    .bearer_auth(&content)
                    .send()
                    .await?;
                if !resp.status().is_success() {
                    bail!("content read: {}", resp.status());
                }
                let mut got = 0usize;
                let mut body = resp.bytes_stream();
                while let Some(chunk) = body.next().await {
                    got += chunk?.len();
                }
                s_r.push(mb / t.elapsed().as_secs_f64());
                if got != FILE_BYTES {
                    bail!("content read: {got} bytes, expected {FILE_BYTES}");
                }

                let t = Instant::now();
                self.raw
                    .docker
                    .upload_to_container(
                        &raw.name,
                        Some(UploadToContainerOptions {
                            path: "/workspace",
                            ..Default::default()
                        }),
                        archive.clone(),
                    )
                    .await
                    .context("raw: docker cp in")?;
                r_w.push(mb / t.elapsed().as_secs_f64());

                let t = Instant::now();
                let mut got = 0usize;
                let mut stream = self.raw.docker.download_from_container(
                    &raw.name,
                    Some(DownloadFromContainerOptions {
                        path: "/workspace/big.bin",
                    }),
                );
                while let Some(chunk) = stream.next().await {
                    got += chunk.context("raw: docker cp out")?.len();
                }
                r_r.push(mb / t.elapsed().as_secs_f64());
                if got < FILE_BYTES {
                    bail!("raw: docker cp out: {got} bytes, expected at least {FILE_BYTES}");
                }
            }
            self.rows.push(
                Row::new(
                    "volume_write",
                    "Shared volume, a 100 MB file written through the content API",
                    "MB/s",
                    Better::Higher,
                    &s_w,
                    Some(&r_w),
                    Target::RatioAtLeast(0.5),
                )
                .note("Stockade: E2B's PUT /volumecontent/{id}/file, streamed through the volume's files helper (a temporary file renamed into place, fsync'd); raw: `docker cp` of the same file into a container's volume (the Engine API's archive upload)."),
            );
            self.rows.push(
                Row::new(
                    "volume_read",
                    "Shared volume, a 100 MB file read through the content API",
                    "MB/s",
                    Better::Higher,
                    &s_r,
                    Some(&r_r),
                    Target::RatioAtLeast(0.5),
                )
                .note("Stockade: E2B's GET /volumecontent/{id}/file, streamed from the volume's files helper; raw: `docker cp` of it out of the container (the Engine API's archive download, a tar)."),
            );
            Ok(())
        }
        .await;
        let _ = self.raw.destroy(&raw).await;
        let _ = http
            .delete(format!("{base}/e2b/volumes/{id}"))
            .header("x-api-key", &token)
            .send()
            .await;
        result
    }
}
