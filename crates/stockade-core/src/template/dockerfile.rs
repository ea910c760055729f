//! A Dockerfile read into a build's base and steps.
//!
//! The `parse-dockerfile` crate splits the text into instructions (line
//! continuations, comments, parser directives, here-documents, flags, exec
//! and shell forms); this module gives them Docker's meaning: variable
//! substitution, quote removal, `CMD`/`ENTRYPOINT` merging, and refuses
//! what a template build cannot honour, naming the line.

use std::collections::HashMap;

use ::parse_dockerfile as dockerfile;
use dockerfile::{Command, Flag, Instruction, Source, UnescapedString};

use crate::error::FieldError;

use super::steps::MAX_STEPS;
use super::{BuildBase, BuildStep, StepKind};

/// What a Dockerfile says: its base, its steps (a `COPY` step's
/// `files_hash` left empty, for the caller to fill from the context) and
/// the start command of `CMD`/`ENTRYPOINT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedDockerfile {
    pub base: BuildBase,
    pub steps: Vec<BuildStep>,
    pub start_cmd: Option<String>,
}

/// Reads `text`; what cannot be honoured is an error on `dockerfile`
/// naming its line.
pub fn parse_dockerfile(text: &str) -> Result<ParsedDockerfile, FieldError> {
    // The parser drops a UTF-8 byte order mark before counting offsets;
    // dropping it here too keeps its spans pointing into `text`.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut reader = Reader::new(text);
    // Instructions are taken one at a time so that a problem this module
    // finds (say a here-document the parser cannot see, whose lines it
    // would then read as instructions) is reported before any parse error
    // further down that it causes.
    let instructions = dockerfile::parse_iter(text).map_err(|e| parse_error(&e, false))?;
    for instruction in instructions {
        let instruction = instruction.map_err(|e| parse_error(&e, reader.base.is_some()))?;
        reader.instruction(&instruction)?;
    }
    reader.finish()
}

/// An error on the `dockerfile` field at `line`.
fn at(line: usize, what: impl std::fmt::Display) -> FieldError {
    FieldError::new("dockerfile", format!("line {line}: {what}"))
}

/// The parser's own error, with its line in front like every other.
fn parse_error(e: &dockerfile::Error, seen_from: bool) -> FieldError {
    if e.line() == 0 {
        // The only error without a place: no FROM at all.
        return at(
            1,
            "no FROM instruction: a Dockerfile starts with FROM <image> (only ARG may come before it)",
        );
    }
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let msg = full.strip_suffix(&suffix).unwrap_or(&full);
    if !seen_from && msg == "expected FROM" {
        return at(
            e.line(),
            "expected FROM: a Dockerfile starts with FROM <image> (only ARG may come before it)",
        );
    }
    at(e.line(), msg)
}

/// The 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The `# escape=` parser directive's character (`\` unless it says
/// `` ` ``). The parser honours it when joining lines; quote removal and
/// substitution here need it too, and the parser does not hand it out
/// while iterating. Directives are the leading `# key=value` lines; an
/// unknown key, any other line, or a directive given twice ends them (the
/// last also voiding them), as Docker reads them.
fn escape_directive(text: &str) -> char {
    let mut escape = '\\';
    let mut seen: Vec<String> = Vec::new();
    for line in text.lines() {
        let Some((key, value)) = line.strip_prefix('#').and_then(|l| l.split_once('=')) else {
            break;
        };
        let key = key.trim().to_ascii_lowercase();
        if !matches!(key.as_str(), "syntax" | "escape" | "check") {
            break;
        }
        if seen.contains(&key) {
            return '\\';
        }
        if key == "escape" && value.trim() == "`" {
            escape = '`';
        }
        seen.push(key);
    }
    escape
}

/// A `CMD` or `ENTRYPOINT` as written.
#[derive(Debug, Clone)]
enum StartForm {
    /// `["executable", "param"]`: run as is, no shell.
    Exec(Vec<String>),
    /// `command param`: run by `/bin/sh -c`.
    Shell(String),
}

/// The variables substitution sees.
#[derive(Debug, Default)]
struct Vars {
    /// `ARG`s before `FROM`: only `FROM` sees them, and an `ARG` without a
    /// value after `FROM` takes its default from here, as in Docker.
    global: HashMap<String, Option<String>>,
    /// `ARG`s after `FROM`; `None` is declared without a value (unset).
    args: HashMap<String, Option<String>>,
    /// `ENV`s after `FROM`; they win over `ARG`s of the same name.
    env: HashMap<String, String>,
    /// Past the `FROM`.
    in_stage: bool,
}

impl Vars {
    /// A variable's value (`None`: declared but unset). A variable no
    /// earlier `ARG` or `ENV` declares is an error rather than empty:
    /// Docker would take it from the base image's environment (`$PATH`),
    /// which is not known when the Dockerfile is read, and an empty value
    /// would quietly build something else.
    fn get(&self, name: &str) -> Result<Option<&str>, String> {
        if !self.in_stage {
            return match self.global.get(name) {
                Some(v) => Ok(v.as_deref()),
                None => Err(format!(
                    "${name} is not declared by an ARG before FROM; add ARG {name}=<value> above it"
                )),
            };
        }
        if let Some(v) = self.env.get(name) {
            return Ok(Some(v));
        }
        match self.args.get(name) {
            Some(v) => Ok(v.as_deref()),
            None => Err(format!(
                "${name} is not set by an earlier ARG or ENV of the Dockerfile, and the base \
                 image's variables are not known when it is read; declare it first or write \
                 the value out"
            )),
        }
    }
}

/// Reads one Dockerfile's instructions in order.
struct Reader<'t> {
    text: &'t str,
    escape: char,
    vars: Vars,
    base: Option<BuildBase>,
    steps: Vec<BuildStep>,
    entrypoint: Option<StartForm>,
    cmd: Option<StartForm>,
    /// The line of the instruction read last.
    line: usize,
}

impl<'t> Reader<'t> {
    fn new(text: &'t str) -> Self {
        Self {
            text,
            escape: escape_directive(text),
            vars: Vars::default(),
            base: None,
            steps: Vec::new(),
            entrypoint: None,
            cmd: None,
            line: 1,
        }
    }

