//! A `COPY` step's files: the entries of the step's context archive that
//! its source names, laid out where its destination puts them, as Docker's
//! `COPY` does — a file to `dest/` keeps its name (or becomes `dest` when
//! that is not a directory), a directory's contents go into `dest`, a
//! source with wildcards copies every match. The result is a tar whose
//! entries are relative to `/`, for the engine to unpack there.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};

/// What a copy wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Every path it wrote, absolute.
    pub paths: Vec<String>,
    /// The bytes of its files.
    pub bytes: u64,
}

/// How one `COPY` lands.
pub struct CopySpec<'a> {
    /// The source, relative to the context's root (wildcards allowed).
    pub src: &'a str,
    /// The destination, absolute.
    pub dest: &'a str,
    /// Whether `dest` is a directory (it ends with `/`, or the sandbox has
    /// a directory there).
    pub dest_is_dir: bool,
    /// The mode of every copied file and directory, when given.
    pub mode: Option<u32>,
    /// The most bytes the files may hold together.
    pub limit: u64,
}

/// A path inside the archive, normalised: no leading `./` or `/`, no
/// trailing `/`; `None` for one that leaves the archive's root.
fn normalise(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

fn has_wildcards(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Where an entry at `path` of the archive lands, given the roots the
/// source matched (`root` → whether it is a directory); `None` when the
/// source does not take it.
fn target(
    path: &str,
    roots: &HashMap<String, bool>,
    spec: &CopySpec<'_>,
    single_file: bool,
) -> Option<String> {
    let dest = spec.dest.trim_end_matches('/');
    let join = |rel: &str| -> String {
        match (dest.is_empty(), rel.is_empty()) {
            (true, true) => "/".to_owned(),
            (true, false) => format!("/{rel}"),
            (false, true) => dest.to_owned(),
            (false, false) => format!("{dest}/{rel}"),
        }
    };
    // The deepest root that holds it.
    let (root, is_dir) = roots
        .iter()
        .filter(|(root, _)| {
            root.is_empty() || path == root.as_str() || path.starts_with(&format!("{root}/"))
        })
        .max_by_key(|(root, _)| root.len())?;
    if *is_dir {
        // A directory's contents, not the directory itself.
        let rel = if root.is_empty() {
            path
        } else {
            path.strip_prefix(root.as_str())?.trim_start_matches('/')
        };
        return Some(join(rel));
    }
    if single_file && !spec.dest_is_dir {
        return Some(join(""));
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    Some(join(name))
}

/// Reads the tar (plain or gzip) `archive` and writes to `out` the entries
/// `spec` selects, renamed, owned by root (the caller changes the owner
/// after), with `spec.mode` when given. An error says why in words.
pub fn copy(archive: impl Read, spec: &CopySpec<'_>, out: impl Write) -> Result<Copied, String> {
    let src =
        normalise(spec.src).ok_or_else(|| format!("'{}' leaves the build context", spec.src))?;
    // Two passes over the archive: the first finds what the source
    // names (its roots and their kinds), the second copies.
    let entries = list(archive)?;
    let pattern = if has_wildcards(&src) {
        Some(
            globset::GlobBuilder::new(&src)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("'{}' is not a valid pattern: {e}", spec.src))?
                .compile_matcher(),
        )
    } else {
        None
    };
    let mut roots: HashMap<String, bool> = HashMap::new();
    for (path, is_dir) in &entries.index {
        let matched = match &pattern {
            Some(p) => p.is_match(path),
            None => *path == src,
        };
        if matched {
            roots.insert(path.clone(), *is_dir);
        }
        // An entry below the source makes the source a directory, even
        // when the archive has no entry of its own for it.
        if pattern.is_none() && (src.is_empty() || path.starts_with(&format!("{src}/"))) {
            roots.insert(src.clone(), true);
        }
    }
    if roots.is_empty() {
        return Err(format!(
            "no file of the build context matches '{}'",
            spec.src
        ));
    }
    let single_file = pattern.is_none() && roots.len() == 1 && roots.values().all(|d| !d);
    if !single_file && !spec.dest_is_dir && roots.len() > 1 {
        return Err(format!(
            "'{}' names several files: the destination '{}' must be a directory (end it with /)",
            spec.src, spec.dest
        ));
    }
    let mut builder = tar::Builder::new(out);
    let mut copied = Copied::default();
    // Old path → new path, for hard links within what is copied.
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut archive = tar::Archive::new(open(entries.file)?);
    for entry in archive.entries().map_err(|e| unreadable(&e))? {
        let mut entry = entry.map_err(|e| unreadable(&e))?;
        let (raw, Some(path)) = entry_path(&entry)? else {
            continue;
        };
        let Some(to) = target(&path, &roots, spec, single_file) else {
            continue;
        };
        let kind = entry.header().entry_type();
        let mut header = entry.header().clone();
        header.set_uid(0);
        header.set_gid(0);
        if let Some(mode) = spec.mode {
            header.set_mode(mode);
        }
        let name = to.trim_start_matches('/').to_owned();
        if name.is_empty() {
            // The destination `/` itself: nothing to write.
            continue;
        }
        if kind.is_hard_link() {
            let link = entry
                .link_name()
                .map_err(|e| unreadable(&e))?
                .map(|l| l.to_string_lossy().into_owned())
                .and_then(|l| normalise(&l))
                .and_then(|l| renamed.get(&l).cloned())
                .ok_or_else(|| {
                    format!("'{raw}' is a hard link to a file the copy does not take")
                })?;
            builder
                .append_link(&mut header, &name, link.trim_start_matches('/'))
                .map_err(|e| written(&e))?;
        } else if kind.is_symlink() {
            let link = entry
                .link_name()
                .map_err(|e| unreadable(&e))?
                .map(|l| l.into_owned())
                .unwrap_or_default();
            builder
                .append_link(&mut header, &name, link)
                .map_err(|e| written(&e))?;
        } else if kind.is_file() || kind.is_dir() {
            copied.bytes = copied.bytes.saturating_add(header.size().unwrap_or(0));
            if copied.bytes > spec.limit {
                return Err(format!(
                    "the files of '{}' hold more than the unpack ceiling of {} bytes",
                    spec.src, spec.limit
                ));
            }
            builder
                .append_data(&mut header, &name, &mut entry)
                .map_err(|e| written(&e))?;
        } else {
            // Devices and fifos are not files a context carries.
            continue;
        }
        renamed.insert(path, to.clone());
        copied.paths.push(to);
    }
    builder.finish().map_err(|e| written(&e))?;
    Ok(copied)
}

struct Listed<R> {
    /// Each entry's path and whether it is a directory.
    index: Vec<(String, bool)>,
    file: R,
}

/// Lists the entries of `archive` and hands back a reader of it from the
/// start (the archive is kept in memory or in the caller's file).
fn list<R: Read>(mut archive: R) -> Result<Listed<io::Cursor<Vec<u8>>>, String> {
    let mut bytes = Vec::new();
    archive
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(&e))?;
    let mut index = Vec::new();
    {
        let mut tar = tar::Archive::new(open(&bytes[..])?);
        for entry in tar.entries().map_err(|e| unreadable(&e))? {
            let entry = entry.map_err(|e| unreadable(&e))?;
            let (raw, path) = entry_path(&entry)?;
            let Some(path) = path else {
                return Err(format!("the build context's entry '{raw}' leaves its root"));
            };
            let is_dir = entry.header().entry_type().is_dir();
            index.push((path, is_dir));
        }
    }
    Ok(Listed {
        index,
        file: io::Cursor::new(bytes),
    })
}

/// An entry's path as written, and normalised (`None`: it leaves the
/// archive's root).
fn entry_path<R: Read>(entry: &tar::Entry<'_, R>) -> Result<(String, Option<String>), String> {
    let raw = entry
        .path()
        .map_err(|e| unreadable(&e))?
        .to_string_lossy()
        .into_owned();
    let path = normalise(&raw);
    Ok((raw, path))
}

/// A reader of the tar in `archive`, unzipped when it is gzip.
fn open<'a, R: Read + 'a>(archive: R) -> Result<Box<dyn Read + 'a>, String> {
    let mut reader = BufReader::new(archive);
    let gzip = reader
        .fill_buf()
        .map_err(|e| unreadable(&e))?
        .starts_with(&[0x1f, 0x8b]);
    Ok(if gzip {
        Box::new(flate2::read::GzDecoder::new(reader))
    } else {
        Box::new(reader)
    })
}

