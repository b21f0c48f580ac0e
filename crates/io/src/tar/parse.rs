//! Reading tar headers: a push parser that indexes an archive from its headers alone (the data
//! of regular members is skipped, or sought over in a file), and the WebDataset rule that
//! groups members into samples by key.
//!
//! Formats: ustar (with its name prefix), GNU (long names `L`, long links `K`, base-256 sizes)
//! and pax (`x` headers: `path` and `size`; global `g` headers are read and ignored). Members
//! that are not regular files (directories, links, devices) are indexed as nothing.

use std::fmt;

/// The size of a tar block.
pub(crate) const BLOCK: u64 = 512;

/// One regular member of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's full name (after long-name and pax headers).
    pub name: String,
    /// The offset of the member's first header block: its own, or the first long-name or pax
    /// header that precedes it.
    pub header: u64,
    /// The offset of its data.
    pub data: u64,
    /// The size of its data.
    pub size: u64,
}

impl Member {
    /// The offset just past its data (saturated: a checked index never gets there).
    pub fn end(&self) -> u64 {
        self.data.saturating_add(self.size)
    }
}

/// What is wrong with an archive, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    /// The offset of the block or member the error is about.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
    /// The archive ended early (as opposed to a malformed header).
    pub truncated: bool,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

fn malformed(offset: u64, message: impl Into<String>) -> ParseError {
    ParseError {
        offset,
        message: message.into(),
        truncated: false,
    }
}

/// The largest long-name or pax header kept in memory (a larger one is malformed).
const MAX_EXTENSION: u64 = 1 << 20;

/// What the parser reads next.
#[derive(Debug)]
enum State {
    /// A header block; `filled` bytes of it are in `block`.
    Header { filled: usize },
    /// The data of an extension header, gathered into `extension`, then its padding.
    Extension { kind: u8, remaining: u64, pad: u64 },
    /// Bytes to pass over: a member's data and padding.
    Skip { remaining: u64 },
    /// The end-of-archive block was read.
    Done,
}

/// What the next regular member takes from the extension headers before it.
#[derive(Debug, Default)]
struct Pending {
    /// The offset of the first extension header of the member.
    start: Option<u64>,
    name: Option<String>,
    size: Option<u64>,
}

/// Indexes an archive from its bytes, fed in order by [`Indexer::feed`]; the bytes of
/// [`Indexer::skippable`] may be passed over with [`Indexer::skip`] instead of being fed.
#[derive(Debug)]
pub(crate) struct Indexer {
    /// The offset of the next byte.
    pos: u64,
    state: State,
    block: Box<[u8; 512]>,
    extension: Vec<u8>,
    pending: Pending,
    members: Vec<Member>,
    /// A fragment (one sample's bytes) has no end-of-archive block and may end without the
    /// padding of its last member.
    fragment: bool,
    /// The archive's size, if known: no member's data may end past it.
    limit: u64,
}

impl Indexer {
    /// A parser of a whole archive, which must end with an end-of-archive block.
    pub(crate) fn new() -> Indexer {
        Indexer {
            pos: 0,
            state: State::Header { filled: 0 },
            block: Box::new([0; 512]),
            extension: Vec::new(),
            pending: Pending::default(),
            members: Vec::new(),
            fragment: false,
            limit: u64::MAX,
        }
    }

    /// The same parser, for an archive (or fragment) of `size` bytes: a member whose data
    /// would end past it is malformed, whatever its header claims.
    pub(crate) fn with_size(self, size: u64) -> Indexer {
        Indexer {
            limit: size,
            ..self
        }
    }

    /// A parser of a fragment: consecutive members of an archive, from a header block to the
    /// end of a member's data.
    pub(crate) fn fragment() -> Indexer {
        Indexer {
            fragment: true,
            ..Indexer::new()
        }
    }

    /// Whether the end-of-archive block was read (nothing more is needed).
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// The offset of the next byte the parser expects.
    #[cfg_attr(not(feature = "file"), allow(dead_code))]
    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// How many of the next bytes the parser does not need to see.
    #[cfg_attr(not(feature = "file"), allow(dead_code))]
    pub(crate) fn skippable(&self) -> u64 {
        match self.state {
            State::Skip { remaining } => remaining,
            _ => 0,
        }
    }

    /// How many bytes the parser needs before it can tell what comes next (at least 1 unless
    /// done): the rest of a header block, of an extension header, or of a skipped member.
    #[cfg_attr(not(feature = "file"), allow(dead_code))]
    pub(crate) fn wanted(&self) -> u64 {
        match self.state {
            State::Header { filled } => BLOCK - filled as u64,
            State::Extension { remaining, pad, .. } => remaining + pad,
            State::Skip { remaining } => remaining,
            State::Done => 0,
        }
    }

    /// The members found since the last call (a reader that keeps no index takes them as
    /// their headers arrive).
    pub(crate) fn take_members(&mut self) -> Vec<Member> {
        std::mem::take(&mut self.members)
    }

