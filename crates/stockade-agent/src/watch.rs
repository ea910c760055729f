//! Directory watches over inotify, with fsnotify's event words (create,
//! write, remove, rename, chmod) and names relative to the watched
//! directory; recursive watches follow new subdirectories. Also the
//! polled watchers of `CreateWatcher`/`GetWatcherEvents`.

use crate::connect::{Code, ConnectError};
use crate::proto::filesystem::{EventType, FilesystemEvent};
use crate::users::NameCache;
use futures_util::StreamExt;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Events a polled watcher keeps between two reads (the oldest go first).
pub const MAX_PENDING_EVENTS: usize = 10_000;
/// Polled watchers alive at once.
pub const MAX_WATCHERS: usize = 256;

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MODIFY
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::ATTRIB
}

/// One watched directory (tree).
pub struct DirWatch {
    stream: inotify::EventStream<Vec<u8>>,
    root: PathBuf,
    recursive: bool,
    include_entry: bool,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    names: NameCache,
}

impl DirWatch {
    /// Starts watching `root`, which must be a directory.
    pub fn new(
        root: &Path,
        recursive: bool,
        include_entry: bool,
        names: NameCache,
    ) -> Result<Self, ConnectError> {
        let meta = std::fs::metadata(root).map_err(|e| {
            crate::fsops::not_found_or_internal(
                &e,
                format!("path {} not found", root.display()),
                format!("error statting path {}: {e}", root.display()),
            )
        })?;
        if !meta.is_dir() {
            return Err(ConnectError::invalid(format!(
                "path {} not a directory",
                root.display()
            )));
        }
        let inotify = Inotify::init()
            .map_err(|e| ConnectError::internal(format!("error creating watcher: {e}")))?;
        let stream = inotify
            .into_event_stream(vec![0u8; 16 << 10])
            .map_err(|e| ConnectError::internal(format!("error creating watcher: {e}")))?;
        let mut w = Self {
            stream,
            root: root.to_path_buf(),
            recursive,
            include_entry,
            dirs: HashMap::new(),
            names,
        };
        w.add_tree(PathBuf::new())?;
        Ok(w)
    }

    fn add_tree(&mut self, rel: PathBuf) -> Result<(), ConnectError> {
        let abs = self.root.join(&rel);
        let wd = match self.stream.watches().add(&abs, mask() | WatchMask::ONLYDIR) {
            Ok(wd) => wd,
            // A subdirectory that vanished before we got to it.
            Err(_) if !rel.as_os_str().is_empty() => return Ok(()),
            Err(e) => {
                return Err(ConnectError::internal(format!(
                    "error adding path {} to watcher: {e}",
                    abs.display()
                )))
            }
        };
        self.dirs.insert(wd, rel.clone());
        if self.recursive {
            if let Ok(read) = std::fs::read_dir(&abs) {
                for entry in read.flatten() {
                    if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        self.add_tree(rel.join(entry.file_name()))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The next events (one inotify event may be several of ours).
    pub async fn next(&mut self) -> Result<Vec<FilesystemEvent>, ConnectError> {
        loop {
            let ev = match self.stream.next().await {
                Some(Ok(ev)) => ev,
                Some(Err(e)) => return Err(ConnectError::internal(format!("watcher error: {e}"))),
                None => return Err(ConnectError::internal("watcher event channel closed")),
            };
            if ev.mask.contains(EventMask::Q_OVERFLOW) {
                return Err(ConnectError::internal(
                    "watcher error: queue or buffer overflow",
                ));
            }
            if ev.mask.contains(EventMask::IGNORED) {
                self.dirs.remove(&ev.wd);
                continue;
            }
            let (Some(dir), Some(name)) = (self.dirs.get(&ev.wd), ev.name) else {
                continue;
            };
            let rel = dir.join(&name);
            if self.recursive
                && ev.mask.contains(EventMask::ISDIR)
                && ev.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO)
            {
                self.add_tree(rel.clone())?;
            }
            let mut kinds = Vec::new();
            if ev.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                kinds.push(EventType::Create);
            }
            if ev.mask.contains(EventMask::MOVED_FROM) {
                kinds.push(EventType::Rename);
            }
            if ev.mask.contains(EventMask::ATTRIB) {
                kinds.push(EventType::Chmod);
            }
            if ev.mask.contains(EventMask::MODIFY) {
                kinds.push(EventType::Write);
            }
            if ev.mask.contains(EventMask::DELETE) {
                kinds.push(EventType::Remove);
            }
            if kinds.is_empty() {
                continue;
            }
            let entry = if self.include_entry {
                crate::fsops::entry_info(&self.root.join(&rel), &self.names).ok()
            } else {
                None
            };
            let name = rel.to_string_lossy().into_owned();
            return Ok(kinds
                .into_iter()
                .map(|k| FilesystemEvent {
                    name: name.clone(),
                    r#type: k as i32,
                    entry: entry.clone(),
                })
                .collect());
        }
    }
}

struct Polled {
    events: Arc<Mutex<PolledState>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct PolledState {
    events: VecDeque<FilesystemEvent>,
    error: Option<ConnectError>,
}

/// The watchers whose events are fetched by polling.
#[derive(Default)]
pub struct Watchers {
    map: Mutex<HashMap<String, Polled>>,
}

fn new_id() -> String {
    let mut bytes = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = t.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Watchers {
    /// Starts a watcher and returns its id.
    pub fn create(&self, mut watch: DirWatch) -> Result<String, ConnectError> {
        let mut map = self.map.lock().expect("watchers");
        map.retain(|_, p| {
            !p.task.is_finished()
                || p.events
                    .lock()
                    .is_ok_and(|s| !s.events.is_empty() || s.error.is_some())
        });
        if map.len() >= MAX_WATCHERS {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!("at most {MAX_WATCHERS} watchers may exist at once"),
            ));
        }
        let state = Arc::new(Mutex::new(PolledState::default()));
        let s = state.clone();
        let task = tokio::spawn(async move {
            loop {
                match watch.next().await {
                    Ok(events) => {
                        let mut st = s.lock().expect("watcher state");
                        for e in events {
                            if st.events.len() >= MAX_PENDING_EVENTS {
                                st.events.pop_front();
                            }
                            st.events.push_back(e);
                        }
                    }
                    Err(e) => {
                        s.lock().expect("watcher state").error = Some(e);
                        return;
                    }
                }
            }
        });
        let id = new_id();
        map.insert(
            id.clone(),
            Polled {
                events: state,
                task,
            },
        );
        Ok(id)
    }

    /// The events since the last call (or the watcher's error).
    pub fn take_events(&self, id: &str) -> Result<Vec<FilesystemEvent>, ConnectError> {
        let map = self.map.lock().expect("watchers");
        let polled = map
            .get(id)
            .ok_or_else(|| ConnectError::not_found(format!("watcher with id {id} not found")))?;
        let mut st = polled.events.lock().expect("watcher state");
        if st.events.is_empty() {
            if let Some(e) = st.error.clone() {
                return Err(e);
            }
        }
        Ok(st.events.drain(..).collect())
    }

    /// Stops and forgets a watcher.
    pub fn remove(&self, id: &str) -> Result<(), ConnectError> {
        let polled = self
            .map
            .lock()
            .expect("watchers")
            .remove(id)
            .ok_or_else(|| ConnectError::not_found(format!("watcher with id {id} not found")))?;
        polled.task.abort();
        Ok(())
    }
}
