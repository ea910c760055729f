//! The Connect protocol as both ends use it: codecs (JSON and binary
//! protobuf), envelope framing of streams, error codes and their HTTP
//! statuses, and the end-of-stream message.

use crate::proto::Msg;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Envelope flag of a compressed message (not supported: we never negotiate
/// compression).
pub const FLAG_COMPRESSED: u8 = 0x01;
/// Envelope flag of the end-of-stream message.
pub const FLAG_END_STREAM: u8 = 0x02;
/// The largest message either end accepts (a 16 MiB envelope).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Connect error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    const ALL: [Code; 16] = [
        Code::Canceled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code's name on the wire (`not_found`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Canceled => "canceled",
            Code::Unknown => "unknown",
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Aborted => "aborted",
            Code::OutOfRange => "out_of_range",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::DataLoss => "data_loss",
            Code::Unauthenticated => "unauthenticated",
        }
    }

    /// Parses a code's wire name.
    pub fn parse(name: &str) -> Option<Code> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// The HTTP status of a unary error with this code.
    pub fn http_status(self) -> u16 {
        match self {
            Code::Canceled => 499,
            Code::Unknown | Code::Internal | Code::DataLoss => 500,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
            Code::DeadlineExceeded => 504,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::PermissionDenied => 403,
            Code::ResourceExhausted => 429,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
            Code::Unauthenticated => 401,
        }
    }

    /// The code a client infers from an HTTP status without a Connect body.
    pub fn from_http_status(status: u16) -> Code {
        match status {
            400 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            408 => Code::DeadlineExceeded,
            409 => Code::AlreadyExists,
            413 | 429 => Code::ResourceExhausted,
            499 => Code::Canceled,
            502..=504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Connect error: a code and a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectError {
    pub code: Code,
    pub message: String,
}

impl ConnectError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }

    /// The JSON body of a unary error (and the `error` of an end message).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.code.as_str(), "message": self.message })
    }

    /// Reads a Connect error body; `None` if it is not one.
    pub fn from_json(body: &[u8]) -> Option<Self> {
        #[derive(Deserialize)]
        struct Wire {
            code: String,
            #[serde(default)]
            message: String,
        }
        let wire: Wire = serde_json::from_slice(body).ok()?;
        Some(Self::new(Code::parse(&wire.code)?, wire.message))
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ConnectError {}

impl From<std::io::Error> for ConnectError {
    fn from(e: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let code = match e.kind() {
            K::NotFound => Code::NotFound,
            K::PermissionDenied => Code::PermissionDenied,
            K::AlreadyExists => Code::AlreadyExists,
            K::InvalidInput => Code::InvalidArgument,
            _ => Code::Internal,
        };
        Self::new(code, e.to_string())
    }
}

/// The message encoding of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Json,
    Proto,
}

impl Codec {
    /// The codec of a unary request's `Content-Type`.
    pub fn from_unary_content_type(ct: &str) -> Option<Codec> {
        match media_type(ct).as_str() {
            "application/json" => Some(Codec::Json),
            "application/proto" => Some(Codec::Proto),
            _ => None,
        }
    }

    /// The codec of a streaming request's `Content-Type`.
    pub fn from_stream_content_type(ct: &str) -> Option<Codec> {
        match media_type(ct).as_str() {
            "application/connect+json" => Some(Codec::Json),
            "application/connect+proto" => Some(Codec::Proto),
            _ => None,
        }
    }

    pub fn unary_content_type(self) -> &'static str {
        match self {
            Codec::Json => "application/json",
            Codec::Proto => "application/proto",
        }
    }

    pub fn stream_content_type(self) -> &'static str {
        match self {
            Codec::Json => "application/connect+json",
            Codec::Proto => "application/connect+proto",
        }
    }

    pub fn encode<M: Msg>(self, m: &M) -> Bytes {
        match self {
            Codec::Json => Bytes::from(serde_json::to_vec(m).expect("messages serialize")),
            Codec::Proto => Bytes::from(m.encode_to_vec()),
        }
    }

    pub fn decode<M: Msg>(self, data: &[u8]) -> Result<M, ConnectError> {
        match self {
            Codec::Json if data.iter().all(u8::is_ascii_whitespace) => Ok(M::default()),
            Codec::Json => serde_json::from_slice(data)
                .map_err(|e| ConnectError::invalid(format!("invalid JSON message: {e}"))),
            Codec::Proto => M::decode(data)
                .map_err(|e| ConnectError::invalid(format!("invalid protobuf message: {e}"))),
        }
    }
}

fn media_type(ct: &str) -> String {
    ct.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// One envelope: flags, 4-byte big-endian length, payload.
pub fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + payload.len());
    out.put_u8(flags);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.freeze()
}

/// The end-of-stream envelope, with the error if the call failed.
pub fn end_stream(error: Option<&ConnectError>) -> Bytes {
    let body = match error {
        Some(e) => serde_json::json!({ "error": e.to_json() }),
        None => serde_json::json!({}),
    };
    envelope(FLAG_END_STREAM, body.to_string().as_bytes())
}

