//! What a connection is for, from its first bytes: the server name of a TLS
//! ClientHello (SNI) or the `Host` of an HTTP/1.x request.

/// What the first bytes of a connection say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// The bytes so far are the start of a ClientHello or a request; more
    /// are needed.
    NeedMore,
    /// A TLS ClientHello, with its server name when it has one.
    Tls(Option<String>),
    /// An HTTP/1.x request, with its host when it has exactly one (an
    /// absolute-form target must agree with `Host`).
    Http(Option<String>),
    /// Neither TLS nor HTTP/1.x.
    Other,
}

impl Sniffed {
    /// The server name, lower case, without a port or a trailing dot;
    /// `None` for an address literal.
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Tls(name) | Self::Http(name) => name.as_deref(),
            _ => None,
        }
    }

    /// The same answer when no more bytes will come: a start that never
    /// completed has no name.
    pub fn finish(self, buf: &[u8]) -> Self {
        match self {
            Self::NeedMore if looks_like_tls(buf) => Self::Tls(None),
            Self::NeedMore if !buf.is_empty() => Self::Http(None),
            Self::NeedMore => Self::Other,
            done => done,
        }
    }
}

/// Reads `buf`, the first bytes a client sent.
pub fn sniff(buf: &[u8]) -> Sniffed {
    if buf.is_empty() {
        return Sniffed::NeedMore;
    }
    if looks_like_tls(buf) {
        return sniff_tls(buf);
    }
    sniff_http(buf)
}

/// A handshake record (22) of TLS 1.x (major version 3).
fn looks_like_tls(buf: &[u8]) -> bool {
    buf.first() == Some(&0x16) && buf.get(1).is_none_or(|&major| major == 3)
}

const RECORD_HEADER: usize = 5;
const HANDSHAKE_HEADER: usize = 4;
const CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const HOST_NAME: u8 = 0;

/// Gathers the handshake bytes of the leading handshake records (a
/// ClientHello may span several) and reads the ClientHello's SNI.
fn sniff_tls(buf: &[u8]) -> Sniffed {
    let mut handshake = Vec::new();
    let mut rest = buf;
    loop {
        if rest.len() < RECORD_HEADER {
            return Sniffed::NeedMore;
        }
        if rest[0] != 0x16 {
            // Another record type before the ClientHello was complete.
            return Sniffed::Tls(None);
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 || len > (1 << 14) {
            return Sniffed::Tls(None);
        }
        let Some(fragment) = rest.get(RECORD_HEADER..RECORD_HEADER + len) else {
            return Sniffed::NeedMore;
        };
        handshake.extend_from_slice(fragment);
        rest = &rest[RECORD_HEADER + len..];
        if handshake.len() < HANDSHAKE_HEADER {
            continue;
        }
        if handshake[0] != CLIENT_HELLO {
            return Sniffed::Tls(None);
        }
        let body_len = u32::from_be_bytes([0, handshake[1], handshake[2], handshake[3]]) as usize;
        if let Some(body) = handshake.get(HANDSHAKE_HEADER..HANDSHAKE_HEADER + body_len) {
            return Sniffed::Tls(client_hello_sni(body));
        }
    }
}

/// A cursor over a ClientHello that fails (returns `None`) instead of
/// reading past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a 1- or 2-byte length in front.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

fn client_hello_sni(body: &[u8]) -> Option<String> {
    let mut r = Reader(body);
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    r.vec8()?; // legacy_session_id
    r.vec16()?; // cipher_suites
    r.vec8()?; // legacy_compression_methods
    let mut extensions = Reader(r.vec16()?);
    let mut found = None;
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let data = extensions.vec16()?;
        if kind != EXT_SERVER_NAME {
            continue;
        }
        if found.is_some() {
            // Two server_name extensions: ambiguous, so no name.
            return None;
        }
        let mut list = Reader(data);
        let mut names = Reader(list.vec16()?);
        while !names.0.is_empty() {
            let name_type = names.u8()?;
            let name = names.vec16()?;
            if name_type == HOST_NAME {
                if found.is_some() {
                    return None;
                }
                found = Some(clean_name(std::str::from_utf8(name).ok()?)?);
            }
        }
    }
    found
}

