//! Helpers shared by the runtime's Docker test suites: a static test
//! program that calls `io_uring_setup`, and packing one file as a
//! tar archive for `write_archive`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use bytes::Bytes;
use stockade_runtime::ArchiveUpload;

/// A C program that calls `io_uring_setup` and `getpid` and prints what
/// happened: `getpid ok`, then `io_uring_setup allowed`, `… EPERM`,
/// `… ENOSYS` or another error.
const IO_URING_PROBE: &str = r#"#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    unsigned char params[120];
    memset(params, 0, sizeof params);
    long fd = syscall(425 /* io_uring_setup */, 8, params);
    int err = errno;
    printf("getpid %s\n", getpid() > 0 ? "ok" : "failed");
    if (fd >= 0) {
        printf("io_uring_setup allowed\n");
        return 0;
    }
    printf("io_uring_setup %s\n",
           err == EPERM ? "EPERM" : err == ENOSYS ? "ENOSYS" : strerror(err));
    return 0;
}
"#;

/// The io_uring probe compiled as a static x86-64/arm64 executable (so it
/// runs in any image, the busybox test image included), built once per test
/// binary with the host's C compiler (`cc`, which Rust's linker needs too).
pub fn io_uring_probe() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            // In the build's own scratch directory (no files left in /tmp);
            // built under a name of this process, then renamed into place,
            // so parallel test binaries never see a half-written one.
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
            std::fs::create_dir_all(&dir).expect("scratch dir");
            let pid = std::process::id();
            let source = dir.join(format!("io_uring_probe-{pid}.c"));
            let building = dir.join(format!("io_uring_probe-{pid}"));
            let binary = dir.join("io_uring_probe");
            std::fs::write(&source, IO_URING_PROBE).expect("write the probe's source");
            let out = Command::new("cc")
                .args(["-static", "-O2", "-o"])
                .arg(&building)
                .arg(&source)
                .output()
                .expect("run cc (install gcc and libc6-dev)");
            let _ = std::fs::remove_file(&source);
            assert!(
                out.status.success(),
                "cc -static failed (is libc6-dev installed?): {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::rename(&building, &binary).expect("move the probe into place");
            binary
        })
        .clone()
}

/// A tar archive of one executable file `name` with `data`.
pub fn executable_tar(name: &str, data: &[u8]) -> ArchiveUpload {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o755);
    b.append_data(&mut h, name, data).expect("tar");
    let bytes = Bytes::from(b.into_inner().expect("tar"));
    Box::pin(futures_util::stream::once(async move { bytes }))
}

pub fn image() -> String {
    std::env::var("STOCKADE_TEST_IMAGE").unwrap_or_else(|_| "stockade-test-base:latest".into())
}

/// `docker version`'s server version, e.g. `20.10.24+dfsg1`.
pub fn engine_version() -> String {
    let out = Command::new("docker")
        .args(["version", "-f", "{{.Server.Version}}"])
        .output()
        .expect("docker version");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
