//! Stockade's object store: where snapshots' `/workspace` archives,
//! workspace syncs and uploaded archives live. The [`BlobStore`] trait, and
//! [`ObjectBlobStore`] over the `object_store` crate: a local directory by
//! default, any S3-compatible endpoint by configuration. Everything streams:
//! no archive is ever held in memory whole (big objects go up in parts).
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::{Stream, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, PutPayload, RetryConfig, WriteMultipart};
use stockade_core::error::error_chain;

/// A stream of bytes (an archive on its way somewhere).
pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// Objects up to this size go up in one request; bigger ones in parts of it.
pub const PART_SIZE: usize = 8 * 1024 * 1024;

/// What can go wrong in the object store.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("object '{0}' not found")]
    NotFound(String),
    /// A key Stockade would never make (empty, `..`, …).
    #[error("invalid object key '{key}': {reason}")]
    InvalidKey { key: String, reason: String },
    /// The data being stored failed to arrive (the source stream broke).
    #[error("reading the data to store failed: {0}")]
    Source(String),
    /// The store itself failed (unreachable endpoint, denied, disk full …).
    #[error("object store ({location}): {message}")]
    Store { location: String, message: String },
    /// The configuration cannot work (e.g. an S3 store without a bucket).
    #[error("object store configuration: {0}")]
    Config(String),
    /// A local store whose file system is down to the room it keeps free
    /// (for the database beside it): nothing was stored.
    #[error("object store ({location}) is full: {message}")]
    Full { location: String, message: String },
}

pub type BlobResult<T> = Result<T, BlobError>;

/// One stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobMeta {
    pub key: String,
    pub size: u64,
    pub last_modified: DateTime<Utc>,
}

/// Where objects are kept; what the server shows (never with secrets).
#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// Streams `data` into `key` and returns how many bytes were stored.
    /// If the stream or the store fails, nothing is left under `key`.
    async fn put_stream(&self, key: &str, data: ByteStream) -> BlobResult<u64>;

    /// The object's size and its content as a stream; `NotFound` when absent.
    async fn get_stream(&self, key: &str) -> BlobResult<(u64, ByteStream)>;

    /// The object's metadata, `None` when absent.
    async fn head(&self, key: &str) -> BlobResult<Option<BlobMeta>>;

    /// Removes an object; one that is absent already is fine.
    async fn delete(&self, key: &str) -> BlobResult<()>;

    /// Every object under `prefix` (a `/`-separated key prefix).
    async fn list(&self, prefix: &str) -> BlobResult<Vec<BlobMeta>>;

    /// Where the objects go, for `metadata.s3_config`: backend, endpoint,
    /// bucket and region, or the local path. Never a secret.
    fn location(&self) -> serde_json::Value;
}

/// An S3-compatible endpoint (AWS, MinIO, Ceph, moto …).
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// e.g. `http://127.0.0.1:9000`; `None` means AWS itself.
    pub endpoint: Option<String>,
    pub bucket: String,
    pub region: String,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Which object store the server uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobConfig {
    /// A directory on the server's disk (the default: `<data dir>/blobs`).
    Local {
        dir: PathBuf,
    },
    S3(S3Config),
}

/// [`BlobStore`] over the `object_store` crate.
#[derive(Debug, Clone)]
pub struct ObjectBlobStore {
    store: Arc<dyn ObjectStore>,
    location: serde_json::Value,
    /// For error messages: `local:/path` or `s3://bucket at endpoint`.
    label: String,
    /// A local store's directory and the bytes its file system keeps free.
    keep_free: Option<(PathBuf, u64)>,
}