/// The longest method token accepted (`OPTIONS`, `PROPFIND`, …).
const MAX_METHOD: usize = 16;

fn sniff_http(buf: &[u8]) -> Sniffed {
    let method_end = buf.iter().position(|&b| b == b' ');
    let method = &buf[..method_end.unwrap_or(buf.len())];
    if method.len() > MAX_METHOD || !method.iter().all(u8::is_ascii_uppercase) {
        return Sniffed::Other;
    }
    if method_end.is_none() || method.is_empty() {
        return if method.is_empty() {
            Sniffed::Other
        } else {
            Sniffed::NeedMore
        };
    }
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        return Sniffed::NeedMore;
    };
    let Ok(head) = std::str::from_utf8(&buf[..head_end]) else {
        return Sniffed::Http(None);
    };
    Sniffed::Http(request_host(head))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The host of a request head (request line and header lines, without the
/// blank line): its one `Host` header, which an absolute-form target must
/// match.
fn request_host(head: &str) -> Option<String> {
    let mut lines = head.split("\r\n");
    let request_line = lines.next()?;
    let mut parts = request_line.split(' ');
    let (_method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return None;
    }
    let mut host = None;
    for line in lines {
        if line.starts_with([' ', '\t']) {
            return None; // obsolete line folding: refuse to guess
        }
        let (name, value) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("host") {
            if host.is_some() {
                return None;
            }
            host = Some(authority_host(value.trim_matches([' ', '\t']))?);
        }
    }
    let lower = target.to_ascii_lowercase();
    let absolute = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    if let Some(rest) = absolute {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let target_host = authority_host(authority)?;
        return match host {
            Some(h) if h != target_host => None,
            _ => Some(target_host),
        };
    }
    host
}

/// The host of an authority (`host`, `host:port`, `[v6]:port`, no
/// userinfo); `None` for an address literal or anything malformed.
fn authority_host(authority: &str) -> Option<String> {
    if authority.starts_with('[') || authority.contains('@') {
        return None;
    }
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        Some(_) => return None,
        None => authority,
    };
    clean_name(host)
}