    /// Passes over `n` bytes, at most [`Indexer::skippable`].
    pub(crate) fn skip(&mut self, n: u64) {
        if let State::Skip { remaining } = &mut self.state {
            let n = n.min(*remaining);
            *remaining -= n;
            self.pos += n;
            if *remaining == 0 {
                self.state = State::Header { filled: 0 };
            }
        }
    }

    /// Parses the next bytes of the archive; what follows an end-of-archive block is ignored.
    pub(crate) fn feed(&mut self, mut input: &[u8]) -> Result<(), ParseError> {
        while !input.is_empty() {
            match &mut self.state {
                State::Done => return Ok(()),
                State::Skip { remaining } => {
                    let n = (*remaining).min(input.len() as u64);
                    input = &input[n as usize..];
                    self.skip(n);
                }
                State::Header { filled } => {
                    let n = (BLOCK as usize - *filled).min(input.len());
                    self.block[*filled..*filled + n].copy_from_slice(&input[..n]);
                    *filled += n;
                    input = &input[n..];
                    if *filled == BLOCK as usize {
                        self.header()?;
                    }
                }
                State::Extension {
                    kind,
                    remaining,
                    pad,
                } => {
                    let n = (*remaining).min(input.len() as u64) as usize;
                    self.extension.extend_from_slice(&input[..n]);
                    *remaining -= n as u64;
                    input = &input[n..];
                    self.pos += n as u64;
                    if *remaining == 0 {
                        let (kind, pad) = (*kind, *pad);
                        let start = self.pos - self.extension.len() as u64 - BLOCK;
                        self.extension_done(kind, start)?;
                        self.state = if pad > 0 {
                            State::Skip { remaining: pad }
                        } else {
                            State::Header { filled: 0 }
                        };
                    }
                }
            }
        }
        Ok(())
    }

    /// The members found, once the input has ended: an error if it ended early.
    pub(crate) fn finish(self) -> Result<Vec<Member>, ParseError> {
        let end = match self.state {
            State::Header { filled } => self.pos + filled as u64,
            _ => self.pos,
        };
        let truncated = |what: &str| ParseError {
            offset: end,
            message: format!("the archive is truncated: it ends {what}"),
            truncated: true,
        };
        match self.state {
            State::Done => Ok(self.members),
            State::Header { filled: 0 } if self.fragment => Ok(self.members),
            // A fragment ends with its last member's data, before the padding.
            State::Skip { remaining } if self.fragment && self.data_ended(remaining) => {
                Ok(self.members)
            }
            State::Header { filled: 0 } => Err(truncated("without an end-of-archive block")),
            State::Header { .. } => Err(truncated("inside a header block")),
            State::Extension { .. } => Err(truncated("inside an extended header")),
            State::Skip { .. } => Err(truncated("inside a member's data")),
        }
    }

    /// Whether the `remaining` bytes to skip are only the padding of the last member.
    fn data_ended(&self, remaining: u64) -> bool {
        self.members
            .last()
            .is_some_and(|m| self.pos >= m.end() && remaining < BLOCK)
    }

    /// Reads the header block just filled, at offset `self.pos`.
    fn header(&mut self) -> Result<(), ParseError> {
        let at = self.pos;
        let block = &*self.block;
        self.pos += BLOCK;
        if block.iter().all(|&b| b == 0) {
            self.state = State::Done;
            return Ok(());
        }
        check_sum(block, at)?;
        let header_size = number(&block[124..136])
            .ok_or_else(|| malformed(at, "the header's size field is not a number"))?;
        let kind = block[156];
        let padded = |size: u64| size.div_ceil(BLOCK) * BLOCK;
        match kind {
            b'L' | b'x' | b'K' | b'g' => {
                if header_size > MAX_EXTENSION {
                    return Err(malformed(
                        at,
                        format!("an extended header of {header_size} bytes"),
                    ));
                }
                self.extension.clear();
                let pad = padded(header_size) - header_size;
                if header_size == 0 {
                    self.extension_done(kind, at)?;
                    self.state = State::Header { filled: 0 };
                } else {
                    self.state = State::Extension {
                        kind,
                        remaining: header_size,
                        pad,
                    };
                }
                return Ok(());
            }
            _ => {}
        }
        let pending = std::mem::take(&mut self.pending);
        let size = pending.size.unwrap_or(header_size);
        // Links, directories, devices and fifos announce a size but store no data.
        let stored = if matches!(kind, b'1' | b'2' | b'3' | b'4' | b'5' | b'6') {
            0
        } else {
            // A claimed size is checked before any offset is computed from it.
            // Past a known end, the archive was cut (or the header lies): it is truncated.
            let past = || match self.limit {
                u64::MAX => malformed(
                    at,
                    format!("a member of {size} bytes, more than any archive holds"),
                ),
                limit => ParseError {
                    offset: limit,
                    message: format!(
                        "the archive is truncated: it ends inside a member's data (its \
                         header at byte {at} gives {size} bytes)"
                    ),
                    truncated: true,
                },
            };
            match self.pos.checked_add(size) {
                Some(end) if end <= self.limit => {}
                _ => return Err(past()),
            }
            size.div_ceil(BLOCK)
                .checked_mul(BLOCK)
                .filter(|&p| self.pos.checked_add(p).is_some())
                .ok_or_else(past)?
        };
        // Regular files: '0', the old '\0', and contiguous files '7'.
        if matches!(kind, b'0' | 0 | b'7') {
            let name = match pending.name {
                Some(name) => name,
                None => ustar_name(block),
            };
            self.members.push(Member {
                name,
                header: pending.start.unwrap_or(at),
                data: self.pos,
                size,
            });
        }
        self.state = if stored > 0 {
            State::Skip { remaining: stored }
        } else {
            State::Header { filled: 0 }
        };
        Ok(())
    }

