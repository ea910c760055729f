//! Command-line and environment configuration of the agent binary.

use std::net::SocketAddr;
use std::path::PathBuf;

/// envd's port.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:49983";
/// Where Stockade writes the main process's environment.
pub const DEFAULT_MAIN_ENV: &str = "/.stockade/main.env";
/// The variable holding the access token (removed from every child).
pub const TOKEN_ENV: &str = "STOCKADE_AGENT_TOKEN";
/// The variable holding the listen address.
pub const LISTEN_ENV: &str = "STOCKADE_AGENT_LISTEN";
/// The default user of requests when `--user` is not given (a template's
/// `USER`); removed from every child, like the token.
pub const USER_ENV: &str = "STOCKADE_AGENT_USER";
/// The default working directory of requests when `--workdir` is not given
/// (a template's `WORKDIR`); removed from every child.
pub const WORKDIR_ENV: &str = "STOCKADE_AGENT_WORKDIR";
/// The variable naming the directory of a shared volume, set in a volume
/// helper container: the agent then serves the volume's files under
/// `/volume/`.
pub const VOLUME_ROOT_ENV: &str = "STOCKADE_AGENT_VOLUME_ROOT";

pub const USAGE: &str =
    "usage: stockade-agent [--listen ADDR|none] [--unix PATH] [--token-file PATH] \
[--insecure-no-token] [--main-env PATH] [--user NAME] [--workdir DIR] [-- MAIN ARGV...]";

/// The agent's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// TCP address to listen on (`None`: no TCP listener).
    pub listen: Option<SocketAddr>,
    /// Unix socket to listen on.
    pub unix: Option<PathBuf>,
    /// The access token (`None` only with `--insecure-no-token`).
    pub token: Option<String>,
    /// The env file applied to the main process.
    pub main_env: PathBuf,
    /// Default user of requests.
    pub user: Option<String>,
    /// Default working directory of requests.
    pub workdir: Option<String>,
    /// The main process (empty: the agent runs alone).
    pub main: Vec<String>,
    /// The shared volume's directory served under `/volume/`, if any.
    pub volume_root: Option<PathBuf>,
}

/// A configuration error, naming the flag or variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn parse_listen(value: &str, source: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if value == "none" {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| {
        ConfigError(format!(
            "{source}: {value:?} is not an IP:PORT address (names are not resolved)"
        ))
    })
}

