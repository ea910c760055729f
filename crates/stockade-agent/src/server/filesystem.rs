//! `filesystem.Filesystem`: Stat, ListDir, MakeDir, Move, Remove, WatchDir
//! and the polled watchers.

use super::rpc::{self, Sink};
use super::{AgentState, Call, Rpc};
use crate::body::BoxBody;
use crate::connect::{Code, ConnectError};
use crate::fsops;
use crate::proto::filesystem::*;
use crate::users::NameCache;
use crate::watch::DirWatch;
use hyper::Response;
use std::path::PathBuf;
use std::sync::Arc;

pub async fn route(r: Rpc<'_>) -> Response<BoxBody> {
    let st = &r.state;
    let c = &r.call;
    match r.method {
        "Stat" => {
            rpc::unary(r.req, |m: StatRequest| async move {
                let path = resolve(c, &m.path)?;
                let entry = fsops::entry_info(&path, &NameCache::load(&st.accounts))?;
                Ok(StatResponse { entry: Some(entry) })
            })
            .await
        }
        "ListDir" => {
            rpc::unary(r.req, |m: ListDirRequest| async move {
                let path = resolve(c, &m.path)?;
                let accounts = st.accounts.clone();
                let entries =
                    tokio::task::spawn_blocking(move || fsops::list_dir(&path, m.depth, &accounts))
                        .await
                        .map_err(|e| ConnectError::internal(format!("listing failed: {e}")))??;
                Ok(ListDirResponse { entries })
            })
            .await
        }
        "MakeDir" => {
            rpc::unary(r.req, |m: MakeDirRequest| async move {
                let path = resolve(c, &m.path)?;
                let entry = fsops::make_dir(&path, st.ids_for(&c.user))?;
                Ok(MakeDirResponse { entry: Some(entry) })
            })
            .await
        }
        "Move" => {
            rpc::unary(r.req, |m: MoveRequest| async move {
                let src = resolve(c, &m.source)?;
                let dst = resolve(c, &m.destination)?;
                let names = NameCache::load(&st.accounts);
                let entry = fsops::move_path(&src, &dst, st.ids_for(&c.user), &names)?;
                Ok(MoveResponse { entry: Some(entry) })
            })
            .await
        }
        "Remove" => {
            rpc::unary(r.req, |m: RemoveRequest| async move {
                let path = resolve(c, &m.path)?;
                fsops::remove(&path)?;
                Ok(RemoveResponse {})
            })
            .await
        }
        "WatchDir" => {
            let (state, call) = (r.state.clone(), r.call.clone());
            rpc::server_stream(r.req, move |m, sink| watch_dir(state, call, m, sink)).await
        }
        "CreateWatcher" => {
            rpc::unary(r.req, |m: CreateWatcherRequest| async move {
                let watch = open_watch(
                    st,
                    c,
                    &m.path,
                    m.recursive,
                    m.include_entry,
                    m.allow_network_mounts,
                )?;
                Ok(CreateWatcherResponse {
                    watcher_id: st.watchers.create(watch)?,
                })
            })
            .await
        }
        "GetWatcherEvents" => {
            rpc::unary(r.req, |m: GetWatcherEventsRequest| async move {
                Ok(GetWatcherEventsResponse {
                    events: st.watchers.take_events(&m.watcher_id)?,
                })
            })
            .await
        }
        "RemoveWatcher" => {
            rpc::unary(r.req, |m: RemoveWatcherRequest| async move {
                st.watchers.remove(&m.watcher_id)?;
                Ok(RemoveWatcherResponse {})
            })
            .await
        }
        _ => rpc::error_response(&ConnectError::new(
            Code::Unimplemented,
            format!("filesystem.Filesystem/{} is not implemented", r.method),
        )),
    }
}

fn resolve(call: &Call, path: &str) -> Result<PathBuf, ConnectError> {
    fsops::resolve(path, &call.user, call.workdir.as_deref())
}

fn open_watch(
    state: &AgentState,
    call: &Call,
    path: &str,
    recursive: bool,
    include_entry: bool,
    allow_network_mounts: bool,
) -> Result<DirWatch, ConnectError> {
    let root = resolve(call, path)?;
    if !allow_network_mounts && fsops::is_network_mount(&root) {
        return Err(ConnectError::invalid(format!(
            "cannot watch path on network filesystem: {}",
            root.display()
        )));
    }
    DirWatch::new(
        &root,
        recursive,
        include_entry,
        NameCache::load(&state.accounts),
    )
}

async fn watch_dir(
    state: Arc<AgentState>,
    call: Call,
    req: WatchDirRequest,
    sink: Sink<WatchDirResponse>,
) -> Result<(), ConnectError> {
    let mut watch = open_watch(
        &state,
        &call,
        &req.path,
        req.recursive,
        req.include_entry,
        req.allow_network_mounts,
    )?;
    let ev = |e: watch_dir_response::Event| WatchDirResponse { event: Some(e) };
    sink.send(&ev(watch_dir_response::Event::Start(
        watch_dir_response::StartEvent {},
    )))
    .await?;
    let deadline = call.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + call.keepalive, call.keepalive);
    loop {
        tokio::select! {
            events = watch.next() => {
                for e in events? {
                    sink.send(&ev(watch_dir_response::Event::Filesystem(e))).await?;
                }
                ticker.reset();
            }
            _ = ticker.tick() => {
                sink.send(&ev(watch_dir_response::Event::Keepalive(watch_dir_response::KeepAlive {}))).await?;
            }
            _ = sink.closed() => return Ok(()),
            _ = async { match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            } } => {
                return Err(ConnectError::new(Code::DeadlineExceeded, "the call's deadline passed"));
            }
        }
    }
}