    fn instruction(&mut self, instruction: &Instruction<'t>) -> Result<(), FieldError> {
        let Some(start) = keyword_start(instruction) else {
            // A kind of instruction newer than this code knows.
            return Err(at(
                self.line,
                "the instruction after this line is not supported",
            ));
        };
        let line = line_of(self.text, start);
        self.line = line;
        match instruction {
            Instruction::Arg(i) => self.arg(line, &i.arguments.value),
            Instruction::From(i) => self.from(line, &i.options, &i.image),
            Instruction::Run(i) => self.run(line, i),
            Instruction::Copy(i) => self.copy(line, "COPY", &i.options, &i.src, &i.dest),
            Instruction::Add(i) => self.copy(line, "ADD", &i.options, &i.src, &i.dest),
            Instruction::Env(i) => self.env(line, &i.arguments.value),
            Instruction::Workdir(i) => {
                let path = self.expand(line, "WORKDIR", &i.arguments.value)?;
                self.push(line, StepKind::Workdir { path })
            }
            Instruction::User(i) => {
                let user = self.expand(line, "USER", &i.arguments.value)?;
                self.push(line, StepKind::User { user })
            }
            Instruction::Cmd(i) => {
                self.cmd = Some(self.start_form(line, "CMD", &i.arguments)?);
                Ok(())
            }
            Instruction::Entrypoint(i) => {
                self.entrypoint = Some(self.start_form(line, "ENTRYPOINT", &i.arguments)?);
                Ok(())
            }
            // Image metadata a template does not keep.
            Instruction::Expose(_)
            | Instruction::Label(_)
            | Instruction::Maintainer(_)
            | Instruction::Stopsignal(_)
            | Instruction::Healthcheck(_)
            | Instruction::Volume(_) => Ok(()),
            Instruction::Shell(_) => Err(at(
                line,
                "SHELL is not supported: steps run with /bin/sh -c; call another shell \
                 explicitly, e.g. RUN bash -c '...'",
            )),
            Instruction::Onbuild(_) => Err(at(
                line,
                "ONBUILD is not supported: write the instructions into the Dockerfile that \
                 starts from this template",
            )),
            _ => Err(at(line, "this instruction is not supported")),
        }
    }

    /// What the Dockerfile comes to, once every instruction is read.
    fn finish(self) -> Result<ParsedDockerfile, FieldError> {
        let Some(base) = self.base else {
            return Err(at(
                1,
                "no FROM instruction: a Dockerfile starts with FROM <image>",
            ));
        };
        // Docker's rules: a shell-form ENTRYPOINT ignores CMD; an exec-form
        // one takes CMD's words (a shell-form CMD as `/bin/sh -c cmd`) as
        // its arguments.
        let words = |form: Option<StartForm>| match form {
            Some(StartForm::Exec(w)) => w,
            Some(StartForm::Shell(c)) => vec!["/bin/sh".into(), "-c".into(), c],
            None => Vec::new(),
        };
        let start_cmd = match (self.entrypoint, self.cmd) {
            (Some(StartForm::Shell(ep)), _) => Some(ep),
            (Some(ep), cmd) => {
                let mut all = words(Some(ep));
                all.extend(words(cmd));
                (!all.is_empty()).then(|| crate::shell::join(&all))
            }
            (None, Some(StartForm::Shell(c))) => Some(c),
            (None, cmd) => {
                let all = words(cmd);
                (!all.is_empty()).then(|| crate::shell::join(&all))
            }
        };
        Ok(ParsedDockerfile {
            base,
            steps: self.steps,
            start_cmd,
        })
    }

    /// Adds a step, checked the way a recipe's steps are.
    fn push(&mut self, line: usize, kind: StepKind) -> Result<(), FieldError> {
        if self.steps.len() >= MAX_STEPS {
            return Err(at(
                line,
                format!(
                    "more than {MAX_STEPS} steps: merge RUN instructions (cmd1 && cmd2) or COPY \
                     a directory instead of its files"
                ),
            ));
        }
        let step = BuildStep { kind, force: false };
        // The caller fills a COPY step's files hash later; until then a
        // stand-in lets every other part be checked.
        let mut checked = step.clone();
        if let StepKind::Copy { files_hash, .. } = &mut checked.kind {
            *files_hash = "0".repeat(64);
        }
        let prefix = format!("dockerfile line {line}");
        checked.validate(&prefix).map_err(|e| {
            let part = e
                .field
                .strip_prefix(&prefix)
                .and_then(|p| p.strip_prefix('.'))
                .unwrap_or("");
            let part = match part {
                "src" => "source",
                "dest" => "destination",
                p => p.strip_prefix("vars.").unwrap_or(p),
            };
            at(line, format!("{} {part}: {}", step.kind.word(), e.message))
        })?;
        self.steps.push(step);
        Ok(())
    }

    /// `word` with its variables substituted and its quotes removed.
    fn expand(&self, line: usize, instruction: &str, word: &str) -> Result<String, FieldError> {
        expand(word, self.escape, &self.vars).map_err(|e| at(line, format!("{instruction}: {e}")))
    }

    fn from(
        &mut self,
        line: usize,
        options: &[Flag<'_>],
        image: &UnescapedString<'_>,
    ) -> Result<(), FieldError> {
        if self.base.is_some() {
            return Err(at(
                line,
                "a second FROM: multi-stage builds are not supported; build the first stage as \
                 its own template and start from it with fromTemplate",
            ));
        }
        if let Some(flag) = options.first() {
            let name = &flag.name.value;
            return Err(at(
                line,
                if name == "platform" {
                    "FROM --platform is not supported: templates are built for the hosts' \
                     platform; drop the option"
                        .to_owned()
                } else {
                    format!("FROM --{name} is not supported; drop the option")
                },
            ));
        }
        let image = self.expand(line, "FROM", &image.value)?;
        if image.eq_ignore_ascii_case("scratch") {
            return Err(at(
                line,
                "FROM scratch is not supported: a template's steps and sandboxes need a base \
                 image with /bin/sh",
            ));
        }
        if image.is_empty()
            || image.len() > 255
            || image.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(at(
                line,
                format!("FROM: '{image}' is not an image reference of 1 to 255 characters"),
            ));
        }
        self.base = Some(BuildBase::Image(image));
        self.vars.in_stage = true;
        Ok(())
    }

