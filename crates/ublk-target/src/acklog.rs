//! The acknowledged-write log: what the emulated SSD's volatile write buffer
//! holds, kept where a killed daemon cannot lose it.
//!
//! The device advertises a volatile write cache, so the SSD acknowledges a
//! write once it is in its DRAM write buffer and makes it durable at the
//! next FLUSH. A daemon killed in between takes the buffer with it — and
//! the kernel, which kept the device quiesced and hands the next FLUSH to
//! the recovered daemon, would see that FLUSH succeed. So, with a file
//! store, every write (write-zeroes, discard) is appended to this log
//! *before* it goes to the SSD, and so before it can be acknowledged. The
//! log lives in a plain file next to the image: a `pwrite` to the page
//! cache survives the process, and the kernel is what the daemon's death
//! has to be survived against (a power cut takes the host's unflushed state
//! with it, as a real disk's would). A FLUSH that completes covers every
//! record logged before it was submitted (the SSD serves writes, discards
//! and flushes in submission order), and those records are dropped.
//!
//! When the backend opens the image again — `ptsd ublk recover`, or an
//! `add` after a crash — the records still in the log are replayed in order
//! on top of what the image recovered, and flushed, before the device
//! serves anything. A record is a whole-block "set" (data, zeroes, or
//! unmapped), so replaying one the image already has changes nothing.
//!
//! File layout: two header slots (at 0 and [`SLOT_B`]; the valid one with
//! the higher sequence number counts, so a torn header write loses
//! nothing), records from [`RECORDS`]. A record: 32-byte header (magic,
//! kind, generation, LPN, pages, crc32c of header and data) and, for a
//! write, its data. Reading stops at the first record that is torn, of
//! another generation (left over from before the last rewind) or out of
//! range.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use ptsd_blockdev::le::{get_u32, get_u64, put_u32, put_u64};

const HEADER_MAGIC: &[u8; 8] = b"PTSDACK1";
const RECORD_MAGIC: &[u8; 4] = b"PAR1";
const SLOT_BYTES: usize = 40;
/// Offset of the second header slot.
pub const SLOT_B: u64 = 512;
/// Offset of the first record.
pub const RECORDS: u64 = 4096;
const RECORD_HEADER: usize = 32;
/// A rewound log whose file grew beyond this is truncated back.
const SHRINK_BYTES: u64 = 64 << 20;

/// One logged operation on `pages` pages from `lpn`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Logged {
    /// Whole pages of data.
    Write {
        /// First logical page.
        lpn: u64,
        /// The pages' bytes.
        data: Vec<u8>,
    },
    /// Pages that read back as zeroes.
    Zeroes {
        /// First logical page.
        lpn: u64,
        /// How many.
        pages: u32,
    },
    /// Pages whose contents the host no longer needs.
    Discard {
        /// First logical page.
        lpn: u64,
        /// How many.
        pages: u32,
    },
}

/// A record to append (a write's data borrowed from its IO buffer).
#[derive(Clone, Copy, Debug)]
pub enum Record<'a> {
    /// Whole pages of data.
    Write {
        /// First logical page.
        lpn: u64,
        /// The pages' bytes.
        data: &'a [u8],
    },
    /// Pages that read back as zeroes.
    Zeroes {
        /// First logical page.
        lpn: u64,
        /// How many.
        pages: u32,
    },
    /// Pages whose contents the host no longer needs.
    Discard {
        /// First logical page.
        lpn: u64,
        /// How many.
        pages: u32,
    },
}