impl Config {
    /// Reads the arguments (without the program name) and the environment.
    pub fn parse(
        args: impl IntoIterator<Item = String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut args = args.into_iter();
        let mut listen = None;
        let mut unix = None;
        let mut token_file = None;
        let mut insecure = false;
        let mut main_env = PathBuf::from(DEFAULT_MAIN_ENV);
        let mut user = None;
        let mut workdir = None;
        let mut main = Vec::new();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
                _ => (arg.clone(), None),
            };
            let mut value = |name: &str| -> Result<String, ConfigError> {
                match inline.clone().or_else(|| args.next()) {
                    Some(v) if !v.is_empty() => Ok(v),
                    _ => Err(ConfigError(format!("{name} needs a value"))),
                }
            };
            match flag.as_str() {
                "--" => {
                    main = args.by_ref().collect();
                    break;
                }
                "--listen" => listen = Some(parse_listen(&value("--listen")?, "--listen")?),
                "--unix" => unix = Some(PathBuf::from(value("--unix")?)),
                "--token-file" => token_file = Some(PathBuf::from(value("--token-file")?)),
                "--insecure-no-token" => insecure = true,
                "--main-env" => main_env = PathBuf::from(value("--main-env")?),
                "--user" => user = Some(value("--user")?),
                "--workdir" => {
                    let w = value("--workdir")?;
                    if !w.starts_with('/') {
                        return Err(ConfigError("--workdir must be an absolute path".into()));
                    }
                    workdir = Some(w);
                }
                "-h" | "--help" => return Err(ConfigError(USAGE.into())),
                other => return Err(ConfigError(format!("unknown argument {other:?}\n{USAGE}"))),
            }
        }
        let listen = match listen {
            Some(l) => l,
            None => match env(LISTEN_ENV) {
                Some(v) if !v.is_empty() => parse_listen(&v, LISTEN_ENV)?,
                _ => Some(DEFAULT_LISTEN.parse().expect("valid default")),
            },
        };
        if listen.is_none() && unix.is_none() {
            return Err(ConfigError(
                "nothing to listen on: give --listen ADDR or --unix PATH".into(),
            ));
        }
        let token = match token_file {
            Some(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| ConfigError(format!("--token-file {}: {e}", path.display())))?;
                Some(text.trim().to_owned())
            }
            None => env(TOKEN_ENV),
        }
        .filter(|t| !t.is_empty());
        if token.is_none() && !insecure {
            return Err(ConfigError(format!(
                "no access token: set {TOKEN_ENV} or --token-file (or --insecure-no-token for local tests)"
            )));
        }
        let user = user.or_else(|| env(USER_ENV).filter(|u| !u.is_empty()));
        let workdir = match workdir {
            Some(w) => Some(w),
            None => match env(WORKDIR_ENV) {
                Some(w) if w.starts_with('/') => Some(w),
                Some(w) if !w.is_empty() => {
                    return Err(ConfigError(format!(
                        "{WORKDIR_ENV}: {w:?} must be an absolute path"
                    )))
                }
                _ => None,
            },
        };
        let volume_root = match env(VOLUME_ROOT_ENV) {
            Some(v) if v.starts_with('/') => Some(PathBuf::from(v)),
            Some(v) if !v.is_empty() => {
                return Err(ConfigError(format!(
                    "{VOLUME_ROOT_ENV}: {v:?} must be an absolute directory, e.g. /volume"
                )))
            }
            _ => None,
        };
        Ok(Config {
            listen,
            unix,
            token,
            main_env,
            user,
            workdir,
            main,
            volume_root,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::parse(args.iter().map(|s| s.to_string()), |k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn defaults_and_main_argv() {
        let c = parse(&["--", "sleep", "--", "5"], &[(TOKEN_ENV, "t")]).unwrap();
        assert_eq!(c.listen, Some("0.0.0.0:49983".parse().unwrap()));
        assert_eq!(c.token.as_deref(), Some("t"));
        assert_eq!(c.main, ["sleep", "--", "5"]);
        assert_eq!(c.main_env, PathBuf::from(DEFAULT_MAIN_ENV));
        let c = parse(&["--listen=127.0.0.1:1", "--insecure-no-token"], &[]).unwrap();
        assert_eq!(c.listen, Some("127.0.0.1:1".parse().unwrap()));
        assert_eq!(c.token, None);
        let c = parse(&["--insecure-no-token"], &[(LISTEN_ENV, "[::1]:7")]).unwrap();
        assert_eq!(c.listen, Some("[::1]:7".parse().unwrap()));
        assert_eq!(c.volume_root, None);
        let c = parse(
            &["--insecure-no-token"],
            &[(USER_ENV, "node"), (WORKDIR_ENV, "/app")],
        )
        .unwrap();
        assert_eq!(
            (c.user.as_deref(), c.workdir.as_deref()),
            (Some("node"), Some("/app"))
        );
        let c = parse(
            &["--insecure-no-token", "--user", "root"],
            &[(USER_ENV, "node")],
        )
        .unwrap();
        assert_eq!(c.user.as_deref(), Some("root"));
        assert!(parse(&["--insecure-no-token"], &[(WORKDIR_ENV, "app")])
            .unwrap_err()
            .0
            .contains(WORKDIR_ENV));
        let c = parse(&["--insecure-no-token"], &[(VOLUME_ROOT_ENV, "/volume")]).unwrap();
        assert_eq!(c.volume_root, Some(PathBuf::from("/volume")));
    }

    #[test]
    fn bad_input_names_the_field() {
        assert!(parse(&[], &[]).unwrap_err().0.contains(TOKEN_ENV));
        assert!(parse(&["--listen", "localhost:1"], &[(TOKEN_ENV, "t")])
            .unwrap_err()
            .0
            .contains("--listen"));
        assert!(parse(&["--insecure-no-token"], &[(LISTEN_ENV, "x")])
            .unwrap_err()
            .0
            .contains(LISTEN_ENV));
        assert!(parse(&["--listen", "none", "--insecure-no-token"], &[])
            .unwrap_err()
            .0
            .contains("nothing to listen on"));
        assert!(parse(&["--bogus"], &[]).unwrap_err().0.contains("--bogus"));
        assert!(
            parse(&["--insecure-no-token"], &[(VOLUME_ROOT_ENV, "volume")])
                .unwrap_err()
                .0
                .contains(VOLUME_ROOT_ENV)
        );
        assert!(parse(&["--unix"], &[]).unwrap_err().0.contains("--unix"));
        assert!(parse(&["--workdir", "rel", "--insecure-no-token"], &[])
            .unwrap_err()
            .0
            .contains("--workdir"));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tok");
        std::fs::write(&f, "secret\n").unwrap();
        let c = parse(&["--token-file", f.to_str().unwrap()], &[]).unwrap();
        assert_eq!(c.token.as_deref(), Some("secret"));
    }
}
