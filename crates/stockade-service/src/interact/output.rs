//! Process output as text: a byte buffer with a cap, and a UTF-8 decoder for
//! output that arrives in chunks (a character may be split between two).

/// Keeps the first `limit` bytes pushed into it and notes whether more came.
#[derive(Debug)]
pub struct Capped {
    buf: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Capped {
    pub fn new(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            limit,
            truncated: false,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        let room = self.limit.saturating_sub(self.buf.len());
        if bytes.len() > room {
            self.buf.extend_from_slice(&bytes[..room]);
            self.truncated = true;
        } else {
            self.buf.extend_from_slice(bytes);
        }
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The text so far (see [`lossy_text`]).
    pub fn text(&self) -> String {
        lossy_text(&self.buf, self.truncated)
    }
}

/// Bytes as text: invalid UTF-8 becomes U+FFFD; when `cut` (the bytes were
/// truncated), a character cut in half at the end is left out instead.
pub fn lossy_text(bytes: &[u8], cut: bool) -> String {
    let end = if cut {
        bytes.len() - incomplete_tail(bytes)
    } else {
        bytes.len()
    };
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// How many bytes at the end of `buf` are the start of a character whose
/// remaining bytes have not come yet.
fn incomplete_tail(buf: &[u8]) -> usize {
    let n = buf.len();
    for back in 1..=n.min(3) {
        let b = buf[n - back];
        if b & 0xC0 == 0x80 {
            continue; // a continuation byte: the lead byte is further back
        }
        let needed = match b {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if needed > back { back } else { 0 };
    }
    0
}

/// Decodes UTF-8 that arrives in chunks, holding back a character split
/// between chunks until its rest arrives (at most 3 bytes).
#[derive(Debug, Default)]
pub struct Utf8Decoder {
    held: Vec<u8>,
}

impl Utf8Decoder {
    /// The text of `chunk` (with what was held before), minus a trailing
    /// incomplete character.
    pub fn push(&mut self, chunk: &[u8]) -> String {
        self.held.extend_from_slice(chunk);
        let keep = incomplete_tail(&self.held);
        let rest = self.held.split_off(self.held.len() - keep);
        let text = String::from_utf8_lossy(&self.held).into_owned();
        self.held = rest;
        text
    }

    /// Whatever is still held (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        String::from_utf8_lossy(&held).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_keeps_the_first_bytes() {
        let mut c = Capped::new(5);
        c.push(b"abc");
        assert!(!c.truncated());
        c.push(b"defg");
        assert_eq!(c.text(), "abcde");
        assert!(c.truncated());
    }

    #[test]
    fn a_cut_character_is_left_out() {
        let mut c = Capped::new(4);
        c.push("ab🦀".as_bytes());
        assert_eq!(c.text(), "ab");
        assert_eq!(lossy_text("ab🦀".as_bytes(), false), "ab🦀");
        assert_eq!(lossy_text(&[b'a', 0xff, b'b'], false), "a\u{fffd}b");
    }

    #[test]
    fn chunks_split_inside_characters_decode_losslessly() {
        let text = "a é 🦀 ü z";
        let bytes = text.as_bytes();
        for size in 1..=5 {
            let mut d = Utf8Decoder::default();
            let mut out = String::new();
            for chunk in bytes.chunks(size) {
                out.push_str(&d.push(chunk));
            }
            out.push_str(&d.finish());
            assert_eq!(out, text, "chunks of {size}");
        }
        let mut d = Utf8Decoder::default();
        assert_eq!(d.push(&[b'x', 0xE2, 0x82]), "x");
        assert_eq!(d.finish(), "\u{fffd}");
        assert_eq!(d.push(&[0xff, b'y']), "\u{fffd}y");
    }
}