    /// `ARG name[=default] ...`: before FROM a global for FROM; after it a
    /// step each.
    fn arg(&mut self, line: usize, arguments: &str) -> Result<(), FieldError> {
        for word in split_words(arguments, self.escape) {
            let (name, value) = match word.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (word.as_str(), None),
            };
            let name = self.expand(line, "ARG", name)?;
            let value = match value {
                Some(v) => Some(self.expand(line, "ARG", v)?),
                // Without a default, the global ARG of that name gives it.
                None if self.vars.in_stage => self.vars.global.get(&name).cloned().flatten(),
                None => None,
            };
            if self.vars.in_stage {
                self.vars.args.insert(name.clone(), value.clone());
                self.push(line, StepKind::Arg { name, value })?;
            } else {
                self.vars.global.insert(name, value);
            }
        }
        Ok(())
    }

    /// `ENV k=v k2="v 2"`, or the legacy `ENV k v w` (one variable, the
    /// rest of the line its value). Every value of one `ENV` is substituted
    /// with the variables from before it, as Docker does.
    fn env(&mut self, line: usize, arguments: &str) -> Result<(), FieldError> {
        let words = split_words(arguments, self.escape);
        let mut vars = Vec::new();
        if words.first().is_some_and(|w| !w.contains('=')) {
            let rest = arguments.trim_start();
            let split = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let (key, value) = rest.split_at(split);
            let value = value.trim_start();
            if value.is_empty() {
                return Err(at(
                    line,
                    format!("ENV {key} has no value: write ENV {key}=<value>"),
                ));
            }
            vars.push((
                self.expand(line, "ENV", key)?,
                self.expand(line, "ENV", value)?,
            ));
        } else {
            for word in &words {
                let Some((key, value)) = word.split_once('=') else {
                    return Err(at(
                        line,
                        format!("ENV: '{word}' has no '=': write name=value"),
                    ));
                };
                vars.push((
                    self.expand(line, "ENV", key)?,
                    self.expand(line, "ENV", value)?,
                ));
            }
        }
        for (k, v) in &vars {
            self.vars.env.insert(k.clone(), v.clone());
        }
        self.push(line, StepKind::Env { vars })
    }

    fn run(&mut self, line: usize, run: &dockerfile::RunInstruction<'t>) -> Result<(), FieldError> {
        if let Some(flag) = run.options.first() {
            let name = &flag.name.value;
            let why = match &**name {
                "mount" => "cache, secret and bind mounts are not available to build steps",
                "network" => "steps run with the build sandbox's network",
                "security" => "steps never run privileged",
                _ => "options of RUN are not supported",
            };
            return Err(at(line, format!("RUN --{name}: {why}; drop the option")));
        }
        let command = match &run.arguments {
            Command::Exec(words) => {
                let words: Vec<String> = words.value.iter().map(|w| w.value.to_string()).collect();
                crate::shell::join(&words)
            }
            Command::Shell(rest) => {
                let rest_text = join_lines(rest.value, self.escape);
                match run.here_docs.first() {
                    None => {
                        if has_heredoc(&rest_text, self.escape) {
                            return Err(at(
                                line,
                                "RUN: a here-document is only supported at the start of the \
                                 command (RUN <<EOF, or RUN <<EOF python3 to feed it to a \
                                 program)",
                            ));
                        }
                        rest_text.trim().to_owned()
                    }
                    Some(doc) => {
                        if run.here_docs.len() > 1 || has_heredoc(&rest_text, self.escape) {
                            return Err(at(
                                line,
                                "RUN: only one here-document per RUN is supported",
                            ));
                        }
                        // The parser's command is what follows the
                        // delimiter; the `<<EOF` itself lies between the
                        // keyword and it.
                        let before = &self.text[run.run.span.end..rest.span.start];
                        let marker = before.find("<<").map_or("<<EOF", |i| &before[i..]);
                        heredoc_command(marker, rest_text.trim_end(), &doc.value)
                            .map_err(|e| at(line, format!("RUN: {e}")))?
                    }
                }
            }
            _ => return Err(at(line, "RUN: this form is not supported")),
        };
        self.push(
            line,
            StepKind::Run {
                command,
                user: None,
            },
        )
    }

    fn copy(
        &mut self,
        line: usize,
        word: &str,
        options: &[Flag<'_>],
        sources: &[Source<'_>],
        dest: &UnescapedString<'_>,
    ) -> Result<(), FieldError> {
        let mut user = None;
        let mut mode = None;
        for flag in options {
            let name: &str = &flag.name.value;
            let value: Option<&str> = flag.value.as_ref().map(|v| &*v.value);
            match (name, value) {
                ("chown", Some(v)) => user = Some(self.expand(line, word, v)?),
                ("chmod", Some(v)) => {
                    let v = self.expand(line, word, v)?;
                    let parsed = u32::from_str_radix(&v, 8).ok().filter(|m| *m <= 0o7777);
                    let Some(m) = parsed else {
                        return Err(at(
                            line,
                            format!(
                                "{word} --chmod={v}: give the mode in octal, e.g. --chmod=0755"
                            ),
                        ));
                    };
                    mode = Some(m);
                }
                ("chown" | "chmod", None) => {
                    return Err(at(
                        line,
                        format!("{word} --{name} needs a value, e.g. --{name}=..."),
                    ))
                }
                ("from", v) => {
                    return Err(at(
                        line,
                        format!(
                            "{word} --from={}: multi-stage builds are not supported; build the \
                             first stage as its own template and start from it with fromTemplate",
                            v.unwrap_or("")
                        ),
                    ))
                }
                _ => {
                    return Err(at(
                        line,
                        format!(
                            "{word} --{name}: this option is not supported; only --chown and \
                             --chmod are"
                        ),
                    ))
                }
            }
        }
        let dest = self.expand(line, word, &dest.value)?;
        if sources.len() > 1 && !dest.ends_with('/') {
            return Err(at(
                line,
                format!(
                    "{word} with several sources needs a destination directory ending in /, not \
                     '{dest}'"
                ),
            ));
        }
        for source in sources {
            let src = match source {
                Source::Path(p) => self.expand(line, word, &p.value)?,
                Source::HereDoc(_) => {
                    return Err(at(
                        line,
                        format!(
                            "{word} <<EOF: files from here-documents are not supported; write \
                             the file into the build context, or create it in a RUN step"
                        ),
                    ))
                }
                _ => return Err(at(line, format!("{word}: this source is not supported"))),
            };
            let src = self.context_path(line, word, &src)?;
            self.push(
                line,
                StepKind::Copy {
                    src,
                    dest: dest.clone(),
                    user: user.clone(),
                    mode,
                    files_hash: String::new(),
                },
            )?;
        }
        Ok(())
    }

    /// A `COPY`/`ADD` source as a path relative to the build context root
    /// (a leading `/` means the root, as in Docker), never above it; `ADD`
    /// refused where it would do more than copy.
    fn context_path(&self, line: usize, word: &str, src: &str) -> Result<String, FieldError> {
        let lower = src.to_ascii_lowercase();
        let is_url = lower.starts_with("git@")
            || lower.split_once("://").is_some_and(|(scheme, _)| {
                !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            });
        if is_url {
            return Err(at(
                line,
                format!(
                    "{word} {src}: sources from URLs are not supported; download it in a RUN \
                     step (curl, wget, git clone) instead"
                ),
            ));
        }
        const ARCHIVES: [&str; 10] = [
            ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz", ".tar.zst",
            ".tzst",
        ];
        if word == "ADD" && ARCHIVES.iter().any(|ext| lower.ends_with(ext)) {
            return Err(at(
                line,
                format!(
                    "ADD {src}: Docker would unpack this archive, and that auto-extraction isn't \
                     honoured here; use COPY and RUN tar -xf"
                ),
            ));
        }
        let mut depth: usize = 0;
        for part in src.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    depth = depth.checked_sub(1).ok_or_else(|| {
                        at(
                            line,
                            format!("{word} {src}: the source leaves the build context"),
                        )
                    })?;
                }
                _ => depth += 1,
            }
        }
        let relative = src.trim_start_matches('/');
        Ok(if relative.is_empty() {
            ".".to_owned()
        } else {
            relative.to_owned()
        })
    }

    fn start_form(
        &self,
        line: usize,
        instruction: &str,
        command: &Command<'_>,
    ) -> Result<StartForm, FieldError> {
        match command {
            Command::Exec(words) => Ok(StartForm::Exec(
                words.value.iter().map(|w| w.value.to_string()).collect(),
            )),
            Command::Shell(text) => {
                let text = join_lines(text.value, self.escape);
                let text = text.trim();
                if text.is_empty() {
                    return Err(at(line, format!("{instruction} needs a command")));
                }
                if has_heredoc(text, self.escape) {
                    return Err(at(
                        line,
                        format!("{instruction}: here-documents are not supported here"),
                    ));
                }
                Ok(StartForm::Shell(text.to_owned()))
            }
            _ => Err(at(
                line,
                format!("{instruction}: this form is not supported"),
            )),
        }
    }
}

