//! The egress filter's own DNS client: sends queries to the configured
//! upstream servers (UDP, or TCP), accepts only answers to the question it
//! asked under an id it chose, and looks up a name's addresses for the
//! proxy (kept until their TTL runs out).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::timeout_at;

use crate::names::MAX_KEEP;

/// How long one server may take to answer one query.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest CNAME chain followed in an answer.
const MAX_CHAIN: usize = 16;
/// The most names whose addresses the proxy keeps.
const MAX_CACHED: usize = 4096;

/// Why a query got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("no upstream DNS server is configured")]
    NoServers,
    #[error("not a DNS query this forwarder handles: {0}")]
    BadQuery(String),
    #[error("'{0}' is not a DNS name")]
    BadName(String),
    #[error("no upstream DNS server answered: {0}")]
    Unanswered(String),
}

/// A client of the upstream DNS servers (tried in order).
#[derive(Debug)]
pub struct Resolver {
    servers: Vec<SocketAddr>,
    timeout: Duration,
    cache: Mutex<HashMap<String, (Vec<IpAddr>, Instant)>>,
}

/// How a query travels to the upstream server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Resolver {
    /// A client of `servers`, each asked in turn until one answers.
    pub fn new(servers: Vec<SocketAddr>) -> Result<Self, DnsError> {
        if servers.is_empty() {
            return Err(DnsError::NoServers);
        }
        Ok(Self {
            servers,
            timeout: DEFAULT_TIMEOUT,
            cache: Mutex::default(),
        })
    }

    /// The servers of a `resolv.conf` (its `nameserver` lines, port 53):
    /// the Docker host's own resolvers.
    pub fn from_resolv_conf(path: &Path) -> Result<Self, DnsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| DnsError::Unanswered(format!("cannot read {}: {e}", path.display())))?;
        let servers = text
            .lines()
            .filter_map(|line| line.trim().strip_prefix("nameserver"))
            .filter_map(|rest| rest.trim().parse::<IpAddr>().ok())
            .map(|ip| SocketAddr::new(ip, 53))
            .collect();
        Self::new(servers)
    }

    /// How long each server may take per query (default 2 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn servers(&self) -> &[SocketAddr] {
        &self.servers
    }

    /// Sends the DNS message `query` (one question) upstream and returns
    /// the answer, with `query`'s id. Over UDP a truncated answer is
    /// returned as it is (the client asks again over TCP).
    pub async fn exchange(&self, query: &[u8], transport: Transport) -> Result<Vec<u8>, DnsError> {
        let parsed = Message::from_vec(query).map_err(|e| DnsError::BadQuery(e.to_string()))?;
        let question = match parsed.queries() {
            [q] => q.clone(),
            _ => return Err(DnsError::BadQuery("not exactly one question".into())),
        };
        let client_id = parsed.id();
        let id: u16 = rand::random();
        let mut ours = query.to_vec();
        ours[..2].copy_from_slice(&id.to_be_bytes());
        let mut failures = Vec::new();
        for &server in &self.servers {
            let attempt = Attempt {
                server,
                query: &ours,
                id,
                question: &question,
                deadline: tokio::time::Instant::now() + self.timeout,
            };
            let attempt = match transport {
                Transport::Udp => attempt.udp().await,
                Transport::Tcp => attempt.tcp().await,
            };
            match attempt {
                Ok(mut answer) => {
                    answer[..2].copy_from_slice(&client_id.to_be_bytes());
                    return Ok(answer);
                }
                Err(e) => failures.push(format!("{server}: {e}")),
            }
        }
        Err(DnsError::Unanswered(failures.join("; ")))
    }

    /// The addresses (A and AAAA, through CNAMEs) of `name`, with their TTL
    /// in seconds, as the upstream servers give them now. A name that does
    /// not exist has none.
    pub async fn lookup_ip(&self, name: &str) -> Result<Vec<(IpAddr, u32)>, DnsError> {
        let name = stockade_core::netpolicy::normalize_name(name);
        let qname =
            Name::from_ascii(format!("{name}.")).map_err(|_| DnsError::BadName(name.clone()))?;
        let (v4, v6) = tokio::join!(
            self.lookup_type(&qname, RecordType::A),
            self.lookup_type(&qname, RecordType::AAAA)
        );
        match (v4, v6) {
            (Err(e), Err(_)) => Err(e),
            (v4, v6) => {
                let mut all = v4.unwrap_or_default();
                all.extend(v6.unwrap_or_default());
                Ok(all)
            }
        }
    }

    async fn lookup_type(
        &self,
        qname: &Name,
        record_type: RecordType,
    ) -> Result<Vec<(IpAddr, u32)>, DnsError> {
        let mut query = Message::new();
        query
            .set_id(0)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(qname.clone(), record_type));
        let bytes = query
            .to_vec()
            .map_err(|e| DnsError::BadName(format!("{qname}: {e}")))?;
        let mut answer = self.exchange(&bytes, Transport::Udp).await?;
        if Message::from_vec(&answer).is_ok_and(|m| m.truncated()) {
            answer = self.exchange(&bytes, Transport::Tcp).await?;
        }
        let answer = Message::from_vec(&answer)
            .map_err(|e| DnsError::Unanswered(format!("malformed answer: {e}")))?;
        match answer.response_code() {
            ResponseCode::NoError | ResponseCode::NXDomain => Ok(addresses_in(&answer, qname)),
            code => Err(DnsError::Unanswered(format!(
                "{qname} {record_type}: {code}"
            ))),
        }
    }

    /// The addresses of `name`, from this resolver's own earlier answers
    /// while they last, else asked anew.
    pub async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, DnsError> {
        match self.cached(name) {
            Some(addrs) => Ok(addrs),
            None => self.refresh(name).await,
        }
    }

    /// The addresses of `name` from this resolver's earlier answer, while
    /// its TTL lasts.
    pub fn cached(&self, name: &str) -> Option<Vec<IpAddr>> {
        let key = stockade_core::netpolicy::normalize_name(name);
        let now = Instant::now();
        self.lock()
            .get(&key)
            .filter(|(_, until)| *until > now)
            .map(|(addrs, _)| addrs.clone())
    }

    /// The addresses of `name`, asked anew (and kept for
    /// [`resolve`](Self::resolve)).
    pub async fn refresh(&self, name: &str) -> Result<Vec<IpAddr>, DnsError> {
        let key = stockade_core::netpolicy::normalize_name(name);
        let answers = self.lookup_ip(&key).await?;
        let addrs: Vec<IpAddr> = answers.iter().map(|(ip, _)| ip.to_canonical()).collect();
        let ttl = answers.iter().map(|(_, ttl)| *ttl).min().unwrap_or(0);
        let keep = Duration::from_secs(u64::from(ttl)).min(MAX_KEEP);
        if !keep.is_zero() {
            let now = Instant::now();
            let mut cache = self.lock();
            if cache.len() >= MAX_CACHED {
                cache.retain(|_, (_, until)| *until > now);
                if cache.len() >= MAX_CACHED {
                    cache.clear();
                }
            }
            cache.insert(key, (addrs.clone(), now + keep));
        }
        Ok(addrs)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Vec<IpAddr>, Instant)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether `bytes` is a response with id `id` to `question`. A response
