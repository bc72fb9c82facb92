//! What travels with a request: owned or caller-lent buffers, and the
//! finished request handed back.

use super::{Queued, Ssd};
use crate::error::SsdRequestError;
use crate::request::Completion;

/// Data that travels with a request.
///
/// A timing-only simulation passes `None` (nothing is allocated); a device
/// that holds data passes the bytes to write, or a buffer to read into
/// (its length must be `pages * page_size`), or says that the caller keeps
/// the buffer ([`External`](Payload::External)).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum Payload {
    #[default]
    None,
    Write(Vec<u8>),
    Read(Vec<u8>),
    /// The caller owns the request's buffer and lends it while the SSD
    /// serves the request, through the [`DataIo`] given to
    /// [`Ssd::advance_with`]: a write's bytes go straight from it into the
    /// write buffer, a read's straight from the store (or the write buffer)
    /// into it, with no copy in between. For reads and writes only.
    External,
}

/// Caller-owned request buffers, for requests submitted with
/// [`Payload::External`].
///
/// The SSD asks for a request's buffer only inside
/// [`Ssd::advance_with`], when it serves the request (a write: when it
/// copies the bytes into its write buffer; a read: when it fills the
/// buffer), and at most once per request. The buffer must be exactly
/// `pages * page_size` bytes long. `None` (or a wrong length) fails that
/// one request ([`Done::error`]); the device goes on.
pub trait DataIo {
    /// The bytes of write request `id`.
    fn source(&mut self, id: u64) -> Option<&[u8]>;
    /// The buffer that read request `id` fills.
    fn destination(&mut self, id: u64) -> Option<&mut [u8]>;
}

/// Buffers by request id: lend one by inserting it before the request is
/// submitted, take it back after the request is done.
impl DataIo for std::collections::HashMap<u64, Vec<u8>> {
    fn source(&mut self, id: u64) -> Option<&[u8]> {
        self.get(&id).map(|b| &b[..])
    }
    fn destination(&mut self, id: u64) -> Option<&mut [u8]> {
        self.get_mut(&id).map(|b| &mut b[..])
    }
}

/// No caller buffers: every [`Payload::External`] request fails
/// (what [`Ssd::advance`] uses).
pub(super) struct NoBuffers;

impl DataIo for NoBuffers {
    fn source(&mut self, _: u64) -> Option<&[u8]> {
        None
    }
    fn destination(&mut self, _: u64) -> Option<&mut [u8]> {
        None
    }
}

/// A finished request. For reads with a `Payload::Read` buffer, the payload
/// comes back filled; a write's buffer comes back too, for reuse.
#[derive(Debug, Clone)]
pub struct Done {
    pub completion: Completion,
    pub payload: Payload,
    /// It failed: the device failed while serving it (see [`Ssd::fault`]),
    /// or the request itself could not be served ([`error`](Self::error)).
    pub failed: bool,
    /// Why this request alone failed, changing nothing (its external
    /// buffer was missing or of the wrong size); `None` otherwise. Boxed:
    /// it is rare, and every completion carries the field.
    pub error: Option<Box<SsdRequestError>>,
}

impl Ssd {
    /// The buffer a read fills: its own payload's or the caller's (checked
    /// before anything changes, so a missing one fails only this request).
    pub(super) fn read_destination<'a>(
        &self,
        q: &'a mut Queued,
        buffers: &'a mut dyn DataIo,
    ) -> Result<Option<&'a mut [u8]>, SsdRequestError> {
        let (id, op, pages) = (q.req.id, q.req.op, q.req.pages);
        match &mut q.payload {
            Payload::Read(b) => Ok(Some(b)),
            Payload::External => match buffers.destination(id) {
                Some(b) => self.check_buffer_len(b.len(), pages).map(|()| Some(b)),
                None => Err(SsdRequestError::BufferMissing { id, op }),
            },
            _ => Ok(None),
        }
    }

    /// The bytes a write takes: its own payload's or the caller's.
    pub(super) fn write_source<'a>(
        &self,
        q: &'a Queued,
        buffers: &'a mut dyn DataIo,
    ) -> Result<Option<&'a [u8]>, SsdRequestError> {
        let (id, op, pages) = (q.req.id, q.req.op, q.req.pages);
        match &q.payload {
            Payload::Write(d) => Ok(Some(d)),
            Payload::External => match buffers.source(id) {
                Some(b) => self.check_buffer_len(b.len(), pages).map(|()| Some(b)),
                None => Err(SsdRequestError::BufferMissing { id, op }),
            },
            _ => Ok(None),
        }
    }

    pub(super) fn check_buffer_len(&self, len: usize, pages: u32) -> Result<(), SsdRequestError> {
        if len == pages as usize * self.g.page_size as usize {
            Ok(())
        } else {
            Err(SsdRequestError::PayloadSize {
                len,
                pages,
                page_size: self.g.page_size,
            })
        }
    }
}