impl ObjectBlobStore {
    /// Opens the store `config` names. A local directory is created if
    /// missing; an S3 endpoint is not contacted until the first request.
    pub fn open(config: &BlobConfig) -> BlobResult<Self> {
        match config {
            BlobConfig::Local { dir } => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    BlobError::Config(format!(
                        "cannot create the object store directory {}: {e}",
                        dir.display()
                    ))
                })?;
                let fs = LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| {
                        BlobError::Config(format!(
                            "cannot use {} as the object store: {e}",
                            dir.display()
                        ))
                    })?
                    .with_automatic_cleanup(true);
                Ok(Self {
                    store: Arc::new(fs),
                    location: serde_json::json!({
                        "backend": "local",
                        "path": dir.display().to_string(),
                    }),
                    label: format!("local directory {}", dir.display()),
                    keep_free: Some((dir.clone(), 0)),
                })
            }
            BlobConfig::S3(s3) => {
                if s3.bucket.trim().is_empty() {
                    return Err(BlobError::Config(
                        "an S3 object store needs a bucket (STOCKADE_S3_BUCKET)".into(),
                    ));
                }
                let mut b = AmazonS3Builder::new()
                    .with_bucket_name(&s3.bucket)
                    .with_region(&s3.region)
                    .with_virtual_hosted_style_request(false)
                    .with_retry(RetryConfig {
                        max_retries: 3,
                        retry_timeout: Duration::from_secs(30),
                        ..RetryConfig::default()
                    })
                    .with_client_options(
                        ClientOptions::new()
                            .with_connect_timeout(Duration::from_secs(5))
                            .with_timeout(Duration::from_secs(300))
                            .with_allow_http(
                                s3.endpoint
                                    .as_deref()
                                    .is_some_and(|e| e.starts_with("http://")),
                            ),
                    );
                if let Some(endpoint) = &s3.endpoint {
                    b = b.with_endpoint(endpoint);
                }
                if let Some(k) = &s3.access_key_id {
                    b = b.with_access_key_id(k);
                }
                if let Some(s) = &s3.secret_access_key {
                    b = b.with_secret_access_key(s);
                }
                let store = b
                    .build()
                    .map_err(|e| BlobError::Config(format!("S3 object store: {e}")))?;
                let endpoint = s3
                    .endpoint
                    .clone()
                    .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", s3.region));
                Ok(Self {
                    store: Arc::new(store),
                    location: serde_json::json!({
                        "backend": "s3",
                        "endpoint": endpoint,
                        "bucket": s3.bucket,
                        "region": s3.region,
                    }),
                    label: format!("s3://{} at {endpoint}", s3.bucket),
                    keep_free: None,
                })
            }
        }
    }

    /// A local store stops storing when its file system would have less
    /// than `bytes` free (the database beside it keeps room to write); S3
    /// is left as it is.
    pub fn keep_free(mut self, bytes: u64) -> Self {
        if let Some((_, keep)) = &mut self.keep_free {
            *keep = bytes;
        }
        self
    }

    /// `Full` when writing `coming` more bytes would leave less than the
    /// room this store keeps free.
    fn check_room(&self, key: &str, coming: u64) -> BlobResult<()> {
        let Some((dir, keep)) = &self.keep_free else {
            return Ok(());
        };
        let Ok(fs) = rustix::fs::statvfs(dir) else {
            return Ok(());
        };
        let free = fs.f_bavail.saturating_mul(fs.f_frsize);
        if free >= keep.saturating_add(coming) {
            return Ok(());
        }
        Err(BlobError::Full {
            location: self.label.clone(),
            message: format!(
                "{key}: {free} bytes are free and {keep} are kept free for the database; \
                 remove snapshots or uploads, or give the object store a disk of its own"
            ),
        })
    }

    fn path(key: &str) -> BlobResult<ObjectPath> {
        let invalid = |reason: &str| BlobError::InvalidKey {
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        if key.is_empty() || key.len() > 1024 {
            return Err(invalid("must be 1 to 1024 characters"));
        }
        if key
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
        {
            return Err(invalid("no empty, '.' or '..' parts"));
        }
        ObjectPath::parse(key).map_err(|e| invalid(&e.to_string()))
    }

    fn err(&self, key: &str, e: object_store::Error) -> BlobError {
        match e {
            object_store::Error::NotFound { .. } => BlobError::NotFound(key.to_owned()),
            other => BlobError::Store {
                location: self.label.clone(),
                message: format!("{key}: {}", error_chain(&other)),
            },
        }
    }
}

