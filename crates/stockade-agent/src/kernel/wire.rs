//! Jupyter messages on the wire: identities, the `<IDS|MSG>` delimiter, the
//! HMAC-SHA256 signature (keyed with the connection file's key), then the
//! header, parent header, metadata and content as JSON frames, then any
//! binary buffers. Building, signing, parsing and verifying them.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// The frame between the routing identities and the signed parts.
pub const DELIMITER: &[u8] = b"<IDS|MSG>";
/// The version of the messaging protocol our headers claim.
pub const PROTOCOL_VERSION: &str = "5.3";

/// Why a received message was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("no <IDS|MSG> delimiter")]
    NoDelimiter,
    #[error("fewer than the five frames after the delimiter")]
    Truncated,
    #[error("bad signature")]
    BadSignature,
    #[error("frame {0} is not a JSON object")]
    BadJson(&'static str),
}

/// Signs and verifies messages with a connection's key.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
}

impl Signer {
    /// A signer keyed with the key as the connection file holds it (the
    /// bytes of the hex text, as Jupyter uses it).
    pub fn new(key: &str) -> Self {
        Self {
            key: key.as_bytes().to_vec(),
        }
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        for p in parts {
            mac.update(p);
        }
        mac
    }

    /// The hex signature of the four signed parts.
    pub fn sign(&self, parts: &[&[u8]]) -> String {
        hex(&self.mac(parts).finalize().into_bytes())
    }

    /// Whether a hex signature matches the parts (in constant time).
    pub fn verify(&self, parts: &[&[u8]], signature: &[u8]) -> bool {
        let Some(raw) = unhex(signature) else {
            return false;
        };
        self.mac(parts).verify_slice(&raw).is_ok()
    }
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    text.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// One Jupyter message.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub identities: Vec<Bytes>,
    pub header: Value,
    pub parent_header: Value,
    pub metadata: Value,
    pub content: Value,
    pub buffers: Vec<Bytes>,
}

impl Message {
    /// A new request of a session: a fresh msg_id, no parent.
    pub fn request(session: &str, msg_type: &str, content: Value) -> Self {
        Self {
            identities: Vec::new(),
            header: json!({
                "msg_id": super::new_id(),
                "session": session,
                "username": "stockade",
                "date": super::now_rfc3339(),
                "msg_type": msg_type,
                "version": PROTOCOL_VERSION,
            }),
            parent_header: json!({}),
            metadata: json!({}),
            content,
            buffers: Vec::new(),
        }
    }

    /// The header's msg_id.
    pub fn id(&self) -> &str {
        self.header["msg_id"].as_str().unwrap_or("")
    }

    /// The header's msg_type.
    pub fn msg_type(&self) -> &str {
        self.header["msg_type"].as_str().unwrap_or("")
    }

    /// The msg_id of the request this message answers.
    pub fn parent_id(&self) -> &str {
        self.parent_header["msg_id"].as_str().unwrap_or("")
    }

    /// The frames to send, signed.
    pub fn encode(&self, signer: &Signer) -> Vec<Bytes> {
        let parts: [Vec<u8>; 4] = [
            &self.header,
            &self.parent_header,
            &self.metadata,
            &self.content,
        ]
        .map(|v| serde_json::to_vec(v).expect("JSON values serialize"));
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let signature = signer.sign(&refs);
        let mut frames = self.identities.clone();
        frames.push(Bytes::from_static(DELIMITER));
        frames.push(Bytes::from(signature));
        frames.extend(parts.into_iter().map(Bytes::from));
        frames.extend(self.buffers.iter().cloned());
        frames
    }

    /// Parses received frames, checking the signature.
    pub fn decode(frames: Vec<Bytes>, signer: &Signer) -> Result<Self, WireError> {
        let at = frames
            .iter()
            .position(|f| f.as_ref() == DELIMITER)
            .ok_or(WireError::NoDelimiter)?;
        if frames.len() < at + 6 {
            return Err(WireError::Truncated);
        }
        let signed: Vec<&[u8]> = frames[at + 2..at + 6].iter().map(|f| f.as_ref()).collect();
        if !signer.verify(&signed, &frames[at + 1]) {
            return Err(WireError::BadSignature);
        }
        let parse = |i: usize, name: &'static str| -> Result<Value, WireError> {
            match serde_json::from_slice::<Value>(&frames[at + 2 + i]) {
                Ok(v @ Value::Object(_)) => Ok(v),
                _ => Err(WireError::BadJson(name)),
            }
        };
        Ok(Self {
            identities: frames[..at].to_vec(),
            header: parse(0, "header")?,
            parent_header: parse(1, "parent_header")?,
            metadata: parse(2, "metadata")?,
            content: parse(3, "content")?,
            buffers: frames[at + 6..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_survives_the_round_trip_and_tampering_is_caught() {
        let signer = Signer::new("0123abcd");
        let mut m = Message::request("s1", "execute_request", json!({"code": "1+1"}));
        m.identities.push(Bytes::from_static(b"peer"));
        let frames = m.encode(&signer);
        assert_eq!(frames[1].as_ref(), DELIMITER);
        let back = Message::decode(frames.clone(), &signer).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.msg_type(), "execute_request");

        let mut bad = frames.clone();
        bad[5] = Bytes::from_static(b"{\"code\":\"2+2\"}");
        assert_eq!(Message::decode(bad, &signer), Err(WireError::BadSignature));
        assert_eq!(
            Message::decode(frames.clone(), &Signer::new("other")),
            Err(WireError::BadSignature)
        );
        assert_eq!(
            Message::decode(frames[2..].to_vec(), &signer),
            Err(WireError::NoDelimiter)
        );
        assert_eq!(
            Message::decode(frames[..5].to_vec(), &signer),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn signatures_match_jupyters() {
        // HMAC-SHA256 over the concatenated parts, as jupyter_client
        // computes it: hmac.new(b"key", b"abc", sha256).hexdigest().
        let s = Signer::new("key");
        assert_eq!(
            s.sign(&[b"a", b"b", b"c"]),
            "9c196e32dc0175f86f4b1cb89289d6619de6bee699e4c378e68309ed97a1a6ab"
        );
    }
}
