//! A streaming `multipart/form-data` reader: parts come out one at a time
//! and their content in chunks, holding at most one delimiter's worth of
//! bytes beyond what was handed out.

use bytes::{Buf, Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;

/// Headers of a part longer than this are refused.
const MAX_HEADER_BYTES: usize = 16 << 10;

/// The headers of one part that matter here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartHeaders {
    pub name: Option<String>,
    pub filename: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Preamble,
    Headers,
    Content,
    Done,
}

/// The boundary of a `multipart/form-data` content type.
pub fn boundary(content_type: &str) -> Option<String> {
    let mut parts = content_type.split(';');
    if !parts
        .next()?
        .trim()
        .eq_ignore_ascii_case("multipart/form-data")
    {
        return None;
    }
    parts
        .find_map(|p| {
            let (k, v) = p.trim().split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("boundary")
                .then(|| v.trim().trim_matches('"').to_owned())
        })
        .filter(|b| !b.is_empty() && b.len() <= 200)
}

/// Reads a multipart body.
pub struct Multipart<B> {
    body: B,
    buf: BytesMut,
    /// `\r\n--boundary`
    delimiter: Vec<u8>,
    state: State,
    eof: bool,
}

/// A malformed body or a failed read.
#[derive(Debug)]
pub struct MultipartError(pub String);

impl std::fmt::Display for MultipartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn header_param(value: &str, key: &str) -> Option<String> {
    value.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case(key)
            .then(|| v.trim().trim_matches('"').replace("\\\"", "\""))
    })
}

impl<B> Multipart<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    pub fn new(body: B, boundary: &str) -> Self {
        Self {
            body,
            buf: BytesMut::new(),
            delimiter: format!("\r\n--{boundary}").into_bytes(),
            state: State::Preamble,
            eof: false,
        }
    }

    async fn fill(&mut self) -> Result<bool, MultipartError> {
        if self.eof {
            return Ok(false);
        }
        loop {
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            self.buf.extend_from_slice(&data);
                            return Ok(true);
                        }
                    }
                }
                Some(Err(e)) => return Err(MultipartError(format!("reading the body: {e}"))),
                None => {
                    self.eof = true;
                    return Ok(false);
                }
            }
        }
    }

    /// Moves to the next part and reads its headers; `None` after the last.
    pub async fn next_part(&mut self) -> Result<Option<PartHeaders>, MultipartError> {
        // Skip what is left of the current part.
        while self.state == State::Content {
            self.next_chunk().await?;
        }
        if self.state == State::Preamble {
            // The first delimiter may come without its leading CRLF.
            let first = &self.delimiter[2..].to_vec();
            loop {
                if let Some(pos) = memchr::memmem::find(&self.buf, first) {
                    self.buf.advance(pos + first.len());
                    self.state = State::Headers;
                    break;
                }
                if !self.fill().await? {
                    return Err(MultipartError("no multipart boundary found".into()));
                }
            }
        }
        if self.state == State::Done {
            return Ok(None);
        }
        // After a delimiter: `--` ends the body, CRLF starts a part.
        loop {
            if self.buf.len() >= 2 {
                break;
            }
            if !self.fill().await? {
                return Err(MultipartError("body ended after a boundary".into()));
            }
        }
        if &self.buf[..2] == b"--" {
            self.state = State::Done;
            return Ok(None);
        }
        let end = loop {
            if let Some(pos) = memchr::memmem::find(&self.buf, b"\r\n\r\n") {
                break pos;
            }
            if self.buf.len() > MAX_HEADER_BYTES {
                return Err(MultipartError("part headers are too long".into()));
            }
            if !self.fill().await? {
                return Err(MultipartError("body ended inside part headers".into()));
            }
        };
        let raw = self.buf.split_to(end + 4);
        let text = String::from_utf8_lossy(&raw);
        let mut headers = PartHeaders::default();
        for line in text.split("\r\n") {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            if k.trim().eq_ignore_ascii_case("content-disposition") {
                headers.name = header_param(v, "name");
                headers.filename = header_param(v, "filename");
            }
        }
        self.state = State::Content;
        Ok(Some(headers))
    }

    /// The next chunk of the current part's content; `None` at its end.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, MultipartError> {
        if self.state != State::Content {
            return Ok(None);
        }
        loop {
            if let Some(pos) = memchr::memmem::find(&self.buf, &self.delimiter) {
                if pos > 0 {
                    return Ok(Some(self.buf.split_to(pos).freeze()));
                }
                self.buf.advance(self.delimiter.len());
                self.state = State::Headers;
                return Ok(None);
            }
            // Everything but a possible delimiter prefix can go out.
            let keep = self.delimiter.len() - 1;
            if self.buf.len() > keep {
                let n = self.buf.len() - keep;
                return Ok(Some(self.buf.split_to(n).freeze()));
            }
            if !self.fill().await? {
                return Err(MultipartError("body ended inside a part".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};

    const BODY: &str = "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a/b.txt\"\r\nContent-Type: application/octet-stream\r\n\r\nhello\r\n-- not a boundary\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c\"\r\n\r\n\r\n--XyZ--\r\n";

    async fn read_all<B>(mut m: Multipart<B>) -> Vec<(PartHeaders, Vec<u8>)>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let mut out = Vec::new();
        while let Some(h) = m.next_part().await.unwrap() {
            let mut data = Vec::new();
            while let Some(c) = m.next_chunk().await.unwrap() {
                data.extend_from_slice(&c);
            }
            out.push((h, data));
        }
        out
    }

    #[tokio::test]
    async fn parts_come_out_whole_or_byte_by_byte() {
        let whole = read_all(Multipart::new(Full::new(Bytes::from(BODY)), "XyZ")).await;
        let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = BODY
            .bytes()
            .map(|b| Ok(http_body::Frame::data(Bytes::from(vec![b]))))
            .collect();
        let bytewise = read_all(Multipart::new(
            StreamBody::new(futures_util::stream::iter(frames)),
            "XyZ",
        ))
        .await;
        assert_eq!(whole, bytewise);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].0.filename.as_deref(), Some("a/b.txt"));
        assert_eq!(whole[0].0.name.as_deref(), Some("file"));
        assert_eq!(whole[0].1, b"hello\r\n-- not a boundary");
        assert_eq!(whole[1].1, b"");
    }

    #[tokio::test]
    async fn truncated_bodies_are_errors() {
        let mut m = Multipart::new(Full::new(Bytes::from(&BODY[..60])), "XyZ");
        m.next_part().await.unwrap_err();
        assert_eq!(
            boundary("multipart/form-data; boundary=\"q\""),
            Some("q".into())
        );
        assert_eq!(boundary("text/plain; boundary=q"), None);
    }
}
