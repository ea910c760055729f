//! Files and archives.

use stockade_sdk::api::FileType;
use stockade_sdk::{CreateParams, Error, StreamExt};

use crate::helpers::{server, tar_files, tar_gz};

#[tokio::test(flavor = "multi_thread")]
async fn files_are_written_read_listed_and_removed() {
    let s = server().await;
    let sb = s.create(CreateParams::new().name("files")).await;

    let every_byte: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let made = sb
        .write_file("dir/sub/data.bin", every_byte.clone())
        .await
        .unwrap();
    assert_eq!(made.path, "/workspace/dir/sub/data.bin");
    assert_eq!(made.size, 100_000);
    assert_eq!(made.mode, "0644");
    assert_eq!(sb.read_file("dir/sub/data.bin").await.unwrap(), every_byte);
    assert_eq!(
        sb.read_file("/workspace/dir/sub/data.bin").await.unwrap(),
        every_byte,
        "absolute and relative paths are the same file"
    );
    let streamed = sb.read_file_stream("dir/sub/data.bin").await.unwrap();
    assert_eq!(streamed.content_length(), Some(100_000));
    assert_eq!(streamed.collect().await.unwrap(), every_byte);

    let script = sb
        .write_file_with_mode("dir/run.sh", "#!/bin/sh\necho ran\n", 0o755)
        .await
        .unwrap();
    assert_eq!(script.mode, "0755");
    assert_eq!(sb.run_command("dir/run.sh").await.unwrap().stdout, "ran\n");
    // Replacing keeps the mode.
    sb.write_file("dir/run.sh", "#!/bin/sh\necho again\n")
        .await
        .unwrap();
    assert_eq!(sb.stat("dir/run.sh").await.unwrap().mode, "0755");

    let listing = sb.list_dir("dir").await.unwrap();
    let names: Vec<(&str, FileType)> = listing
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.file_type))
        .collect();
    assert_eq!(names, [("run.sh", FileType::File), ("sub", FileType::Dir)]);
    assert_eq!(sb.stat("dir/sub").await.unwrap().file_type, FileType::Dir);
    assert!(sb.exists("dir/run.sh").await.unwrap());
    assert!(!sb.exists("dir/nope").await.unwrap());
    let err = sb.stat("dir/nope").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");

    // Asking for the wrong kind says so.
    let err = sb.read_file("dir").await.unwrap_err();
    assert!(matches!(err, Error::InvalidParams { .. }), "{err}");
    assert!(err.to_string().contains("directory"), "{err}");
    let err = sb.list_dir("dir/run.sh").await.unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");

    sb.remove("dir/run.sh").await.unwrap();
    assert!(!sb.exists("dir/run.sh").await.unwrap());
    let err = sb.remove("dir").await.unwrap_err();
    assert!(
        err.is_conflict(),
        "a non-empty directory needs remove_all: {err}"
    );
    sb.remove_all("dir").await.unwrap();
    assert!(!sb.exists("dir").await.unwrap());
    let err = sb.read_file("../etc/passwd").await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn archives_go_up_and_come_down_byte_for_byte() {
    let s = server().await;
    let sb = s.create(CreateParams::new().name("archives")).await;
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 253) as u8).collect();
    let archive = tar_gz(&[
        ("app/readme.txt", b"hello\n", 0o644),
        ("app/bin/tool", b"#!/bin/sh\necho tool\n", 0o755),
        ("app/big.bin", &big, 0o600),
    ]);
    let done = sb.upload_archive("/workspace/up", archive).await.unwrap();
    assert_eq!(done.path, "/workspace/up");
    assert_eq!(done.bytes, 6 + 20 + 300_000);
    assert_eq!(
        sb.run_command("up/app/bin/tool").await.unwrap().stdout,
        "tool\n"
    );
    assert_eq!(sb.stat("up/app/big.bin").await.unwrap().mode, "0600");

    let tar = sb.download_archive("up/app").await.unwrap();
    let mut files = tar_files(&tar);
    files.sort();
    assert_eq!(
        files,
        [
            ("app/big.bin".to_string(), big.clone()),
            (
                "app/bin/tool".to_string(),
                b"#!/bin/sh\necho tool\n".to_vec()
            ),
            ("app/readme.txt".to_string(), b"hello\n".to_vec()),
        ]
    );

    // Streamed both ways.
    let mut stream = sb.download_archive_stream("up/app/big.bin").await.unwrap();
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        tar.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(tar_files(&tar), [("big.bin".to_string(), big.clone())]);
    let chunks: Vec<std::io::Result<stockade_sdk::bytes::Bytes>> = tar
        .chunks(7000)
        .map(|c| Ok(stockade_sdk::bytes::Bytes::copy_from_slice(c)))
        .collect();
    let len = tar.len() as u64;
    sb.upload_archive_stream("copy", stockade_sdk::stream::iter(chunks), Some(len))
        .await
        .unwrap();
    assert_eq!(sb.read_file("copy/big.bin").await.unwrap(), big);
}
