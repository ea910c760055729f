//! Checks shared by the names people give things (hosts, teams, tokens,
//! snapshots); each kind of name says its own length and characters.

use crate::error::FieldError;

/// `name` when it is 1 to `max` bytes long and `valid` accepts its bytes;
/// otherwise an error on `field` saying what a name must be (`rule`).
pub(crate) fn check_name(
    name: &str,
    field: &str,
    max: usize,
    valid: impl FnOnce(&[u8]) -> bool,
    rule: impl FnOnce() -> String,
) -> Result<String, FieldError> {
    if !name.is_empty() && name.len() <= max && valid(name.as_bytes()) {
        Ok(name.to_owned())
    } else {
        Err(FieldError::new(field, rule()))
    }
}

/// A free-text name, trimmed: 1 to `max` characters and no control
/// characters. Errors name `field`.
pub(crate) fn check_text_name(name: &str, field: &str, max: usize) -> Result<String, FieldError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > max {
        return Err(FieldError::new(
            field,
            format!("must be 1 to {max} characters"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(FieldError::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(name.to_owned())
}
