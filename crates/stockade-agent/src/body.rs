//! HTTP bodies shared by the server and the client: a whole buffer, and a
//! body fed through a bounded channel (streams, downloads).

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// The body type of every response (and of client requests).
pub type BoxBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// A whole body.
pub fn full(data: impl Into<Bytes>) -> BoxBody {
    Full::new(data.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An empty body.
pub fn empty() -> BoxBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A body whose chunks arrive through a channel; an `Err` ends it with an
/// error (the connection is then cut, so a truncated transfer shows).
pub struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    size: Option<u64>,
}

impl ChannelBody {
    /// A channel of `capacity` chunks and the body reading it.
    pub fn new(capacity: usize) -> (mpsc::Sender<Result<Bytes, std::io::Error>>, Self) {
        let (tx, rx) = mpsc::channel(capacity);
        (tx, Self { rx, size: None })
    }

    /// Declares the exact length (sent as `Content-Length`).
    pub fn with_size(mut self, size: u64) -> Self {
        self.size = Some(size);
        self
    }

    pub fn boxed(self) -> BoxBody {
        BodyExt::boxed_unsync(self)
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.rx
            .poll_recv(cx)
            .map(|chunk| chunk.map(|r| r.map(Frame::data)))
    }

    fn size_hint(&self) -> SizeHint {
        match self.size {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