/// Reads an end-of-stream message: `Ok(())` or the error it carries.
pub fn parse_end_stream(payload: &[u8]) -> Result<(), ConnectError> {
    #[derive(Deserialize, Serialize)]
    struct End {
        #[serde(default)]
        error: Option<serde_json::Value>,
    }
    let end: End = serde_json::from_slice(payload)
        .map_err(|e| ConnectError::internal(format!("invalid end-of-stream message: {e}")))?;
    match end.error {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(v) => Err(ConnectError::from_json(v.to_string().as_bytes())
            .unwrap_or_else(|| ConnectError::new(Code::Unknown, v.to_string()))),
    }
}

/// An HTTP body of envelopes as it arrives: the messages of a server
/// stream for the client, of a client stream for the server.
pub(crate) struct EnvelopeBody<M> {
    body: hyper::body::Incoming,
    pub(crate) reader: EnvelopeReader,
    codec: Codec,
    /// The body has ended (or failed).
    pub(crate) done: bool,
    _msg: std::marker::PhantomData<fn() -> M>,
}

impl<M: Msg> EnvelopeBody<M> {
    pub(crate) fn new(body: hyper::body::Incoming, codec: Codec) -> Self {
        Self {
            body,
            reader: EnvelopeReader::default(),
            codec,
            done: false,
            _msg: std::marker::PhantomData,
        }
    }

    pub(crate) fn decode(&self, payload: &[u8]) -> Result<M, ConnectError> {
        self.codec.decode::<M>(payload)
    }

    /// Reads the body to its end, throwing away what comes (at most
    /// `budget` bytes: a peer that sends more is cut off).
    pub(crate) async fn discard_rest(mut self, budget: usize) {
        use http_body_util::BodyExt as _;
        let mut left = budget;
        while let Some(Ok(frame)) = self.body.frame().await {
            let len = frame.data_ref().map_or(0, |d| d.len());
            match left.checked_sub(len) {
                Some(l) => left = l,
                None => return,
            }
        }
    }

    /// Waits for the body's next frame and buffers its data; `None` at the
    /// end of the body.
    pub(crate) async fn read_frame(&mut self) -> Option<Result<(), hyper::Error>> {
        use http_body_util::BodyExt as _;
        let frame = self.body.frame().await?;
        Some(frame.map(|frame| {
            if let Ok(data) = frame.into_data() {
                self.reader.push(&data);
            }
        }))
    }
}

/// Splits a byte stream into envelopes, holding at most one message.
#[derive(Default)]
pub struct EnvelopeReader {
    buf: BytesMut,
}

impl EnvelopeReader {
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole envelope, if one is buffered.
    pub fn next_envelope(&mut self) -> Result<Option<(u8, Bytes)>, ConnectError> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_MESSAGE_BYTES {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!("message of {len} bytes is larger than {MAX_MESSAGE_BYTES}"),
            ));
        }
        if self.buf.len() < 5 + len {
            self.buf.reserve(5 + len - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(5);
        let payload = self.buf.split_to(len).freeze();
        if flags & FLAG_COMPRESSED != 0 {
            return Err(ConnectError::new(
                Code::Internal,
                "compressed messages are not supported",
            ));
        }
        Ok(Some((flags, payload)))
    }

    /// Whether bytes of an incomplete envelope are left.
    pub fn has_partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::process::ProcessSelector;

    #[test]
    fn envelopes_split_across_chunks() {
        let a = envelope(0, b"hello");
        let b = end_stream(Some(&ConnectError::not_found("gone")));
        let all = [a.as_ref(), b.as_ref()].concat();
        let mut r = EnvelopeReader::default();
        let mut got = Vec::new();
        for byte in all {
            r.push(&[byte]);
            while let Some(e) = r.next_envelope().unwrap() {
                got.push(e);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (0, Bytes::from_static(b"hello")));
        assert_eq!(got[1].0, FLAG_END_STREAM);
        let err = parse_end_stream(&got[1].1).unwrap_err();
        assert_eq!(err, ConnectError::not_found("gone"));
        assert!(parse_end_stream(b"{}").is_ok());
        assert!(!r.has_partial());
    }

    #[test]
    fn oversized_and_compressed_messages_are_refused() {
        let mut r = EnvelopeReader::default();
        r.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(r.next_envelope().unwrap_err().code, Code::ResourceExhausted);
        let mut r = EnvelopeReader::default();
        r.push(&envelope(FLAG_COMPRESSED, b"x"));
        assert!(r.next_envelope().is_err());
    }

    #[test]
    fn codecs_round_trip_and_name_content_types() {
        let sel = ProcessSelector::tag("web");
        for codec in [Codec::Json, Codec::Proto] {
            let bytes = codec.encode(&sel);
            assert_eq!(codec.decode::<ProcessSelector>(&bytes).unwrap(), sel);
        }
        assert_eq!(
            Codec::from_unary_content_type("application/json; charset=utf-8"),
            Some(Codec::Json)
        );
        assert_eq!(
            Codec::from_stream_content_type("application/connect+proto"),
            Some(Codec::Proto)
        );
        assert_eq!(Codec::from_unary_content_type("text/plain"), None);
        assert_eq!(
            Codec::Json.decode::<ProcessSelector>(b"").unwrap(),
            ProcessSelector::default()
        );
        assert_eq!(Code::parse("unauthenticated"), Some(Code::Unauthenticated));
        assert_eq!(Code::Unauthenticated.http_status(), 401);
    }
}
