//! Words for a POSIX shell: quoted so that `/bin/sh` reads them back as
//! they are.

/// `word` in single quotes, every `'` written as `'\''`.
pub fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `word` as it is when the shell reads it unchanged (letters, digits and
/// `_@%+=:,./-`), else [`quote`]d.
pub fn quote_if_needed(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if plain {
        word.to_owned()
    } else {
        quote(word)
    }
}

/// `words` as one command line that runs them as they are.
pub fn join<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| quote_if_needed(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_come_back_as_they_were() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote_if_needed("/usr/bin/env"), "/usr/bin/env");
        assert_eq!(quote_if_needed(""), "''");
        assert_eq!(join(&["echo", "a b", "$HOME"]), "echo 'a b' '$HOME'");
    }
}
