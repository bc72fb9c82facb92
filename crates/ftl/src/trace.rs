//! Streaming readers for block I/O traces: MSR Cambridge CSV, `blkparse`
//! text output and FIU traces.
//!
//! A [`TraceReader`] reads one line at a time (traces can be gigabytes) and
//! yields [`TraceRecord`]s: a timestamp relative to the first record and a
//! [`Request`] in logical pages of the SSD's page size. A line that cannot be
//! understood is an error naming the file, the line number and what is
//! wrong; reading never panics.
//!
//! ```
//! use ptsd_ftl::trace::{TraceFormat, TraceOptions, TraceReader};
//! use ptsd_ftl::Op;
//! let csv = "128166372003061629,src1,0,Read,8192,4096,1331\n\
//!            128166372003071629,src1,0,Write,1073741824,8192,200\n";
//! let opts = TraceOptions::new(TraceFormat::Msr, 4096, 1 << 20);
//! let recs: Vec<_> = TraceReader::new(csv.as_bytes(), "example.csv", opts)
//!     .collect::<Result<_, _>>()
//!     .unwrap();
//! assert_eq!((recs[0].request.op, recs[0].request.lpn, recs[0].request.pages), (Op::Read, 2, 1));
//! assert_eq!((recs[1].ts_ns, recs[1].request.lpn, recs[1].request.pages), (1_000_000, 262_144, 2));
//! ```

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;
use std::str::FromStr;

use thiserror::Error;

use crate::request::{Op, Request};

/// Trace file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`
    /// (timestamp in 100 ns Windows ticks, offset and size in bytes).
    Msr,
    /// The default text output of `blkparse`:
    /// `dev cpu seq time pid action rwbs sector + count [process]`.
    Blkparse,
    /// FIU traces: `ts pid process lba size rw major minor md5`
    /// (timestamp in ns, lba and size in 512-byte sectors).
    Fiu,
}

impl FromStr for TraceFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "msr" => Ok(TraceFormat::Msr),
            "blkparse" => Ok(TraceFormat::Blkparse),
            "fiu" => Ok(TraceFormat::Fiu),
            _ => Err(format!(
                "unknown trace format {s:?}; expected msr, blkparse or fiu"
            )),
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TraceFormat::Msr => "msr",
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::Fiu => "fiu",
        })
    }
}

/// What to do with a request beyond the SSD's logical capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutOfRange {
    /// Fold the address into the capacity (modulo), keeping the size.
    Wrap,
    /// Report the line as an error.
    Reject,
}

/// Which `blkparse` events become requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlkparseEvent {
    /// `Q`: the request as the application queued it.
    Queued,
    /// `D`: the request as the block layer issued it to the driver.
    Dispatched,
}

/// How to read a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceOptions {
    pub format: TraceFormat,
    /// The SSD's page size in bytes; addresses are mapped to pages of it.
    pub page_size: u32,
    /// The SSD's logical capacity in pages.
    pub logical_pages: u64,
    pub out_of_range: OutOfRange,
    pub blkparse_event: BlkparseEvent,
}

impl TraceOptions {
    /// Defaults: wrap out-of-range addresses, take `Q` events from blkparse.
    pub fn new(format: TraceFormat, page_size: u32, logical_pages: u64) -> Self {
        TraceOptions {
            format,
            page_size,
            logical_pages,
            out_of_range: OutOfRange::Wrap,
            blkparse_event: BlkparseEvent::Queued,
        }
    }
}

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Nanoseconds since the first record of the trace (never decreasing:
    /// a record stamped earlier than its predecessor gets its predecessor's
    /// time).
    pub ts_ns: u64,
    pub request: Request,
}