/// A server name as the policy compares it, or `None` when it is empty,
/// an address literal or has characters no host name has.
fn clean_name(name: &str) -> Option<String> {
    let name = stockade_core::netpolicy::normalize_name(name);
    if name.is_empty()
        || name.len() > 253
        || name.parse::<std::net::IpAddr>().is_ok()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return None;
    }
    Some(name)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ClientHello record carrying `names` as host_name entries.
    pub(crate) fn client_hello(names: &[&str]) -> Vec<u8> {
        let mut ext = Vec::new();
        if !names.is_empty() {
            let mut list = Vec::new();
            for name in names {
                list.push(HOST_NAME);
                list.extend_from_slice(&(name.len() as u16).to_be_bytes());
                list.extend_from_slice(name.as_bytes());
            }
            let mut sni = (list.len() as u16).to_be_bytes().to_vec();
            sni.extend_from_slice(&list);
            // An unrelated extension first (supported_versions).
            ext.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
            ext.extend_from_slice(&EXT_SERVER_NAME.to_be_bytes());
            ext.extend_from_slice(&(sni.len() as u16).to_be_bytes());
            ext.extend_from_slice(&sni);
        }
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[0x01, 0x00]); // null compression
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![CLIENT_HELLO];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        record(&hs)
    }

    fn record(fragment: &[u8]) -> Vec<u8> {
        let mut rec = vec![0x16, 0x03, 0x01];
        rec.extend_from_slice(&(fragment.len() as u16).to_be_bytes());
        rec.extend_from_slice(fragment);
        rec
    }

    #[test]
    fn tls_server_name() {
        let hello = client_hello(&["Allowed.Test."]);
        assert_eq!(sniff(&hello), Sniffed::Tls(Some("allowed.test".into())));
        // Every prefix asks for more; the whole answers.
        for n in 1..hello.len() {
            assert_eq!(sniff(&hello[..n]), Sniffed::NeedMore, "prefix {n}");
        }
        assert_eq!(sniff(&hello[..3]).finish(&hello[..3]), Sniffed::Tls(None));
        assert_eq!(sniff(&client_hello(&[])), Sniffed::Tls(None));
        assert_eq!(
            sniff(&client_hello(&["a.test", "b.test"])),
            Sniffed::Tls(None)
        );
        assert_eq!(sniff(&client_hello(&["192.0.2.1"])), Sniffed::Tls(None));
        assert_eq!(sniff(&client_hello(&["bad name"])), Sniffed::Tls(None));
    }

    #[test]
    fn tls_hello_split_over_records() {
        let hello = client_hello(&["split.test"]);
        let hs = &hello[RECORD_HEADER..];
        let mut two = record(&hs[..10]);
        two.extend_from_slice(&record(&hs[10..]));
        assert_eq!(sniff(&two), Sniffed::Tls(Some("split.test".into())));
        assert_eq!(sniff(&two[..20]), Sniffed::NeedMore);
    }

    #[test]
    fn tls_oddities_have_no_name() {
        // Not a ClientHello (a ServerHello).
        let mut hello = client_hello(&["x.test"]);
        hello[RECORD_HEADER] = 2;
        assert_eq!(sniff(&hello), Sniffed::Tls(None));
        // A length running past the extension block.
        let mut hello = client_hello(&["x.test"]);
        let last = hello.len() - 1;
        hello.truncate(last);
        let len = u16::from_be_bytes([hello[3], hello[4]]) - 1;
        hello[3..5].copy_from_slice(&len.to_be_bytes());
        let hs_len = len as u32 - 4;
        hello[6..9].copy_from_slice(&hs_len.to_be_bytes()[1..]);
        assert_eq!(sniff(&hello), Sniffed::Tls(None));
        // A record too long for TLS.
        assert_eq!(sniff(&[0x16, 3, 1, 0xff, 0xff, 1]), Sniffed::Tls(None));
    }

    #[test]
    fn http_host() {
        let req = b"GET /x HTTP/1.1\r\nUser-Agent: t\r\nhost: Allowed.Test:8080\r\n\r\n";
        assert_eq!(sniff(req), Sniffed::Http(Some("allowed.test".into())));
        for n in 1..req.len() {
            assert_eq!(sniff(&req[..n]), Sniffed::NeedMore, "prefix {n}");
        }
        let cases: [(&[u8], Option<&str>); 9] = [
            (b"GET / HTTP/1.0\r\nHost: a.test\r\n\r\n", Some("a.test")),
            (
                b"GET http://a.test/p HTTP/1.1\r\nHost: a.test\r\n\r\n",
                Some("a.test"),
            ),
            (b"GET http://a.test:80/p HTTP/1.1\r\n\r\n", Some("a.test")),
            (b"GET http://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", None),
            (
                b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
                None,
            ),
            (b"GET / HTTP/1.1\r\n\r\n", None),
            (b"GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n", None),
            (b"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", None),
            (
                b"GET / HTTP/1.1\r\nX: 1\r\n folded\r\nHost: a.test\r\n\r\n",
                None,
            ),
        ];
        for (req, host) in cases {
            let expected = Sniffed::Http(host.map(str::to_owned));
            assert_eq!(sniff(req), expected, "{}", String::from_utf8_lossy(req));
        }
        assert_eq!(
            sniff(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            Sniffed::Http(None)
        );
    }

    #[test]
    fn other_protocols() {
        assert_eq!(sniff(b"SSH-2.0-OpenSSH_9.6\r\n"), Sniffed::Other);
        assert_eq!(sniff(b"\x00\x01\x02"), Sniffed::Other);
        assert_eq!(sniff(b"get / HTTP/1.1\r\n\r\n"), Sniffed::Other);
        assert_eq!(sniff(b" GET"), Sniffed::Other);
        assert_eq!(sniff(b""), Sniffed::NeedMore);
        assert_eq!(Sniffed::NeedMore.finish(b""), Sniffed::Other);
        assert_eq!(Sniffed::NeedMore.finish(b"GET / HT"), Sniffed::Http(None));
    }
}
