//! `decode`: arbitrary bytes where the stack decodes on-media structures.
//!
//! - Raw decoders of ptsd-fs (superblock, inode, directory block, extent
//!   overflow block, xattr block, xattr chain block) on fuzzed blocks
//!   whose magic and crc are optionally made right, so the field checks
//!   behind them are reached.
//! - A valid journal region with fuzzed bytes in its superblock, slots and
//!   commit records, opened (recovered).
//! - A valid FTL image with a fuzzed header (crc made right), opened.
//! - A valid file-system image with fuzzed blocks: mount and read
//!   everything, then `fsck --repair`, then `fsck` must find it clean (or
//!   refuse with an error).
//!
//! Every outcome must be a value or a typed error; a panic is the finding
//! (libFuzzer also bounds memory and time per input).

use std::sync::{Arc, OnceLock};

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::format::{
    decode_dir_block, decode_overflow, decode_xattr_chain_block, decode_xattrs, DiskInode,
    Superblock,
};
use ptsd_fs::{fsck, mkfs, Caller, DirectStore, FileSystem, MkfsOptions, Store};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig, Persist};

use crate::input::Input;
use crate::{CheckResult, Violation};

const T: &str = "decode";
const BS: usize = 4096;
const FS_BLOCKS: u64 = 1024;

fn crc_with_zero_field(b: &[u8], at: usize) -> u32 {
    let c = crc32c::crc32c(&b[..at]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &b[at + 4..])
}

/// The block the input describes, with magic and crc fixed up as asked.
fn block(inp: &mut Input<'_>, magic: &[u8], crc_at: usize) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    let fixups = inp.u8();
    // Runs of input bytes at input-chosen offsets (dense near the header).
    for _ in 0..inp.below(16) {
        let at = if inp.bool() {
            inp.below(128)
        } else {
            inp.below(BS as u32)
        } as usize;
        let len = (1 + inp.below(64) as usize).min(BS - at);
        for x in &mut b[at..at + len] {
            *x = inp.u8();
        }
    }
    if fixups & 1 == 1 {
        b[..magic.len()].copy_from_slice(magic);
    }
    if fixups & 2 == 2 {
        let c = crc_with_zero_field(&b, crc_at);
        b[crc_at..crc_at + 4].copy_from_slice(&c.to_le_bytes());
    }
    b
}

/// The valid file-system image the image cases start from: a few
/// directories, files with data and xattrs, a symlink, a file with many
/// extents (overflow blocks) and a chain of xattr blocks.
fn base_fs() -> &'static Vec<Vec<u8>> {
    static BASE: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    BASE.get_or_init(|| {
        let dev = Arc::new(MemDevice::new(BS as u32, FS_BLOCKS).expect("geometry"));
        let store = Arc::new(DirectStore::new(dev.clone()).expect("store"));
        mkfs(&*store, &MkfsOptions::default()).expect("mkfs");
        let fs = FileSystem::mount(store).expect("mount");
        let me = Caller { uid: 0, gid: 0 };
        let root = fs.root();
        let d = fs.mkdir(root, b"d", 0o755, me).expect("mkdir");
        for i in 0..6u8 {
            let f = fs
                .create(d.ino, &[b'f', b'0' + i], 0o644, me)
                .expect("create");
            fs.write(f.ino, u64::from(i) * 5000, &[i; 7000])
                .expect("write");
            fs.setxattr(f.ino, b"user.k", &[i; 9], 0).expect("xattr");
            fs.release(f.ino).expect("release");
        }
        let big = fs.create(root, b"big", 0o644, me).expect("create");
        for k in 0..300u64 {
            fs.write(big.ino, k * 2 * BS as u64, &[k as u8; 100])
                .expect("write");
        }
        // More xattrs than one block holds: a chain of xattr blocks.
        for k in 0..300u32 {
            let name = format!("user.many.{k:04}");
            fs.setxattr(big.ino, name.as_bytes(), &k.to_le_bytes(), 0)
                .expect("xattr");
        }
        fs.release(big.ino).expect("release");
        fs.symlink(root, b"s", b"d/f0", me).expect("symlink");
        fs.close().expect("close");
        (0..FS_BLOCKS)
            .map(|b| {
                let mut v = vec![0u8; BS];
                dev.read(b, &mut v).expect("read");
                v
            })
            .collect()
    })
}

