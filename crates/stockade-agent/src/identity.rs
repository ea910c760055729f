//! Proof that the agent answering at an address is a given sandbox's,
//! without sending that sandbox's token there first: the caller sends a
//! fresh challenge, the agent answers with an HMAC of it keyed by its own
//! token, and the caller checks it against the token it expects. Something
//! else listening at the address (another sandbox that took the address of
//! one that died) cannot answer, and learns nothing it could use.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::kernel::wire::hex;

/// The longest challenge an agent answers (hex of 32 random bytes is 64).
pub const MAX_CHALLENGE: usize = 128;

/// Hex of HMAC-SHA256 keyed by `token` of the domain and `challenge`: what
/// the agent holding `token` answers to `challenge`.
pub fn proof(token: &[u8], challenge: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token).expect("HMAC takes any key");
    mac.update(b"stockade-agent-identity:");
    mac.update(challenge.as_bytes());
    hex(&mac.finalize().into_bytes())
}

/// Whether `answer` is what the agent holding `token` answers to
/// `challenge`.
pub fn verify(token: &[u8], challenge: &str, answer: &str) -> bool {
    let expected = proof(token, challenge);
    expected.len() == answer.len() && bool::from(expected.as_bytes().ct_eq(answer.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_tokens_holder_answers_its_challenge() {
        let answer = proof(b"token-a", "c1");
        assert!(verify(b"token-a", "c1", &answer));
        assert!(!verify(b"token-b", "c1", &answer));
        assert!(!verify(b"token-a", "c2", &answer));
        assert!(!verify(b"token-a", "c1", ""));
        // Not the token itself, nor a proof for another purpose.
        assert_ne!(answer, hex(b"token-a"));
    }
}