/// Where an instruction's keyword starts.
fn keyword_start(instruction: &Instruction<'_>) -> Option<usize> {
    let keyword = match instruction {
        Instruction::Add(i) => &i.add,
        Instruction::Arg(i) => &i.arg,
        Instruction::Cmd(i) => &i.cmd,
        Instruction::Copy(i) => &i.copy,
        Instruction::Entrypoint(i) => &i.entrypoint,
        Instruction::Env(i) => &i.env,
        Instruction::Expose(i) => &i.expose,
        Instruction::From(i) => &i.from,
        Instruction::Healthcheck(i) => &i.healthcheck,
        Instruction::Label(i) => &i.label,
        Instruction::Maintainer(i) => &i.maintainer,
        Instruction::Onbuild(i) => &i.onbuild,
        Instruction::Run(i) => &i.run,
        Instruction::Shell(i) => &i.shell,
        Instruction::Stopsignal(i) => &i.stopsignal,
        Instruction::User(i) => &i.user,
        Instruction::Volume(i) => &i.volume,
        Instruction::Workdir(i) => &i.workdir,
        _ => return None,
    };
    Some(keyword.span.start)
}

/// A shell-form command as the parser leaves it (continuations kept) made
/// one line as Docker does: the escape character ending a line goes, with
/// the line break, and so do comment and blank lines inside it.
fn join_lines(raw: &str, escape: char) -> String {
    let mut out = String::with_capacity(raw.len());
    for (i, line) in raw.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if i > 0 {
            let t = line.trim_start();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
        }
        match line.trim_end_matches([' ', '\t']).strip_suffix(escape) {
            Some(joined) => out.push_str(joined),
            None => out.push_str(line),
        }
    }
    out
}

/// Whether `cmd` holds a here-document redirection (`<<EOF`, `2<<-'EOF'`)
/// as a word of its own outside quotes, the way Docker spots them. The
/// parser only sees one at the start of `RUN`; anywhere else its lines
/// would be read as instructions.
fn has_heredoc(cmd: &str, escape: char) -> bool {
    let chars: Vec<char> = cmd.chars().collect();
    let mut quote = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                } else if c == escape && q == '"' {
                    i += 1;
                }
            }
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == escape => i += 1,
            None if c == '<' && chars.get(i + 1) == Some(&'<') => {
                // A word start, after an optional file descriptor number.
                let mut w = i;
                while w > 0 && chars[w - 1].is_ascii_digit() {
                    w -= 1;
                }
                let word_start = w == 0 || chars[w - 1].is_whitespace();
                let mut j = i + 2;
                if chars.get(j) == Some(&'-') {
                    j += 1;
                }
                let delimiter = chars
                    .get(j)
                    .is_some_and(|&d| d.is_ascii_alphabetic() || matches!(d, '_' | '\'' | '"'));
                if word_start && delimiter {
                    return true;
                }
                // Past `<<`, so `<<<` is not read as one at its second `<`.
                i = j;
                continue;
            }
            None => {}
        }
        i += 1;
    }
    false
}

