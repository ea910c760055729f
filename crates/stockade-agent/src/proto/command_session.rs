//! The messages of Prime Intellect's `command_session` package (service
//! `command_session.CommandSession`), which the `prime-sandboxes` SDK
//! speaks to its sandbox gateway: envd's process messages with a session
//! uuid instead of a tag and a user in the command. Events, PTY sizes and
//! inputs are envd's own messages (the same field numbers), reused.

use super::json::EnumField;
use super::process::{ProcessInput, Pty, Signal};
// The empty messages are envd's own.
pub use super::process::{
    ListRequest, SendInputResponse, SendSignalResponse, StreamInputResponse, UpdateResponse,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct CommandSpec {
    #[prost(string, tag = "1")]
    pub cmd: String,
    #[prost(string, repeated, tag = "2")]
    pub args: Vec<String>,
    #[prost(map = "string, string", tag = "3")]
    pub envs: HashMap<String, String>,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// An existing user of the sandbox to run as.
    #[prost(string, optional, tag = "5")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CommandSessionInfo {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandSpec>,
    #[prost(uint32, tag = "2")]
    pub pid: u32,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none", alias = "session_uuid")]
    pub session_uuid: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ListResponse {
    #[prost(message, repeated, tag = "1")]
    pub sessions: Vec<CommandSessionInfo>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StartRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandSpec>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
    #[prost(bool, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<bool>,
    /// Names the session: a Start with a running session's uuid attaches
    /// to it instead of starting another (with the same command only).
    #[prost(string, optional, tag = "5")]
    #[serde(skip_serializing_if = "Option::is_none", alias = "session_uuid")]
    pub session_uuid: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<CommandSessionSelector>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SendInputRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<CommandSessionSelector>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<ProcessInput>,
    /// Makes a retried send write once.
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none", alias = "input_uuid")]
    pub input_uuid: Option<String>,
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
        pub session: Option<CommandSessionSelector>,
    }

    #[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
    #[serde(default)]
    pub struct DataEvent {
        #[prost(message, optional, tag = "1")]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub input: Option<ProcessInput>,
    }

    pub use crate::proto::process::stream_input_request::KeepAlive;
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SendSignalRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<CommandSessionSelector>,
    #[prost(enumeration = "Signal", tag = "2")]
    #[serde(with = "EnumField::<Signal>")]
    pub signal: i32,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none", alias = "signal_uuid")]
    pub signal_uuid: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectRequest {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<CommandSessionSelector>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub struct CommandSessionSelector {
    #[prost(oneof = "command_session_selector::Selector", tags = "1, 3")]
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub selector: Option<command_session_selector::Selector>,
}

pub mod command_session_selector {
    use super::*;

    #[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Selector {
        #[prost(uint32, tag = "1")]
        Pid(u32),
        #[prost(string, tag = "3")]
        #[serde(alias = "session_uuid")]
        SessionUuid(String),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::process;
    use prost::Message as _;

    #[test]
    fn a_start_request_of_the_sdk_decodes() {
        // prime-sandboxes' StartRequest(command=CommandSpec(cmd="/bin/bash",
        // args=["-c","echo hi"], user="root"), stdin=False, session_uuid="s1")
        // written field by field.
        let spec = CommandSpec {
            cmd: "/bin/bash".into(),
            args: vec!["-c".into(), "echo hi".into()],
            envs: HashMap::new(),
            cwd: None,
            user: Some("root".into()),
        };
        let req = StartRequest {
            command: Some(spec.clone()),
            pty: None,
            stdin: Some(false),
            session_uuid: Some("s1".into()),
        };
        let bytes = req.encode_to_vec();
        // Field 5 (session_uuid) = "s1": 0x2a 0x02 's' '1'.
        assert!(bytes.ends_with(&[0x2a, 0x02, b's', b'1']), "{bytes:?}");
        assert_eq!(StartRequest::decode(bytes.as_slice()).unwrap(), req);
        // Selectors: a session uuid is field 3.
        let sel = CommandSessionSelector {
            selector: Some(command_session_selector::Selector::SessionUuid("x".into())),
        };
        assert_eq!(sel.encode_to_vec(), vec![0x1a, 0x01, b'x']);
        // The events are envd's: a start event reads the same in both.
        let ev = process::StartResponse {
            event: Some(process::ProcessEvent {
                event: Some(process::process_event::Event::Start(
                    process::process_event::StartEvent { pid: 7 },
                )),
            }),
        };
        assert_eq!(ev.encode_to_vec(), vec![0x0a, 0x04, 0x0a, 0x02, 0x08, 0x07]);
    }
}
