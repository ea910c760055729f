//! Files in the fake runtime: it keeps no filesystem, so every file
//! operation fails plainly (file tests use Docker).

use async_trait::async_trait;
use stockade_core::{SandboxId, SandboxPath};

use super::FakeRuntime;
use crate::{ArchiveStream, ArchiveUpload, Files, FsError, FsResult, PathStat, RuntimeError};

#[async_trait]
impl Files for FakeRuntime {
    // Files: the fake keeps no filesystem; file tests use Docker.

    async fn stat_path(&self, _id: &SandboxId, _path: &SandboxPath) -> FsResult<PathStat> {
        Err(files_unsupported())
    }

    async fn read_archive(&self, _id: &SandboxId, _path: &SandboxPath) -> FsResult<ArchiveStream> {
        Err(files_unsupported())
    }

    async fn write_archive(
        &self,
        _id: &SandboxId,
        _dir: &SandboxPath,
        _archive: ArchiveUpload,
    ) -> FsResult<()> {
        Err(files_unsupported())
    }

    async fn delete_path(
        &self,
        _id: &SandboxId,
        _path: &SandboxPath,
        _recursive: bool,
    ) -> FsResult<()> {
        Err(files_unsupported())
    }
}

fn files_unsupported() -> FsError {
    FsError::Runtime(RuntimeError::Other(
        "files are not supported by the fake runtime".into(),
    ))
}