/// without its question section only counts as an error answer.
fn answers(bytes: &[u8], id: u16, question: &Query) -> bool {
    if bytes.len() < 12 || u16::from_be_bytes([bytes[0], bytes[1]]) != id {
        return false;
    }
    let Ok(message) = Message::from_vec(bytes) else {
        return false;
    };
    if message.message_type() != MessageType::Response {
        return false;
    }
    match message.queries() {
        [] => message.response_code() != ResponseCode::NoError,
        [q] => {
            q.name() == question.name()
                && q.query_type() == question.query_type()
                && q.query_class() == question.query_class()
        }
        _ => false,
    }
}

/// The A and AAAA answers for `qname` in `message`, following CNAMEs in
/// the answer section; each TTL is at most those of the CNAMEs before it.
pub(crate) fn addresses_in(message: &Message, qname: &Name) -> Vec<(IpAddr, u32)> {
    let mut current = qname.clone();
    let mut ttl_cap = u32::MAX;
    let mut found = Vec::new();
    for _ in 0..MAX_CHAIN {
        let mut next = None;
        for record in message.answers() {
            if record.name() != &current {
                continue;
            }
            let ttl = record.ttl().min(ttl_cap);
            match record.data() {
                RData::A(a) => found.push((IpAddr::V4(a.0), ttl)),
                RData::AAAA(aaaa) => found.push((IpAddr::V6(aaaa.0), ttl)),
                RData::CNAME(target) => next = Some((target.0.clone(), record.ttl())),
                _ => {}
            }
        }
        if !found.is_empty() {
            break;
        }
        match next {
            Some((target, ttl)) => {
                current = target;
                ttl_cap = ttl_cap.min(ttl);
            }
            None => break,
        }
    }
    found
}

/// One query to one upstream server, with our id, answered by `deadline`.
#[derive(Clone, Copy)]
struct Attempt<'a> {
    server: SocketAddr,
    query: &'a [u8],
    id: u16,
    question: &'a Query,
    deadline: tokio::time::Instant,
}

