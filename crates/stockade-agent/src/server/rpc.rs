//! The server side of Connect calls: unary, server-streaming and
//! client-streaming handlers over hyper, with codecs picked by content type.

use crate::body::{self, BoxBody, ChannelBody};
use crate::connect::{self, Code, Codec, ConnectError, EnvelopeBody, EnvelopeReader};
use crate::proto::Msg;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::future::Future;
use std::marker::PhantomData;

/// The largest unary request body.
const MAX_UNARY_BYTES: usize = connect::MAX_MESSAGE_BYTES;

/// The request's Content-Type, empty when absent or not text.
pub(super) fn content_type(req: &Request<Incoming>) -> String {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// A unary error response: the code's status and its JSON body.
pub fn error_response(e: &ConnectError) -> Response<BoxBody> {
    Response::builder()
        .status(
            StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        )
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body::full(e.to_json().to_string()))
        .expect("valid response")
}

fn unsupported_media(ct: &str, accepted: &str) -> Response<BoxBody> {
    Response::builder()
        .status(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        .header("accept-post", accepted)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body::full(
            ConnectError::new(
                Code::Unknown,
                format!("unsupported content type {ct:?}; use {accepted}"),
            )
            .to_json()
            .to_string(),
        ))
        .expect("valid response")
}

async fn read_limited(body: Incoming) -> Result<Bytes, ConnectError> {
    Limited::new(body, MAX_UNARY_BYTES)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| {
            ConnectError::new(
                Code::ResourceExhausted,
                format!("request body could not be read: {e}"),
            )
        })
}

/// Runs a unary call.
pub async fn unary<Req, Res, F, Fut>(req: Request<Incoming>, f: F) -> Response<BoxBody>
where
    Req: Msg,
    Res: Msg,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Res, ConnectError>>,
{
    let ct = content_type(&req);
    let Some(codec) = Codec::from_unary_content_type(&ct) else {
        return unsupported_media(&ct, "application/json, application/proto");
    };
    let result = async {
        let data = read_limited(req.into_body()).await?;
        let msg = codec.decode::<Req>(&data)?;
        f(msg).await
    }
    .await;
    match result {
        Ok(res) => Response::builder()
            .header(http::header::CONTENT_TYPE, codec.unary_content_type())
            .body(body::full(codec.encode(&res)))
            .expect("valid response"),
        Err(e) => error_response(&e),
    }
}

/// The sending half of a server stream.
pub struct Sink<Res> {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    codec: Codec,
    _res: PhantomData<fn(Res)>,
}

/// The client went away.
#[derive(Debug)]
pub struct Gone;

impl From<Gone> for ConnectError {
    fn from(_: Gone) -> Self {
        ConnectError::new(Code::Canceled, "the client went away")
    }
}

impl<Res: Msg> Sink<Res> {
    /// Sends one message (waits while the client's queue is full).
    pub async fn send(&self, m: &Res) -> Result<(), Gone> {
        let payload = self.codec.encode(m);
        self.tx
            .send(Ok(connect::envelope(0, &payload)))
            .await
            .map_err(|_| Gone)
    }

    /// Resolves when the client has gone away.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// Runs a server-streaming call: `f` sends messages into the sink; its
/// result becomes the end-of-stream message.
pub async fn server_stream<Req, Res, F, Fut>(req: Request<Incoming>, f: F) -> Response<BoxBody>
where
    Req: Msg,
    Res: Msg,
    F: FnOnce(Req, Sink<Res>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), ConnectError>> + Send + 'static,
{
    let ct = content_type(&req);
    let Some(codec) = Codec::from_stream_content_type(&ct) else {
        return unsupported_media(&ct, "application/connect+json, application/connect+proto");
    };
    let first = async {
        let data = read_limited(req.into_body()).await?;
        let mut reader = EnvelopeReader::default();
        reader.push(&data);
        let msg = match reader.next_envelope()? {
            Some((0, payload)) => codec.decode::<Req>(&payload)?,
            _ => {
                return Err(ConnectError::invalid(
                    "expected exactly one request message",
                ))
            }
        };
        if reader.has_partial() || reader.next_envelope()?.is_some() {
            return Err(ConnectError::invalid(
                "expected exactly one request message",
            ));
        }
        Ok(msg)
    }
    .await;
    let (tx, body) = ChannelBody::new(16);
    match first {
        Ok(msg) => {
            let sink = Sink {
                tx: tx.clone(),
                codec,
                _res: PhantomData,
            };
            tokio::spawn(async move {
                let result = f(msg, sink).await;
                let _ = tx
                    .send(Ok(connect::end_stream(result.err().as_ref())))
                    .await;
            });
        }
        Err(e) => {
            let _ = tx.try_send(Ok(connect::end_stream(Some(&e))));
        }
    }
    Response::builder()
        .header(http::header::CONTENT_TYPE, codec.stream_content_type())
        .body(body.boxed())
        .expect("valid response")
}

/// The messages of a client stream, read as they arrive.
pub struct MsgStream<Req>(EnvelopeBody<Req>);

impl<Req: Msg> MsgStream<Req> {
    /// The next message; `None` at the end of the request.
    pub async fn next(&mut self) -> Option<Result<Req, ConnectError>> {
        loop {
            match self.0.reader.next_envelope() {
                Err(e) => return Some(Err(e)),
                Ok(Some((flags, payload))) => {
                    if flags & connect::FLAG_END_STREAM != 0 {
                        continue;
                    }
                    return Some(self.0.decode(&payload));
                }
                Ok(None) => {}
            }
            if self.0.done {
                if self.0.reader.has_partial() {
                    self.0.reader = EnvelopeReader::default();
                    return Some(Err(ConnectError::invalid("request ended inside a message")));
                }
                return None;
            }
            match self.0.read_frame().await {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    self.0.done = true;
                    return Some(Err(ConnectError::new(
                        Code::Canceled,
                        format!("request body failed: {e}"),
                    )));
                }
                None => self.0.done = true,
            }
        }
    }
}

/// Runs a client-streaming call.
pub async fn client_stream<Req, Res, F, Fut>(req: Request<Incoming>, f: F) -> Response<BoxBody>
where
    Req: Msg,
    Res: Msg,
    F: FnOnce(MsgStream<Req>) -> Fut,
    Fut: Future<Output = Result<Res, ConnectError>>,
{
    let ct = content_type(&req);
    let Some(codec) = Codec::from_stream_content_type(&ct) else {
        return unsupported_media(&ct, "application/connect+json, application/connect+proto");
    };
    let stream = MsgStream(EnvelopeBody::new(req.into_body(), codec));
    let out = match f(stream).await {
        Ok(res) => {
            let mut out = connect::envelope(0, &codec.encode(&res)).to_vec();
            out.extend_from_slice(&connect::end_stream(None));
            out
        }
        Err(e) => connect::end_stream(Some(&e)).to_vec(),
    };
    Response::builder()
        .header(http::header::CONTENT_TYPE, codec.stream_content_type())
        .body(body::full(out))
        .expect("valid response")
}