/// What is wrong with one trace line.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LineProblem {
    #[error("the line is not valid UTF-8")]
    NotUtf8,
    #[error("expected {expected} fields, found {found}")]
    FieldCount { expected: usize, found: usize },
    #[error("field {field} is {value:?}, not a number")]
    NotANumber { field: &'static str, value: String },
    #[error("unknown request type {0:?}")]
    UnknownType(String),
    #[error("pages {lpn}..{end} are beyond the SSD's {capacity} logical pages")]
    OutOfRange { lpn: u64, end: u64, capacity: u64 },
    #[error("request of {pages} pages is larger than the SSD's {capacity} logical pages")]
    TooLarge { pages: u64, capacity: u64 },
}

/// Reading a trace failed.
#[derive(Debug, Error)]
pub enum TraceError {
    #[error("{file}")]
    Io {
        file: String,
        #[source]
        source: io::Error,
    },
    #[error("{file}:{line}: {problem}")]
    BadLine {
        file: String,
        line: u64,
        problem: LineProblem,
    },
    #[error("invalid trace options: {0}")]
    Options(&'static str),
}

/// A streaming trace reader; see the [module docs](self).
pub struct TraceReader<R> {
    reader: R,
    file: String,
    opts: TraceOptions,
    line: Vec<u8>,
    line_no: u64,
    first_raw_ts: Option<u64>,
    last_ts_ns: u64,
    next_id: u64,
    skipped: u64,
    finished: bool,
}

impl TraceReader<BufReader<File>> {
    /// Open a trace file.
    pub fn open(path: &Path, opts: TraceOptions) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Io {
            file: path.display().to_string(),
            source,
        })?;
        let reader = TraceReader::new(
            BufReader::with_capacity(1 << 20, file),
            &path.display().to_string(),
            opts,
        );
        reader.check_options()?;
        Ok(reader)
    }
}

/// The fields of a line before its addresses are mapped to pages.
struct RawRecord {
    raw_ts: u64,
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
}

impl<R: BufRead> TraceReader<R> {
    /// Read a trace from any buffered reader; `file` names it in errors.
    pub fn new(reader: R, file: &str, opts: TraceOptions) -> Self {
        TraceReader {
            reader,
            file: file.to_string(),
            opts,
            line: Vec::with_capacity(256),
            line_no: 0,
            first_raw_ts: None,
            last_ts_ns: 0,
            next_id: 0,
            skipped: 0,
            finished: false,
        }
    }

    fn check_options(&self) -> Result<(), TraceError> {
        if self.opts.page_size == 0 {
            return Err(TraceError::Options("page size is zero"));
        }
        if self.opts.logical_pages == 0 {
            return Err(TraceError::Options("logical capacity is zero"));
        }
        Ok(())
    }

    /// Lines read so far (the number of the last one).
    pub fn line_number(&self) -> u64 {
        self.line_no
    }

    /// Lines that held no request (blank lines, comments, headers, other
    /// blkparse events, zero-length requests).
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    fn bad(&self, problem: LineProblem) -> TraceError {
        TraceError::BadLine {
            file: self.file.clone(),
            line: self.line_no,
            problem,
        }
    }

    /// Parse the current line; `Ok(None)` for a line without a request.
    fn parse_line(&mut self) -> Result<Option<TraceRecord>, LineProblem> {
        let text = std::str::from_utf8(&self.line).map_err(|_| LineProblem::NotUtf8)?;
        let text = text.trim();
        if text.is_empty() || text.starts_with('#') {
            return Ok(None);
        }
        let raw = match self.opts.format {
            TraceFormat::Msr => parse_msr(text)?,
            TraceFormat::Blkparse => match parse_blkparse(text, self.opts.blkparse_event)? {
                BlkLine::Record(raw) => Some(raw),
                BlkLine::Other => None,
                BlkLine::Summary => {
                    self.finished = true;
                    None
                }
            },
            TraceFormat::Fiu => parse_fiu(text)?,
        };
        let Some(raw) = raw else { return Ok(None) };
        let ts_ns = self.timestamp_ns(raw.raw_ts);
        let request = match raw.op {
            Op::Flush => Request {
                id: 0,
                op: Op::Flush,
                lpn: 0,
                pages: 0,
            },
            op => {
                if raw.len_bytes == 0 {
                    return Ok(None);
                }
                let (lpn, pages) = self.map_range(raw.offset_bytes, raw.len_bytes)?;
                Request {
                    id: 0,
                    op,
                    lpn,
                    pages,
                }
            }
        };
        Ok(Some(TraceRecord { ts_ns, request }))
    }