fn unreadable(e: &io::Error) -> String {
    format!("the build context is not a readable tar archive: {e}")
}

fn written(e: &io::Error) -> String {
    format!("could not lay out the copied files: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context archive of `files` (a path ending in `/` is a directory).
    fn context(files: &[&str], gzip: bool) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for f in files {
            let mut h = tar::Header::new_gnu();
            if let Some(dir) = f.strip_suffix('/') {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                h.set_mode(0o755);
                b.append_data(&mut h, dir, io::empty()).unwrap();
            } else {
                let body = format!("content of {f}");
                h.set_size(body.len() as u64);
                h.set_mode(0o644);
                h.set_uid(1000);
                b.append_data(&mut h, f, body.as_bytes()).unwrap();
            }
        }
        let bytes = b.into_inner().unwrap();
        if !gzip {
            return bytes;
        }
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&bytes).unwrap();
        z.finish().unwrap()
    }

    fn run(
        files: &[&str],
        src: &str,
        dest: &str,
        dest_is_dir: bool,
    ) -> Result<Vec<String>, String> {
        let spec = CopySpec {
            src,
            dest,
            dest_is_dir,
            mode: Some(0o600),
            limit: 1 << 20,
        };
        let mut out = Vec::new();
        let copied = copy(io::Cursor::new(context(files, true)), &spec, &mut out)?;
        // What the engine would unpack: the same names, owned by root.
        let mut tar = tar::Archive::new(io::Cursor::new(out));
        for e in tar.entries().unwrap() {
            let e = e.unwrap();
            assert_eq!(e.header().uid().unwrap(), 0);
            assert_eq!(e.header().mode().unwrap(), 0o600);
        }
        Ok(copied.paths)
    }

    #[test]
    fn copies_land_where_docker_puts_them() {
        let files = [
            "app/",
            "app/main.py",
            "app/lib/x.py",
            "README.md",
            "a.txt",
            "b.txt",
        ];
        assert_eq!(
            run(&files, "README.md", "/srv/", true).unwrap(),
            ["/srv/README.md"]
        );
        assert_eq!(
            run(&files, "README.md", "/srv/readme", false).unwrap(),
            ["/srv/readme"]
        );
        assert_eq!(
            run(&files, "app", "/opt/app", false).unwrap(),
            ["/opt/app", "/opt/app/main.py", "/opt/app/lib/x.py"]
        );
        assert_eq!(run(&files, "./app/lib", "/l", true).unwrap(), ["/l/x.py"]);
        assert_eq!(
            run(&files, "*.txt", "/t/", true).unwrap(),
            ["/t/a.txt", "/t/b.txt"]
        );
        assert_eq!(run(&files, ".", "/all", true).unwrap().len(), 6);
    }

    #[test]
    fn what_cannot_be_copied_is_said() {
        let files = ["a.txt", "b.txt"];
        assert!(run(&files, "missing", "/x", false)
            .unwrap_err()
            .contains("matches"));
        assert!(run(&files, "*.txt", "/x", false)
            .unwrap_err()
            .contains("directory"));
        assert!(run(&files, "../etc", "/x", true)
            .unwrap_err()
            .contains("leaves"));
        let spec = CopySpec {
            src: ".",
            dest: "/x",
            dest_is_dir: true,
            mode: None,
            limit: 3,
        };
        let e = copy(io::Cursor::new(context(&files, false)), &spec, Vec::new()).unwrap_err();
        assert!(e.contains("unpack ceiling"), "{e}");
    }
}
