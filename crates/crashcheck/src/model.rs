//! The model file system `stack_crash` checks against, and the workload
//! grammar (ACE-like: CrashMonkey/ACE, OSDI'18) it draws operations from.
//!
//! The model is a map from path to entry; files are shared by hard links
//! through an id. It only needs to decide whether an operation is valid
//! (the generator issues valid ones only, so every failure of the real file
//! system before a crash is a finding) and what it leaves.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::input::Input;

/// File contents, in copy-on-write chunks: the runner keeps the model's
/// state after every operation since the last sync, and a clone of a
/// multi-megabyte file per 4 KiB write would be most of its time.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Data {
    len: usize,
    /// `len.div_ceil(CHUNK)` chunks of `CHUNK` bytes; bytes past `len` are 0.
    chunks: Vec<Arc<Vec<u8>>>,
}

const CHUNK: usize = 16 << 10;

impl Data {
    /// The contents `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let chunks = bytes
            .chunks(CHUNK)
            .map(|c| {
                let mut v = c.to_vec();
                v.resize(CHUNK, 0);
                Arc::new(v)
            })
            .collect();
        Data {
            len: bytes.len(),
            chunks,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Grow with zeroes or shrink to `n` bytes.
    pub fn resize(&mut self, n: usize) {
        if n < self.len {
            self.zero(n, self.len);
        }
        self.chunks
            .resize_with(n.div_ceil(CHUNK), || Arc::new(vec![0; CHUNK]));
        self.len = n;
    }

    /// Bytes `at..at + n` become `f(0), f(1), ...` (within `len`).
    pub fn write_with(&mut self, at: usize, n: usize, f: impl Fn(usize) -> u8) {
        let end = (at + n).min(self.len);
        let mut pos = at;
        while pos < end {
            let (c, o) = (pos / CHUNK, pos % CHUNK);
            let k = (CHUNK - o).min(end - pos);
            let chunk = Arc::make_mut(&mut self.chunks[c]);
            for (i, b) in chunk[o..o + k].iter_mut().enumerate() {
                *b = f(pos + i - at);
            }
            pos += k;
        }
    }

    /// Bytes `from..to` become zeroes (within `len`).
    pub fn zero(&mut self, from: usize, to: usize) {
        self.write_with(from, to.saturating_sub(from), |_| 0);
    }

    /// The contents as one vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v: Vec<u8> = self.chunks.iter().flat_map(|c| c.iter().copied()).collect();
        v.truncate(self.len);
        v
    }
}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes (crc32c {:08x})",
            self.len,
            crc32c::crc32c(&self.to_vec())
        )
    }
}

/// Parent directories operations use ("" is the root).
pub const PARENTS: [&str; 3] = ["", "d0", "d1"];
/// Names operations use in them.
pub const NAMES: [&str; 5] = ["a", "b", "c", "d0", "d1"];
/// Extended attribute names.
pub const XATTRS: [&str; 2] = ["user.x", "user.y"];

/// The value `Op::SetXattr` stores for byte `v`: short, or (one in seven)
/// 3 000 bytes, so two of them need ptsd-fs's xattr chain and crashes land
/// while a set moves between one block and a chain.
pub fn xattr_value(v: u8) -> Vec<u8> {
    let len = if v % 7 == 0 {
        3000
    } else {
        1 + v as usize % 40
    };
    vec![v; len]
}
/// Writes and fallocates land at multiples of this in `0..OFF_UNITS`.
pub const OFF_UNIT: u64 = 4096;
pub const OFF_UNITS: u32 = 600;

/// A path from the grammar: parent index and name index.
pub fn path(parent: usize, name: usize) -> String {
    if PARENTS[parent].is_empty() {
        NAMES[name].to_string()
    } else {
        format!("{}/{}", PARENTS[parent], NAMES[name])
    }
}

/// The parent of a path ("" for an entry of the root).
pub fn parent_of(p: &str) -> &str {
    p.rsplit_once('/').map_or("", |(a, _)| a)
}

/// How an fsync-family call names what it syncs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    Fsync,
    Fdatasync,
}