    fn timestamp_ns(&mut self, raw_ts: u64) -> u64 {
        let first = *self.first_raw_ts.get_or_insert(raw_ts);
        let ns = raw_ts
            .saturating_sub(first)
            .saturating_mul(match self.opts.format {
                TraceFormat::Msr => 100,
                // blkparse timestamps are parsed to ns already; FIU's are ns.
                TraceFormat::Blkparse | TraceFormat::Fiu => 1,
            });
        self.last_ts_ns = self.last_ts_ns.max(ns);
        self.last_ts_ns
    }

    /// Byte range → page range of the SSD, folded or rejected when it lies
    /// beyond the capacity.
    fn map_range(&self, offset: u64, len: u64) -> Result<(u64, u32), LineProblem> {
        let page = u64::from(self.opts.page_size);
        let capacity = self.opts.logical_pages;
        let first = offset / page;
        let end = offset.saturating_add(len).div_ceil(page);
        let pages = end - first;
        if pages > capacity || pages > u64::from(u32::MAX) {
            return Err(LineProblem::TooLarge { pages, capacity });
        }
        if end <= capacity {
            return Ok((first, pages as u32));
        }
        match self.opts.out_of_range {
            OutOfRange::Reject => Err(LineProblem::OutOfRange {
                lpn: first,
                end,
                capacity,
            }),
            OutOfRange::Wrap => {
                let lpn = (first % capacity).min(capacity - pages);
                Ok((lpn, pages as u32))
            }
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(e) = self.check_options() {
            self.finished = true;
            return Some(Err(e));
        }
        while !self.finished {
            self.line.clear();
            match self.reader.read_until(b'\n', &mut self.line) {
                Ok(0) => self.finished = true,
                Ok(_) => {
                    self.line_no += 1;
                    match self.parse_line() {
                        Ok(Some(mut rec)) => {
                            rec.request.id = self.next_id;
                            self.next_id += 1;
                            return Some(Ok(rec));
                        }
                        Ok(None) => self.skipped += 1,
                        Err(problem) => return Some(Err(self.bad(problem))),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    self.finished = true;
                    return Some(Err(TraceError::Io {
                        file: self.file.clone(),
                        source,
                    }));
                }
            }
        }
        None
    }
}

fn number(field: &'static str, value: &str) -> Result<u64, LineProblem> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| LineProblem::NotANumber {
            field,
            value: value.to_string(),
        })
}

fn parse_msr(text: &str) -> Result<Option<RawRecord>, LineProblem> {
    let mut fields = [""; 7];
    let mut found = 0;
    for f in text.split(',') {
        if found < fields.len() {
            fields[found] = f;
        }
        found += 1;
    }
    if found != 7 {
        return Err(LineProblem::FieldCount { expected: 7, found });
    }
    // A header line, as some copies of the traces carry.
    if fields[0].trim().eq_ignore_ascii_case("timestamp") {
        return Ok(None);
    }
    let raw_ts = number("Timestamp", fields[0])?;
    let op = match fields[3].trim() {
        t if t.eq_ignore_ascii_case("read") => Op::Read,
        t if t.eq_ignore_ascii_case("write") => Op::Write,
        t => return Err(LineProblem::UnknownType(t.to_string())),
    };
    Ok(Some(RawRecord {
        raw_ts,
        op,
        offset_bytes: number("Offset", fields[4])?,
        len_bytes: number("Size", fields[5])?,
    }))
}

enum BlkLine {
    Record(RawRecord),
    /// An event we do not replay (another action, a plug/unplug, a message).
    Other,
    /// The per-CPU / total summary blkparse prints at the end.
    Summary,
}