    /// An extension header of `kind` whose first block is at `start` has been read whole.
    fn extension_done(&mut self, kind: u8, start: u64) -> Result<(), ParseError> {
        let data = std::mem::take(&mut self.extension);
        if kind != b'g' {
            self.pending.start.get_or_insert(start);
        }
        match kind {
            b'L' => {
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                self.pending.name = Some(String::from_utf8_lossy(&data[..end]).into_owned());
            }
            b'x' => {
                for (key, value) in pax_records(&data, start)? {
                    match key {
                        b"path" => {
                            self.pending.name = Some(String::from_utf8_lossy(value).into_owned())
                        }
                        b"size" => {
                            let size = std::str::from_utf8(value)
                                .ok()
                                .and_then(|v| v.parse().ok())
                                .ok_or_else(|| {
                                    malformed(start, "a pax size that is not a number")
                                })?;
                            self.pending.size = Some(size);
                        }
                        _ => {}
                    }
                }
            }
            // Global pax headers (and long link names) say nothing this index keeps; a global
            // header is still checked.
            b'g' => {
                pax_records(&data, start)?;
            }
            _ => {}
        }
        self.extension = data;
        Ok(())
    }
}

/// Checks a header's checksum: the sum of its bytes with the checksum field as spaces, taken
/// as unsigned bytes (or signed, as some old writers did).
fn check_sum(block: &[u8; 512], at: u64) -> Result<(), ParseError> {
    let stored = number(&block[148..156])
        .ok_or_else(|| malformed(at, "not a tar header (its checksum field is not a number)"))?;
    let field = 148..156;
    let (mut unsigned, mut signed) = (0u64, 0i64);
    for (i, &b) in block.iter().enumerate() {
        let b = if field.contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    if stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed) {
        Ok(())
    } else {
        Err(malformed(
            at,
            format!("not a tar header (checksum {stored}, computed {unsigned})"),
        ))
    }
}

/// A numeric field: octal digits padded by spaces or NULs, or GNU's base-256 (the first byte's
/// high bit set, then big-endian bytes).
fn number(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|&b| b & 0x80 != 0) {
        if field[0] != 0x80 {
            return None; // negative, or too large for 64 bits
        }
        let tail = &field[1..];
        let significant = tail.iter().position(|&b| b != 0).unwrap_or(tail.len());
        if tail.len() - significant > 8 {
            return None;
        }
        return Some(tail.iter().fold(0u64, |n, &b| (n << 8) | u64::from(b)));
    }
    let text = field
        .iter()
        .skip_while(|&&b| b == b' ' || b == 0)
        .take_while(|&&b| b != b' ' && b != 0);
    // An all-blank field is 0.
    let mut value = 0u64;
    for &b in text {
        if !(b'0'..=b'7').contains(&b) {
            return None;
        }
        value = value.checked_mul(8)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(value)
}

/// The name of a header without extensions: the ustar prefix (POSIX magic only: GNU headers
/// keep other fields there), a slash and the name.
fn ustar_name(block: &[u8; 512]) -> String {
    let text = |field: &[u8]| {
        let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
        String::from_utf8_lossy(&field[..end]).into_owned()
    };
    let name = text(&block[0..100]);
    if &block[257..263] == b"ustar\0" {
        let prefix = text(&block[345..500]);
        if !prefix.is_empty() {
            return format!("{prefix}/{name}");
        }
    }
    name
}

/// One `key=value` record of a pax header.
type PaxRecord<'a> = (&'a [u8], &'a [u8]);