impl Attempt<'_> {
    async fn udp(&self) -> Result<Vec<u8>, String> {
        let local: SocketAddr = if self.server.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(local).await.map_err(|e| e.to_string())?;
        socket
            .connect(self.server)
            .await
            .map_err(|e| e.to_string())?;
        socket.send(self.query).await.map_err(|e| e.to_string())?;
        let mut buf = vec![0; 65_535];
        loop {
            let n = timeout_at(self.deadline, socket.recv(&mut buf))
                .await
                .map_err(|_| "timed out".to_owned())?
                .map_err(|e| e.to_string())?;
            // Anything else on this socket (a stray or forged datagram) is
            // ignored until the deadline.
            if answers(&buf[..n], self.id, self.question) {
                return Ok(buf[..n].to_vec());
            }
        }
    }

    async fn tcp(&self) -> Result<Vec<u8>, String> {
        let exchange = async {
            let mut stream = TcpStream::connect(self.server).await?;
            stream.set_nodelay(true)?;
            let mut framed = Vec::with_capacity(self.query.len() + 2);
            framed.extend_from_slice(&(self.query.len() as u16).to_be_bytes());
            framed.extend_from_slice(self.query);
            stream.write_all(&framed).await?;
            let len = stream.read_u16().await?;
            let mut answer = vec![0; usize::from(len)];
            stream.read_exact(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        let answer = timeout_at(self.deadline, exchange)
            .await
            .map_err(|_| "timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        if answers(&answer, self.id, self.question) {
            Ok(answer)
        } else {
            Err("the answer does not match the question".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use hickory_proto::rr::rdata::{A, AAAA, CNAME, TXT};
    use hickory_proto::rr::Record;

    use super::*;

    fn name(s: &str) -> Name {
        Name::from_str(s).unwrap()
    }

    #[test]
    fn follows_cname_chains() {
        let mut m = Message::new();
        m.add_answer(Record::from_rdata(
            name("www.allowed.test."),
            300,
            RData::CNAME(CNAME(name("Edge.CDN.test."))),
        ));
        m.add_answer(Record::from_rdata(
            name("edge.cdn.test."),
            60,
            RData::CNAME(CNAME(name("e1.cdn.test."))),
        ));
        m.add_answer(Record::from_rdata(
            name("e1.cdn.test."),
            600,
            RData::A(A::new(192, 0, 2, 7)),
        ));
        m.add_answer(Record::from_rdata(
            name("e1.cdn.test."),
            20,
            RData::AAAA(AAAA::from_str("2001:db8::7").unwrap()),
        ));
        m.add_answer(Record::from_rdata(
            name("other.test."),
            600,
            RData::A(A::new(192, 0, 2, 9)),
        ));
        let got = addresses_in(&m, &name("WWW.allowed.test."));
        assert_eq!(
            got,
            vec![
                (IpAddr::from([192, 0, 2, 7]), 60),
                ("2001:db8::7".parse().unwrap(), 20)
            ]
        );
        assert!(addresses_in(&m, &name("none.test.")).is_empty());
        // A loop ends.
        let mut looped = Message::new();
        looped.add_answer(Record::from_rdata(
            name("a.test."),
            5,
            RData::CNAME(CNAME(name("b.test."))),
        ));
        looped.add_answer(Record::from_rdata(
            name("b.test."),
            5,
            RData::CNAME(CNAME(name("a.test."))),
        ));
        assert!(addresses_in(&looped, &name("a.test.")).is_empty());
        let mut txt = Message::new();
        txt.add_answer(Record::from_rdata(
            name("a.test."),
            5,
            RData::TXT(TXT::new(vec!["x".into()])),
        ));
        assert!(addresses_in(&txt, &name("a.test.")).is_empty());
    }

    #[test]
    fn matches_answers_to_questions() {
        let q = Query::query(name("allowed.test."), RecordType::A);
        let mut m = Message::new();
        m.set_id(7)
            .set_message_type(MessageType::Response)
            .add_query(Query::query(name("ALLOWED.test."), RecordType::A));
        let bytes = m.to_vec().unwrap();
        assert!(answers(&bytes, 7, &q));
        assert!(!answers(&bytes, 8, &q));
        assert!(!answers(
            &bytes,
            7,
            &Query::query(name("allowed.test."), RecordType::AAAA)
        ));
        assert!(!answers(
            &bytes,
            7,
            &Query::query(name("other.test."), RecordType::A)
        ));
        assert!(!answers(&bytes[..11], 7, &q));
        let mut query = m.clone();
        query.set_message_type(MessageType::Query);
        assert!(!answers(&query.to_vec().unwrap(), 7, &q));
        let mut bare = Message::error_msg(7, OpCode::Query, ResponseCode::FormErr);
        assert!(answers(&bare.to_vec().unwrap(), 7, &q));
        bare.set_response_code(ResponseCode::NoError);
        assert!(!answers(&bare.to_vec().unwrap(), 7, &q));
    }

    #[test]
    fn reads_resolv_conf() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, "# c\nsearch x\nnameserver 192.0.2.53\nnameserver  2001:db8::53\nnameserver fe80::1%eth0\n").unwrap();
        let r = Resolver::from_resolv_conf(&path).unwrap();
        assert_eq!(
            r.servers(),
            [
                "192.0.2.53:53".parse().unwrap(),
                "[2001:db8::53]:53".parse().unwrap()
            ]
        );
        std::fs::write(&path, "search x\n").unwrap();
        assert!(matches!(
            Resolver::from_resolv_conf(&path),
            Err(DnsError::NoServers)
        ));
        assert!(Resolver::new(vec![]).is_err());
    }
}
