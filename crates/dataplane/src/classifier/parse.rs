//! Text forms of the classifier's small values, as Meridio-2's L34Route
//! writes them: port ranges (`80`, `1000-2000`, `any`) and byte matches
//! (`tcp[13:1] & 0x02 = 0x02`). Both parsers check what nfqlb checks, so a
//! route Meridio-2 accepts means the same here and one nfqlb would refuse is
//! refused with a message saying why.

use std::str::FromStr;

use super::model::{ByteMatch, PortRange, RuleProto};

impl FromStr for PortRange {
    type Err = String;

    /// `N` (one port), `N-M` (N <= M, both 0-65535) or `any` (0-65535);
    /// blanks around the whole and around `-` are ignored.
    fn from_str(s: &str) -> Result<Self, String> {
        const FORMS: &str = "expected N, N-M or any";
        let text = s.trim();
        if text.is_empty() {
            return Err(format!("port range {s:?} is empty: {FORMS}"));
        }
        if text == "any" {
            return Ok(PortRange::ANY);
        }
        let port = |p: &str| -> Result<u16, String> {
            let p = p.trim();
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("port range {text}: {p:?} is not a port: {FORMS}"));
            }
            p.parse::<u16>()
                .map_err(|_| format!("port range {text}: {p} is not a port (0-65535)"))
        };
        match text.split_once('-') {
            None => port(text).map(|p| PortRange { first: p, last: p }),
            Some((a, b)) => {
                let (first, last) = (port(a)?, port(b)?);
                if first > last {
                    return Err(format!("port range {text}: first port above last"));
                }
                Ok(PortRange { first, last })
            }
        }
    }
}

/// A cursor over a byte match's text, following Meridio-2's regex
/// `^(sctp|tcp|udp)\[[0-9]+ *: *[124]\]( *& *0x[0-9a-f]+)? *= *([0-9]+|0x[0-9a-f]+)$`.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    /// Skips spaces (only spaces: the regex allows no other blank).
    fn spaces(&mut self) {
        while self.rest().starts_with(' ') {
            self.at += 1;
        }
    }

    /// Consumes `word` if the text continues with it.
    fn eat(&mut self, word: &str) -> bool {
        if self.rest().starts_with(word) {
            self.at += word.len();
            true
        } else {
            false
        }
    }

    /// The longest run of bytes satisfying `ok` (possibly empty).
    fn take(&mut self, ok: impl Fn(u8) -> bool) -> &'a str {
        let len = self.rest().bytes().take_while(|&b| ok(b)).count();
        let run = &self.rest()[..len];
        self.at += len;
        run
    }

    /// What is left, for messages: `end of text` or `"xyz"`.
    fn found(&self) -> String {
        match self.rest() {
            "" => "the end of the text".to_string(),
            r => format!("{r:?}"),
        }
    }
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// A decimal or hex digit string as a number; None when above u32::MAX.
fn number(digits: &str, radix: u32) -> Option<u32> {
    let mut n: u64 = 0;
    for c in digits.chars() {
        n = n * u64::from(radix) + u64::from(c.to_digit(radix)?);
        if n > u64::from(u32::MAX) {
            return None;
        }
    }
    Some(n as u32)
}

/// All ones of `len` bytes (1, 2 or 4).
fn full_mask(len: u8) -> u32 {
    if len >= 4 {
        u32::MAX
    } else {
        (1u32 << (8 * u32::from(len))) - 1
    }
}

impl FromStr for ByteMatch {
    type Err = String;