/// `seconds.nanoseconds` → nanoseconds.
fn parse_blk_time(value: &str) -> Result<u64, LineProblem> {
    let bad = || LineProblem::NotANumber {
        field: "time",
        value: value.to_string(),
    };
    let (secs, frac) = value.split_once('.').unwrap_or((value, ""));
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let secs: u64 = secs.parse().map_err(|_| bad())?;
    let mut nanos: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| bad())?
    };
    for _ in frac.len()..9 {
        nanos *= 10;
    }
    secs.checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(nanos))
        .ok_or_else(bad)
}

fn parse_blkparse(text: &str, event: BlkparseEvent) -> Result<BlkLine, LineProblem> {
    const SECTOR: u64 = 512;
    let mut it = text.split_whitespace();
    let dev = it.next().unwrap_or("");
    // Summary lines ("CPU0 (8,0):", "Total (8,0):", "Reads Queued: …") and
    // anything after them are not events.
    let is_dev = dev
        .split_once(',')
        .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
    if !is_dev {
        if dev.starts_with("CPU") || dev == "Total" {
            return Ok(BlkLine::Summary);
        }
        return Err(LineProblem::NotANumber {
            field: "device (major,minor)",
            value: dev.to_string(),
        });
    }
    let mut fields = [""; 7];
    let mut found = 1;
    fields[0] = dev;
    for f in it.by_ref().take(6) {
        fields[found] = f;
        found += 1;
    }
    if found < 7 {
        return Err(LineProblem::FieldCount { expected: 7, found });
    }
    let [_, _cpu, _seq, time, _pid, action, rwbs] = fields;
    let wanted = match event {
        BlkparseEvent::Queued => "Q",
        BlkparseEvent::Dispatched => "D",
    };
    if action != wanted {
        return Ok(BlkLine::Other);
    }
    let raw_ts = parse_blk_time(time)?;
    let op = if rwbs.contains('D') {
        Op::Discard
    } else if rwbs.contains('R') {
        Op::Read
    } else if rwbs.contains('W') {
        Op::Write
    } else if rwbs.contains('F') {
        Op::Flush
    } else if rwbs.contains('N') {
        return Ok(BlkLine::Other);
    } else {
        return Err(LineProblem::UnknownType(rwbs.to_string()));
    };
    let rest: Vec<&str> = it.take(3).collect();
    match rest.as_slice() {
        [sector, "+", count, ..] => {
            let sector = number("sector", sector)?;
            let count = number("sector count", count)?;
            Ok(BlkLine::Record(RawRecord {
                raw_ts,
                op,
                offset_bytes: sector.saturating_mul(SECTOR),
                len_bytes: count.saturating_mul(SECTOR),
            }))
        }
        // A flush (or a flush-only write) carries no sector range.
        _ if op == Op::Flush || rest.first().is_none_or(|f| f.starts_with('[')) => {
            if op == Op::Flush || rwbs.contains('F') {
                Ok(BlkLine::Record(RawRecord {
                    raw_ts,
                    op: Op::Flush,
                    offset_bytes: 0,
                    len_bytes: 0,
                }))
            } else {
                Ok(BlkLine::Other)
            }
        }
        _ => Err(LineProblem::FieldCount {
            expected: 10,
            found: 7 + rest.len(),
        }),
    }
}

