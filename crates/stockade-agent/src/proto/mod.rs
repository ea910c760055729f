//! envd's wire messages, written by hand from its protocol: `process` and
//! `filesystem` packages, binary (prost) and proto3 JSON (serde) encodings;
//! and Prime Intellect's `command_session` package, envd's process
//! messages by other names.

pub mod command_session;
pub mod filesystem;
pub mod json;
pub mod process;

/// A message the Connect layer can carry in either encoding.
pub trait Msg:
    prost::Message + Default + serde::Serialize + serde::de::DeserializeOwned + Send + 'static
{
}

impl<T> Msg for T where
    T: prost::Message + Default + serde::Serialize + serde::de::DeserializeOwned + Send + 'static
{
}