    /// Meridio-2's tcpdump-like form: `PROTO[OFFSET:LEN]`, an optional
    /// `& 0xMASK`, then `= VALUE` (decimal or `0x` hex, lower case), with
    /// spaces allowed around `:`, `&` and `=` as the API's regex allows.
    /// `OFFSET + LEN` must lie inside the protocol's fixed header
    /// ([`RuleProto::header_len`]), and the mask (all ones of LEN bytes by
    /// default) and value must fit in LEN bytes, as nfqlb requires.
    fn from_str(s: &str) -> Result<Self, String> {
        let err = |why: String| format!("byte match {s:?}: {why}");
        let mut c = Cursor { text: s, at: 0 };
        let proto = if c.eat("sctp") {
            RuleProto::Sctp
        } else if c.eat("tcp") {
            RuleProto::Tcp
        } else if c.eat("udp") {
            RuleProto::Udp
        } else {
            return Err(err(
                "must start with sctp, tcp or udp (lower case), as in tcp[13:1]=2".to_string(),
            ));
        };
        if !c.eat("[") {
            return Err(err(format!(
                "expected [ after {}, found {}",
                proto.as_str(),
                c.found()
            )));
        }
        let offset_digits = c.take(|b| b.is_ascii_digit());
        if offset_digits.is_empty() {
            return Err(err(format!(
                "expected the byte offset (digits) after [, found {}",
                c.found()
            )));
        }
        c.spaces();
        if !c.eat(":") {
            return Err(err(format!(
                "expected : after the offset, found {}",
                c.found()
            )));
        }
        c.spaces();
        let len_digits = c.take(|b| b.is_ascii_digit());
        let len: u8 = match len_digits {
            "1" => 1,
            "2" => 2,
            "4" => 4,
            "" => {
                return Err(err(format!(
                    "expected the length (1, 2 or 4) after :, found {}",
                    c.found()
                )));
            }
            other => return Err(err(format!("length {other} is not 1, 2 or 4"))),
        };
        if !c.eat("]") {
            return Err(err(format!(
                "expected ] after the length, found {}",
                c.found()
            )));
        }
        let header = proto.header_len();
        let offset = number(offset_digits, 10)
            .filter(|o| u64::from(*o) + u64::from(len) <= u64::from(header))
            .ok_or_else(|| {
                err(format!(
                    "{}[{offset_digits}:{len}] reads past the {header}-byte {} header \
                     (offset + length must be at most {header})",
                    proto.as_str(),
                    proto
                ))
            })? as u8;
        let full = full_mask(len);
        let bytes = if len == 1 { "byte" } else { "bytes" };
        c.spaces();
        let mut mask = full;
        if c.eat("&") {
            c.spaces();
            if !c.eat("0x") {
                return Err(err(format!(
                    "expected a hex mask (0x...) after &, found {}",
                    c.found()
                )));
            }
            let hex = c.take(is_lower_hex);
            if hex.is_empty() {
                return Err(err(format!(
                    "expected hex digits (0-9, a-f) after 0x, found {}",
                    c.found()
                )));
            }
            mask = number(hex, 16)
                .filter(|m| *m <= full)
                .ok_or_else(|| err(format!("mask 0x{hex} does not fit in {len} {bytes}")))?;
            c.spaces();
        }
        if !c.eat("=") {
            return Err(err(format!(
                "expected = (or & 0xMASK) after ], found {}",
                c.found()
            )));
        }
        c.spaces();
        let (digits, radix, shown) = if c.eat("0x") {
            let hex = c.take(is_lower_hex);
            if hex.is_empty() {
                return Err(err(format!(
                    "expected hex digits (0-9, a-f) after 0x, found {}",
                    c.found()
                )));
            }
            (hex, 16, format!("0x{hex}"))
        } else {
            let dec = c.take(|b| b.is_ascii_digit());
            if dec.is_empty() {
                return Err(err(format!(
                    "expected a value (decimal or 0x hex) after =, found {}",
                    c.found()
                )));
            }
            (dec, 10, dec.to_string())
        };
        if !c.rest().is_empty() {
            return Err(err(format!("unexpected {} after the value", c.found())));
        }
        let value = number(digits, radix)
            .filter(|v| *v <= full)
            .ok_or_else(|| err(format!("value {shown} does not fit in {len} {bytes}")))?;
        Ok(ByteMatch {
            proto,
            offset,
            len,
            mask,
            value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(first: u16, last: u16) -> PortRange {
        PortRange { first, last }
    }

    #[test]
    fn port_range_forms() {
        assert_eq!("80".parse(), Ok(pr(80, 80)));
        assert_eq!(" 80 ".parse(), Ok(pr(80, 80)));
        assert_eq!("0".parse(), Ok(pr(0, 0)));
        assert_eq!("65535".parse(), Ok(pr(65535, 65535)));
        assert_eq!("1000-2000".parse(), Ok(pr(1000, 2000)));
        assert_eq!(" 1000 - 2000 ".parse(), Ok(pr(1000, 2000)));
        assert_eq!("80-80".parse(), Ok(pr(80, 80)));
        assert_eq!("any".parse(), Ok(PortRange::ANY));
        assert_eq!(" any ".parse(), Ok(PortRange::ANY));
        assert_eq!("0-65535".parse(), Ok(PortRange::ANY));
    }

    #[test]
    fn port_range_errors() {
        let e = |s: &str| s.parse::<PortRange>().unwrap_err();
        assert_eq!(e("90-80"), "port range 90-80: first port above last");
        assert!(
            e("65536").contains("65536 is not a port (0-65535)"),
            "{}",
            e("65536")
        );
        assert!(
            e("1-99999").contains("99999 is not a port"),
            "{}",
            e("1-99999")
        );
        assert!(e("").contains("is empty"), "{}", e(""));
        assert!(e("  ").contains("is empty"));
        assert!(
            e("http").contains("\"http\" is not a port"),
            "{}",
            e("http")
        );
        assert!(e("-5").contains("\"\" is not a port"), "{}", e("-5"));
        assert!(e("5-").contains("\"\" is not a port"));
        assert!(
            e("1-2-3").contains("\"2-3\" is not a port"),
            "{}",
            e("1-2-3")
        );
        assert!(e("+5").contains("is not a port"));
        assert!(e("ANY").contains("expected N, N-M or any"));
    }

    #[test]
    fn port_range_display_round_trips() {
        for r in [pr(0, 0), pr(80, 80), pr(1, 65535), PortRange::ANY, pr(5, 6)] {
            assert_eq!(r.to_string().parse(), Ok(r), "{r}");
        }
    }

    fn bm(proto: RuleProto, offset: u8, len: u8, mask: u32, value: u32) -> ByteMatch {
        ByteMatch {
            proto,
            offset,
            len,
            mask,
            value,
        }
    }

    #[test]
    fn byte_match_forms() {
        use RuleProto::*;
        let p = |s: &str| s.parse::<ByteMatch>().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p("sctp[4:4]=0"), bm(Sctp, 4, 4, u32::MAX, 0));
        assert_eq!(p("tcp[13:1]&0x02=0x02"), bm(Tcp, 13, 1, 2, 2));
        assert_eq!(p("tcp[13 : 1] & 0x12 = 18"), bm(Tcp, 13, 1, 0x12, 18));
        assert_eq!(p("udp[0:2]=53"), bm(Udp, 0, 2, 0xffff, 53));
        assert_eq!(p("udp[6:2] =0xffff"), bm(Udp, 6, 2, 0xffff, 0xffff));
        assert_eq!(p("udp[6:2]= 0x0"), bm(Udp, 6, 2, 0xffff, 0));
        assert_eq!(
            p("tcp[16:4]&0xffffffff=4294967295"),
            bm(Tcp, 16, 4, u32::MAX, u32::MAX)
        );
        assert_eq!(p("sctp[8:4]&0x0=0"), bm(Sctp, 8, 4, 0, 0));
        // Leading zeros are digits like any other.
        assert_eq!(p("tcp[013:1]=007"), bm(Tcp, 13, 1, 0xff, 7));
        assert_eq!(p("tcp[0:1]=0x00000001"), bm(Tcp, 0, 1, 0xff, 1));
    }

    #[test]
    fn byte_match_errors() {
        let e = |s: &str| s.parse::<ByteMatch>().unwrap_err();
        let has = |s: &str, want: &str| {
            let got = e(s);
            assert!(got.contains(want), "{s}: {got:?} lacks {want:?}");
            assert!(got.starts_with(&format!("byte match {s:?}: ")), "{got}");
        };
        has("icmp[0:1]=8", "must start with sctp, tcp or udp");
        has("TCP[0:1]=8", "must start with sctp, tcp or udp");
        has(" tcp[0:1]=8", "must start with sctp, tcp or udp");
        has("tcp(0:1)=8", "expected [ after tcp");
        has("tcp[ 0:1]=8", "expected the byte offset");
        has("tcp[0;1]=8", "expected : after the offset");
        has("tcp[0:]=8", "expected the length (1, 2 or 4)");
        has("tcp[0:3]=8", "length 3 is not 1, 2 or 4");
        has("tcp[0:12]=8", "length 12 is not 1, 2 or 4");
        has("tcp[0:1 ]=8", "expected ] after the length");
        has("tcp[19:2]=8", "tcp[19:2] reads past the 20-byte TCP header");
        has("udp[8:1]=0", "reads past the 8-byte UDP header");
        has("sctp[9:4]=0", "reads past the 12-byte SCTP header");
        has("tcp[99999999999:1]=0", "reads past the 20-byte TCP header");
        has("tcp[0:1]&2=2", "expected a hex mask (0x...) after &");
        has("tcp[0:1]&0x=2", "expected hex digits");
        has("tcp[0:1]&0xFF=2", "expected hex digits");
        has("tcp[0:1]&0x100=2", "mask 0x100 does not fit in 1 byte");
        has("tcp[0:2]&0x10000=2", "mask 0x10000 does not fit in 2 bytes");
        has("tcp[0:4]&0x100000000=2", "does not fit in 4 bytes");
        has("tcp[0:1]", "expected = (or & 0xMASK) after ]");
        has("tcp[0:1]==1", "expected a value");
        has(
            "tcp[0:1]=",
            "expected a value (decimal or 0x hex) after =, found the end",
        );
        has("tcp[0:1]=0x", "expected hex digits");
        has("tcp[0:1]=0xAB", "expected hex digits");
        has("tcp[0:1]=256", "value 256 does not fit in 1 byte");
        has("tcp[0:2]=0x10000", "value 0x10000 does not fit in 2 bytes");
        has(
            "tcp[0:4]=4294967296",
            "value 4294967296 does not fit in 4 bytes",
        );
        has("tcp[0:1]=1 ", "unexpected \" \" after the value");
        has("tcp[0:1]=1x", "unexpected \"x\" after the value");
        has("tcp[0:1]=-1", "expected a value");
    }

    #[test]
    fn byte_match_display_round_trips() {
        let mut n = 0;
        for proto in [RuleProto::Tcp, RuleProto::Udp, RuleProto::Sctp] {
            for len in [1u8, 2, 4] {
                for offset in 0..=proto.header_len() - len {
                    let full = full_mask(len);
                    for mask in [full, 0, 1, 0x12, full >> 1, full & 0xf0f0_f0f0] {
                        for value in [0, 1, 9, 10, 0x12, full, full >> 3] {
                            let x = bm(proto, offset, len, mask, value);
                            let text = x.to_string();
                            assert_eq!(text.parse::<ByteMatch>(), Ok(x), "{text}");
                            n += 1;
                        }
                    }
                }
            }
        }
        assert!(n > 1000);
        assert_eq!(
            bm(RuleProto::Tcp, 13, 1, 2, 2).to_string(),
            "tcp[13:1]&0x2=2"
        );
    }
}