/// The `length key=value\n` records of a pax header.
fn pax_records(data: &[u8], at: u64) -> Result<Vec<PaxRecord<'_>>, ParseError> {
    let bad = || malformed(at, "a malformed pax header");
    let mut records = Vec::new();
    let mut rest = data;
    // Writers may pad the data with NULs.
    while !rest.is_empty() && rest[0] != 0 {
        let space = rest.iter().position(|&b| b == b' ').ok_or_else(bad)?;
        let length: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|l| l.parse().ok())
            .filter(|&l| l > space + 1 && l <= rest.len())
            .ok_or_else(bad)?;
        let record = &rest[space + 1..length];
        let record = record.strip_suffix(b"\n").ok_or_else(bad)?;
        let equals = record.iter().position(|&b| b == b'=').ok_or_else(bad)?;
        records.push((&record[..equals], &record[equals + 1..]));
        rest = &rest[length..];
    }
    Ok(records)
}

/// A member's sample key and extension by the WebDataset rule: the key is the name up to the
/// first dot of its last path component, the extension what follows (lower-cased). A name
/// whose last component has no dot, or starts with one, belongs to no sample.
pub fn split_name(name: &str) -> Option<(&str, String)> {
    let base_start = name.rfind('/').map_or(0, |i| i + 1);
    let dot = name[base_start..].find('.')? + base_start;
    if dot == base_start {
        return None;
    }
    Some((&name[..dot], name[dot + 1..].to_ascii_lowercase()))
}

/// A sample of an archive: consecutive members that share a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grouped {
    pub key: String,
    /// The members (indices into the archive's member list) and their extensions.
    pub members: Vec<(usize, String)>,
}

/// The samples of `members`: runs of consecutive members with the same key (members without
/// one are left out). Two members of one sample with the same extension are an error.
pub(crate) fn group(members: &[Member]) -> Result<Vec<Grouped>, ParseError> {
    let mut samples: Vec<Grouped> = Vec::new();
    for (i, member) in members.iter().enumerate() {
        let Some((key, ext)) = split_name(&member.name) else {
            continue;
        };
        match samples.last_mut() {
            Some(last) if last.key == key => {
                if last.members.iter().any(|(_, e)| *e == ext) {
                    return Err(malformed(
                        member.header,
                        format!("sample {key:?} has two members with extension {ext:?}"),
                    ));
                }
                last.members.push((i, ext));
            }
            _ => samples.push(Grouped {
                key: key.to_owned(),
                members: vec![(i, ext)],
            }),
        }
    }
    Ok(samples)
}

/// Indexes a whole archive held in memory.
pub(crate) fn index_bytes(data: &[u8]) -> Result<Vec<Member>, ParseError> {
    let mut indexer = Indexer::new().with_size(data.len() as u64);
    indexer.feed(data)?;
    indexer.finish()
}

/// Indexes a fragment held in memory (consecutive members, as [`Indexer::fragment`]).
pub(crate) fn index_fragment(data: &[u8]) -> Result<Vec<Member>, ParseError> {
    let mut indexer = Indexer::fragment().with_size(data.len() as u64);
    indexer.feed(data)?;
    indexer.finish()
}