/// What can go wrong with the log.
#[derive(Debug, thiserror::Error)]
pub enum AckLogError {
    /// Reading or writing the log file failed.
    #[error("acknowledged-write log {path}")]
    Io {
        /// The log file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The log belongs to a device of another page size.
    #[error("acknowledged-write log {path} was written for {found}-byte pages, the device has {expected}-byte pages")]
    PageSize {
        /// The log file.
        path: PathBuf,
        /// The log's page size, bytes.
        found: u32,
        /// The device's page size, bytes.
        expected: u32,
    },
}

/// The log of a file store (see the module documentation).
pub struct AckLog {
    file: File,
    path: PathBuf,
    page: usize,
    /// Records of other generations are stale.
    generation: u64,
    /// Sequence number of the last header written.
    seq: u64,
    /// First live record.
    start: u64,
    /// Where the next record goes.
    end: u64,
    logical_pages: u64,
}

#[derive(Clone, Copy)]
struct Header {
    seq: u64,
    generation: u64,
    start: u64,
    page: u32,
}

fn encode_header(h: &Header) -> [u8; SLOT_BYTES] {
    let mut b = [0u8; SLOT_BYTES];
    b[..8].copy_from_slice(HEADER_MAGIC);
    put_u64(&mut b, 8, h.seq);
    put_u64(&mut b, 16, h.generation);
    put_u64(&mut b, 24, h.start);
    put_u32(&mut b, 32, h.page);
    let crc = crc32c::crc32c(&b[..36]);
    put_u32(&mut b, 36, crc);
    b
}

fn decode_header(b: &[u8]) -> Option<Header> {
    if b.len() < SLOT_BYTES || &b[..8] != HEADER_MAGIC || crc32c::crc32c(&b[..36]) != get_u32(b, 36)
    {
        return None;
    }
    Some(Header {
        seq: get_u64(b, 8),
        generation: get_u64(b, 16),
        start: get_u64(b, 24),
        page: get_u32(b, 32),
    })
}

fn encode_record(kind: u8, generation: u64, lpn: u64, pages: u32, data: &[u8]) -> [u8; 32] {
    let mut h = [0u8; RECORD_HEADER];
    h[..4].copy_from_slice(RECORD_MAGIC);
    h[4] = kind;
    put_u64(&mut h, 8, generation);
    put_u64(&mut h, 16, lpn);
    put_u32(&mut h, 24, pages);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&h[..28]), data);
    put_u32(&mut h, 28, crc);
    h
}

const KIND_WRITE: u8 = 1;
const KIND_ZEROES: u8 = 2;
const KIND_DISCARD: u8 = 3;

impl AckLog {
    /// The log of the image at `image`: the same path with `.acklog`
    /// appended.
    pub fn path_for(image: &Path) -> PathBuf {
        let mut s = image.as_os_str().to_owned();
        s.push(".acklog");
        PathBuf::from(s)
    }

    /// Open (or create) the log at `path` for a device of `logical_pages`
    /// pages of `page` bytes, and return the records still live in it, in
    /// the order they were logged.
    pub fn open(
        path: &Path,
        page: u32,
        logical_pages: u64,
    ) -> Result<(AckLog, Vec<Logged>), AckLogError> {
        let io = |source| AckLogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let mut slots = [0u8; 2 * SLOT_BYTES];
        let len = file.metadata().map_err(io)?.len();
        let read_slot = |at: u64, buf: &mut [u8]| -> std::io::Result<()> {
            if len >= at + SLOT_BYTES as u64 {
                file.read_exact_at(buf, at)?;
            }
            Ok(())
        };
        let (a, b) = slots.split_at_mut(SLOT_BYTES);
        read_slot(0, a).map_err(io)?;
        read_slot(SLOT_B, b).map_err(io)?;
        let header = [decode_header(a), decode_header(b)]
            .into_iter()
            .flatten()
            .max_by_key(|h| h.seq);
        let mut log = AckLog {
            file,
            path: path.to_path_buf(),
            page: page as usize,
            generation: 1,
            seq: 0,
            start: RECORDS,
            end: RECORDS,
            logical_pages,
        };
        let Some(h) = header else {
            // New (or never written): nothing to replay.
            log.write_header().map_err(io)?;
            return Ok((log, Vec::new()));
        };
        if h.page != page {
            return Err(AckLogError::PageSize {
                path: path.to_path_buf(),
                found: h.page,
                expected: page,
            });
        }
        log.generation = h.generation;
        log.seq = h.seq;
        log.start = h.start.max(RECORDS);
        let records = log.read_records(len).map_err(io)?;
        Ok((log, records))
    }

