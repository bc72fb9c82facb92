use parking_lot::RwLock;

use crate::{check_range, check_request, BlockDevice, BlockError};

/// Number of lock stripes: enough that threads touching different blocks
/// rarely contend, few enough to stay cheap.
const STRIPES: usize = 64;

/// A device held in memory. Writes are durable at once (there is nothing to
/// lose), so `flush` does nothing.
///
/// ```
/// use ptsd_blockdev::{BlockDevice, MemDevice};
/// let dev = MemDevice::new(512, 8).unwrap();
/// assert_eq!(dev.capacity_bytes(), 4096);
/// ```
pub struct MemDevice {
    block_size: u32,
    num_blocks: u64,
    /// Block `b` lives in stripe `b % STRIPES` at index `b / STRIPES`.
    stripes: Vec<RwLock<Vec<u8>>>,
}

impl MemDevice {
    /// A zero-filled device of `num_blocks` blocks of `block_size` bytes.
    pub fn new(block_size: u32, num_blocks: u64) -> Result<Self, BlockError> {
        validate_geometry(block_size, num_blocks)?;
        let per_stripe = num_blocks.div_ceil(STRIPES as u64) as usize;
        let stripes = (0..STRIPES)
            .map(|_| RwLock::new(vec![0u8; per_stripe * block_size as usize]))
            .collect();
        Ok(Self {
            block_size,
            num_blocks,
            stripes,
        })
    }

    fn locate(&self, block: u64) -> (usize, usize) {
        let bs = self.block_size as usize;
        let stripe = (block % STRIPES as u64) as usize;
        let offset = (block / STRIPES as u64) as usize * bs;
        (stripe, offset)
    }
}

/// Reject geometries no device can have.
pub(crate) fn validate_geometry(block_size: u32, num_blocks: u64) -> Result<(), BlockError> {
    if block_size < 512 || !block_size.is_power_of_two() {
        return Err(BlockError::InvalidConfig(format!(
            "block size {block_size} is not a power of two >= 512"
        )));
    }
    if num_blocks == 0 {
        return Err(BlockError::InvalidConfig("device has zero blocks".into()));
    }
    Ok(())
}

impl BlockDevice for MemDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), BlockError> {
        let count = check_request(self, block, buf.len())?;
        let bs = self.block_size as usize;
        for (i, chunk) in buf.chunks_exact_mut(bs).enumerate().take(count as usize) {
            let (stripe, off) = self.locate(block + i as u64);
            chunk.copy_from_slice(&self.stripes[stripe].read()[off..off + bs]);
        }
        Ok(())
    }

    fn write(&self, block: u64, buf: &[u8]) -> Result<(), BlockError> {
        check_request(self, block, buf.len())?;
        let bs = self.block_size as usize;
        for (i, chunk) in buf.chunks_exact(bs).enumerate() {
            let (stripe, off) = self.locate(block + i as u64);
            self.stripes[stripe].write()[off..off + bs].copy_from_slice(chunk);
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), BlockError> {
        Ok(())
    }

    fn discard(&self, block: u64, count: u64) -> Result<(), BlockError> {
        check_range(self, block, count)?;
        let bs = self.block_size as usize;
        for b in block..block + count {
            let (stripe, off) = self.locate(b);
            self.stripes[stripe].write()[off..off + bs].fill(0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let dev = MemDevice::new(512, 100).unwrap();
        let data: Vec<u8> = (0..512 * 3).map(|i| (i % 251) as u8).collect();
        dev.write(97, &data).unwrap();
        let mut back = vec![0u8; 512 * 3];
        dev.read(97, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(matches!(
            dev.write(98, &data),
            Err(BlockError::OutOfRange {
                block: 98,
                count: 3,
                capacity: 100
            })
        ));
        assert!(matches!(
            dev.read(0, &mut [0u8; 100]),
            Err(BlockError::Misaligned { .. })
        ));
        assert!(matches!(
            dev.read(u64::MAX, &mut back),
            Err(BlockError::OutOfRange { .. })
        ));
        dev.discard(98, 1).unwrap();
        dev.read(97, &mut back).unwrap();
        assert_eq!(&back[..512], &data[..512]);
        assert!(back[512..1024].iter().all(|&b| b == 0));
        assert!(MemDevice::new(1000, 1).is_err());
        assert!(MemDevice::new(4096, 0).is_err());
    }
}
