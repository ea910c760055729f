//! The fake's main-process output: the lines tests pushed, filtered like
//! Docker's `since` and `tail`.

use async_trait::async_trait;
use stockade_core::SandboxId;

use super::{not_found, FakeRuntime};
use crate::{LogLine, LogLines, Logs, LogsOptions, RuntimeResult};

#[async_trait]
impl Logs for FakeRuntime {
    async fn logs(&self, id: &SandboxId, options: LogsOptions) -> RuntimeResult<LogLines> {
        self.check_available()?;
        let st = self.state();
        if !st.containers.contains_key(id) {
            return Err(not_found(id));
        }
        let since = options.since.map(|t| t.timestamp());
        let mut lines: Vec<LogLine> = st
            .logs
            .get(id)
            .into_iter()
            .flatten()
            .filter(|l| since.is_none_or(|s| l.timestamp.timestamp() >= s))
            .cloned()
            .collect();
        if let Some(tail) = options.tail {
            let skip = lines.len().saturating_sub(tail);
            lines.drain(..skip);
        }
        Ok(Box::pin(futures_util::stream::iter(
            lines.into_iter().map(Ok),
        )))
    }
}
