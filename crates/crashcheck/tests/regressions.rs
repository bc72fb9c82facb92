//! Regression tests for what the crash checkers found, each a plain
//! deterministic case (the seeded runner finds them again from a seed).

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice, SECTOR};
use ptsd_fs::format::Superblock;
use ptsd_fs::{mkfs, DirectStore, MkfsOptions, Store};

/// The superblock is rewritten in place at every mount and unmount; a
/// crash could tear that write after its first sector, and the file system
/// could then never be mounted again (checksum mismatch). Found by
/// `stack_crash` with torn writes (seed 98 of the CI runner).
#[test]
fn superblock_torn_after_its_first_sector_still_decodes() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 1024).unwrap());
    let store = DirectStore::new(dev.clone()).unwrap();
    mkfs(&store, &MkfsOptions::default()).unwrap();
    let mut old = vec![0u8; 4096];
    store.read(0, &mut old).unwrap();
    let mut sb = Superblock::decode(&old, 1024).unwrap();
    sb.mount_count += 1;
    sb.state = ptsd_fs::format::STATE_DIRTY;
    let new = sb.encode();
    for keep in 1..4096 / SECTOR {
        let mut torn = old.clone();
        torn[..keep * SECTOR].copy_from_slice(&new[..keep * SECTOR]);
        let got = Superblock::decode(&torn, 1024)
            .unwrap_or_else(|e| panic!("torn after {keep} sectors: {e}"));
        assert_eq!(got, sb);
    }
    // A damaged first sector is still refused.
    let mut bad = new.clone();
    bad[20] ^= 1;
    assert!(Superblock::decode(&bad, 1024).is_err());
}

/// A bit flip, lost or misdirected write under the emulated SSD's page
/// store used to come back to the reader as wrong data (found by
/// `ftl_powercut` in its corruption mode, seed 18); the page's crc in its
/// OOB entry now turns it into a failed request.
#[test]
fn ssd_page_corruption_is_an_error_not_wrong_data() {
    for seed in 0..200u64 {
        let input = ptsd_crashcheck::input::seeded_bytes(seed, 512);
        if let Err(v) = ptsd_crashcheck::ftl_powercut::run(&input) {
            panic!("seed {seed}: {v}");
        }
    }
}

/// Flushed data lost after a power cut inside the SSD store's sync (PTSD
/// schemes; seeds 66 and 1586 of the CI runner: a mapping page's OOB entry
/// durable before its data pages' ones), and flushed-then-discarded data
/// back after a cut (seed 4565: a merged run of discard records numbered by
/// its first discard). `ptsd-ftl`'s `tests/powercut.rs` pins both too.
#[test]
fn ftl_powercut_ptsd_seeds_66_1586_4565() {
    for seed in [66u64, 1586, 4565] {
        let input = ptsd_crashcheck::input::seeded_bytes(seed, ptsd_crashcheck::runner::INPUT_LEN);
        if let Err(v) = ptsd_crashcheck::ftl_powercut::run(&input) {
            panic!("seed {seed}: {v}");
        }
    }
}

/// Issue 11 §1 (fallocated file + scattered writes unreadable after the
/// inode is reloaded): before its fix, `stack_crash`'s no-crash mode found
/// it at seed 246 of the CI runner ("walking the live tree: lookup c:
/// Input/output error" after a 1 024-piece scatter into a preallocated
/// file), in 77 s on a loaded machine.
#[test]
fn stack_crash_seed_246_fallocate_scatter_reload() {
    let input = ptsd_crashcheck::input::seeded_bytes(246, ptsd_crashcheck::runner::INPUT_LEN);
    ptsd_crashcheck::stack_crash::run(&input).unwrap_or_else(|v| panic!("{v}"));
}