/// Blocks of the base image that are not all zero (where metadata lives).
fn used_blocks() -> &'static Vec<u64> {
    static USED: OnceLock<Vec<u64>> = OnceLock::new();
    USED.get_or_init(|| {
        base_fs()
            .iter()
            .enumerate()
            .filter(|(_, b)| b.iter().any(|&x| x != 0))
            .map(|(i, _)| i as u64)
            .collect()
    })
}

fn fs_image(inp: &mut Input<'_>) -> CheckResult {
    let dev = Arc::new(MemDevice::new(BS as u32, FS_BLOCKS).expect("geometry"));
    for (i, b) in base_fs().iter().enumerate() {
        dev.write(i as u64, b).expect("write");
    }
    let used = used_blocks();
    for _ in 0..1 + inp.below(3) {
        let blk = used[inp.below(used.len() as u32) as usize];
        let mut b = base_fs()[blk as usize].clone();
        for _ in 0..1 + inp.below(8) {
            let at = inp.below(BS as u32) as usize;
            b[at] = inp.u8();
        }
        if inp.bool() {
            // Re-seal, so the damage passes the crc and meets the checks.
            let at = if blk == 0 { BS - 4 } else { 4 };
            let c = crc_with_zero_field(&b, at);
            b[at..at + 4].copy_from_slice(&c.to_le_bytes());
        }
        dev.write(blk, &b).expect("write");
    }
    let ddev: Arc<dyn BlockDevice> = dev.clone();
    let store = || -> Arc<dyn Store> { Arc::new(DirectStore::new(ddev.clone()).expect("store")) };
    if let Ok(fs) = FileSystem::mount(store()) {
        walk(&fs);
        let _ = fs.close();
    }
    match fsck::check(store(), true) {
        Ok(_) => match fsck::check(store(), false) {
            Ok(r) if r.problems.is_empty() => Ok(1),
            Ok(r) => Err(Violation::new(
                T,
                format!("fsck after fsck --repair is not clean: {:?}", r.problems),
            )),
            Err(e) => Err(Violation::new(
                T,
                format!(
                    "fsck after a repair that succeeded failed: {}",
                    ptsd_blockdev::ErrorChain(&e)
                ),
            )),
        },
        Err(_) => Ok(1), // refused with an error: fine
    }
}

/// Read everything reachable; errors are fine, panics are not.
fn walk(fs: &FileSystem) {
    let mut stack = vec![fs.root()];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        let Ok(ents) = fs.readdir(dir, 0, 4096) else {
            continue;
        };
        for e in ents {
            seen += 1;
            if seen > 10_000 || e.name == b"." || e.name == b".." {
                continue;
            }
            let Ok(a) = fs.lookup(dir, &e.name) else {
                continue;
            };
            match a.mode & libc::S_IFMT {
                libc::S_IFDIR => stack.push(a.ino),
                libc::S_IFLNK => drop(fs.readlink(a.ino)),
                _ => {
                    let _ = fs.read(a.ino, 0, 1 << 22);
                    let _ = fs.listxattr(a.ino);
                }
            }
            fs.forget(a.ino, 1);
        }
    }
}