/// The shell command of `RUN <<EOF ...`: with nothing after the
/// delimiter, the body is the script; otherwise (`RUN <<EOF python3`) the
/// line and body are handed to `/bin/sh` as the here-document they are.
fn heredoc_command(marker: &str, rest: &str, body: &str) -> Result<String, String> {
    if rest.trim().is_empty() {
        if body.starts_with("#!") {
            return Err(
                "a here-document starting with #! would be run by /bin/sh, not by its \
                 interpreter; name the interpreter after the delimiter, e.g. RUN <<EOF python3"
                    .to_owned(),
            );
        }
        return Ok(body.to_owned());
    }
    let delimiter: String = marker
        .trim_start_matches('<')
        .trim_start_matches('-')
        .chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect();
    Ok(format!("{marker}{rest}\n{body}{delimiter}"))
}

/// `ENV`/`ARG` arguments split into words at whitespace outside quotes;
/// the quotes and escapes stay, for [`expand`] to remove.
fn split_words(s: &str, escape: char) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            word.push(c);
            if c == q {
                quote = None;
            } else if c == escape && q != '\'' {
                word.extend(chars.next());
            }
        } else if c.is_whitespace() {
            if in_word {
                words.push(std::mem::take(&mut word));
                in_word = false;
            }
        } else {
            in_word = true;
            word.push(c);
            if c == '\'' || c == '"' {
                quote = Some(c);
            } else if c == escape {
                word.extend(chars.next());
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// `word` as Docker reads one: `$VAR`, `${VAR}`, `${VAR:-default}`,
/// `${VAR-default}`, `${VAR:+alt}`, `${VAR+alt}`, `${VAR:?message}`
/// substituted from `vars`; single quotes literal; double quotes
/// substituting; the escape character making the next one literal.
fn expand(word: &str, escape: char, vars: &Vars) -> Result<String, String> {
    let mut e = Expander {
        chars: word.chars().collect(),
        pos: 0,
        escape,
        vars,
    };
    e.word(None)
}

struct Expander<'v> {
    chars: Vec<char>,
    pos: usize,
    escape: char,
    vars: &'v Vars,
}

impl Expander<'_> {
    fn next(&mut self) -> Option<char> {
        let c = self.chars.get(self.pos).copied();
        self.pos += usize::from(c.is_some());
        c
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    /// Up to `stop` (consumed) or the end.
    fn word(&mut self, stop: Option<char>) -> Result<String, String> {
        let mut out = String::new();
        while let Some(c) = self.next() {
            if Some(c) == stop {
                return Ok(out);
            }
            match c {
                '\'' => loop {
                    match self.next() {
                        Some('\'') => break,
                        Some(c) => out.push(c),
                        None => return Err("a ' quote is not closed".into()),
                    }
                },
                '"' => self.double_quoted(&mut out)?,
                '$' => out.push_str(&self.dollar()?),
                c if c == self.escape => out.extend(self.next()),
                c => out.push(c),
            }
        }
        match stop {
            Some(stop) => Err(format!("a ${{...}} is missing its closing '{stop}'")),
            None => Ok(out),
        }
    }

    fn double_quoted(&mut self, out: &mut String) -> Result<(), String> {
        loop {
            match self.next() {
                Some('"') => return Ok(()),
                Some('$') => out.push_str(&self.dollar()?),
                Some(c) if c == self.escape => match self.peek() {
                    // Inside double quotes only these are escaped.
                    Some(n) if n == '"' || n == '$' || n == self.escape => {
                        self.pos += 1;
                        out.push(n);
                    }
                    _ => out.push(c),
                },
                Some(c) => out.push(c),
                None => return Err("a \" quote is not closed".into()),
            }
        }
    }

    fn name(&mut self) -> String {
        let mut name = String::new();
        while let Some(c) = self
            .peek()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        {
            name.push(c);
            self.pos += 1;
        }
        name
    }

    /// After a `$`.
    fn dollar(&mut self) -> Result<String, String> {
        match self.peek() {
            Some('{') => {
                self.pos += 1;
                self.braced()
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let name = self.name();
                Ok(self.vars.get(&name)?.unwrap_or("").to_owned())
            }
            // A `$` before anything else is itself.
            _ => Ok("$".into()),
        }
    }

    /// After a `${`.
    fn braced(&mut self) -> Result<String, String> {
        let name = self.name();
        if name.is_empty() {
            return Err("'${' must be followed by a variable name".into());
        }
        let (colon, op) = match self.next() {
            Some('}') => return Ok(self.vars.get(&name)?.unwrap_or("").to_owned()),
            Some(':') => (true, self.next()),
            op => (false, op),
        };
        if op.is_none() {
            return Err("a ${...} is missing its closing '}'".into());
        }
        let Some(op @ ('-' | '+' | '?')) = op else {
            return Err(format!(
                "${{{name}...}}: only ${{VAR}}, ${{VAR:-default}}, ${{VAR:+alt}} and \
                 ${{VAR:?message}} (with or without the ':') are supported"
            ));
        };
        let arg = self.word(Some('}'))?;
        // With ':' an empty value counts as unset.
        let value = self.vars.get(&name)?.filter(|v| !(colon && v.is_empty()));
        match (op, value) {
            ('-', Some(v)) => Ok(v.to_owned()),
            ('-', None) => Ok(arg),
            ('+', Some(_)) => Ok(arg),
            ('+', None) => Ok(String::new()),
            (_, Some(v)) => Ok(v.to_owned()),
            (_, None) if arg.is_empty() => Err(format!("{name} is not set")),
            (_, None) => Err(format!("{name}: {arg}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ParsedDockerfile {
        parse_dockerfile(text).unwrap_or_else(|e| panic!("{text}\n{e:?}"))
    }

    fn kinds(text: &str) -> Vec<StepKind> {
        parse(text).steps.into_iter().map(|s| s.kind).collect()
    }

    /// The error of `text`, asserted to be on `dockerfile` at `line` and
    /// to say `fragment`.
    fn refused(text: &str, line: usize, fragment: &str) {
        let e = parse_dockerfile(text).expect_err(text);
        assert_eq!(e.field, "dockerfile", "{e:?}");
        let prefix = format!("line {line}: ");
        assert!(
            e.message.starts_with(&prefix),
            "{text}\nwanted '{prefix}', got: {}",
            e.message
        );
        assert!(
            e.message.contains(fragment),
            "{text}\nwanted '{fragment}' in: {}",
            e.message
        );
    }

    fn run(command: &str) -> StepKind {
        StepKind::Run {
            command: command.into(),
            user: None,
        }
    }

    fn copy(src: &str, dest: &str, user: Option<&str>, mode: Option<u32>) -> StepKind {
        StepKind::Copy {
            src: src.into(),
            dest: dest.into(),
            user: user.map(Into::into),
            mode,
            files_hash: String::new(),
        }
    }

    fn env(vars: &[(&str, &str)]) -> StepKind {
        StepKind::Env {
            vars: vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn arg(name: &str, value: Option<&str>) -> StepKind {
        StepKind::Arg {
            name: name.into(),
            value: value.map(Into::into),
        }
    }

    #[test]
    fn a_realistic_dockerfile() {
        let text = r#"# syntax=docker/dockerfile:1
ARG PY_VERSION=3.11
FROM python:${PY_VERSION}-slim AS base

LABEL org.opencontainers.image.source="https://example.com/app"
ARG APP_HOME=/srv/app
ARG PIP_INDEX
ENV PYTHONUNBUFFERED=1 \
    APP_NAME="my app" HOME_DIR=$APP_HOME
ENV LANG C.UTF-8
WORKDIR $APP_HOME
WORKDIR src
COPY --chown=app:app --chmod=0755 requirements.txt setup.py ./
COPY . .
RUN pip install --no-cache-dir -r requirements.txt && \
    # make the user that runs the app
    useradd --create-home app
RUN ["python", "-c", "print('hi there')"]
RUN <<EOF
set -e
echo "built $APP_NAME"
EOF
USER app:app
EXPOSE 8000
HEALTHCHECK CMD curl -f http://localhost:8000/ || exit 1
CMD ["python", "-m", "app", "--port", "8000"]
"#;
        let parsed = parse(text);
        assert_eq!(parsed.base, BuildBase::Image("python:3.11-slim".into()));
        assert_eq!(
            parsed.steps.iter().map(|s| s.kind.clone()).collect::<Vec<_>>(),
            vec![
                arg("APP_HOME", Some("/srv/app")),
                arg("PIP_INDEX", None),
                env(&[
                    ("PYTHONUNBUFFERED", "1"),
                    ("APP_NAME", "my app"),
                    ("HOME_DIR", "/srv/app"),
                ]),
                env(&[("LANG", "C.UTF-8")]),
                StepKind::Workdir {
                    path: "/srv/app".into()
                },
                StepKind::Workdir { path: "src".into() },
                copy("requirements.txt", "./", Some("app:app"), Some(0o755)),
                copy("setup.py", "./", Some("app:app"), Some(0o755)),
                copy(".", ".", None, None),
                run("pip install --no-cache-dir -r requirements.txt &&     useradd --create-home app"),
                run("python -c 'print('\\''hi there'\\'')'"),
                run("set -e\necho \"built $APP_NAME\"\n"),
                StepKind::User {
                    user: "app:app".into()
                },
            ]
        );
        assert!(parsed.steps.iter().all(|s| !s.force));
        assert_eq!(
            parsed.start_cmd.as_deref(),
            Some("python -m app --port 8000")
        );
    }

    #[test]
    fn start_commands_follow_docker() {
        let start = |tail: &str| parse(&format!("FROM alpine\n{tail}")).start_cmd;
        assert_eq!(start(""), None);
        assert_eq!(start("CMD python app.py"), Some("python app.py".into()));
        assert_eq!(
            start("CMD [\"echo\", \"a b\", \"it's\"]"),
            Some("echo 'a b' 'it'\\''s'".into())
        );
        assert_eq!(start("CMD []"), None);
        assert_eq!(
            start("ENTRYPOINT [\"tini\", \"--\"]\nCMD [\"python\", \"app.py\"]"),
            Some("tini -- python app.py".into())
        );
        // The order does not matter, and the last of each wins.
        assert_eq!(
            start("CMD [\"a\"]\nENTRYPOINT [\"x\"]\nCMD [\"b\"]\nENTRYPOINT [\"tini\"]"),
            Some("tini b".into())
        );
        // A shell-form CMD is the argument of /bin/sh -c after ENTRYPOINT.
        assert_eq!(
            start("ENTRYPOINT [\"tini\", \"--\"]\nCMD python app.py"),
            Some("tini -- /bin/sh -c 'python app.py'".into())
        );
        // A shell-form ENTRYPOINT ignores CMD.
        assert_eq!(
            start("ENTRYPOINT exec python app.py\nCMD [\"--debug\"]"),
            Some("exec python app.py".into())
        );
        assert_eq!(
            start("ENTRYPOINT [\"/entry.sh\"]"),
            Some("/entry.sh".into())
        );
        assert_eq!(
            start("CMD python \\\n    app.py"),
            Some("python     app.py".into())
        );
    }

    #[test]
    fn run_forms() {
        assert_eq!(
            kinds("FROM alpine\nRUN [\"echo\", \"\", \"$HOME\", \"a;b\"]"),
            vec![run("echo '' '$HOME' 'a;b'")]
        );
        // RUN is not substituted here: the shell does that.
        assert_eq!(
            kinds("FROM alpine\nENV A=1\nRUN echo $A ${B:-x}"),
            vec![env(&[("A", "1")]), run("echo $A ${B:-x}")]
        );
        // A here-document feeding a program.
        assert_eq!(
            kinds("FROM python\nRUN <<'EOF' python3\nprint(\"$HOME\")\nEOF\nRUN true"),
            vec![run("<<'EOF' python3\nprint(\"$HOME\")\nEOF"), run("true")]
        );
        // Tabs stripped with <<-.
        assert_eq!(
            kinds("FROM alpine\nRUN <<-EOF\n\techo a\n\tEOF\n"),
            vec![run("echo a\n")]
        );
        // Lowercase instructions are instructions.
        assert_eq!(kinds("from alpine\nrun ls"), vec![run("ls")]);
    }

    #[test]
    fn continuations_and_comments() {
        let text = "FROM alpine\n\
                    # a comment\n\
                    RUN apk add \\\n\
                    \x20   # a comment inside the command\n\
                    \n\
                    \x20   curl \\\n\
                    \x20   git\n\
                    COPY a \\\n\
                    \x20    b /dst/\n\
                    ENV A=1 \\\n\
                    # between variables\n\
                    \x20   B=2\n\
                    RUN echo done \\\n";
        assert_eq!(
            kinds(text),
            vec![
                run("apk add     curl     git"),
                copy("a", "/dst/", None, None),
                copy("b", "/dst/", None, None),
                env(&[("A", "1"), ("B", "2")]),
                run("echo done"),
            ]
        );
    }

    #[test]
    fn escape_directive_is_honoured() {
        let text = "# escape=`\nFROM alpine\nENV P=C:\\dir Q=a`$b\nRUN echo a `\n    b\n";
        assert_eq!(
            kinds(text),
            vec![env(&[("P", "C:\\dir"), ("Q", "a$b")]), run("echo a     b")]
        );
        assert_eq!(escape_directive("# syntax=x\n# escape=`\nFROM a"), '`');
        assert_eq!(escape_directive("# hello\n# escape=`\nFROM a"), '\\');
        assert_eq!(escape_directive("# escape=`\n# escape=`\nFROM a"), '\\');
    }

    #[test]
    fn substitution() {
        let text = r#"ARG TAG=3.12
ARG REG
FROM ${REG:-docker.io}/library/python:${TAG}
ARG TAG
ARG EMPTY=
ARG UNSET
ENV A=${EMPTY:-def} B=${EMPTY-def} C=${TAG:+alt} D=${UNSET+x} E=\$TAG F='$TAG' G="v $TAG \$ \x" H=${UNSET:-$TAG}
ENV A=new I=$A
ENV TAG=env
WORKDIR /opt/${TAG}
USER ${TAG}:staff
COPY --chown=$TAG --chmod=${MODE:-644} src/${TAG}/ /dst/
"#;
        let e = parse_dockerfile(text).unwrap_err();
        assert!(e.message.contains("$MODE is not set"), "{e:?}");

        let text = text.replace("${MODE:-644}", "644");
        let parsed = parse(&text);
        assert_eq!(
            parsed.base,
            BuildBase::Image("docker.io/library/python:3.12".into())
        );
        assert_eq!(
            parsed.steps.into_iter().map(|s| s.kind).collect::<Vec<_>>(),
            vec![
                // ARG without a value takes the global default.
                arg("TAG", Some("3.12")),
                arg("EMPTY", Some("")),
                arg("UNSET", None),
                env(&[
                    ("A", "def"),
                    ("B", ""),
                    ("C", "alt"),
                    ("D", ""),
                    ("E", "$TAG"),
                    ("F", "$TAG"),
                    ("G", "v 3.12 $ \\x"),
                    ("H", "3.12"),
                ]),
                // I sees A from before this ENV.
                env(&[("A", "new"), ("I", "def")]),
                env(&[("TAG", "env")]),
                // ENV wins over ARG.
                StepKind::Workdir {
                    path: "/opt/env".into()
                },
                StepKind::User {
                    user: "env:staff".into()
                },
                copy("src/env/", "/dst/", Some("env"), Some(0o644)),
            ]
        );
    }

    #[test]
    fn substitution_errors_name_the_line() {
        refused(
            "FROM python:${V}",
            1,
            "$V is not declared by an ARG before FROM",
        );
        refused(
            "FROM alpine\nENV PATH=/opt/bin:$PATH",
            2,
            "$PATH is not set by an earlier ARG or ENV",
        );
        // A global ARG is not seen after FROM unless declared again.
        refused(
            "ARG V=1\nFROM alpine\nWORKDIR /$V",
            3,
            "WORKDIR: $V is not set",
        );
        refused(
            "FROM alpine\nARG X\nENV A=\"${X:?needs X}\"",
            3,
            "X: needs X",
        );
        refused("FROM alpine\nARG X=\nENV A=${X:?}", 3, "X is not set");
        refused("FROM alpine\nARG X=1\nENV A=${X%1}", 3, "only ${VAR}");
        refused("FROM alpine\nARG X=1\nENV A=${X", 3, "missing its closing");
        refused("FROM alpine\nENV A=\"abc", 2, "quote is not closed");
        refused("FROM alpine\nENV A='abc", 2, "quote is not closed");
        refused("FROM alpine\nENV A", 2, "ENV A has no value");
        refused("FROM alpine\nENV A=1 B", 2, "'B' has no '='");
    }

    #[test]
    fn legacy_env_keeps_the_rest_of_the_line() {
        assert_eq!(
            kinds("FROM alpine\nENV GREETING hello   \"big world\""),
            vec![env(&[("GREETING", "hello   big world")])]
        );
        // An escaped space joins a word, as in Docker.
        assert_eq!(
            kinds("FROM alpine\nENV A=hello\\ world B=x"),
            vec![env(&[("A", "hello world"), ("B", "x")])]
        );
    }

    #[test]
    fn copy_sources_stay_in_the_context() {
        assert_eq!(
            kinds("FROM alpine\nCOPY /etc/app.conf ./a/../b / /app/"),
            vec![
                copy("etc/app.conf", "/app/", None, None),
                copy("./a/../b", "/app/", None, None),
                copy(".", "/app/", None, None),
            ]
        );
        // The JSON form keeps spaces in a path.
        assert_eq!(
            kinds("FROM alpine\nARG D=/dst\nCOPY [\"my file\", \"${D}/\"]"),
            vec![arg("D", Some("/dst")), copy("my file", "/dst/", None, None)]
        );
        assert_eq!(
            kinds("FROM alpine\nADD notes.txt /n.txt"),
            vec![copy("notes.txt", "/n.txt", None, None)]
        );
        refused(
            "FROM alpine\nCOPY ../secret /x",
            2,
            "leaves the build context",
        );
        refused(
            "FROM alpine\n\nCOPY a/../../b /x",
            3,
            "leaves the build context",
        );
        refused(
            "FROM alpine\nCOPY /../etc /x",
            2,
            "leaves the build context",
        );
    }

    #[test]
    fn refusals_name_their_line() {
        let cases: &[(&str, usize, &str)] = &[
            (
                "FROM scratch\nCOPY app /app",
                1,
                "FROM scratch is not supported",
            ),
            (
                "FROM golang AS build\nRUN go build\n\nFROM alpine\nCOPY --from=build /app /app",
                4,
                "a second FROM: multi-stage builds are not supported",
            ),
            (
                "FROM --platform=linux/amd64 alpine",
                1,
                "FROM --platform is not supported",
            ),
            (
                "FROM alpine\nRUN --mount=type=cache,target=/root/.cache pip install x",
                2,
                "RUN --mount",
            ),
            ("FROM alpine\nRUN --network=none true", 2, "RUN --network"),
            (
                "FROM alpine\nRUN --security=insecure true",
                2,
                "RUN --security",
            ),
            (
                "FROM alpine\n\n\nCOPY --from=builder /app /app",
                4,
                "COPY --from=builder: multi-stage builds are not supported; build the first \
                 stage as its own template and start from it with fromTemplate",
            ),
            ("FROM alpine\nCOPY --link a /a", 2, "COPY --link"),
            ("FROM alpine\nCOPY --parents a/b /a/", 2, "COPY --parents"),
            (
                "FROM alpine\nADD --checksum=sha256:00 a /a",
                2,
                "ADD --checksum",
            ),
            ("FROM alpine\nCOPY --chmod=u+x a /a", 2, "octal"),
            ("FROM alpine\nCOPY --chmod=17777 a /a", 2, "octal"),
            ("FROM alpine\nCOPY --chown a /a", 2, "needs a value"),
            (
                "FROM alpine\nADD https://example.com/x.tgz /x",
                2,
                "sources from URLs are not supported",
            ),
            (
                "FROM alpine\nADD git@github.com:a/b.git /b",
                2,
                "sources from URLs",
            ),
            ("FROM alpine\nCOPY http://example.com/x /x", 2, "URLs"),
            (
                "FROM alpine\nADD vendor.tar.gz /opt/",
                2,
                "auto-extraction isn't honoured here; use COPY and RUN tar",
            ),
            ("FROM alpine\nADD rootfs.tar /", 2, "auto-extraction"),
            (
                "FROM alpine\nADD a.tgz b.tar.bz2 c.tar.xz /x/",
                2,
                "ADD a.tgz",
            ),
            (
                "FROM alpine\nCOPY <<EOF /etc/motd\nhello\nEOF",
                2,
                "here-documents are not supported",
            ),
            (
                "FROM alpine\nCOPY a b /dest",
                2,
                "needs a destination directory ending in /",
            ),
            (
                "FROM alpine\nSHELL [\"/bin/bash\", \"-c\"]",
                2,
                "SHELL is not supported",
            ),
            ("FROM alpine\nONBUILD RUN ls", 2, "ONBUILD is not supported"),
            ("FROM alpine\nFROBNICATE now", 2, "unknown instruction"),
            ("# only a comment\n", 1, "no FROM instruction"),
            ("", 1, "no FROM instruction"),
            ("ARG A=1\n", 1, "no FROM instruction"),
            ("ARG A=1\nRUN ls\nFROM alpine", 2, "expected FROM"),
            (
                "FROM alpine\nUSER root;rm",
                2,
                "USER user: 'root;rm' is not a user",
            ),
            ("FROM alpine\nENV 1X=y", 2, "ENV 1X:"),
            (
                "FROM alpine\nWORKDIR \"\"",
                2,
                "WORKDIR path: must be a path",
            ),
            ("FROM alpine\nCMD", 2, "CMD needs a command"),
            (
                "FROM python\nRUN python3 <<EOF\nprint(1)\nEOF",
                2,
                "only supported at the start",
            ),
            (
                "FROM alpine\nRUN <<EOF1 <<EOF2\na\nEOF1\nb\nEOF2",
                2,
                "only one here-document",
            ),
            (
                "FROM python\nRUN <<EOF\n#!/usr/bin/env python3\nprint(1)\nEOF",
                2,
                "#!",
            ),
            (
                "FROM alpine\nRUN <<EOF\nEOF",
                2,
                "RUN command: must not be empty",
            ),
        ];
        for (text, line, fragment) in cases {
            refused(text, *line, fragment);
        }
    }

    #[test]
    fn heredoc_words_are_spotted_like_docker() {
        for yes in ["cat <<EOF", "<<EOF", "cat <<-'EOF' > f", "cat 2<<\"X\""] {
            assert!(has_heredoc(yes, '\\'), "{yes}");
        }
        for no in [
            "echo '<<EOF'",
            "echo \"<<EOF\"",
            "echo $((1<<3))",
            "echo $((a<<b))",
            "cat <<<word",
            "echo \\<<EOF",
            "echo << EOF",
        ] {
            assert!(!has_heredoc(no, '\\'), "{no}");
        }
    }

    #[test]
    fn too_many_steps() {
        let mut text = String::from("FROM alpine\n");
        for i in 0..MAX_STEPS {
            text.push_str(&format!("RUN echo {i}\n"));
        }
        assert_eq!(parse(&text).steps.len(), MAX_STEPS);
        text.push_str("RUN echo last\n");
        refused(
            &text,
            MAX_STEPS + 2,
            &format!("more than {MAX_STEPS} steps"),
        );
    }

    #[test]
    fn ignored_instructions_make_no_steps() {
        let text = "FROM alpine\n\
                    MAINTAINER someone\n\
                    LABEL a=b\n\
                    EXPOSE 80/tcp 443\n\
                    STOPSIGNAL SIGTERM\n\
                    HEALTHCHECK NONE\n\
                    VOLUME [\"/data\"]\n\
                    VOLUME /cache\n";
        assert_eq!(parse(text).steps, Vec::new());
    }

    #[test]
    fn a_byte_order_mark_and_crlf_are_read_through() {
        let text = "\u{feff}FROM alpine\r\nRUN echo a \\\r\n  b\r\nWORKDIR /x\r\n";
        assert_eq!(
            kinds(text),
            vec![run("echo a   b"), StepKind::Workdir { path: "/x".into() }]
        );
        refused("\u{feff}FROM alpine\r\nSHELL [\"sh\"]\r\n", 2, "SHELL");
    }
}
