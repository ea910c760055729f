//! The in-sandbox agent as the runtime ships it: the static
//! `stockade-agent` executable embedded at build time (`build.rs`), its
//! version, and how a sandbox container runs it — from a read-only,
//! per-engine volume, as PID 1 in front of the main process.

/// The static `stockade-agent` executable (built by `build.rs`).
pub static AGENT_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/stockade-agent"));

/// The first 12 hex digits of the SHA-256 of [`AGENT_BINARY`]: names the
/// agent volume and labels the containers that run it.
pub fn agent_version() -> &'static str {
    env!("STOCKADE_AGENT_VERSION")
}

/// The Rust target [`AGENT_BINARY`] was built for (`x86_64-unknown-linux-gnu`).
pub fn agent_target() -> &'static str {
    env!("STOCKADE_AGENT_TARGET")
}

/// The port the agent listens on in every sandbox (envd's).
pub const AGENT_PORT: u16 = 49983;

/// Where a sandbox mounts the agent volume (read-only).
pub const AGENT_MOUNT_PATH: &str = "/.stockade/agent";

/// The agent's path inside a sandbox.
pub const AGENT_PATH: &str = "/.stockade/agent/stockade-agent";

/// The variable that hands the agent its access token; the agent removes it
/// from every process it starts.
pub const AGENT_TOKEN_ENV: &str = "STOCKADE_AGENT_TOKEN";

/// The longest access token accepted.
const MAX_TOKEN_LEN: usize = 512;

/// The Docker volume holding [`AGENT_BINARY`] on an engine:
/// `stockade-agent-<version>`.
pub fn agent_volume_name() -> String {
    format!("stockade-agent-{}", agent_version())
}

/// The arguments before the main process's argv: the agent listens on all
/// addresses of the container at [`AGENT_PORT`], and runs the main process
/// after `--`.
pub(crate) fn agent_entrypoint_prefix() -> Vec<String> {
    vec![
        AGENT_PATH.to_owned(),
        "--listen".to_owned(),
        format!("0.0.0.0:{AGENT_PORT}"),
        "--".to_owned(),
    ]
}

/// Why an access token was refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentTokenError {
    #[error("agent_token must not be empty")]
    Empty,
    #[error("agent_token is longer than {} characters", MAX_TOKEN_LEN)]
    TooLong,
    #[error("agent_token must be visible ASCII characters only (no spaces)")]
    NotVisibleAscii,
}

/// Checks an access token: 1 to 512 visible ASCII characters (it travels in
/// an HTTP header and an environment variable).
pub fn validate_agent_token(token: &str) -> Result<(), AgentTokenError> {
    if token.is_empty() {
        return Err(AgentTokenError::Empty);
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(AgentTokenError::TooLong);
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(AgentTokenError::NotVisibleAscii);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program header type of a dynamic loader's path.
    const PT_INTERP: u32 = 3;

    #[test]
    fn the_embedded_agent_is_a_static_elf_executable() {
        let b = AGENT_BINARY;
        assert!(b.len() > 64 * 1024, "only {} bytes", b.len());
        assert_eq!(&b[..4], b"\x7fELF");
        assert_eq!(b[4], 2, "64-bit");
        assert_eq!(b[5], 1, "little-endian");
        let u16_at = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        // ET_EXEC, or ET_DYN for a static-pie.
        assert!(matches!(u16_at(16), 2 | 3), "type {}", u16_at(16));
        let machine = u16_at(18);
        match agent_target().split('-').next().unwrap() {
            "x86_64" => assert_eq!(machine, 62),
            "aarch64" => assert_eq!(machine, 183),
            _ => {}
        }
        let phoff = u64_at(32) as usize;
        let phentsize = usize::from(u16_at(54));
        let phnum = usize::from(u16_at(56));
        assert!(phnum > 0);
        let types: Vec<u32> = (0..phnum).map(|i| u32_at(phoff + i * phentsize)).collect();
        assert!(
            !types.contains(&PT_INTERP),
            "the agent names a dynamic loader: {types:?}"
        );
        // No symbol table: built with `-C strip=symbols`.
        let shoff = u64_at(40) as usize;
        let shentsize = usize::from(u16_at(58));
        let shnum = usize::from(u16_at(60));
        let section_types: Vec<u32> = (0..shnum)
            .map(|i| u32_at(shoff + i * shentsize + 4))
            .collect();
        assert!(!section_types.contains(&2), "SHT_SYMTAB left in the binary");
    }

    #[test]
    fn the_version_is_the_digest_prefix() {
        use sha2::Digest;
        let v = agent_version();
        assert_eq!(v.len(), 12);
        assert!(v
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        let full = sha2::Sha256::digest(AGENT_BINARY);
        let hex: String = full.iter().map(|b| format!("{b:02x}")).collect();
        assert!(hex.starts_with(v));
        assert_eq!(agent_volume_name(), format!("stockade-agent-{v}"));
    }

    #[test]
    fn tokens_are_checked() {
        assert!(validate_agent_token("abc-DEF_123.~").is_ok());
        for bad in ["", "with space", "tab\t", "nl\n", "é", &"x".repeat(513)] {
            let e = validate_agent_token(bad).unwrap_err().to_string();
            assert!(e.contains("agent_token"), "{e}");
        }
    }

    #[test]
    fn the_entrypoint_listens_on_the_agent_port() {
        let p = agent_entrypoint_prefix();
        assert_eq!(p[0], AGENT_PATH);
        assert_eq!(p[2], "0.0.0.0:49983");
        assert_eq!(p.last().unwrap(), "--");
        assert!(AGENT_PATH.starts_with(AGENT_MOUNT_PATH));
    }
}