fn journal_region(inp: &mut Input<'_>) -> CheckResult {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(1024, 32).expect("geometry"));
    let cfg = JournalConfig {
        partitions: 1 + inp.below(2),
        block_size: 1024,
        checkpoint_interval: None,
        checkpoint_fill: 1.0,
        ..JournalConfig::default()
    };
    let region = CrashRegion::new(96 << 10);
    {
        let j = Journal::create(region.clone(), dev.clone(), cfg.clone()).map_err(|e| {
            Violation::new(
                T,
                format!("journal create: {}", ptsd_blockdev::ErrorChain(&e)),
            )
        })?;
        for t in 0..4u8 {
            let mut tx = j.begin();
            for b in 0..3u64 {
                tx.write(b + u64::from(t), &[t; 1024]).expect("write");
            }
            tx.finish().expect("finish");
            if t % 2 == 1 {
                j.commit().expect("commit");
            }
        }
    }
    // Fuzz bytes: mostly in the superblock and commit area, some anywhere.
    let len = region.len();
    for _ in 0..1 + inp.below(12) {
        let at = match inp.below(3) {
            0 => inp.below(256) as usize,
            1 => inp.below(8192) as usize,
            _ => inp.u32() as usize % len,
        };
        let n = (1 + inp.below(16) as usize).min(len - at);
        let bytes: Vec<u8> = (0..n).map(|_| inp.u8()).collect();
        region.write(at, &bytes);
        region.persist(at, n);
    }
    let img = region.crash_image(0);
    if let Ok((j, _)) = Journal::open(CrashRegion::from_image(img), dev.clone(), cfg) {
        let mut buf = vec![0u8; 1024];
        for b in 0..32 {
            let _ = j.read(b, &mut buf);
        }
        let _ = j.close();
    }
    Ok(1)
}

fn ftl_header(inp: &mut Input<'_>) -> CheckResult {
    let cfg = ptsd_ftl::FtlConfig {
        page_size: 512,
        channels: 1,
        chips_per_channel: 1,
        blocks_per_chip: 16,
        pages_per_block: 8,
        logical_bytes: Some(40 * 512),
        op_ratio: 0.2,
        write_buffer_pages: 2,
        ..ptsd_ftl::FtlConfig::default()
    };
    let blocks = ptsd_ftl::Ssd::image_blocks(&cfg, 512);
    let dev = Arc::new(MemDevice::new(512, blocks).expect("geometry"));
    {
        let mut ssd = ptsd_ftl::Ssd::open_on(cfg.clone(), Box::new(dev.clone())).map_err(|e| {
            Violation::new(T, format!("ftl create: {}", ptsd_blockdev::ErrorChain(&e)))
        })?;
        if inp.bool() {
            let _ = ssd.shutdown();
        }
    }
    let mut h = vec![0u8; 512];
    dev.read(0, &mut h).expect("read");
    for _ in 0..1 + inp.below(8) {
        let at = inp.below(48) as usize;
        h[at] = inp.u8();
    }
    if inp.bool() {
        let c = crc32c::crc32c(&h[..44]);
        h[44..48].copy_from_slice(&c.to_le_bytes());
    }
    dev.write(0, &h).expect("write");
    let _ = ptsd_ftl::Ssd::open_on(cfg, Box::new(dev));
    Ok(1)
}

/// Run one input; see the module doc. Returns the structures decoded.
pub fn run(data: &[u8]) -> CheckResult {
    let mut inp = Input::new(data);
    match inp.below(8) {
        0 => {
            let b = block(&mut inp, b"PTSDFS\0\x01", BS - 4);
            let _ = Superblock::decode(&b, u64::from(inp.u32()));
        }
        1 => {
            let b = block(&mut inp, b"PTIN", 4);
            let _ = DiskInode::decode(&b, u64::from(inp.u16()));
        }
        2 => {
            let b = block(&mut inp, b"PTDR", 4);
            let _ = decode_dir_block(&b, 7, u64::from(inp.u16()));
        }
        3 => {
            let b = block(&mut inp, b"PTEX", 4);
            let _ = decode_overflow(&b, 7, u64::from(inp.u16()));
        }
        4 if inp.bool() => {
            let b = block(&mut inp, b"PTXC", 4);
            let _ = decode_xattr_chain_block(&b, 7, u64::from(inp.u16()));
        }
        4 => {
            let b = block(&mut inp, b"PTXA", 4);
            let _ = decode_xattrs(&b, 7, u64::from(inp.u16()));
        }
        5 => return journal_region(&mut inp),
        6 => return ftl_header(&mut inp),
        _ => return fs_image(&mut inp),
    }
    Ok(1)
}