/// One operation of the grammar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Create(String),
    Mkdir(String),
    /// path, offset, length, fill byte
    Write(String, u64, u64, u8),
    Append(String, u64, u8),
    Truncate(String, u64),
    /// path, offset, length, keep size
    Falloc(String, u64, u64, bool),
    Punch(String, u64, u64),
    /// Many small writes, one operation each: `count` units from the first
    /// unit, every `stride`-th first, then the ones after those, ... (see
    /// [`scatter_order`]): path, first unit, count, stride, fill byte. A
    /// preallocated file filled out of order (fio, a torrent client):
    /// extents split, then merge again.
    Scatter(String, u64, u64, u64, u8),
    Link(String, String),
    Unlink(String),
    Rmdir(String),
    Rename(String, String),
    Symlink(String, String),
    SetXattr(String, usize, u8),
    RemoveXattr(String, usize),
    /// fsync or fdatasync of a file or directory
    Fsync(String, SyncKind),
    Sync,
    /// A journal checkpoint (what the background thread does).
    Checkpoint,
    /// Drop every cached inode (as after the kernel's FORGET).
    Evict,
    /// Clean unmount and mount again.
    Remount,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ent {
    Dir(BTreeMap<String, Vec<u8>>),
    File(u32),
    Sym(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileM {
    pub data: Data,
    pub xattrs: BTreeMap<String, Vec<u8>>,
}

/// What a path shows, compared between model and file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum View {
    Dir {
        xattrs: BTreeMap<String, Vec<u8>>,
    },
    File {
        data: Data,
        xattrs: BTreeMap<String, Vec<u8>>,
        nlink: u32,
        /// The first path (in order) of the same inode: hard links agree.
        first: String,
    },
    Sym(String),
}

pub type Tree = BTreeMap<String, View>;

/// The units a [`Op::Scatter`] writes, in order.
pub fn scatter_order(start: u64, count: u64, stride: u64) -> impl Iterator<Item = u64> {
    (0..stride).flat_map(move |r| (r..count).step_by(stride as usize).map(move |u| start + u))
}

/// Bytes a write puts at file offset `at`: position-dependent, so data
/// landing at the wrong offset is caught.
pub fn fill(byte: u8, at: u64) -> u8 {
    byte ^ (at as u8) ^ ((at >> 8) as u8).rotate_left(3)
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    pub ents: BTreeMap<String, Ent>,
    pub files: BTreeMap<u32, FileM>,
    next: u32,
}

impl Model {
    fn parent_ok(&self, p: &str) -> bool {
        let par = parent_of(p);
        par.is_empty() || matches!(self.ents.get(par), Some(Ent::Dir(_)))
    }

    fn file(&self, p: &str) -> Option<u32> {
        match self.ents.get(p) {
            Some(Ent::File(id)) => Some(*id),
            _ => None,
        }
    }

    fn children(&self, p: &str) -> usize {
        let pre = format!("{p}/");
        self.ents.keys().filter(|k| k.starts_with(&pre)).count()
    }

    fn drop_entry(&mut self, p: &str) {
        if let Some(Ent::File(id)) = self.ents.remove(p) {
            if !self.ents.values().any(|e| *e == Ent::File(id)) {
                self.files.remove(&id);
            }
        }
    }

    /// Apply `op` if valid; false (and no change) if not.
    pub fn apply(&mut self, op: &Op) -> bool {
        match op {
            Op::Create(p) | Op::Mkdir(p) | Op::Symlink(p, _) => {
                if self.ents.contains_key(p) || !self.parent_ok(p) {
                    return false;
                }
                let e = match op {
                    Op::Create(_) => {
                        self.next += 1;
                        self.files.insert(self.next, FileM::default());
                        Ent::File(self.next)
                    }
                    Op::Mkdir(_) => Ent::Dir(BTreeMap::new()),
                    Op::Symlink(_, t) => Ent::Sym(t.clone()),
                    _ => unreachable!(),
                };
                self.ents.insert(p.clone(), e);
            }
            Op::Write(p, off, len, byte) => {
                let Some(id) = self.file(p) else { return false };
                let d = &mut self.files.get_mut(&id).unwrap().data;
                let end = (off + len) as usize;
                if d.len() < end {
                    d.resize(end);
                }
                d.write_with(*off as usize, *len as usize, |i| {
                    fill(*byte, off + i as u64)
                });
            }
            Op::Append(p, len, byte) => {
                let Some(id) = self.file(p) else { return false };
                let off = self.files[&id].data.len() as u64;
                return self.apply(&Op::Write(p.clone(), off, *len, *byte));
            }
            Op::Truncate(p, size) => {
                let Some(id) = self.file(p) else { return false };
                self.files.get_mut(&id).unwrap().data.resize(*size as usize);
            }
            Op::Falloc(p, off, len, keep) => {
                let Some(id) = self.file(p) else { return false };
                let d = &mut self.files.get_mut(&id).unwrap().data;
                let end = (off + len) as usize;
                if !keep && d.len() < end {
                    d.resize(end);
                }
            }
            Op::Scatter(p, start, count, stride, byte) => {
                if self.file(p).is_none() {
                    return false;
                }
                for u in scatter_order(*start, *count, *stride) {
                    self.apply(&Op::Write(p.clone(), u * OFF_UNIT, OFF_UNIT, *byte));
                }
            }
            Op::Punch(p, off, len) => {
                let Some(id) = self.file(p) else { return false };
                let d = &mut self.files.get_mut(&id).unwrap().data;
                d.zero(*off as usize, (off + len) as usize);
            }
            Op::Link(src, dst) => {
                let Some(id) = self.file(src) else {
                    return false;
                };
                if self.ents.contains_key(dst) || !self.parent_ok(dst) {
                    return false;
                }
                self.ents.insert(dst.clone(), Ent::File(id));
            }
            Op::Unlink(p) => {
                if !matches!(self.ents.get(p), Some(Ent::File(_) | Ent::Sym(_))) {
                    return false;
                }
                self.drop_entry(p);
            }
            Op::Rmdir(p) => {
                if !matches!(self.ents.get(p), Some(Ent::Dir(_))) || self.children(p) > 0 {
                    return false;
                }
                self.ents.remove(p);
            }
            Op::Rename(src, dst) => return self.rename(src, dst),
            Op::SetXattr(p, x, v) => {
                let val = xattr_value(*v);
                match self.ents.get_mut(p) {
                    Some(Ent::Dir(xs)) => {
                        xs.insert(XATTRS[*x].into(), val);
                    }
                    Some(Ent::File(id)) => {
                        let id = *id;
                        self.files
                            .get_mut(&id)
                            .unwrap()
                            .xattrs
                            .insert(XATTRS[*x].into(), val);
                    }
                    _ => return false,
                }
            }
            Op::RemoveXattr(p, x) => {
                let xs = match self.ents.get_mut(p) {
                    Some(Ent::Dir(xs)) => xs,
                    Some(Ent::File(id)) => {
                        let id = *id;
                        &mut self.files.get_mut(&id).unwrap().xattrs
                    }
                    _ => return false,
                };
                if xs.remove(XATTRS[*x]).is_none() {
                    return false;
                }
            }
            Op::Fsync(p, _) => {
                if !p.is_empty() && !matches!(self.ents.get(p), Some(Ent::Dir(_) | Ent::File(_))) {
                    return false;
                }
            }
            Op::Sync | Op::Checkpoint | Op::Evict | Op::Remount => {}
        }
        true
    }

    fn rename(&mut self, src: &str, dst: &str) -> bool {
        let Some(s) = self.ents.get(src).cloned() else {
            return false;
        };
        if !self.parent_ok(dst) {
            return false;
        }
        if src == dst {
            return true;
        }
        let is_dir = matches!(s, Ent::Dir(_));
        // A directory cannot move under itself.
        if is_dir && dst.starts_with(&format!("{src}/")) {
            return false;
        }
        match self.ents.get(dst) {
            Some(Ent::Dir(_)) if !is_dir => return false,
            Some(Ent::Dir(_)) if self.children(dst) > 0 => return false,
            Some(Ent::File(_) | Ent::Sym(_)) if is_dir => return false,
            // Hard links of one inode: rename does nothing.
            Some(d) if *d == s && matches!(s, Ent::File(_)) => return true,
            _ => {}
        }
        self.drop_entry(dst);
        if is_dir {
            let pre = format!("{src}/");
            let moved: Vec<(String, Ent)> = self
                .ents
                .iter()
                .filter(|(k, _)| k.starts_with(&pre))
                .map(|(k, v)| (format!("{dst}/{}", &k[pre.len()..]), v.clone()))
                .collect();
            self.ents.retain(|k, _| !k.starts_with(&pre));
            self.ents.extend(moved);
        }
        self.ents.remove(src);
        self.ents.insert(dst.to_string(), s);
        true
    }

    /// What every path shows.
    pub fn view(&self) -> Tree {
        let mut first: BTreeMap<u32, String> = BTreeMap::new();
        let mut nlink: BTreeMap<u32, u32> = BTreeMap::new();
        for (k, e) in &self.ents {
            if let Ent::File(id) = e {
                first.entry(*id).or_insert_with(|| k.clone());
                *nlink.entry(*id).or_default() += 1;
            }
        }
        self.ents
            .iter()
            .map(|(k, e)| {
                let v = match e {
                    Ent::Dir(xs) => View::Dir { xattrs: xs.clone() },
                    Ent::Sym(t) => View::Sym(t.clone()),
                    Ent::File(id) => View::File {
                        data: self.files[id].data.clone(),
                        xattrs: self.files[id].xattrs.clone(),
                        nlink: nlink[id],
                        first: first[id].clone(),
                    },
                };
                (k.clone(), v)
            })
            .collect()
    }
}

/// Decode one operation from the input, with the arguments kept small.
pub fn gen_op(inp: &mut Input<'_>, model: &Model) -> Op {
    // Mostly a path that exists (so most operations are valid and the
    // tree grows deep), sometimes any path of the grammar.
    let keys: Vec<&String> = model.ents.keys().collect();
    let p = |inp: &mut Input<'_>| {
        if !keys.is_empty() && inp.below(4) != 0 {
            keys[inp.below(keys.len() as u32) as usize].clone()
        } else {
            path(inp.below(3) as usize, inp.below(5) as usize)
        }
    };
    let off = |inp: &mut Input<'_>| u64::from(inp.below(OFF_UNITS)) * OFF_UNIT;
    match inp.below(28) {
        0 | 1 => Op::Create(p(inp)),
        2 => Op::Mkdir(p(inp)),
        3..=5 => {
            let path = p(inp);
            Op::Write(
                path,
                off(inp) + u64::from(inp.below(4096)),
                1 + u64::from(inp.below(9000)),
                inp.u8(),
            )
        }
        6 => Op::Append(p(inp), 1 + u64::from(inp.below(6000)), inp.u8()),
        7 => Op::Truncate(p(inp), u64::from(inp.below(40_000))),
        8 | 9 => {
            let path = p(inp);
            Op::Falloc(
                path,
                off(inp),
                OFF_UNIT * u64::from(1 + inp.below(1024)),
                inp.bool(),
            )
        }
        10 => {
            let path = p(inp);
            Op::Punch(
                path,
                off(inp) + u64::from(inp.below(4096)),
                1 + u64::from(inp.below(20_000)),
            )
        }
        11 => Op::Link(p(inp), p(inp)),
        12 => Op::Unlink(p(inp)),
        13 => Op::Rmdir(p(inp)),
        14 | 15 => Op::Rename(p(inp), p(inp)),
        16 => {
            let path = p(inp);
            Op::Symlink(path, format!("t{}", inp.below(4)))
        }
        17 => Op::SetXattr(p(inp), inp.below(2) as usize, inp.u8()),
        18 => Op::RemoveXattr(p(inp), inp.below(2) as usize),
        19 | 20 => {
            let kind = if inp.bool() {
                SyncKind::Fsync
            } else {
                SyncKind::Fdatasync
            };
            let path = if inp.below(4) == 0 {
                String::new()
            } else {
                p(inp)
            };
            Op::Fsync(path, kind)
        }
        21 => Op::Sync,
        22 => Op::Checkpoint,
        23 | 24 => Op::Evict,
        25 | 26 => {
            let path = p(inp);
            let start = u64::from(inp.below(OFF_UNITS));
            // Mostly a few pieces; sometimes hundreds, every other block
            // or so (a preallocated file filled out of order).
            let count = if inp.below(8) == 0 {
                1 + inp.below(1024)
            } else {
                1 + inp.below(32)
            };
            Op::Scatter(
                path,
                start,
                u64::from(count),
                2 + u64::from(inp.below(6)),
                inp.u8(),
            )
        }
        _ => Op::Remount,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_and_links_follow_posix() {
        let mut m = Model::default();
        assert!(m.apply(&Op::Mkdir("d0".into())));
        assert!(m.apply(&Op::Create("d0/a".into())));
        assert!(m.apply(&Op::Write("d0/a".into(), 10, 5, 7)));
        assert!(m.apply(&Op::Link("d0/a".into(), "b".into())));
        assert!(!m.apply(&Op::Rmdir("d0".into())), "not empty");
        assert!(m.apply(&Op::Rename("d0".into(), "d1".into())));
        let v = m.view();
        match &v["b"] {
            View::File {
                data, nlink, first, ..
            } => {
                assert_eq!((data.len(), *nlink, first.as_str()), (15, 2, "b"));
            }
            o => panic!("{o:?}"),
        }
        assert!(v.contains_key("d1/a") && !v.contains_key("d0/a"));
        assert!(
            !m.apply(&Op::Rename("d1".into(), "d1/c".into())),
            "under itself"
        );
        assert!(m.apply(&Op::Create("c".into())));
        assert!(
            m.apply(&Op::Rename("c".into(), "b".into())),
            "onto an existing file"
        );
        assert!(matches!(&m.view()["d1/a"], View::File { nlink: 1, .. }));
        assert!(m.apply(&Op::Unlink("d1/a".into())));
        assert_eq!(m.files.len(), 1);
    }
}
