//! `GET /stockade/forward?port=N` with `Upgrade: stockade-tcp`: after the
//! `101` answer, the connection is a plain TCP connection to port `N` of
//! the sandbox (`127.0.0.1` inside it). This is how a server that is not on
//! the sandbox's Docker host reaches the sandbox's ports: through the one
//! port of the agent its host publishes, with the sandbox's token.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::{http_error, AgentState};
use crate::body::{self, BoxBody};

/// The `Upgrade` protocol a forward asks for.
pub const PROTOCOL: &str = "stockade-tcp";

/// The port of `?port=N` (1 to 65535).
fn port_of(query: Option<&str>) -> Option<u16> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix("port="))?
        .parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
}

/// Answers a forward request (the token was checked by the caller).
pub async fn forward(_state: Arc<AgentState>, mut req: Request<Incoming>) -> Response<BoxBody> {
    let Some(port) = port_of(req.uri().query()) else {
        return http_error(StatusCode::BAD_REQUEST, "port: give ?port=1..65535");
    };
    let asked = req
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(PROTOCOL));
    if !asked {
        return http_error(
            StatusCode::UPGRADE_REQUIRED,
            format!("a forward needs Connection: Upgrade and Upgrade: {PROTOCOL}"),
        );
    }
    // Connected before the answer, so that a refused port is an error the
    // caller can tell apart (502), not a connection that closes at once.
    let upstream = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => s,
        Err(e) => {
            return http_error(
                StatusCode::BAD_GATEWAY,
                format!("port {port} in the sandbox: {e}"),
            )
        }
    };
    let _ = upstream.set_nodelay(true);
    let upgraded = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(client) = upgraded.await else {
            return;
        };
        let mut client = TokioIo::new(client);
        let mut upstream = upstream;
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(hyper::header::CONNECTION, "upgrade")
        .header(hyper::header::UPGRADE, PROTOCOL)
        .body(body::empty())
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::port_of;

    #[test]
    fn ports() {
        assert_eq!(port_of(Some("port=8080")), Some(8080));
        assert_eq!(port_of(Some("a=1&port=22")), Some(22));
        for bad in [
            None,
            Some(""),
            Some("port=0"),
            Some("port=70000"),
            Some("port=x"),
        ] {
            assert_eq!(port_of(bad), None, "{bad:?}");
        }
    }
}
