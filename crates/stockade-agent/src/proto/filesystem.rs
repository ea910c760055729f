//! The messages of envd's `filesystem` package (service
//! `filesystem.Filesystem`), field for field, plus `google.protobuf.Timestamp`.

use super::json::{self, proto_enum, EnumField};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;

/// `google.protobuf.Timestamp`; RFC 3339 in JSON.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&json::format_rfc3339(self.seconds, self.nanos))
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let (seconds, nanos) = json::parse_rfc3339(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid timestamp {text:?}")))?;
        Ok(Self { seconds, nanos })
    }
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct MoveRequest {
    #[prost(string, tag = "1")]
    pub source: String,
    #[prost(string, tag = "2")]
    pub destination: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct MoveResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct MakeDirRequest {
    #[prost(string, tag = "1")]
    pub path: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct MakeDirResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoveRequest {
    #[prost(string, tag = "1")]
    pub path: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoveResponse {}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct StatRequest {
    #[prost(string, tag = "1")]
    pub path: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct StatResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct EntryInfo {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(enumeration = "FileType", tag = "2")]
    #[serde(rename = "type", with = "EnumField::<FileType>")]
    pub r#type: i32,
    #[prost(string, tag = "3")]
    pub path: String,
    #[prost(int64, tag = "4")]
    #[serde(with = "json::i64_str")]
    pub size: i64,
    #[prost(uint32, tag = "5")]
    pub mode: u32,
    #[prost(string, tag = "6")]
    pub permissions: String,
    #[prost(string, tag = "7")]
    pub owner: String,
    #[prost(string, tag = "8")]
    pub group: String,
    #[prost(message, optional, tag = "9")]
    #[serde(
        rename = "modifiedTime",
        alias = "modified_time",
        skip_serializing_if = "Option::is_none"
    )]
    pub modified_time: Option<Timestamp>,
    #[prost(string, optional, tag = "10")]
    #[serde(
        rename = "symlinkTarget",
        alias = "symlink_target",
        skip_serializing_if = "Option::is_none"
    )]
    pub symlink_target: Option<String>,
    #[prost(map = "string, string", tag = "11")]
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub metadata: HashMap<String, String>,
    #[prost(bool, tag = "12")]
    #[serde(
        rename = "isSymlink",
        alias = "is_symlink",
        skip_serializing_if = "json::is_default"
    )]
    pub is_symlink: bool,
}

proto_enum! {
    /// `filesystem.FileType`.
    pub enum FileType {
        Unspecified = 0 => "FILE_TYPE_UNSPECIFIED",
        File = 1 => "FILE_TYPE_FILE",
        Directory = 2 => "FILE_TYPE_DIRECTORY",
        Symlink = 3 => "FILE_TYPE_SYMLINK",
    }
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ListDirRequest {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(uint32, tag = "2")]
    pub depth: u32,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ListDirResponse {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<EntryInfo>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct WatchDirRequest {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(bool, tag = "2")]
    pub recursive: bool,
    #[prost(bool, tag = "3")]
    #[serde(rename = "includeEntry", alias = "include_entry")]
    pub include_entry: bool,
    #[prost(bool, tag = "4")]
    #[serde(rename = "allowNetworkMounts", alias = "allow_network_mounts")]
    pub allow_network_mounts: bool,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemEvent {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(enumeration = "EventType", tag = "2")]
    #[serde(rename = "type", with = "EnumField::<EventType>")]
    pub r#type: i32,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct WatchDirResponse {
    #[prost(oneof = "watch_dir_response::Event", tags = "1, 2, 3")]
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub event: Option<watch_dir_response::Event>,
}

pub mod watch_dir_response {
    use super::*;

    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(clippy::large_enum_variant)] // the wire shape of envd's message
    pub enum Event {
        #[prost(message, tag = "1")]
        Start(StartEvent),
        #[prost(message, tag = "2")]
        Filesystem(super::FilesystemEvent),
        #[prost(message, tag = "3")]
        Keepalive(KeepAlive),
    }

    #[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct StartEvent {}

    #[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct KeepAlive {}
}

proto_enum! {
    /// `filesystem.EventType`.
    pub enum EventType {
        Unspecified = 0 => "EVENT_TYPE_UNSPECIFIED",
        Create = 1 => "EVENT_TYPE_CREATE",
        Write = 2 => "EVENT_TYPE_WRITE",
        Remove = 3 => "EVENT_TYPE_REMOVE",
        Rename = 4 => "EVENT_TYPE_RENAME",
        Chmod = 5 => "EVENT_TYPE_CHMOD",
    }
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct CreateWatcherRequest {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(bool, tag = "2")]
    pub recursive: bool,
    #[prost(bool, tag = "3")]
    #[serde(rename = "includeEntry", alias = "include_entry")]
    pub include_entry: bool,
    #[prost(bool, tag = "4")]
    #[serde(rename = "allowNetworkMounts", alias = "allow_network_mounts")]
    pub allow_network_mounts: bool,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct CreateWatcherResponse {
    #[prost(string, tag = "1")]
    #[serde(rename = "watcherId", alias = "watcher_id")]
    pub watcher_id: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct GetWatcherEventsRequest {
    #[prost(string, tag = "1")]
    #[serde(rename = "watcherId", alias = "watcher_id")]
    pub watcher_id: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct GetWatcherEventsResponse {
    #[prost(message, repeated, tag = "1")]
    pub events: Vec<FilesystemEvent>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoveWatcherRequest {
    #[prost(string, tag = "1")]
    #[serde(rename = "watcherId", alias = "watcher_id")]
    pub watcher_id: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoveWatcherResponse {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_json_matches_the_proto3_mapping() {
        let entry = EntryInfo {
            name: "a".into(),
            r#type: FileType::File as i32,
            path: "/a".into(),
            size: 5,
            mode: 0o644,
            permissions: "-rw-r--r--".into(),
            owner: "root".into(),
            group: "root".into(),
            modified_time: Some(Timestamp {
                seconds: 0,
                nanos: 0,
            }),
            ..Default::default()
        };
        let v = serde_json::to_value(&entry).unwrap();
        assert_eq!(v["type"], "FILE_TYPE_FILE");
        assert_eq!(v["size"], "5");
        assert_eq!(v["modifiedTime"], "1970-01-01T00:00:00Z");
        assert!(v.get("isSymlink").is_none());
        let back: EntryInfo = serde_json::from_value(v).unwrap();
        assert_eq!(back, entry);
        let ev: FilesystemEvent =
            serde_json::from_str(r#"{"name":"x","type":"EVENT_TYPE_RENAME"}"#).unwrap();
        assert_eq!(ev.r#type, EventType::Rename as i32);
    }
}