    /// The live records from `start`, stopping at the first invalid one;
    /// leaves `end` after the last valid one.
    fn read_records(&mut self, len: u64) -> std::io::Result<Vec<Logged>> {
        let mut out = Vec::new();
        let mut at = self.start;
        let mut h = [0u8; RECORD_HEADER];
        while at + RECORD_HEADER as u64 <= len {
            self.file.read_exact_at(&mut h, at)?;
            if &h[..4] != RECORD_MAGIC || get_u64(&h, 8) != self.generation {
                break;
            }
            let (kind, lpn, pages) = (h[4], get_u64(&h, 16), get_u32(&h, 24));
            if pages == 0
                || lpn
                    .checked_add(u64::from(pages))
                    .is_none_or(|e| e > self.logical_pages)
            {
                break;
            }
            let data_len = if kind == KIND_WRITE {
                pages as usize * self.page
            } else {
                0
            };
            let next = at + (RECORD_HEADER + data_len) as u64;
            if next > len {
                break;
            }
            let mut data = vec![0u8; data_len];
            self.file
                .read_exact_at(&mut data, at + RECORD_HEADER as u64)?;
            let crc = crc32c::crc32c_append(crc32c::crc32c(&h[..28]), &data);
            if crc != get_u32(&h, 28) {
                break;
            }
            out.push(match kind {
                KIND_WRITE => Logged::Write { lpn, data },
                KIND_ZEROES => Logged::Zeroes { lpn, pages },
                KIND_DISCARD => Logged::Discard { lpn, pages },
                _ => break,
            });
            at = next;
        }
        self.end = at;
        Ok(out)
    }

    fn write_header(&mut self) -> std::io::Result<()> {
        self.seq += 1;
        let b = encode_header(&Header {
            seq: self.seq,
            generation: self.generation,
            start: self.start,
            page: self.page as u32,
        });
        let at = if self.seq % 2 == 0 { 0 } else { SLOT_B };
        self.file.write_all_at(&b, at)
    }

    /// Append `rec`. Once this returns, the record survives the process.
    pub fn append(&mut self, rec: Record<'_>) -> std::io::Result<()> {
        let (kind, lpn, pages, data): (u8, u64, u32, &[u8]) = match rec {
            Record::Write { lpn, data } => {
                let pages = u32::try_from(data.len() / self.page.max(1))
                    .map_err(|_| std::io::Error::other("write too large for the log"))?;
                if pages == 0 || data.len() % self.page != 0 {
                    return Err(std::io::Error::other(format!(
                        "a logged write of {} bytes is not a whole number of {}-byte pages",
                        data.len(),
                        self.page
                    )));
                }
                (KIND_WRITE, lpn, pages, data)
            }
            Record::Zeroes { lpn, pages } => (KIND_ZEROES, lpn, pages, &[][..]),
            Record::Discard { lpn, pages } => (KIND_DISCARD, lpn, pages, &[][..]),
        };
        let h = encode_record(kind, self.generation, lpn, pages, data);
        // Data first, then the header that makes the record valid: a torn
        // append fails its checksum either way, this just keeps it to two
        // writes without copying the data.
        self.file
            .write_all_at(data, self.end + RECORD_HEADER as u64)?;
        self.file.write_all_at(&h, self.end)?;
        self.end += (RECORD_HEADER + data.len()) as u64;
        Ok(())
    }

    /// Where the next record goes: a FLUSH submitted now covers the records
    /// before this mark.
    pub fn mark(&self) -> u64 {
        self.end
    }

    /// Bytes of live records.
    pub fn live_bytes(&self) -> u64 {
        self.end - self.start
    }

    /// Whether no record is live.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// A FLUSH submitted at `mark` completed: the records before it are
    /// durable in the store. With nothing logged since, the log is rewound.
    pub fn covered(&mut self, mark: u64) -> std::io::Result<()> {
        if mark >= self.end {
            return self.rewind();
        }
        if mark > self.start {
            self.start = mark;
            self.write_header()?;
        }
        Ok(())
    }

    /// Everything logged is durable: start a new generation at the first
    /// record's place (the old records become stale).
    pub fn rewind(&mut self) -> std::io::Result<()> {
        let grown = self.end > SHRINK_BYTES;
        self.generation += 1;
        self.start = RECORDS;
        self.end = RECORDS;
        self.write_header()?;
        if grown {
            self.file.set_len(RECORDS)?;
        }
        Ok(())
    }

