//! The messages of envd's `process` package (service `process.Process`),
//! field for field: binary protobuf through prost, proto3 JSON through serde.

use super::json::{self, proto_enum, EnumField};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct Pty {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<PtySize>,
}

#[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct PtySize {
    #[prost(uint32, tag = "1")]
    pub cols: u32,
    #[prost(uint32, tag = "2")]
    pub rows: u32,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessConfig {
    #[prost(string, tag = "1")]
    pub cmd: String,
    #[prost(string, repeated, tag = "2")]
    pub args: Vec<String>,
    #[prost(map = "string, string", tag = "3")]
    pub envs: HashMap<String, String>,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ListRequest {}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessInfo {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<ProcessConfig>,
    #[prost(uint32, tag = "2")]
    pub pid: u32,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ListResponse {
    #[prost(message, repeated, tag = "1")]
    pub processes: Vec<ProcessInfo>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct StartRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessConfig>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[prost(bool, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessSelector>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateResponse {}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessEvent {
    #[prost(oneof = "process_event::Event", tags = "1, 2, 3, 4")]
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub event: Option<process_event::Event>,
}

pub mod process_event {
    use super::*;

    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Event {
        #[prost(message, tag = "1")]
        Start(StartEvent),
        #[prost(message, tag = "2")]
        Data(DataEvent),
        #[prost(message, tag = "3")]
        End(EndEvent),
        #[prost(message, tag = "4")]
        Keepalive(KeepAlive),
    }

    #[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct StartEvent {
        #[prost(uint32, tag = "1")]
        pub pid: u32,
    }

    #[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct DataEvent {
        #[prost(oneof = "Output", tags = "1, 2, 3")]
        #[serde(flatten, skip_serializing_if = "Option::is_none")]
        pub output: Option<Output>,
    }

    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Output {
        #[prost(bytes = "bytes", tag = "1")]
        Stdout(#[serde(with = "json::b64")] Bytes),
        #[prost(bytes = "bytes", tag = "2")]
        Stderr(#[serde(with = "json::b64")] Bytes),
        #[prost(bytes = "bytes", tag = "3")]
        Pty(#[serde(with = "json::b64")] Bytes),
    }

    #[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct EndEvent {
        #[prost(sint32, tag = "1")]
        #[serde(rename = "exitCode", alias = "exit_code")]
        pub exit_code: i32,
        #[prost(bool, tag = "2")]
        pub exited: bool,
        #[prost(string, tag = "3")]
        pub status: String,
        #[prost(string, optional, tag = "4")]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub error: Option<String>,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct KeepAlive {}
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct StartResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<ProcessEvent>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectResponse {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<ProcessEvent>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct SendInputRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessSelector>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<ProcessInput>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct SendInputResponse {}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessInput {
    #[prost(oneof = "process_input::Input", tags = "1, 2")]
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub input: Option<process_input::Input>,
}

pub mod process_input {
    use super::*;

    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Input {
        #[prost(bytes = "bytes", tag = "1")]
        Stdin(#[serde(with = "json::b64")] Bytes),
        #[prost(bytes = "bytes", tag = "2")]
        Pty(#[serde(with = "json::b64")] Bytes),
    }
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamInputRequest {
    #[prost(oneof = "stream_input_request::Event", tags = "1, 2, 3")]
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub event: Option<stream_input_request::Event>,
}

pub mod stream_input_request {
    use super::*;

    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Event {
        #[prost(message, tag = "1")]
        Start(StartEvent),
        #[prost(message, tag = "2")]
        Data(DataEvent),
        #[prost(message, tag = "3")]
        Keepalive(KeepAlive),
    }

    #[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct StartEvent {
        #[prost(message, optional, tag = "1")]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub process: Option<ProcessSelector>,
    }

    #[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct DataEvent {
        #[prost(message, optional, tag = "2")]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub input: Option<ProcessInput>,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct KeepAlive {}
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamInputResponse {}

proto_enum! {
    /// `process.Signal`.
    pub enum Signal {
        Unspecified = 0 => "SIGNAL_UNSPECIFIED",
        Sigterm = 15 => "SIGNAL_SIGTERM",
        Sigkill = 9 => "SIGNAL_SIGKILL",
    }
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct SendSignalRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessSelector>,
    #[prost(enumeration = "Signal", tag = "2")]
    #[serde(with = "EnumField::<Signal>")]
    pub signal: i32,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct SendSignalResponse {}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct CloseStdinRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessSelector>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct CloseStdinResponse {}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessSelector>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessSelector {
    #[prost(oneof = "process_selector::Selector", tags = "1, 2")]
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub selector: Option<process_selector::Selector>,
}

pub mod process_selector {
    use super::*;

    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Selector {
        #[prost(uint32, tag = "1")]
        Pid(u32),
        #[prost(string, tag = "2")]
        Tag(String),
    }
}

impl ProcessSelector {
    /// Selects a process by its pid.
    pub fn pid(pid: u32) -> Self {
        Self {
            selector: Some(process_selector::Selector::Pid(pid)),
        }
    }

    /// Selects a process by its tag.
    pub fn tag(tag: impl Into<String>) -> Self {
        Self {
            selector: Some(process_selector::Selector::Tag(tag.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    #[test]
    fn json_uses_proto3_names_and_oneofs() {
        let ev = StartResponse {
            event: Some(ProcessEvent {
                event: Some(process_event::Event::Data(process_event::DataEvent {
                    output: Some(process_event::Output::Stdout(Bytes::from_static(b"hi"))),
                })),
            }),
        };
        let text = serde_json::to_string(&ev).unwrap();
        assert_eq!(text, r#"{"event":{"data":{"stdout":"aGk="}}}"#);
        let back: StartResponse = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ev);

        let end: process_event::EndEvent =
            serde_json::from_str(r#"{"exit_code":3,"exited":true,"status":"exit status 3"}"#)
                .unwrap();
        assert_eq!(end.exit_code, 3);

        let sig: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"pid":7},"signal":"SIGNAL_SIGKILL"}"#).unwrap();
        assert_eq!(sig.signal, 9);
        assert_eq!(sig.process, Some(ProcessSelector::pid(7)));
        let sig: SendSignalRequest = serde_json::from_str(r#"{"signal":15}"#).unwrap();
        assert_eq!(sig.signal, 15);
        assert!(serde_json::from_str::<SendSignalRequest>(r#"{"signal":"SIGHUP"}"#).is_err());
    }

    #[test]
    fn binary_matches_field_numbers() {
        // EndEvent{exit_code: -1 (sint32 → zigzag 1), exited: true}
        let end = process_event::EndEvent {
            exit_code: -1,
            exited: true,
            status: String::new(),
            error: None,
        };
        assert_eq!(end.encode_to_vec(), vec![0x08, 0x01, 0x10, 0x01]);
        // ProcessSelector{tag: "a"} → field 2, length-delimited
        assert_eq!(
            ProcessSelector::tag("a").encode_to_vec(),
            vec![0x12, 0x01, b'a']
        );
        // StartRequest{stdin: Some(false)} keeps the explicit false.
        let req = StartRequest {
            stdin: Some(false),
            ..Default::default()
        };
        assert_eq!(req.encode_to_vec(), vec![0x20, 0x00]);
        let _ = json::is_default(&0u32);
    }
}
