//! Reading Stockade's error body, `{"error": {"code", "message",
//! "details"?}}`: shared by the Docker-backed and the in-process tests.

use serde_json::Value;

/// The field names a validation error lists in `error.details.fields`.
pub fn fields(body: &Value) -> Vec<String> {
    body["error"]["details"]["fields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["field"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}