    /// The log's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path) -> (AckLog, Vec<Logged>) {
        AckLog::open(path, 512, 64).unwrap()
    }

    #[test]
    fn records_survive_a_reopen_until_a_flush_covers_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img.acklog");
        let (mut log, recs) = open(&p);
        assert!(recs.is_empty());
        log.append(Record::Write {
            lpn: 3,
            data: &[7; 1024],
        })
        .unwrap();
        let m = log.mark();
        log.append(Record::Discard { lpn: 9, pages: 2 }).unwrap();
        log.append(Record::Zeroes { lpn: 1, pages: 1 }).unwrap();
        drop(log); // a killed daemon: nothing but what was written
        let (mut log, recs) = open(&p);
        assert_eq!(
            recs,
            vec![
                Logged::Write {
                    lpn: 3,
                    data: vec![7; 1024]
                },
                Logged::Discard { lpn: 9, pages: 2 },
                Logged::Zeroes { lpn: 1, pages: 1 },
            ]
        );
        // A flush submitted at `m` covers the write only.
        log.covered(m).unwrap();
        let (mut log, recs) = {
            drop(log);
            open(&p)
        };
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0], Logged::Discard { lpn: 9, pages: 2 });
        log.covered(log.mark()).unwrap();
        assert!(log.is_empty());
        drop(log);
        assert!(open(&p).1.is_empty(), "a rewound log replays nothing");
    }

    #[test]
    fn a_torn_record_ends_the_log_and_stale_generations_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img.acklog");
        let (mut log, _) = open(&p);
        for lpn in 0..4 {
            log.append(Record::Write {
                lpn,
                data: &[lpn as u8 + 1; 512],
            })
            .unwrap();
        }
        // Rewind, then log one record: the old second..fourth records are
        // still in the file, of the old generation.
        log.rewind().unwrap();
        log.append(Record::Write {
            lpn: 10,
            data: &[0xAA; 512],
        })
        .unwrap();
        let second = log.mark();
        log.append(Record::Write {
            lpn: 11,
            data: &[0xBB; 512],
        })
        .unwrap();
        drop(log);
        // Tear the last record's data.
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&[0u8; 8], second + RECORD_HEADER as u64 + 100)
            .unwrap();
        let (log, recs) = open(&p);
        assert_eq!(
            recs,
            vec![Logged::Write {
                lpn: 10,
                data: vec![0xAA; 512]
            }]
        );
        assert_eq!(
            log.mark(),
            second,
            "the next record overwrites the torn one"
        );
    }

    #[test]
    fn a_torn_header_falls_back_to_the_other_slot() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img.acklog");
        let (mut log, _) = open(&p);
        log.append(Record::Zeroes { lpn: 0, pages: 1 }).unwrap();
        let m = log.mark();
        log.append(Record::Zeroes { lpn: 5, pages: 1 }).unwrap();
        let slot = if (log.seq + 1) % 2 == 0 { 0 } else { SLOT_B };
        log.covered(m).unwrap(); // header written to `slot`
        drop(log);
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&[0xFF; 4], slot + 20).unwrap();
        // The older header still holds: both records replay (replaying a
        // covered record is harmless).
        let (_, recs) = open(&p);
        assert_eq!(recs.len(), 2);
    }

    #[test]
    fn out_of_range_and_wrong_page_size_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img.acklog");
        let (mut log, _) = open(&p);
        log.append(Record::Discard { lpn: 60, pages: 4 }).unwrap();
        drop(log);
        // A smaller device: the record lies beyond it and is not replayed.
        let (_, recs) = AckLog::open(&p, 512, 32).unwrap();
        assert!(recs.is_empty());
        let err = AckLog::open(&p, 4096, 64).err().unwrap();
        assert!(err.to_string().contains("512-byte pages"), "{err}");
        let (mut log, _) = open(&p);
        assert!(log
            .append(Record::Write {
                lpn: 0,
                data: &[1; 100]
            })
            .is_err());
    }
}
