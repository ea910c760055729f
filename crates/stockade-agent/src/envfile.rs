//! The main process's env file (`/.stockade/main.env`), parsed without a
//! shell: `export NAME='value'` lines with POSIX single-quote escaping,
//! `unset NAME` lines and `#` comments.

/// One instruction of the env file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvOp {
    Set(String, String),
    Unset(String),
}

/// A line the parser could not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvFileError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for EnvFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Parses the file. Valid instructions are returned in order; a bad line is
/// reported and skipped (to the end of its line).
pub fn parse(text: &str) -> (Vec<EnvOp>, Vec<EnvFileError>) {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut line = 1;
    let mut ops = Vec::new();
    let mut errors = Vec::new();

    let skip_to_eol = |i: &mut usize, line: &mut usize| {
        while *i < chars.len() && chars[*i] != '\n' {
            *i += 1;
        }
        if *i < chars.len() {
            *i += 1;
            *line += 1;
        }
    };

    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        if c == ' ' || c == '\t' || c == '\r' || c == ';' {
            i += 1;
            continue;
        }
        if c == '#' {
            skip_to_eol(&mut i, &mut line);
            continue;
        }
        // A word: the keyword.
        let start_line = line;
        let mut word = String::new();
        while i < chars.len() && !matches!(chars[i], ' ' | '\t' | '\n' | '\r' | ';') {
            word.push(chars[i]);
            i += 1;
        }
        let (keyword, assignment) = match word.as_str() {
            "export" | "unset" => {
                while i < chars.len() && matches!(chars[i], ' ' | '\t') {
                    i += 1;
                }
                let mut rest = String::new();
                while i < chars.len() && !matches!(chars[i], ' ' | '\t' | '\n' | '\r' | ';' | '=') {
                    rest.push(chars[i]);
                    i += 1;
                }
                (word.clone(), rest)
            }
            _ => {
                // `NAME=value` without `export`: rewind to the `=`.
                match word.find('=') {
                    Some(eq) => {
                        let consumed = word[eq..].chars().count();
                        i -= consumed;
                        ("export".to_owned(), word[..eq].to_owned())
                    }
                    None => {
                        errors.push(EnvFileError {
                            line: start_line,
                            message: format!("unexpected word {word:?}"),
                        });
                        skip_to_eol(&mut i, &mut line);
                        continue;
                    }
                }
            }
        };
        if !is_name(&assignment) {
            errors.push(EnvFileError {
                line: start_line,
                message: format!("invalid variable name {assignment:?}"),
            });
            skip_to_eol(&mut i, &mut line);
            continue;
        }
        if keyword == "unset" {
            ops.push(EnvOp::Unset(assignment));
            continue;
        }
        if i >= chars.len() || chars[i] != '=' {
            // `export NAME` alone keeps the current value.
            continue;
        }
        i += 1;
        // The value: a shell word of quoted and unquoted parts.
        let mut value = String::new();
        let mut ok = true;
        while i < chars.len() && !matches!(chars[i], ' ' | '\t' | '\n' | '\r' | ';') {
            match chars[i] {
                '\'' => {
                    i += 1;
                    loop {
                        match chars.get(i) {
                            Some('\'') => {
                                i += 1;
                                break;
                            }
                            Some(&ch) => {
                                if ch == '\n' {
                                    line += 1;
                                }
                                value.push(ch);
                                i += 1;
                            }
                            None => {
                                ok = false;
                                break;
                            }
                        }
                    }
                }
                '\\' => {
                    match chars.get(i + 1) {
                        Some('\n') => line += 1,
                        Some(&ch) => value.push(ch),
                        None => {}
                    }
                    i += 2;
                }
                '"' | '$' | '`' => {
                    errors.push(EnvFileError {
                        line,
                        message: format!("unsupported character {:?} in value", chars[i]),
                    });
                    ok = false;
                    break;
                }
                ch => {
                    value.push(ch);
                    i += 1;
                }
            }
            if !ok {
                break;
            }
        }
        if ok {
            ops.push(EnvOp::Set(assignment, value));
        } else {
            if errors.last().map(|e| e.line) != Some(line) {
                errors.push(EnvFileError {
                    line: start_line,
                    message: "unterminated quote".into(),
                });
            }
            skip_to_eol(&mut i, &mut line);
        }
    }
    (ops, errors)
}

/// Applies parsed instructions to an environment (ordered, last one wins).
pub fn apply(env: &mut Vec<(String, String)>, ops: &[EnvOp]) {
    for op in ops {
        match op {
            EnvOp::Set(k, v) => {
                env.retain(|(name, _)| name != k);
                env.push((k.clone(), v.clone()));
            }
            EnvOp::Unset(k) => env.retain(|(name, _)| name != k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(k: &str, v: &str) -> EnvOp {
        EnvOp::Set(k.into(), v.into())
    }

    #[test]
    fn reads_what_stockade_writes() {
        let text = "# Written by Stockade\nexport A='plain'\nexport B='it'\\''s'\nexport C='two\nlines'\nexport D=''\nunset E\n";
        let (ops, errors) = parse(text);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            ops,
            vec![
                set("A", "plain"),
                set("B", "it's"),
                set("C", "two\nlines"),
                set("D", ""),
                EnvOp::Unset("E".into())
            ]
        );
    }

    #[test]
    fn bad_lines_are_reported_and_skipped() {
        let text = "export 1X='a'\nexport OK='yes'\nexport Q='open\n";
        let (ops, errors) = parse(text);
        assert_eq!(ops, vec![set("OK", "yes")]);
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].line, 1);
        let (ops, errors) = parse("X=1 Y=a\\ b\nexport Z=\"no\"\n");
        assert_eq!(ops, vec![set("X", "1"), set("Y", "a b")]);
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn apply_overrides_and_unsets() {
        let mut env = vec![("A".into(), "1".into()), ("B".into(), "2".into())];
        apply(&mut env, &[set("A", "3"), EnvOp::Unset("B".into())]);
        assert_eq!(env, vec![("A".to_string(), "3".to_string())]);
    }
}
