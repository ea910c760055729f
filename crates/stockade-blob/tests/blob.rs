//! The object store against real backends: a local directory, and a real
//! S3-protocol server (`moto_server`, started here on a free loopback port;
//! scripts/lib/s3.sh installs it). Contents are compared byte for byte.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{stream, StreamExt};
use stockade_blob::{BlobConfig, BlobError, BlobStore, ByteStream, ObjectBlobStore, S3Config};

/// A moto S3 server on 127.0.0.1, killed on drop.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn moto_binary() -> Option<String> {
    if let Ok(p) = std::env::var("STOCKADE_TEST_MOTO_SERVER") {
        return Some(p);
    }
    let found = Command::new("sh")
        .args(["-c", "command -v moto_server"])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&found.stdout).trim().to_owned();
    (!path.is_empty()).then_some(path)
}

async fn start_moto(bucket: &str) -> Option<Moto> {
    let Some(bin) = moto_binary() else {
        eprintln!("S3 test skipped: moto_server not found (scripts/lib/s3.sh installs it)");
        return None;
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    let moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http.put(format!("{}/{bucket}", moto.endpoint)).send().await {
            assert!(r.status().is_success(), "create bucket: {}", r.status());
            return Some(moto);
        }
        assert!(Instant::now() < deadline, "moto_server did not start");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn s3_config(endpoint: &str, bucket: &str) -> BlobConfig {
    BlobConfig::S3(S3Config {
        endpoint: Some(endpoint.to_owned()),
        bucket: bucket.to_owned(),
        region: "us-east-1".into(),
        access_key_id: Some("testing".into()),
        secret_access_key: Some("testing".into()),
    })
}

/// Deterministic pseudo-random bytes.
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn chunks(bytes: &[u8], size: usize) -> ByteStream {
    let parts: Vec<std::io::Result<Bytes>> = bytes
        .chunks(size)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(stream::iter(parts))
}

async fn read_all(store: &dyn BlobStore, key: &str) -> Vec<u8> {
    let (size, mut s) = store.get_stream(key).await.unwrap();
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.unwrap());
    }
    assert_eq!(size, out.len() as u64);
    out
}

/// Stores `bytes` at `key` in chunks of `chunk` bytes; the size stored.
async fn put(store: &dyn BlobStore, key: &str, bytes: &[u8], chunk: usize) -> u64 {
    store.put_stream(key, chunks(bytes, chunk)).await.unwrap()
}

async fn round_trips(store: &dyn BlobStore) {
    // Small (one request) and big (multipart: three parts) objects.
    let small = data(1000, 1);
    let big = data(2 * stockade_blob::PART_SIZE + 12345, 2);
    assert_eq!(put(store, "t/small.bin", &small, 100).await, 1000);
    assert_eq!(
        put(store, "t/dir/big.tar", &big, 64 * 1024).await,
        big.len() as u64
    );
    assert!(read_all(store, "t/small.bin").await == small);
    assert!(read_all(store, "t/dir/big.tar").await == big);
    let meta = store.head("t/dir/big.tar").await.unwrap().unwrap();
    assert_eq!(meta.size, big.len() as u64);
    let mut keys: Vec<String> = store
        .list("t")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    keys.sort();
    assert_eq!(keys, vec!["t/dir/big.tar", "t/small.bin"]);

    // A source stream that breaks leaves nothing behind.
    let broken: ByteStream = Box::pin(stream::iter(vec![
        Ok(Bytes::from_static(b"partial")),
        Err(std::io::Error::other("the container went away")),
    ]));
    assert!(matches!(
        store.put_stream("t/broken.tar", broken).await,
        Err(BlobError::Source(_))
    ));
    assert!(store.head("t/broken.tar").await.unwrap().is_none());

    // Delete; deleting again is fine; reading it is NotFound.
    store.delete("t/small.bin").await.unwrap();
    store.delete("t/small.bin").await.unwrap();
    assert!(matches!(
        store.get_stream("t/small.bin").await,
        Err(BlobError::NotFound(_))
    ));
    assert!(store.head("t/small.bin").await.unwrap().is_none());
}

#[tokio::test]
async fn local_directory_store() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("blobs");
    let store = ObjectBlobStore::open(&BlobConfig::Local { dir: root.clone() }).unwrap();
    round_trips(&store).await;
    // The objects are plain files under the directory.
    assert_eq!(
        std::fs::metadata(root.join("t/dir/big.tar")).unwrap().len(),
        2 * stockade_blob::PART_SIZE as u64 + 12345
    );
    assert_eq!(store.location()["backend"], "local");
}

/// A local store keeps room free on its file system for the database
/// beside it: a store that would cut into it refuses and leaves nothing
/// behind.
#[tokio::test]
async fn a_local_store_keeps_room_free_for_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("blobs");
    let open = || ObjectBlobStore::open(&BlobConfig::Local { dir: root.clone() }).unwrap();
    let free = {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(dir.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    // All of the disk kept free: nothing may be stored.
    let full = open().keep_free(free + (1 << 40));
    let small = data(1000, 1);
    match full.put_stream("t/small.bin", chunks(&small, 100)).await {
        Err(BlobError::Full { message, .. }) => {
            assert!(message.contains("kept free"), "{message}")
        }
        other => panic!("stored beyond the room kept free: {other:?}"),
    }
    assert!(full.head("t/small.bin").await.unwrap().is_none());
    // A big one, in parts: refused as well, no part left behind.
    let big = data(3 * stockade_blob::PART_SIZE, 2);
    assert!(matches!(
        full.put_stream("t/big.bin", chunks(&big, 1 << 20)).await,
        Err(BlobError::Full { .. })
    ));
    assert!(full.list("t").await.unwrap().is_empty());
    // Nothing kept free: stored.
    let roomy = open().keep_free(0);
    assert_eq!(put(&roomy, "t/small.bin", &small, 100).await, 1000);
}

#[tokio::test]
async fn s3_store() {
    let Some(moto) = start_moto("stockade-blob-test").await else {
        return;
    };
    let store = ObjectBlobStore::open(&s3_config(&moto.endpoint, "stockade-blob-test")).unwrap();
    round_trips(&store).await;
    let loc = store.location();
    assert_eq!(loc["backend"], "s3");
    assert_eq!(loc["bucket"], "stockade-blob-test");
    assert_eq!(loc["endpoint"], moto.endpoint.as_str());
    assert!(!loc.to_string().contains("testing"), "{loc}");
}

#[tokio::test]
async fn unreachable_s3_fails_clearly() {
    // Nothing listens on this port.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store =
        ObjectBlobStore::open(&s3_config(&format!("http://127.0.0.1:{port}"), "b")).unwrap();
    let err = store
        .put_stream("x/y.tar", chunks(b"data", 2))
        .await
        .unwrap_err();
    assert!(matches!(err, BlobError::Store { .. }), "{err}");
    assert!(err.to_string().contains("s3://b"), "{err}");
}