#[async_trait]
impl BlobStore for ObjectBlobStore {
    #[tracing::instrument(skip(self, data), err(Display))]
    async fn put_stream(&self, key: &str, mut data: ByteStream) -> BlobResult<u64> {
        let path = Self::path(key)?;
        // Up to PART_SIZE the data is gathered and sent in one PUT; beyond
        // that it goes up as a multipart upload of PART_SIZE parts, with at
        // most two parts in flight (so in memory) at once.
        let mut total: u64 = 0;
        let mut head: Vec<Bytes> = Vec::new();
        let mut head_len = 0usize;
        let mut multipart: Option<WriteMultipart> = None;
        let source_err = |e: std::io::Error| BlobError::Source(e.to_string());
        // Room is looked at before the first byte and at every part.
        let mut room_until: u64 = 0;
        while let Some(chunk) = data.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    if let Some(m) = multipart {
                        self.abort(key, m).await;
                    }
                    return Err(source_err(e));
                }
            };
            total += chunk.len() as u64;
            if total > room_until {
                if let Err(full) = self.check_room(key, PART_SIZE as u64) {
                    if let Some(m) = multipart {
                        self.abort(key, m).await;
                    }
                    return Err(full);
                }
                room_until = total + PART_SIZE as u64;
            }
            match &mut multipart {
                Some(m) => {
                    if let Err(e) = m.wait_for_capacity(2).await {
                        if let Some(m) = multipart {
                            self.abort(key, m).await;
                        }
                        return Err(self.err(key, e));
                    }
                    m.put(chunk);
                }
                None => {
                    head_len += chunk.len();
                    head.push(chunk);
                    if head_len >= PART_SIZE {
                        let upload = self
                            .store
                            .put_multipart(&path)
                            .await
                            .map_err(|e| self.err(key, e))?;
                        let mut m = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
                        for c in head.drain(..) {
                            m.put(c);
                        }
                        multipart = Some(m);
                    }
                }
            }
        }
        match multipart {
            Some(m) => {
                m.finish().await.map_err(|e| self.err(key, e))?;
            }
            None => {
                self.store
                    .put(&path, PutPayload::from_iter(head))
                    .await
                    .map_err(|e| self.err(key, e))?;
            }
        }
        tracing::debug!(key, bytes = total, "object stored");
        Ok(total)
    }

    async fn get_stream(&self, key: &str) -> BlobResult<(u64, ByteStream)> {
        let path = Self::path(key)?;
        let got = self.store.get(&path).await.map_err(|e| self.err(key, e))?;
        let size = got.meta.size;
        let label = self.label.clone();
        let stream = got
            .into_stream()
            .map_err(move |e| std::io::Error::other(format!("object store ({label}): {e}")));
        Ok((size, Box::pin(stream)))
    }

    async fn head(&self, key: &str) -> BlobResult<Option<BlobMeta>> {
        let path = Self::path(key)?;
        match self.store.head(&path).await {
            Ok(meta) => Ok(Some(BlobMeta {
                key: meta.location.to_string(),
                size: meta.size,
                last_modified: meta.last_modified,
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(key, e)),
        }
    }

    async fn delete(&self, key: &str) -> BlobResult<()> {
        let path = Self::path(key)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(key, e)),
        }
    }

    async fn list(&self, prefix: &str) -> BlobResult<Vec<BlobMeta>> {
        let path = Self::path(prefix.trim_end_matches('/'))?;
        self.store
            .list(Some(&path))
            .map_ok(|meta| BlobMeta {
                key: meta.location.to_string(),
                size: meta.size,
                last_modified: meta.last_modified,
            })
            .try_collect()
            .await
            .map_err(|e| self.err(prefix, e))
    }

    fn location(&self) -> serde_json::Value {
        self.location.clone()
    }
}

impl ObjectBlobStore {
    /// Gives up a multipart upload so that no parts linger.
    async fn abort(&self, key: &str, upload: WriteMultipart) {
        if let Err(e) = upload.abort().await {
            tracing::warn!(key, error = %e, location = %self.label, "could not abort a failed multipart upload");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        for bad in ["", "a//b", "../x", "a/./b", "/abs"] {
            assert!(
                matches!(
                    ObjectBlobStore::path(bad),
                    Err(BlobError::InvalidKey { .. })
                ),
                "{bad}"
            );
        }
        assert!(ObjectBlobStore::path("snapshots/abc/workspace.tar").is_ok());
    }

    #[test]
    fn secrets_are_not_printed() {
        let c = S3Config {
            endpoint: Some("http://127.0.0.1:9000".into()),
            bucket: "b".into(),
            region: "us-east-1".into(),
            access_key_id: Some("AKIA".into()),
            secret_access_key: Some("very-secret".into()),
        };
        let printed = format!("{c:?}");
        assert!(!printed.contains("very-secret"), "{printed}");
        let store = ObjectBlobStore::open(&BlobConfig::S3(c)).unwrap();
        let loc = store.location().to_string();
        assert!(
            !loc.contains("very-secret") && !loc.contains("AKIA"),
            "{loc}"
        );
        assert!(loc.contains("\"bucket\":\"b\""), "{loc}");
    }

    #[test]
    fn s3_needs_a_bucket() {
        let c = S3Config {
            endpoint: None,
            bucket: " ".into(),
            region: "us-east-1".into(),
            access_key_id: None,
            secret_access_key: None,
        };
        assert!(matches!(
            ObjectBlobStore::open(&BlobConfig::S3(c)),
            Err(BlobError::Config(_))
        ));
    }
}
