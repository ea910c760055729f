//! Identifiers: sandbox ids (`[a-z0-9]{12}`), account, team and instance ids.

use rand::Rng;

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// `len` random characters from `[a-z0-9]`.
pub(crate) fn random_id(len: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Whether `s` is `len` characters from `[a-z0-9]`.
pub(crate) fn is_id(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $len:expr, $what:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub const LEN: usize = $len;

            pub fn generate() -> Self {
                Self($crate::ids::random_id($len))
            }

            /// Parses an id; `field` names the input in the error.
            pub fn parse_field(s: &str, field: &str) -> Result<Self, $crate::error::FieldError> {
                if $crate::ids::is_id(s, $len) {
                    Ok(Self(s.to_owned()))
                } else {
                    Err($crate::error::FieldError::new(
                        field,
                        format!(
                            "invalid {} '{}': expected {} characters from [a-z0-9]",
                            $what,
                            $crate::ids::truncate(s),
                            $len
                        ),
                    ))
                }
            }

            pub fn parse(s: &str) -> Result<Self, $crate::error::FieldError> {
                Self::parse_field(s, "id")
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                Self::parse(&s).map_err(|e| e.message)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

pub(crate) use id_type;

pub(crate) fn truncate(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if s.chars().count() > 40 {
        out.push('…');
    }
    out
}

id_type!(
    /// A sandbox's id: 12 characters from `[a-z0-9]`; also part of its volume name.
    SandboxId, 12, "sandbox id"
);
id_type!(
    /// An account's id.
    AccountId, 16, "account id"
);
id_type!(
    /// A team's id.
    TeamId, 16, "team id"
);
id_type!(
    /// Identifies one Stockade installation (its database); every container it
    /// creates carries this id as a label so it can find its own.
    InstanceId, 16, "instance id"
);
id_type!(
    /// A snapshot's id: 12 characters from `[a-z0-9]`; also its image tag
    /// (`stockade-snapshot:{id}`).
    SnapshotId, 12, "snapshot id"
);
id_type!(
    /// An API token's or a dashboard session's id: what lists show and
    /// `DELETE /api/v1/tokens/{id}` takes (never the secret).
    TokenId, 12, "token id"
);
id_type!(
    /// A lifecycle event's id: the same in every delivery of the event.
    EventId, 24, "event id"
);
id_type!(
    /// A webhook's id.
    WebhookId, 16, "webhook id"
);
id_type!(
    /// One event on its way to one webhook; each attempt at it has an id of
    /// the same form.
    DeliveryId, 24, "delivery id"
);
id_type!(
    /// A shared volume's id: 12 characters from `[a-z0-9]`; also part of its
    /// Docker volume's name (`stockade-shared-{id}`).
    SharedVolumeId, 12, "volume id"
);
id_type!(
    /// An uploaded archive's id (`POST /uploads`), used once as a create source.
    UploadId, 24, "upload id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse() {
        for _ in 0..100 {
            let id = SandboxId::generate();
            assert_eq!(SandboxId::parse(id.as_str()).unwrap(), id);
        }
    }

    #[test]
    fn bad_ids_are_rejected_with_the_field() {
        for bad in [
            "",
            "abc",
            "ABCDEFGHIJKL",
            "abcdefghijk!",
            "abcdefghijklm",
            "../../etc/pa",
        ] {
            let err = SandboxId::parse_field(bad, "sandbox_id").unwrap_err();
            assert_eq!(err.field, "sandbox_id");
        }
    }

    #[test]
    fn serde_round_trip_validates() {
        let id: SandboxId = serde_json::from_str("\"abcdefghijkl\"").unwrap();
        assert_eq!(id.as_str(), "abcdefghijkl");
        assert!(serde_json::from_str::<SandboxId>("\"nope\"").is_err());
    }
}
