//! The real transparent path (needs root; skipped otherwise): a "sandbox"
//! network namespace and an "upstream" one, each linked to the host by a
//! veth pair. The sandbox's traffic meets the rules [`iptables`] writes for
//! its policy, hooked up as Stockade hooks them: its `nat` chain
//! (`REDIRECT` of port 53 to the forwarder and of TCP 80/443 to the proxy,
//! which find the original destination with `SO_ORIGINAL_DST`) and its
//! `filter` chain on the forwarding path (address entries). The host side
//! of the sandbox link is cut off like Stockade's isolation chain does,
//! with the accept rules the filter needs. The upstream namespace runs an
//! HTTP server (busybox httpd, ports 80 and 8080) and a TLS server (openssl
//! s_server). Nothing leaves the machine: the namespaces only reach the
//! host and each other, and DNS goes to a documentation address
//! (192.0.2.53) that the redirect catches. The upstream namespace also
//! holds 169.254.169.254 (the cloud metadata address), reached from the
//! sandbox's subnet alone through a routing rule and table of the test's
//! own, so the host's own route to it is left alone.
//!
//! Everything made is named after the test's process id and removed when
//! the test ends, also on failure; leftovers of a killed run are swept at
//! the next start.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use stockade_core::netpolicy::{Cidr, PrivateAccess};
use stockade_egress::iptables::{self, Family, RedirectPorts};
use stockade_egress::{
    DnsConfig, DnsForwarder, EgressPolicy, EgressProxy, Policies, ProxyConfig, ResolvedNames,
    Resolver,
};
use tokio::net::TcpListener;

use crate::support::FakeDns;

const PREFIX_NS: &str = "stkeg-";
/// Interface names: `stks<pid>h`/`stks<pid>s` (sandbox side),
/// `stku<pid>h`/`stku<pid>s` (upstream side); at most 12 characters.
const DNS_TARGET: &str = "192.0.2.53";
/// The test's chains: `STKEG-I-<pid>` (the stand-in for Stockade's
/// isolation chain), `STKEG-F-<pid>` and `STKEG-N-<pid>` (the sandbox's
/// filter and nat chains) and `STKEG-P-<pid>` (the private ranges').
const CHAIN_PREFIX: &str = "STKEG-";
/// The cloud metadata address, held by the upstream namespace.
const METADATA: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
/// The iptables match and target that let replies through.
const REPLIES: [&str; 6] = [
    "-m",
    "conntrack",
    "--ctstate",
    "RELATED,ESTABLISHED",
    "-j",
    "ACCEPT",
];
/// The routing table of a run is this plus its process id.
const TABLE_BASE: u32 = 1_000_000;

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The `ip` commands that make namespace `ns` and join it to the host by a
/// veth pair: `host_if` on the host with `host_addr`, `ns_if` inside with
/// `addrs`; both ends and the namespace's loopback up.
fn joined_namespace<'a>(
    ns: &'a str,
    host_if: &'a str,
    ns_if: &'a str,
    host_addr: &'a str,
    addrs: &[&'a str],
) -> Vec<Vec<&'a str>> {
    let mut steps = vec![
        vec!["ip", "netns", "add", ns],
        vec![
            "ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if,
        ],
        vec!["ip", "link", "set", ns_if, "netns", ns],
        vec!["ip", "addr", "add", host_addr, "dev", host_if],
        vec!["ip", "link", "set", host_if, "up"],
        vec!["ip", "-n", ns, "link", "set", "lo", "up"],
    ];
    for addr in addrs {
        steps.push(vec!["ip", "-n", ns, "addr", "add", addr, "dev", ns_if]);
    }
    steps.push(vec!["ip", "-n", ns, "link", "set", ns_if, "up"]);
    steps
}