/// `fsck --repair` used to leave a corrupt xattr block in place, so the
/// next `fsck` reported it again ("corrupt xattr block ... bad magic";
/// found by `cargo fuzz run -s none -O decode` in under a minute). Repair
/// now drops the block (the inode's extended attributes are lost, the
/// block freed); the file's data stays.
#[test]
fn fsck_repair_drops_a_corrupt_xattr_block() {
    use ptsd_fs::format::DiskInode;
    use ptsd_fs::{fsck, Caller, FileSystem};
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 1024).unwrap());
    let store = || -> Arc<dyn Store> { Arc::new(DirectStore::new(dev.clone()).unwrap()) };
    mkfs(&*store(), &MkfsOptions::default()).unwrap();
    let ino = {
        let fs = FileSystem::mount(store()).unwrap();
        let f = fs
            .create(fs.root(), b"f", 0o644, Caller::default())
            .unwrap();
        fs.write(f.ino, 0, b"payload").unwrap();
        fs.setxattr(f.ino, b"user.k", b"v", 0).unwrap();
        fs.release(f.ino).unwrap();
        fs.close().unwrap();
        f.ino
    };
    let mut b = vec![0u8; 4096];
    dev.read(ino, &mut b).unwrap();
    let xblk = DiskInode::decode(&b, ino).unwrap().xattr_blk;
    assert_ne!(xblk, 0);
    for damage in [0usize, 100] {
        // Bad magic, then (on a fresh copy of the block) a bad checksum.
        let mut x = vec![0u8; 4096];
        dev.read(xblk, &mut x).unwrap();
        x[damage] ^= 0x5a;
        dev.write(xblk, &x).unwrap();
        let first = fsck::check(store(), true).unwrap();
        assert!(
            first
                .problems
                .iter()
                .any(|p| p.to_string().contains("xattr block")),
            "{:?}",
            first.problems
        );
        let second = fsck::check(store(), false).unwrap();
        assert!(second.problems.is_empty(), "{:?}", second.problems);
        let fs = FileSystem::mount(store()).unwrap();
        let f = fs.lookup(fs.root(), b"f").unwrap().ino;
        assert_eq!(fs.read(f, 0, 100).unwrap(), b"payload");
        assert!(fs.listxattr(f).unwrap().is_empty());
        // Give it an xattr block again for the next round.
        fs.setxattr(f, b"user.k", b"v", 0).unwrap();
        fs.close().unwrap();
    }
}

/// `fsck --repair` reported a directory entry whose type disagrees with its
/// inode's mode but did not fix it (found by `cargo fuzz run -s none -O
/// decode` in 10 s; the libFuzzer input is kept as it was found). Repair
/// now rewrites the entry's type.
#[test]
fn decode_libfuzzer_entry_type_is_repaired() {
    let input = include_bytes!("inputs/decode-entry-type");
    ptsd_crashcheck::decode::run(input).unwrap_or_else(|v| panic!("{v}"));
}

/// Images `fsck --repair` left unclean, each found by the seeded `decode`
/// runner: a resealed xattr block with a bad checksum (seed 320), a data
/// extent far outside the device (6321), a directory block lost with its
/// extent (49725), a directory size far past its last block (69340).
#[test]
fn decode_seeds_fsck_repair_leaves_clean() {
    for seed in [320u64, 6321, 49_725, 69_340] {
        let input = ptsd_crashcheck::input::seeded_bytes(seed, ptsd_crashcheck::runner::INPUT_LEN);
        ptsd_crashcheck::decode::run(&input).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    }
}

/// A directory inode whose size field is huge (a resealed inode) made
/// `readdir` allocate a vector of that many blocks and abort the process
/// (found by the seeded `decode` runner; libFuzzer's malloc limit had hidden
/// it). The size is now checked against the blocks the directory maps: an
/// error, no allocation.
#[test]
fn a_directory_with_a_huge_size_is_an_error_not_an_allocation() {
    use ptsd_fs::format::{decode_dir_block, DiskInode};
    use ptsd_fs::{Caller, Errno, FileSystem};
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 1024).unwrap());
    let store = || -> Arc<dyn Store> { Arc::new(DirectStore::new(dev.clone()).unwrap()) };
    mkfs(&*store(), &MkfsOptions::default()).unwrap();
    let d = {
        let fs = FileSystem::mount(store()).unwrap();
        let d = fs.mkdir(fs.root(), b"d", 0o755, Caller::default()).unwrap();
        fs.close().unwrap();
        d.ino
    };
    let mut b = vec![0u8; 4096];
    dev.read(d, &mut b).unwrap();
    let mut di = DiskInode::decode(&b, d).unwrap();
    di.size = 1 << 50;
    dev.write(d, &di.encode()).unwrap();
    let fs = FileSystem::mount(store()).unwrap();
    let ino = fs.lookup(fs.root(), b"d").map(|a| a.ino);
    match ino {
        Ok(ino) => assert_eq!(fs.readdir(ino, 0, 100).err(), Some(Errno::EIO)),
        Err(e) => assert_eq!(e, Errno::EIO),
    }
    // A directory block claiming 65 535 entries: an error.
    let mut blk = vec![0u8; 4096];
    blk[..4].copy_from_slice(b"PTDR");
    blk[8..16].copy_from_slice(&7u64.to_le_bytes());
    blk[16..18].copy_from_slice(&u16::MAX.to_le_bytes());
    blk[18..20].copy_from_slice(&4096u16.to_le_bytes());
    let c = crc32c::crc32c_append(crc32c::crc32c(&blk[..4]), &[0u8; 4]);
    let c = crc32c::crc32c_append(c, &blk[8..]);
    blk[4..8].copy_from_slice(&c.to_le_bytes());
    assert!(decode_dir_block(&blk, 9, 7).is_err());
}
