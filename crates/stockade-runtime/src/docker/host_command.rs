//! Commands run on Stockade's own host (`btrfs`, `mkfs.ext4`, `mount`…),
//! bounded in time, with their failure said in words.

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

/// How long one host command may take.
const HOST_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a command on this host; its stdout, or why it failed.
pub(super) async fn host_command(program: &str, args: &[&str]) -> Result<String, String> {
    host_command_output(program, args).await.map(|(out, _)| out)
}

/// Runs a command on this host; its stdout and stderr, or why it failed.
pub(super) async fn host_command_output(
    program: &str,
    args: &[&str],
) -> Result<(String, String), String> {
    let run = Command::new(program).args(args).kill_on_drop(true).output();
    let output = match tokio::time::timeout(HOST_COMMAND_TIMEOUT, run).await {
        Err(_) => {
            return Err(format!(
                "`{program}` took longer than {} s",
                HOST_COMMAND_TIMEOUT.as_secs()
            ))
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("`{program}` is not installed on Stockade's host"))
        }
        Ok(Err(e)) => return Err(format!("`{program}` could not run: {e}")),
        Ok(Ok(o)) => o,
    };
    if output.status.success() {
        Ok((
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(format!(
            "`{program} {}` failed: {}",
            args.first().copied().unwrap_or_default(),
            stderr.trim()
        ))
    }
}

/// Whether `dir` is a directory Stockade may manage on this host; says why
/// not (not here: the engine is elsewhere; not allowed: not root).
pub(super) async fn check_local_dir(dir: &Path, needed: &str) -> Result<(), String> {
    let shown = dir.display();
    match tokio::fs::metadata(dir).await {
        Ok(m) if m.is_dir() => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(format!(
            "Stockade may not manage the volume's directory {shown} (run it as root)"
        )),
        _ => Err(format!(
            "the volume's directory {shown} is not on Stockade's host ({needed} is needed)"
        )),
    }
}
