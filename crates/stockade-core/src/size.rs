//! Human-readable byte sizes.

/// Formats bytes in decimal units: `1.2 GB`, `512 B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Volumes larger than this get a warning.
pub const LARGE_VOLUME_BYTES: u64 = 10_000_000_000;

/// The warning shown for a volume above [`LARGE_VOLUME_BYTES`].
pub fn volume_warning(bytes: u64) -> Option<String> {
    (bytes > LARGE_VOLUME_BYTES).then(|| {
        format!(
            "Volume uses {} (more than 10 GB): consider cleaning up /workspace",
            human_bytes(bytes)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1_200_000_000), "1.2 GB");
        assert_eq!(human_bytes(1_500), "1.5 KB");
        assert!(volume_warning(10_000_000_000).is_none());
        assert!(volume_warning(10_000_000_001).is_some());
    }
}