fn parse_fiu(text: &str) -> Result<Option<RawRecord>, LineProblem> {
    const SECTOR: u64 = 512;
    let mut fields = [""; 6];
    let mut found = 0;
    for f in text.split_whitespace() {
        if found < fields.len() {
            fields[found] = f;
        }
        found += 1;
    }
    if found < 6 {
        return Err(LineProblem::FieldCount { expected: 9, found });
    }
    let raw_ts = number("ts", fields[0])?;
    let lba = number("lba", fields[3])?;
    let size = number("size", fields[4])?;
    let op = match fields[5] {
        "R" | "r" => Op::Read,
        "W" | "w" => Op::Write,
        t => return Err(LineProblem::UnknownType(t.to_string())),
    };
    Ok(Some(RawRecord {
        raw_ts,
        op,
        offset_bytes: lba.saturating_mul(SECTOR),
        len_bytes: size.saturating_mul(SECTOR),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read_all(format: TraceFormat, text: &str) -> Vec<Result<TraceRecord, TraceError>> {
        TraceReader::new(text.as_bytes(), "t", TraceOptions::new(format, 4096, 1024)).collect()
    }

    fn records(format: TraceFormat, text: &str) -> Vec<(u64, Op, u64, u32)> {
        read_all(format, text)
            .into_iter()
            .map(|r| {
                let r = r.unwrap();
                (r.ts_ns, r.request.op, r.request.lpn, r.request.pages)
            })
            .collect()
    }

    #[test]
    fn msr_lines() {
        let text = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n\
                    1000,hm,0,Read,4096,4096,10\n\
                    1010,hm,0,Write,6144,4096,10\n\
                    \n\
                    1020,hm,0,write,0,512,10\n";
        assert_eq!(
            records(TraceFormat::Msr, text),
            vec![
                (0, Op::Read, 1, 1),
                // 6144..10240 touches pages 1 and 2.
                (1000, Op::Write, 1, 2),
                (2000, Op::Write, 0, 1),
            ]
        );
    }

    #[test]
    fn msr_bad_line_names_the_line() {
        let text = "1000,hm,0,Read,4096,4096,10\n1001,hm,0,Trim,0,4096,10\n";
        let results = read_all(TraceFormat::Msr, text);
        let err = results[1].as_ref().unwrap_err().to_string();
        assert_eq!(err, "t:2: unknown request type \"Trim\"");
        let err = read_all(TraceFormat::Msr, "1,2,3\n")[0]
            .as_ref()
            .unwrap_err()
            .to_string();
        assert_eq!(err, "t:1: expected 7 fields, found 3");
        let err = read_all(TraceFormat::Msr, "x,h,0,Read,0,1,1\n")[0]
            .as_ref()
            .unwrap_err()
            .to_string();
        assert_eq!(err, "t:1: field Timestamp is \"x\", not a number");
    }

    #[test]
    fn blkparse_takes_the_chosen_event() {
        let text = "  8,0    3        1     0.000000000   697  A   W 223490 + 8 <- (8,1) 223427\n\
                    \x20 8,0    3        2     0.000001000   697  Q   W 8 + 8 [kjournald]\n\
                    \x20 8,0    3        3     0.000005000   697  G   W 8 + 8 [kjournald]\n\
                    \x20 8,0    3        4     0.000008000   697  D   W 8 + 8 [kjournald]\n\
                    \x20 8,0    3        5     0.000010000     0  C   W 8 + 8 [0]\n\
                    \x20 8,0    3        6     0.000012000   697  P   N [kjournald]\n\
                    \x20 8,0    1        7     1.500000000   700  Q  RS 16 + 16 [cat]\n\
                    \x20 8,0    1        8     1.600000000   700  Q  FWS [jbd2]\n\
                    CPU0 (8,0):\n Reads Queued:           0,        0KiB\n";
        assert_eq!(
            records(TraceFormat::Blkparse, text),
            vec![
                (0, Op::Write, 1, 1),
                (1_499_999_000, Op::Read, 2, 2),
                (1_599_999_000, Op::Flush, 0, 0),
            ]
        );
        let mut opts = TraceOptions::new(TraceFormat::Blkparse, 4096, 1024);
        opts.blkparse_event = BlkparseEvent::Dispatched;
        let d: Vec<_> = TraceReader::new(text.as_bytes(), "t", opts)
            .map(|r| r.unwrap().request.lpn)
            .collect();
        assert_eq!(d, vec![1]);
    }

    #[test]
    fn blkparse_bad_sector() {
        let text = "  8,0 3 2 0.000001000 697 Q W 8x + 8 [kjournald]\n";
        let err = read_all(TraceFormat::Blkparse, text)[0]
            .as_ref()
            .unwrap_err()
            .to_string();
        assert_eq!(err, "t:1: field sector is \"8x\", not a number");
    }

    #[test]
    fn fiu_lines() {
        let text = "89966527700 4253 nfsd 22479880 8 W 6 0 1d0a3b6cc1bc4d3a8d9f2cd0b7d5e5f1\n\
                    89966527800 4253 nfsd 16 16 R 6 0 00000000000000000000000000000000\n";
        assert_eq!(
            records(TraceFormat::Fiu, text),
            // Sector 22479880 is byte 11509698560, page 2809985, folded into
            // 1024 pages.
            vec![(0, Op::Write, 2_809_985 % 1024, 1), (100, Op::Read, 2, 2)]
        );
    }

    #[test]
    fn out_of_range_wrap_or_reject() {
        let text = "0,h,0,Read,4190208,8192,1\n"; // pages 1023..1025 of 1024
        assert_eq!(
            records(TraceFormat::Msr, text),
            vec![(0, Op::Read, 1022, 2)]
        );
        let mut opts = TraceOptions::new(TraceFormat::Msr, 4096, 1024);
        opts.out_of_range = OutOfRange::Reject;
        let err = TraceReader::new(text.as_bytes(), "t", opts)
            .next()
            .unwrap()
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "t:1: pages 1023..1025 are beyond the SSD's 1024 logical pages"
        );
        let huge = "0,h,0,Read,0,1073741824,1\n";
        assert!(matches!(
            read_all(TraceFormat::Msr, huge)[0],
            Err(TraceError::BadLine {
                problem: LineProblem::TooLarge { .. },
                ..
            })
        ));
    }

    #[test]
    fn not_utf8_is_an_error_and_reading_goes_on() {
        let mut bytes = b"0,h,0,Read,0,4096,1\n".to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
        bytes.extend_from_slice(b"1,h,0,Read,0,4096,1\n");
        let out: Vec<_> = TraceReader::new(
            &bytes[..],
            "t",
            TraceOptions::new(TraceFormat::Msr, 4096, 8),
        )
        .collect();
        assert_eq!(out.len(), 3);
        assert!(out[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("t:2: the line is not valid UTF-8"));
        assert!(out[2].is_ok());
    }

    #[test]
    fn timestamps_never_go_back() {
        let text = "100,h,0,Read,0,4096,1\n90,h,0,Read,0,4096,1\n";
        let ts: Vec<_> = records(TraceFormat::Msr, text)
            .iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(ts, vec![0, 0]);
    }

    proptest! {
        #[test]
        fn arbitrary_lines_never_panic(lines in proptest::collection::vec(".{0,80}", 0..8), page_shift in 9u32..16, cap in 1u64..1 << 40) {
            let text = lines.join("\n");
            for format in [TraceFormat::Msr, TraceFormat::Blkparse, TraceFormat::Fiu] {
                let opts = TraceOptions::new(format, 1 << page_shift, cap);
                for rec in TraceReader::new(text.as_bytes(), "p", opts).flatten() {
                    prop_assert!(rec.request.end_lpn() <= cap);
                }
            }
        }

        #[test]
        fn numeric_lines_never_panic(ts in any::<u64>(), off in any::<u64>(), len in any::<u64>(), cap in 1u64..u64::MAX) {
            let msr = format!("{ts},h,0,Write,{off},{len},0");
            let fiu = format!("{ts} 1 p {off} {len} R 8 0 x");
            let blk = format!("8,0 0 1 {ts}.{} 1 Q W {off} + {len} [p]", ts % 1_000_000_000);
            for (format, line) in [(TraceFormat::Msr, msr), (TraceFormat::Fiu, fiu), (TraceFormat::Blkparse, blk)] {
                for opts in [TraceOptions::new(format, 4096, cap), TraceOptions { out_of_range: OutOfRange::Reject, ..TraceOptions::new(format, 512, cap) }] {
                    for rec in TraceReader::new(line.as_bytes(), "p", opts).flatten() {
                        prop_assert!(rec.request.end_lpn() <= cap);
                    }
                }
            }
        }
    }
}