/// Why the test cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    let uid = run(&["id", "-u"]).unwrap_or_default();
    if uid.trim() != "0" {
        return Some("not root".into());
    }
    for tool in [
        "ip",
        "iptables",
        "iptables-restore",
        "curl",
        "busybox",
        "openssl",
    ] {
        if !have(tool) {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

/// Removes namespaces and redirect rules of earlier runs whose process is
/// gone.
fn sweep_leftovers() {
    let dead = |pid: &str| !Path::new(&format!("/proc/{pid}")).exists();
    if let Ok(list) = run(&["ip", "netns", "list"]) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            let Some(rest) = name.strip_prefix(PREFIX_NS) else {
                continue;
            };
            let pid = rest.rsplit('-').next().unwrap_or_default();
            if dead(pid) {
                let _ = run(&["ip", "netns", "del", name]);
            }
        }
    }
    let ours = |iface: &str| -> Option<String> {
        let rest = iface
            .strip_prefix("stks")
            .or_else(|| iface.strip_prefix("stku"))?;
        let pid = rest.strip_suffix('h')?;
        pid.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| pid.to_owned())
    };
    for (table, chain) in [
        ("nat", "PREROUTING"),
        ("filter", "INPUT"),
        ("filter", "FORWARD"),
    ] {
        let Ok(rules) = run(&["iptables", "-w", "-t", table, "-S", chain]) else {
            continue;
        };
        for rule in rules.lines() {
            let words: Vec<&str> = rule.split_whitespace().collect();
            let stale = words
                .windows(2)
                .any(|w| matches!(w[0], "-i" | "-o") && ours(w[1]).is_some_and(|p| dead(&p)));
            if stale {
                let mut args = vec!["iptables", "-w", "-t", table, "-D"];
                args.extend(&words[1..]);
                let _ = run(&args);
            }
        }
    }
    if let Ok(rules) = run(&["ip", "rule", "list"]) {
        for line in rules.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let table = words
                .windows(2)
                .find(|w| w[0] == "lookup")
                .and_then(|w| w[1].parse::<u32>().ok());
            let Some(pid) = table.and_then(|t| t.checked_sub(TABLE_BASE)) else {
                continue;
            };
            if dead(&pid.to_string()) {
                let mut del = vec!["ip", "rule", "del"];
                del.extend(&words[1..]);
                let _ = run(&del);
            }
        }
    }
    for table in ["filter", "nat"] {
        let Ok(rules) = run(&["iptables", "-w", "-t", table, "-S"]) else {
            continue;
        };
        for line in rules.lines() {
            let Some(chain) = line.strip_prefix("-N ") else {
                continue;
            };
            if !chain.starts_with(CHAIN_PREFIX) {
                continue;
            }
            let pid = chain.rsplit('-').next().unwrap_or_default();
            if pid.bytes().all(|b| b.is_ascii_digit()) && dead(pid) {
                let _ = run(&["iptables", "-w", "-t", table, "-F", chain]);
                let _ = run(&["iptables", "-w", "-t", table, "-X", chain]);
            }
        }
    }
}

