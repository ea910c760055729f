//! Users and groups read from `/etc/passwd` and `/etc/group` directly: no
//! NSS, so the static binary behaves the same in every image.

use std::path::Path;

/// A user the agent can run processes as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

/// The account databases of the sandbox.
#[derive(Clone, Debug)]
pub struct Accounts {
    passwd: std::path::PathBuf,
    group: std::path::PathBuf,
}

impl Default for Accounts {
    fn default() -> Self {
        Self::at(Path::new("/etc"))
    }
}

fn parse_passwd_line(line: &str) -> Option<User> {
    let f: Vec<&str> = line.split(':').collect();
    if f.len() < 7 || f[0].is_empty() || f[0].starts_with('#') {
        return None;
    }
    Some(User {
        name: f[0].to_owned(),
        uid: f[2].parse().ok()?,
        gid: f[3].parse().ok()?,
        home: if f[5].is_empty() { "/" } else { f[5] }.to_owned(),
    })
}

impl Accounts {
    /// The databases under a directory (`/etc` in a sandbox).
    pub fn at(dir: &Path) -> Self {
        Self {
            passwd: dir.join("passwd"),
            group: dir.join("group"),
        }
    }

    fn users(&self) -> Vec<User> {
        std::fs::read_to_string(&self.passwd)
            .map(|t| t.lines().filter_map(parse_passwd_line).collect())
            .unwrap_or_default()
    }

    /// A user by name (or by a numeric uid, as `"1000"`).
    pub fn user_by_name(&self, name: &str) -> Option<User> {
        let users = self.users();
        if let Some(u) = users.iter().find(|u| u.name == name) {
            return Some(u.clone());
        }
        let uid: u32 = name.parse().ok()?;
        Some(self.user_by_uid(uid))
    }

    /// The user with a uid; a nameless uid gets its number as name and `/`
    /// as home.
    pub fn user_by_uid(&self, uid: u32) -> User {
        self.users()
            .into_iter()
            .find(|u| u.uid == uid)
            .unwrap_or_else(|| User {
                name: uid.to_string(),
                uid,
                gid: uid,
                home: "/".into(),
            })
    }

    /// The name of a uid, or the number.
    pub fn user_name(&self, uid: u32) -> String {
        self.users()
            .into_iter()
            .find(|u| u.uid == uid)
            .map(|u| u.name)
            .unwrap_or_else(|| uid.to_string())
    }

    /// The name of a gid, or the number.
    pub fn group_name(&self, gid: u32) -> String {
        std::fs::read_to_string(&self.group)
            .ok()
            .and_then(|t| {
                t.lines().find_map(|line| {
                    let f: Vec<&str> = line.split(':').collect();
                    (f.len() >= 3 && f[2].parse() == Ok(gid)).then(|| f[0].to_owned())
                })
            })
            .unwrap_or_else(|| gid.to_string())
    }
}

/// Names of owners and groups, with the databases read once for a listing.
pub struct NameCache {
    users: Vec<User>,
    groups: Vec<(String, u32)>,
}

impl NameCache {
    pub fn load(accounts: &Accounts) -> Self {
        let groups = std::fs::read_to_string(&accounts.group)
            .map(|t| {
                t.lines()
                    .filter_map(|line| {
                        let f: Vec<&str> = line.split(':').collect();
                        Some((f.first()?.to_string(), f.get(2)?.parse().ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            users: accounts.users(),
            groups,
        }
    }

    pub fn user(&self, uid: u32) -> String {
        self.users
            .iter()
            .find(|u| u.uid == uid)
            .map(|u| u.name.clone())
            .unwrap_or_else(|| uid.to_string())
    }

    pub fn group(&self, gid: u32) -> String {
        self.groups
            .iter()
            .find(|(_, g)| *g == gid)
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| gid.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_passwd_and_group() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("passwd"),
            "root:x:0:0:root:/root:/bin/sh\n# comment\nbroken\nuser:x:1000:1001::/home/user:/bin/sh\nnohome:x:5:5:::\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("group"), "root:x:0:\nstaff:x:1001:user\n").unwrap();
        let acc = Accounts::at(dir.path());
        let user = acc.user_by_name("user").unwrap();
        assert_eq!(
            (user.uid, user.gid, user.home.as_str()),
            (1000, 1001, "/home/user")
        );
        assert_eq!(acc.user_by_name("nohome").unwrap().home, "/");
        assert_eq!(acc.user_by_name("1000").unwrap().name, "user");
        assert_eq!(acc.user_by_name("4242").unwrap().name, "4242");
        assert!(acc.user_by_name("ghost").is_none());
        assert_eq!(acc.group_name(1001), "staff");
        assert_eq!(acc.group_name(7), "7");
        assert_eq!(acc.user_name(0), "root");
        let cache = NameCache::load(&acc);
        assert_eq!(
            (cache.user(1000), cache.group(0)),
            ("user".into(), "root".into())
        );
    }
}