/// Whether `members` can be the index of an archive of `size` bytes: headers and data on
/// block boundaries, each member's data after its header and inside the archive, and each
/// member after the padded data of the one before. What the reads of a sample rely on.
pub(crate) fn check_layout(members: &[Member], size: u64) -> Result<(), String> {
    let mut next_free = 0u64;
    for m in members {
        let padded_end = m
            .data
            .checked_add(m.size)
            .and_then(|end| end.checked_next_multiple_of(BLOCK))
            .filter(|&end| end <= size);
        let Some(padded_end) = padded_end else {
            return Err(format!(
                "member {:?} ({} bytes at byte {}) is past the shard's end ({size} bytes)",
                m.name, m.size, m.data
            ));
        };
        if m.header % BLOCK != 0
            || m.data % BLOCK != 0
            || m.header < next_free
            || m.header.checked_add(BLOCK).is_none_or(|h| h > m.data)
        {
            return Err(format!(
                "member {:?} (header at byte {}, data at byte {}) is out of place",
                m.name, m.header, m.data
            ));
        }
        next_free = padded_end;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A minimal tar writer for the tests: ustar headers, GNU long names and pax headers, as
    /// real writers make them.
    pub(crate) struct Writer {
        pub out: Vec<u8>,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Long {
        /// A name over 100 bytes is split into the ustar prefix and name.
        Ustar,
        /// GNU `././@LongLink` headers.
        Gnu,
        /// A pax `path` record.
        Pax,
    }

    fn octal(field: &mut [u8], value: u64) {
        let text = format!("{value:0width$o}\0", width = field.len() - 1);
        field.copy_from_slice(text.as_bytes());
    }

    impl Writer {
        pub(crate) fn new() -> Writer {
            Writer { out: Vec::new() }
        }

        fn header(&mut self, name: &[u8], size: u64, kind: u8, gnu: bool, prefix: &[u8]) {
            let mut block = [0u8; 512];
            block[..name.len()].copy_from_slice(name);
            octal(&mut block[100..108], 0o644);
            octal(&mut block[108..116], 0);
            octal(&mut block[116..124], 0);
            if size < 8u64.pow(11) {
                octal(&mut block[124..136], size);
            } else {
                block[124] = 0x80;
                block[128..136].copy_from_slice(&size.to_be_bytes());
            }
            octal(&mut block[136..148], 1_700_000_000);
            block[156] = kind;
            if gnu {
                block[257..265].copy_from_slice(b"ustar  \0");
            } else {
                block[257..263].copy_from_slice(b"ustar\0");
                block[263..265].copy_from_slice(b"00");
                block[345..345 + prefix.len()].copy_from_slice(prefix);
            }
            block[148..156].copy_from_slice(b"        ");
            let sum: u64 = block.iter().map(|&b| u64::from(b)).sum();
            let text = format!("{sum:06o}\0 ");
            block[148..156].copy_from_slice(text.as_bytes());
            self.out.extend_from_slice(&block);
        }

        fn data(&mut self, data: &[u8]) {
            self.out.extend_from_slice(data);
            let pad = (512 - data.len() % 512) % 512;
            self.out.extend(std::iter::repeat_n(0, pad));
        }

        /// Adds a pax extended header of these records (for the next member).
        pub(crate) fn pax(&mut self, records: &[(&str, &str)]) {
            let text: String = records.iter().map(|(k, v)| pax_record(k, v)).collect();
            self.header(b"PaxHeader/x", text.len() as u64, b'x', false, b"");
            self.data(text.as_bytes());
        }

        /// Adds a regular member's header that claims `size` bytes (base-256 from 8**11 on)
        /// and `data` after it, whatever its length.
        pub(crate) fn claim(&mut self, name: &str, size: u64, data: &[u8]) {
            self.header(name.as_bytes(), size, b'0', true, b"");
            self.data(data);
        }

        /// Adds a member of another type than a regular file, without data.
        pub(crate) fn special(&mut self, name: &str, kind: u8) {
            self.header(name.as_bytes(), 0, kind, false, b"");
        }

        /// Adds a regular member; returns its data offset.
        pub(crate) fn file(&mut self, name: &str, data: &[u8], long: Long) -> u64 {
            let bytes = name.as_bytes();
            if bytes.len() <= 100 {
                self.header(bytes, data.len() as u64, b'0', long == Long::Gnu, b"");
            } else {
                match long {
                    Long::Ustar => {
                        let split = name[..name.len() - 1]
                            .rfind('/')
                            .filter(|&s| s <= 155 && name.len() - s - 1 <= 100)
                            .expect("a name ustar can split");
                        self.header(
                            &name.as_bytes()[split + 1..],
                            data.len() as u64,
                            b'0',
                            false,
                            &name.as_bytes()[..split],
                        );
                    }
                    Long::Gnu => {
                        let mut long = bytes.to_vec();
                        long.push(0);
                        self.header(b"././@LongLink", long.len() as u64, b'L', true, b"");
                        self.data(&long);
                        self.header(&bytes[..100], data.len() as u64, b'0', true, b"");
                    }
                    Long::Pax => {
                        let record = pax_record("path", name);
                        self.header(b"PaxHeader/x", record.len() as u64, b'x', false, b"");
                        self.data(record.as_bytes());
                        self.header(&bytes[..100], data.len() as u64, b'0', false, b"");
                    }
                }
            }
            let offset = self.out.len() as u64;
            self.data(data);
            offset
        }

        pub(crate) fn finish(mut self) -> Vec<u8> {
            self.out.extend(std::iter::repeat_n(0, 1024));
            self.out
        }

        /// A whole archive of these regular members, in order.
        pub(crate) fn archive(files: &[(&str, &[u8], Long)]) -> Vec<u8> {
            let mut w = Writer::new();
            for &(name, data, long) in files {
                w.file(name, data, long);
            }
            w.finish()
        }
    }

    /// A pax record `"<len> key=value\n"` whose length counts its own digits.
    fn pax_record(key: &str, value: &str) -> String {
        let body = format!(" {key}={value}\n");
        let mut len = body.len() + 1;
        while format!("{len}").len() + body.len() != len {
            len += 1;
        }
        format!("{len}{body}")
    }

    #[test]
    fn numbers() {
        assert_eq!(number(b"0000644\0"), Some(0o644));
        assert_eq!(number(b"  644 \0\0"), Some(0o644));
        assert_eq!(number(b"\0\0\0\0"), Some(0));
        assert_eq!(number(b"00000000009\0"), None);
        let mut big = [0u8; 12];
        big[0] = 0x80;
        big[4..12].copy_from_slice(&(10u64 << 33).to_be_bytes());
        assert_eq!(number(&big), Some(10 << 33));
        big[0] = 0xff;
        assert_eq!(number(&big), None);
    }

    #[test]
    fn members_with_long_names_of_every_format() {
        let long = format!("{}/{}.jpg", "d".repeat(120), "k".repeat(60));
        for format in [Long::Ustar, Long::Gnu, Long::Pax] {
            let mut w = Writer::new();
            let a = w.file("000001.jpg", b"jpeg", format);
            w.special("dir/", b'5');
            let b = w.file(&long, &[7; 600], format);
            let c = w.file("000002.cls", b"", format);
            let members = index_bytes(&w.finish()).unwrap();
            let shape: Vec<(&str, u64, u64)> = members
                .iter()
                .map(|m| (m.name.as_str(), m.data, m.size))
                .collect();
            assert_eq!(
                shape,
                [
                    ("000001.jpg", a, 4),
                    (long.as_str(), b, 600),
                    ("000002.cls", c, 0)
                ],
                "{format:?}"
            );
            assert_eq!(members[0].header, 0);
            // The long name's first header comes right after the directory's.
            assert_eq!(members[1].header, 512 * 3, "{format:?}");
        }
    }

    #[test]
    fn truncated_and_malformed_archives() {
        let whole = Writer::archive(&[("a.txt", &[1; 1000], Long::Ustar)]);
        let cut = |n: usize| index_bytes(&whole[..n]).unwrap_err();
        for (n, what) in [
            (0, "without an end-of-archive block"),
            (100, "inside a header block"),
            (700, "inside a member's data"),
            (1536, "without an end-of-archive block"),
        ] {
            let error = cut(n);
            assert!(error.truncated, "{n}: {error}");
            let message = format!("the archive is truncated: it ends {what}");
            assert!(error.message.starts_with(&message), "{n}: {error}");
            assert_eq!(error.offset, n as u64);
        }
        index_bytes(&whole[..1536 + 512]).unwrap();
        let mut bad = whole.clone();
        bad[10] ^= 1;
        let error = index_bytes(&bad).unwrap_err();
        assert!(!error.truncated);
        assert!(error.message.starts_with("not a tar header"), "{error}");
        assert_eq!(error.to_string(), format!("{} (at byte 0)", error.message));
        let error = index_bytes(&[b'x'; 1024]).unwrap_err();
        assert!(error.message.starts_with("not a tar header"), "{error}");
    }

    /// Sizes that would wrap when padded to blocks, or end past the end of the archive, or
    /// past the largest offset, are errors, never offsets.
    #[test]
    fn claimed_sizes_past_the_end_are_errors() {
        let mut pax = Writer::new();
        pax.pax(&[("size", "18446744073709551615")]);
        pax.file("s.txt", b"hello", Long::Ustar);
        let pax = pax.finish();
        let mut base256 = Writer::new();
        base256.claim("s.txt", u64::MAX, b"hello");
        let base256 = base256.finish();
        // 2**64 - 1 in base-256, as GNU tar writes it.
        assert_eq!(
            base256[124..136],
            [
                0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
            ]
        );
        let mut near = Writer::new();
        near.claim("s.txt", u64::MAX - 1000, b"hello");
        let near = near.finish();
        for (what, archive, header) in [
            ("pax", &pax, 1024),
            ("base-256", &base256, 0),
            ("near", &near, 0),
        ] {
            let size = archive.len() as u64;
            let error = index_bytes(archive).unwrap_err();
            assert!(error.truncated, "{what}: {error}");
            assert_eq!(error.offset, size, "{what}");
            assert!(
                error.message.ends_with(&format!(
                    "(its header at byte {header} gives {} bytes)",
                    if what == "near" {
                        u64::MAX - 1000
                    } else {
                        u64::MAX
                    }
                )),
                "{what}: {error}"
            );
            // Without a known size: no offset past the largest one.
            let mut unsized_ = Indexer::new();
            let error = unsized_.feed(archive).unwrap_err();
            assert!(!error.truncated, "{what}: {error}");
            assert_eq!(error.offset, header, "{what}");
            assert!(
                error
                    .message
                    .ends_with("bytes, more than any archive holds"),
                "{error}"
            );
            // Nor in a fragment.
            let error = index_fragment(&archive[..header as usize + 512 + 5]).unwrap_err();
            assert!(error.truncated, "{what}: {error}");
        }
        // A field that is negative in base-256 is not a size.
        let mut negative = base256.clone();
        negative[124..136].fill(0xff);
        negative[148..156].fill(b' ');
        let sum: u64 = negative[..512].iter().map(|&b| u64::from(b)).sum();
        negative[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        let error = index_bytes(&negative).unwrap_err();
        assert_eq!(error.message, "the header's size field is not a number");
    }

    #[test]
    fn layouts_that_do_not_fit_the_archive() {
        let archive = Writer::archive(&[
            ("a.jpg", &[1; 600], Long::Ustar),
            ("a.cls", b"1", Long::Pax),
        ]);
        let size = archive.len() as u64;
        let members = index_bytes(&archive).unwrap();
        assert_eq!(check_layout(&members, size), Ok(()));
        assert_eq!(check_layout(&[], 0), Ok(()));
        let with = |i: usize, f: &dyn Fn(&mut Member)| {
            let mut members = members.clone();
            f(&mut members[i]);
            check_layout(&members, size).unwrap_err()
        };
        let past = with(1, &|m| m.data = 1 << 40);
        assert_eq!(
            past,
            format!(
                "member \"a.cls\" (1 bytes at byte {}) is past the shard's end ({size} bytes)",
                1u64 << 40
            )
        );
        // One byte past the end of the data, or a size that wraps.
        with(1, &|m| m.size = size - m.data + 1);
        with(1, &|m| m.size = u64::MAX);
        with(0, &|m| m.size = u64::MAX - m.data);
        // Out of place: unaligned, data before its header, overlapping the member before.
        type Case<'a> = (usize, &'a dyn Fn(&mut Member));
        let cases: [Case; 4] = [
            (0, &|m| m.data += 1),
            (0, &|m| m.header = m.data),
            (1, &|m| m.header = 512),
            (1, &|m| m.header = u64::MAX - 511),
        ];
        for (i, f) in cases {
            assert!(with(i, f).ends_with("is out of place"), "{i}");
        }
    }

    #[test]
    fn keys_and_extensions() {
        assert_eq!(split_name("000123.jpg"), Some(("000123", "jpg".into())));
        assert_eq!(
            split_name("a.b/dir/x.seg.PNG"),
            Some(("a.b/dir/x", "seg.png".into()))
        );
        assert_eq!(split_name("dir/noext"), None);
        assert_eq!(split_name("dir/.hidden"), None);
        assert_eq!(split_name("x."), Some(("x", String::new())));
    }

    #[test]
    fn samples_are_runs_of_one_key() {
        let member = |name: &str| Member {
            name: name.into(),
            header: 0,
            data: 0,
            size: 0,
        };
        let members: Vec<Member> = ["a.jpg", "a.cls", "README", "b.jpg", "a.txt"]
            .into_iter()
            .map(member)
            .collect();
        let samples = group(&members).unwrap();
        let shape: Vec<(&str, Vec<(usize, &str)>)> = samples
            .iter()
            .map(|s| {
                (
                    s.key.as_str(),
                    s.members.iter().map(|(i, e)| (*i, e.as_str())).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("a", vec![(0, "jpg"), (1, "cls")]),
                ("b", vec![(3, "jpg")]),
                ("a", vec![(4, "txt")]),
            ]
        );
        let twice = group(&[member("a.jpg"), member("a.JPG")]).unwrap_err();
        assert_eq!(
            twice.message,
            "sample \"a\" has two members with extension \"jpg\""
        );
    }

    #[test]
    fn fed_in_pieces_or_skipped() {
        let mut w = Writer::new();
        for i in 0..5 {
            let name = format!("{}/{i:03}.bin", "d".repeat(110));
            w.file(&name, &vec![i as u8; 700 * i], Long::Pax);
        }
        let data = w.finish();
        let whole = index_bytes(&data).unwrap();
        for piece in [1, 7, 511, 513, 4096] {
            let mut indexer = Indexer::new();
            for chunk in data.chunks(piece) {
                indexer.feed(chunk).unwrap();
            }
            assert!(indexer.is_done());
            assert_eq!(indexer.finish().unwrap(), whole, "pieces of {piece}");
        }
        // Seeking over what may be skipped, as a file read does.
        let mut indexer = Indexer::new();
        let mut reads = 0;
        while !indexer.is_done() {
            let skip = indexer.skippable();
            if skip > 0 {
                indexer.skip(skip);
                continue;
            }
            let at = indexer.position() as usize;
            let wanted = indexer.wanted() as usize;
            indexer.feed(&data[at..at + wanted]).unwrap();
            reads += 1;
        }
        assert_eq!(indexer.finish().unwrap(), whole);
        // Five headers, one pax header each, their data, and the end block.
        assert_eq!(reads, 16);
    }

    #[test]
    fn fragments_end_after_the_last_data() {
        let data = Writer::archive(&[
            ("k.jpg", &[1; 10], Long::Ustar),
            ("k.cls", b"7", Long::Ustar),
        ]);
        let members = index_bytes(&data).unwrap();
        let end = members[1].end() as usize;
        let mut fragment = Indexer::fragment();
        fragment.feed(&data[..end]).unwrap();
        assert_eq!(fragment.finish().unwrap(), members);
        let mut short = Indexer::fragment();
        short.feed(&data[..end - 1]).unwrap();
        assert!(short.finish().unwrap_err().truncated);
    }

    fn arb_name() -> impl Strategy<Value = String> {
        let component = "[a-zA-Z0-9_-]{1,40}";
        (
            proptest::collection::vec(component, 0..5),
            component,
            "[a-z]{1,5}",
        )
            .prop_map(|(dirs, base, ext)| {
                let mut name = dirs.join("/");
                if !name.is_empty() {
                    name.push('/');
                }
                format!("{name}{base}.{ext}")
            })
    }

    /// How the `tar` crate writes one member.
    #[derive(Debug, Clone, Copy)]
    enum Written {
        /// GNU headers (a long name as a `././@LongLink` entry).
        Gnu,
        /// ustar headers (a long name split into prefix and name, or a GNU long-name entry).
        Ustar,
        /// A pax `path` record before a ustar header with a placeholder name.
        Pax,
        /// A directory, then a symbolic link, then the member (GNU).
        AfterOthers,
    }

    /// `files` written by the `tar` crate, and each member's data offset.
    fn tar_crate_archive(files: &[(String, Vec<u8>, Written)]) -> (Vec<u8>, Vec<u64>) {
        let mut builder = tar::Builder::new(Vec::new());
        let mut offsets = Vec::new();
        for (name, data, how) in files {
            let mut header = match how {
                Written::Ustar | Written::Pax => tar::Header::new_ustar(),
                Written::Gnu | Written::AfterOthers => tar::Header::new_gnu(),
            };
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            match how {
                Written::Pax => {
                    builder
                        .append_pax_extensions([("path", name.as_bytes())])
                        .unwrap();
                    header.set_path("placeholder").unwrap();
                    header.set_cksum();
                    builder.append(&header, &data[..]).unwrap();
                }
                Written::AfterOthers => {
                    let mut dir = tar::Header::new_gnu();
                    dir.set_entry_type(tar::EntryType::Directory);
                    dir.set_size(0);
                    builder.append_data(&mut dir, "some/dir/", &[][..]).unwrap();
                    let mut link = tar::Header::new_gnu();
                    link.set_entry_type(tar::EntryType::Symlink);
                    link.set_size(0);
                    builder
                        .append_link(&mut link, "some/link", "target")
                        .unwrap();
                    builder.append_data(&mut header, name, &data[..]).unwrap();
                }
                Written::Gnu | Written::Ustar => {
                    builder.append_data(&mut header, name, &data[..]).unwrap();
                }
            }
            offsets.push(builder.get_ref().len() as u64 - data.len().div_ceil(512) as u64 * 512);
        }
        (builder.into_inner().unwrap(), offsets)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Any members the `tar` crate writes, in GNU, ustar or pax form, after other kinds of
        /// entries or not, index back to their names, offsets and sizes, whatever pieces the
        /// archive's bytes come in.
        #[test]
        fn members_written_by_the_tar_crate_round_trip(
            files in proptest::collection::vec(
                (
                    arb_name(),
                    proptest::collection::vec(any::<u8>(), 0..1500),
                    prop_oneof![
                        Just(Written::Gnu),
                        Just(Written::Ustar),
                        Just(Written::Pax),
                        Just(Written::AfterOthers),
                    ],
                ),
                0..10,
            ),
            piece in 1usize..3000,
        ) {
            let (archive, offsets) = tar_crate_archive(&files);
            let mut indexer = Indexer::new();
            for chunk in archive.chunks(piece) {
                indexer.feed(chunk).unwrap();
            }
            prop_assert!(indexer.is_done());
            let members = indexer.finish().unwrap();
            let got: Vec<(String, u64, u64)> =
                members.iter().map(|m| (m.name.clone(), m.data, m.size)).collect();
            let expected: Vec<(String, u64, u64)> = files
                .iter()
                .zip(&offsets)
                .map(|((name, data, _), &offset)| (name.clone(), offset, data.len() as u64))
                .collect();
            prop_assert_eq!(got, expected);
        }

        /// Any members written, in any of the long-name formats, index back to their names,
        /// offsets and sizes, whatever pieces the bytes come in.
        #[test]
        fn written_members_round_trip(
            files in proptest::collection::vec(
                (arb_name(), proptest::collection::vec(any::<u8>(), 0..1500)),
                0..12,
            ),
            format in prop_oneof![Just(Long::Ustar), Just(Long::Gnu), Just(Long::Pax)],
            piece in 1usize..2000,
        ) {
            let mut w = Writer::new();
            let mut expected = Vec::new();
            for (name, data) in &files {
                // ustar splits only at a slash that leaves at most 100 bytes of name.
                let fits = name.len() <= 100 || name[..name.len() - 1]
                    .rfind('/')
                    .is_some_and(|s| s <= 155 && name.len() - s - 1 <= 100);
                let format = if format == Long::Ustar && !fits { Long::Pax } else { format };
                let offset = w.file(name, data, format);
                expected.push((name.clone(), offset, data.len() as u64));
            }
            let archive = w.finish();
            let mut indexer = Indexer::new();
            for chunk in archive.chunks(piece) {
                indexer.feed(chunk).unwrap();
            }
            let members = indexer.finish().unwrap();
            let got: Vec<(String, u64, u64)> =
                members.iter().map(|m| (m.name.clone(), m.data, m.size)).collect();
            prop_assert_eq!(&got, &expected);
            for (member, (_, data)) in members.iter().zip(&files) {
                prop_assert_eq!(&archive[member.data as usize..member.end() as usize], &data[..]);
            }
        }
    }
}