/// The namespaces, links, rules and servers of one run; all removed on drop.
struct Lab {
    sandbox_ns: String,
    upstream_ns: String,
    host_if: String,
    upstream_if: String,
    /// The host's address on the sandbox link (the "gateway").
    gateway: Ipv4Addr,
    /// The sandbox's address.
    sandbox: Ipv4Addr,
    /// The upstream namespace's addresses: the first two opted in (see
    /// `private`), the third not.
    upstream: [Ipv4Addr; 3],
    /// The private blocks the sandbox may reach: the upstream's first two
    /// addresses (10.214.k.0/30) unless a test changes it.
    private: PrivateAccess,
    /// `ip` commands that undo what was set up, run on drop.
    undo: Vec<Vec<String>>,
    /// Rules added (table, rule without its verb), removed in reverse.
    rules: Vec<(&'static str, Vec<String>)>,
    /// Chains made (table, name), emptied and removed after the rules.
    chains: Vec<(&'static str, String)>,
    servers: Vec<Child>,
    _dir: tempfile::TempDir,
    dir: std::path::PathBuf,
}

impl Lab {
    fn new() -> Result<Self, String> {
        let pid = std::process::id();
        // Subnets 10.213.k.0/24 and 10.214.k.0/24 that no other run (or
        // anything else) uses now.
        let used = run(&["ip", "-o", "-4", "addr", "show"])?;
        let k = (0..200)
            .map(|i| ((pid + i) % 200 + 20) as u8)
            .find(|k| {
                !used.contains(&format!("10.213.{k}.")) && !used.contains(&format!("10.214.{k}."))
            })
            .ok_or("no free 10.213.x.0/24 subnet")?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().to_owned();
        let mut lab = Self {
            sandbox_ns: format!("{PREFIX_NS}sbx-{pid}"),
            upstream_ns: format!("{PREFIX_NS}up-{pid}"),
            host_if: format!("stks{pid}h"),
            upstream_if: format!("stku{pid}h"),
            gateway: Ipv4Addr::new(10, 213, k, 1),
            sandbox: Ipv4Addr::new(10, 213, k, 2),
            upstream: [
                Ipv4Addr::new(10, 214, k, 2),
                Ipv4Addr::new(10, 214, k, 3),
                Ipv4Addr::new(10, 214, k, 4),
            ],
            private: PrivateAccess::new([Cidr::new(
                IpAddr::V4(Ipv4Addr::new(10, 214, k, 0)),
                30,
            )?])?,
            undo: Vec::new(),
            rules: Vec::new(),
            chains: Vec::new(),
            servers: Vec::new(),
            _dir: dir,
            dir: path,
        };
        lab.build(pid, k)?;
        Ok(lab)
    }

    fn build(&mut self, pid: u32, k: u8) -> Result<(), String> {
        let (sbx, up) = (self.sandbox_ns.clone(), self.upstream_ns.clone());
        let (sh, ss) = (format!("stks{pid}h"), format!("stks{pid}s"));
        let (uh, us) = (format!("stku{pid}h"), format!("stku{pid}s"));
        let gw = format!("{}/24", self.gateway);
        let sandbox = format!("{}/24", self.sandbox);
        let up_gw = format!("10.214.{k}.1/24");
        let up_a = format!("{}/24", self.upstream[0]);
        let up_b = format!("{}/24", self.upstream[1]);
        let up_c = format!("{}/24", self.upstream[2]);
        let metadata = format!("{METADATA}/32");
        let up_net = format!("10.214.{k}.0/24");
        let via = self.gateway.to_string();
        let sbx_net = format!("10.213.{k}.0/24");
        let up_via = format!("10.214.{k}.1");
        let mut steps = joined_namespace(&sbx, &sh, &ss, &gw, &[&sandbox]);
        steps.extend([
            vec!["ip", "-n", &sbx, "route", "add", &up_net, "via", &via],
            vec![
                "ip",
                "-n",
                &sbx,
                "route",
                "add",
                "192.0.2.0/24",
                "via",
                &via,
            ],
        ]);
        steps.extend(joined_namespace(
            &up,
            &uh,
            &us,
            &up_gw,
            &[&up_a, &up_b, &up_c, &metadata],
        ));
        steps.extend([
            vec!["ip", "-n", &up, "route", "add", &sbx_net, "via", &up_via],
            vec!["ip", "-n", &sbx, "route", "add", &metadata, "via", &via],
        ]);
        for step in steps {
            run(&step)?;
        }
        // The metadata address from the sandbox's subnet only: a rule and a
        // table of this run's, so the host's own traffic to it is untouched.
        let table = (TABLE_BASE + pid).to_string();
        run(&["ip", "route", "add", &metadata, "dev", &uh, "table", &table])?;
        let rule = ["rule", "add", "from", &sbx_net, "lookup", &table].map(String::from);
        let mut add = vec!["ip"];
        add.extend(rule.iter().map(String::as_str));
        run(&add)?;
        let mut del = vec!["ip".to_owned()];
        del.extend(rule);
        del[2] = "del".into();
        self.undo.push(del);
        Ok(())
    }

    /// Inserts `rule` (a chain and its arguments) at the top of its chain in
    /// `table`; removed on drop.
    fn insert(&mut self, table: &'static str, rule: Vec<String>) -> Result<(), String> {
        let mut add: Vec<&str> = vec!["iptables", "-w", "-t", table, "-I", &rule[0], "1"];
        add.extend(rule[1..].iter().map(String::as_str));
        run(&add)?;
        self.rules.push((table, rule));
        Ok(())
    }

    /// Writes the sandbox's two chains for `policy` with
    /// `iptables-restore --noflush` (both made on the first call).
    fn apply_policy(&mut self, policy: &EgressPolicy, ports: RedirectPorts) -> Result<(), String> {
        let pid = std::process::id();
        let (filter, nat) = (
            format!("{CHAIN_PREFIX}F-{pid}"),
            format!("{CHAIN_PREFIX}N-{pid}"),
        );
        let private = format!("{CHAIN_PREFIX}P-{pid}");
        let script = iptables::restore_script(
            policy,
            Family::V4,
            &filter,
            &nat,
            (&private, &self.private),
            ports,
        );
        let mut child = Command::new("iptables-restore")
            .args(["-w", "--noflush"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("iptables-restore: {e}"))?;
        use std::io::Write;
        child
            .stdin
            .take()
            .ok_or("no stdin")?
            .write_all(script.as_bytes())
            .map_err(|e| e.to_string())?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "iptables-restore: {}\n{script}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if self.chains.iter().any(|(_, c)| *c == filter) {
            return Ok(());
        }
        self.chains.push(("filter", filter.clone()));
        self.chains.push(("nat", nat.clone()));
        self.chains.push(("filter", private));
        // The hooks, as Stockade's would be: PREROUTING for the sandbox's
        // address into its nat chain; on the forwarding path replies back,
        // then its filter chain, then (standing in for Docker's rule for
        // the bridge) accept.
        let (sh, uh) = (self.host_if.clone(), self.upstream_if.clone());
        let sandbox = self.sandbox.to_string();
        let hooks: [(&'static str, Vec<&str>); 4] = [
            (
                "nat",
                vec!["PREROUTING", "-i", &sh, "-s", &sandbox, "-j", &nat],
            ),
            (
                "filter",
                vec!["FORWARD", "-i", &sh, "-o", &uh, "-j", "ACCEPT"],
            ),
            (
                "filter",
                vec![
                    "FORWARD", "-i", &sh, "-o", &uh, "-s", &sandbox, "-j", &filter,
                ],
            ),
            (
                "filter",
                [&["FORWARD", "-i", &uh, "-o", &sh][..], &REPLIES].concat(),
            ),
        ];
        for (table, rule) in hooks {
            self.insert(table, rule.into_iter().map(String::from).collect())?;
        }
        Ok(())
    }

    /// Cuts the sandbox link off the host as Stockade's isolation chain
    /// does (replies only), plus the rules the egress filter needs
    /// there: redirected connections to the proxy and the forwarder.
    fn isolate(&mut self, proxy_port: u16, dns_port: u16) -> Result<(), String> {
        let chain = format!("{CHAIN_PREFIX}I-{}", std::process::id());
        run(&["iptables", "-w", "-N", &chain])?;
        self.chains.push(("filter", chain.clone()));
        let (proxy, dns) = (proxy_port.to_string(), dns_port.to_string());
        let dnat = ["-m", "conntrack", "--ctstate", "DNAT", "-j", "ACCEPT"];
        let rules: Vec<Vec<&str>> = vec![
            [&["-p", "tcp", "--dport", &proxy][..], &dnat].concat(),
            [&["-p", "udp", "--dport", &dns][..], &dnat].concat(),
            [&["-p", "tcp", "--dport", &dns][..], &dnat].concat(),
            REPLIES.to_vec(),
            vec!["-j", "DROP"],
        ];
        for rule in rules {
            let mut add = vec!["iptables", "-w", "-A", &chain];
            add.extend(rule);
            run(&add)?;
        }
        let jump = ["INPUT", "-i", &self.host_if, "-j", &chain]
            .map(String::from)
            .to_vec();
        self.insert("filter", jump)
    }

    /// Starts the HTTP server (port 80) and the TLS server (port 443) in
    /// the upstream namespace.
    fn start_servers(&mut self, cert_pem: &str, key_pem: &str) -> Result<(), String> {
        let www = self.dir.join("www");
        std::fs::create_dir_all(&www).map_err(|e| e.to_string())?;
        std::fs::write(www.join("index.html"), "netns upstream\n").map_err(|e| e.to_string())?;
        let cert = self.dir.join("cert.pem");
        let key = self.dir.join("key.pem");
        std::fs::write(&cert, cert_pem).map_err(|e| e.to_string())?;
        std::fs::write(&key, key_pem).map_err(|e| e.to_string())?;
        let spawn = |args: &[&str]| {
            Command::new("ip")
                .args(["netns", "exec", &self.upstream_ns])
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("{}: {e}", args.join(" ")))
        };
        let www = www.to_string_lossy().into_owned();
        for port in ["80", "8080"] {
            let httpd = spawn(&["busybox", "httpd", "-f", "-p", port, "-h", &www])?;
            self.servers.push(httpd);
        }
        let tls = spawn(&[
            "openssl",
            "s_server",
            "-quiet",
            "-accept",
            "443",
            "-cert",
            &cert.to_string_lossy(),
            "-key",
            &key.to_string_lossy(),
            "-www",
        ])?;
        self.servers.push(tls);
        // Wait until both answer from the host.
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in [80, 443, 8080] {
            let addr = SocketAddr::new(IpAddr::V4(self.upstream[0]), port);
            while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
                if Instant::now() > deadline {
                    return Err(format!("the upstream server on port {port} did not start"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Runs a command in the sandbox namespace; its stdout, and whether it
    /// succeeded.
    async fn in_sandbox(&self, args: &[&str]) -> (bool, String) {
        let out = tokio::process::Command::new("ip")
            .args(["netns", "exec", &self.sandbox_ns])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .expect("ip netns exec runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// `curl` from the sandbox: the status code (`000` when no HTTP answer
    /// came) and the body.
    async fn curl(&self, args: &[&str]) -> (String, String) {
        let mut all = vec![
            "curl",
            "-sS",
            "-m",
            "5",
            "-k",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
        ];
        all.extend(args);
        let (_, out) = self.in_sandbox(&all).await;
        let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
        (code.trim().to_owned(), body.to_owned())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.servers {
            let _ = child.kill();
            let _ = child.wait();
        }
        for (table, rule) in self.rules.iter().rev() {
            let mut del: Vec<&str> = vec!["iptables", "-w", "-t", table, "-D"];
            del.extend(rule.iter().map(String::as_str));
            if let Err(e) = run(&del) {
                eprintln!("cleanup: {e}");
            }
        }
        for (table, chain) in &self.chains {
            for verb in ["-F", "-X"] {
                if let Err(e) = run(&["iptables", "-w", "-t", table, verb, chain]) {
                    eprintln!("cleanup: {e}");
                }
            }
        }
        for cmd in &self.undo {
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            if let Err(e) = run(&args) {
                eprintln!("cleanup: {e}");
            }
        }
        // Deleting a namespace deletes its end of each veth pair, and so the
        // pair (and the routes through it).
        for ns in [&self.sandbox_ns, &self.upstream_ns] {
            if let Err(e) = run(&["ip", "netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

fn forwarding_on() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").is_ok_and(|v| v.trim() == "1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_transparent_path_through_iptables_redirect() {
    if let Some(why) = unavailable() {
        eprintln!("skipped the_real_transparent_path_through_iptables_redirect: {why}");
        return;
    }
    sweep_leftovers();
    let mut lab = Lab::new().expect("the network namespaces are made");
    let [up_a, up_b, up_c] = lab.upstream;

    // The upstream servers, with a certificate for the test names.
    let ck = rcgen::generate_simple_self_signed(vec!["allowed.test".into(), "other.test".into()])
        .unwrap();
    lab.start_servers(&ck.cert.pem(), &ck.key_pair.serialize_pem())
        .expect("the upstream servers start");

    // The filter on the host's address on the sandbox link, with the fake
    // upstream DNS: allowed.test is up_a, other.test is up_b, internal.test
    // is up_c (a private address not opted in).
    let overrides: HashMap<String, Vec<Ipv4Addr>> = HashMap::from([
        ("allowed.test".to_owned(), vec![up_a]),
        ("other.test".to_owned(), vec![up_b]),
        ("internal.test".to_owned(), vec![up_c]),
    ]);
    let dns = FakeDns::with_overrides(Arc::new(overrides)).await;
    let resolver = Arc::new(Resolver::new(vec![dns.addr]).unwrap());
    let policies = Arc::new(Policies::new());
    let names = Arc::new(ResolvedNames::new());
    let listener = TcpListener::bind((lab.gateway, 0)).await.unwrap();
    let proxy_port = listener.local_addr().unwrap().port();
    // The real default: SO_ORIGINAL_DST, and never the host's addresses;
    // of the private ranges only the blocks opted in.
    let _proxy = EgressProxy::new(
        ProxyConfig {
            private: lab.private.clone(),
            ..ProxyConfig::default()
        },
        Arc::clone(&policies) as _,
        Arc::clone(&resolver),
        Arc::clone(&names),
    )
    .serve(listener);
    let (udp, tcp) = DnsForwarder::bind(SocketAddr::new(IpAddr::V4(lab.gateway), 0))
        .await
        .unwrap();
    let dns_port = udp.local_addr().unwrap().port();
    let forwarder = DnsForwarder::new(
        DnsConfig::default(),
        Arc::clone(&policies) as _,
        Arc::clone(&resolver),
        Arc::clone(&names),
    );
    let _udp_task = forwarder.serve_udp(udp);
    let _tcp_task = forwarder.serve_tcp(tcp);
    lab.isolate(proxy_port, dns_port).unwrap();
    let ports = RedirectPorts {
        proxy: proxy_port,
        dns: dns_port,
    };

    // What a create (or a PATCH) does: the registry and the chains.
    let sandbox = IpAddr::V4(lab.sandbox);
    let apply = |lab: &mut Lab, policy: serde_json::Value| {
        let policy = EgressPolicy::parse(&policy).unwrap();
        lab.apply_policy(&policy, ports).expect("the rules apply");
        policies.set(sandbox, policy);
    };
    apply(
        &mut lab,
        json!({"allow": ["allowed.test", format!("{up_b}:8080")]}),
    );

    // DNS: the allowed name is answered (through the redirect) and recorded.
    let (ok, out) = lab
        .in_sandbox(&["busybox", "nslookup", "allowed.test", DNS_TARGET])
        .await;
    assert!(
        ok && out.contains(&up_a.to_string()),
        "nslookup allowed.test: {out}"
    );
    assert!(names.contains(sandbox, "allowed.test", IpAddr::V4(up_a)));
    let (ok, out) = lab
        .in_sandbox(&["busybox", "nslookup", "other.test", DNS_TARGET])
        .await;
    assert!(
        !ok || !out.contains(&up_b.to_string()),
        "nslookup other.test: {out}"
    );
    assert_eq!(dns.asked("other.test"), 0);

    // HTTP to the name's address goes through; the answer is the upstream's.
    let host = "Host: allowed.test";
    let (code, body) = lab.curl(&["-H", host, &format!("http://{up_a}/")]).await;
    assert_eq!((code.as_str(), body.as_str()), ("200", "netns upstream\n"));
    // HTTPS by name (curl sends the SNI) goes through.
    let resolve = format!("allowed.test:443:{up_a}");
    let (code, _) = lab
        .curl(&["--resolve", &resolve, "https://allowed.test/"])
        .await;
    assert_eq!(code, "200", "HTTPS to allowed.test");

    // An unlisted name, and the allowed name at another address, are refused.
    let (code, body) = lab
        .curl(&["-H", "Host: other.test", &format!("http://{up_b}/")])
        .await;
    assert_eq!(code, "403", "{body}");
    let (code, body) = lab.curl(&["-H", host, &format!("http://{up_b}/")]).await;
    assert_eq!(code, "403");
    assert!(
        body.contains(&format!("allowed.test does not resolve to {up_b}")),
        "{body}"
    );
    let other = format!("other.test:443:{up_b}");
    let (code, _) = lab
        .curl(&["--resolve", &other, "https://other.test/"])
        .await;
    assert_eq!(code, "000", "HTTPS to other.test must be closed");
    // HTTPS to a bare address sends no SNI: refused.
    let (code, _) = lab.curl(&[&format!("https://{up_a}/")]).await;
    assert_eq!(code, "000", "HTTPS without SNI must be closed");
    // The isolation chain accepts only redirected flows at the proxy's
    // port: dialling it directly is dropped like any other host port.
    let direct = format!("http://{}:{proxy_port}/", lab.gateway);
    let (code, _) = lab
        .curl(&["--connect-timeout", "1", "-H", host, &direct])
        .await;
    assert_eq!(code, "000", "a direct connection to the proxy got through");

    // Address entries, on the forwarding path.
    let forwarding = forwarding_on();
    if forwarding {
        let (code, _) = lab.curl(&[&format!("http://{up_b}:8080/")]).await;
        assert_eq!(code, "200", "an allowed address and port");
        let (code, _) = lab.curl(&[&format!("http://{up_a}:8080/")]).await;
        assert_eq!(code, "000", "an address not in the allow list");
        // A deny entry beats an allow entry; without name entries 80/443
        // are not redirected but forwarded like any port.
        let net = format!("{}/24", Ipv4Addr::from(u32::from(up_a) & 0xffff_ff00));
        apply(
            &mut lab,
            json!({"allow": [net], "deny": [up_b.to_string()]}),
        );
        let (code, body) = lab.curl(&[&format!("http://{up_a}:8080/")]).await;
        assert_eq!((code.as_str(), body.as_str()), ("200", "netns upstream\n"));
        let (code, _) = lab
            .curl(&["-H", "Host: anything.test", &format!("http://{up_a}/")])
            .await;
        assert_eq!(code, "200", "port 80 of an allowed address");
        let (code, _) = lab.curl(&[&format!("http://{up_b}:8080/")]).await;
        assert_eq!(code, "000", "a denied address");
    } else {
        eprintln!("net.ipv4.ip_forward is 0: the forwarding-path checks are skipped");
    }

    // An allowed name whose answer is a private address not opted in: the
    // DNS answer comes, the proxy does not dial it.
    apply(&mut lab, json!({"allow": ["internal.test"]}));
    let (ok, out) = lab
        .in_sandbox(&["busybox", "nslookup", "internal.test", DNS_TARGET])
        .await;
    assert!(ok && out.contains(&up_c.to_string()), "{out}");
    let (code, body) = lab
        .curl(&["-H", "Host: internal.test", &format!("http://{up_c}/")])
        .await;
    assert_eq!(code, "403", "{body}");
    assert!(body.contains("private or link-local range"), "{body}");
    let resolve = format!("internal.test:443:{up_c}");
    let (code, _) = lab
        .curl(&["--resolve", &resolve, "https://internal.test/"])
        .await;
    assert_eq!(code, "000", "HTTPS to a private answer must be closed");

    // Whatever the policy, allow-all included, the private ranges stay out
    // of reach but for the blocks opted in: up_b is, up_c and the metadata
    // address are not. Opted in, they answer: the filter refused them.
    if forwarding {
        let opted = lab.private.clone();
        for policy in [json!("allow-all"), json!({"deny": ["evil.test"]})] {
            apply(&mut lab, policy.clone());
            let (code, _) = lab.curl(&[&format!("http://{up_b}:8080/")]).await;
            assert_eq!(code, "200", "{policy}: a block opted in");
            for addr in [up_c, METADATA] {
                let (code, _) = lab.curl(&[&format!("http://{addr}:8080/")]).await;
                assert_eq!(code, "000", "{policy} reached {addr}, not opted in");
            }
        }
        let mut blocks = opted.allowed().to_vec();
        blocks.extend([up_c, METADATA].map(|a| Cidr::host(IpAddr::V4(a))));
        lab.private = PrivateAccess::new(blocks).unwrap();
        apply(&mut lab, json!("allow-all"));
        for addr in [up_c, METADATA] {
            let (code, body) = lab.curl(&[&format!("http://{addr}:8080/")]).await;
            assert_eq!(
                (code.as_str(), body.as_str()),
                ("200", "netns upstream\n"),
                "{addr} opted in"
            );
        }
        // An allow list still decides about what is opted in.
        apply(&mut lab, json!({"allow": [format!("{up_c}:8080")]}));
        let (code, _) = lab.curl(&[&format!("http://{up_c}:8080/")]).await;
        assert_eq!(code, "200");
        let (code, _) = lab.curl(&[&format!("http://{METADATA}:8080/")]).await;
        assert_eq!(code, "000", "opted in but not in the allow list");
        lab.private = opted;
    }

    // A live change: deny-all in the registry refuses the next connection
    // at once, and the next question.
    apply(&mut lab, json!({"allow": ["allowed.test"]}));
    policies.set(sandbox, EgressPolicy::DenyAll);
    let (code, _) = lab.curl(&["-H", host, &format!("http://{up_a}/")]).await;
    assert_eq!(code, "403");
    let asked = dns.asked_total();
    let (_, out) = lab
        .in_sandbox(&["busybox", "nslookup", "allowed.test", DNS_TARGET])
        .await;
    assert!(!out.contains(&up_a.to_string()), "deny-all answered: {out}");
    assert_eq!(dns.asked_total(), asked);
    // And its chains reject everything else.
    apply(&mut lab, json!("deny-all"));
    if forwarding {
        let (code, _) = lab.curl(&[&format!("http://{up_b}:8080/")]).await;
        assert_eq!(code, "000");
    }
    let (code, _) = lab.curl(&["-H", host, &format!("http://{up_a}/")]).await;
    assert_eq!(code, "000", "deny-all: port 80 is rejected, not proxied");
}
