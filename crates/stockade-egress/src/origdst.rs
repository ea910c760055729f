//! Where a redirected connection was going: `SO_ORIGINAL_DST` for
//! connections the packet filter redirected to the proxy, or anything else
//! that knows (tests, other redirect mechanisms).

use std::io;
use std::net::SocketAddr;

use socket2::SockRef;
use tokio::net::TcpStream;

/// Finds the destination a client dialled before its connection was
/// redirected to the proxy.
pub trait OriginalDst: Send + Sync + 'static {
    fn original_dst(&self, conn: &TcpStream) -> io::Result<SocketAddr>;
}

/// Functions (and closures) are lookups too.
impl<F> OriginalDst for F
where
    F: Fn(&TcpStream) -> io::Result<SocketAddr> + Send + Sync + 'static,
{
    fn original_dst(&self, conn: &TcpStream) -> io::Result<SocketAddr> {
        self(conn)
    }
}

/// The destination netfilter recorded for a connection it `REDIRECT`ed or
/// `DNAT`ed (`SO_ORIGINAL_DST`, or `IP6T_SO_ORIGINAL_DST` for IPv6). For a
/// connection that was not redirected it is the connection's own local
/// address.
#[derive(Debug, Clone, Copy, Default)]
pub struct SoOriginalDst;

impl OriginalDst for SoOriginalDst {
    fn original_dst(&self, conn: &TcpStream) -> io::Result<SocketAddr> {
        let local = conn.local_addr()?;
        let socket = SockRef::from(conn);
        let addr = if local.ip().to_canonical().is_ipv4() {
            socket.original_dst_v4()?
        } else {
            socket.original_dst_v6()?
        };
        addr.as_socket().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "SO_ORIGINAL_DST gave no IP socket address",
            )
        })
    }
}
