// Over 800 lines: one target (workload replay, crash points, recovery through Stack::open, the model check) whose steps share the run's state.
//! `stack_crash`: a workload from the grammar of [`crate::model`] on the
//! file system over the journal over crash-simulating media, a power cut at
//! an input-chosen region event or device write, and several post-crash
//! images of that cut recovered and checked against the model.
//!
//! After a crash, for each image:
//! - the recovered tree equals the model's state after some operation at or
//!   after the last fsync/fdatasync/sync that returned (every operation is
//!   atomic; everything synced is there — stronger than ext4's guarantee,
//!   since one journal commit makes every finished operation durable);
//!   sizes, contents, xattrs, symlinks and link counts all compared;
//! - `fsck` finds the image clean after the recovered stack's clean close;
//! - the recovered stack takes new operations;
//! - one image per cut is crashed again during its own recovery, and the
//!   second recovery must satisfy the same.
//!
//! In the no-crash mode the stack drops its inode cache (as after FORGET)
//! and remounts at input-chosen points, and the live tree must equal the
//! model's after every operation.

use std::collections::{BTreeMap, HashMap};

use ptsd_blockdev::Fault;
use ptsd_fs::{Caller, Errno, FileSystem, SetAttr};

use crate::assembly::{self, Media, Mounted, Under, UNDER};
use crate::input::Input;
use crate::model::{fill, gen_op, parent_of, Model, Op, Tree, View, OFF_UNIT};
use crate::{CheckResult, Violation};

const T: &str = "stack_crash";
const ME: Caller = Caller { uid: 0, gid: 0 };
/// Operations per run.
pub const MAX_OPS: usize = 32;
/// Post-crash images drawn from each cut.
pub const IMAGES: u64 = 4;
/// Operations of a run after which the power is also cut, as it were: an
/// image drawn from the live media, recovered and checked while the run
/// goes on.
pub const SNAPS: usize = 8;

/// A mounted stack plus the lookups the "kernel" holds on its inodes.
struct Live {
    m: Mounted,
    lookups: HashMap<u64, u64>,
}

impl Live {
    fn fs(&self) -> &FileSystem {
        self.m.fs()
    }

    fn look(&mut self, parent: u64, name: &str) -> Result<u64, Errno> {
        let a = self.fs().lookup(parent, name.as_bytes())?;
        *self.lookups.entry(a.ino).or_default() += 1;
        Ok(a.ino)
    }

    fn resolve(&mut self, path: &str) -> Result<u64, Errno> {
        let mut ino = self.fs().root();
        if path.is_empty() {
            return Ok(ino);
        }
        for part in path.split('/') {
            ino = self.look(ino, part)?;
        }
        Ok(ino)
    }

    fn parent_and_name<'p>(&mut self, path: &'p str) -> Result<(u64, &'p str), Errno> {
        let par = self.resolve(parent_of(path))?;
        Ok((par, path.rsplit('/').next().unwrap_or(path)))
    }

    fn evict(&mut self) {
        for (ino, n) in self.lookups.drain() {
            self.m.fs().forget(ino, n);
        }
    }

    fn counted(&mut self, ino: u64) {
        *self.lookups.entry(ino).or_default() += 1;
    }

    /// Run one grammar operation.
    fn exec(&mut self, op: &Op) -> Result<(), String> {
        let e = |what: &str, err: Errno| format!("{what}: {err}");
        match op {
            Op::Create(p) => {
                let (par, name) = self.parent_and_name(p).map_err(|x| e("lookup", x))?;
                let a = self
                    .fs()
                    .create(par, name.as_bytes(), 0o644, ME)
                    .map_err(|x| e("create", x))?;
                self.counted(a.ino);
                self.fs().release(a.ino).map_err(|x| e("release", x))?;
            }
            Op::Mkdir(p) => {
                let (par, name) = self.parent_and_name(p).map_err(|x| e("lookup", x))?;
                let a = self
                    .fs()
                    .mkdir(par, name.as_bytes(), 0o755, ME)
                    .map_err(|x| e("mkdir", x))?;
                self.counted(a.ino);
            }
            Op::Write(p, off, len, byte) => {
                let ino = self.resolve(p).map_err(|x| e("lookup", x))?;
                self.write(ino, *off, *len, *byte)?;
            }
            Op::Append(p, len, byte) => {
                let ino = self.resolve(p).map_err(|x| e("lookup", x))?;
                let off = self.fs().getattr(ino).map_err(|x| e("getattr", x))?.size;
                self.write(ino, off, *len, *byte)?;
            }
            Op::Truncate(p, size) => {
                let ino = self.resolve(p).map_err(|x| e("lookup", x))?;
                let set = SetAttr {
                    size: Some(*size),
                    ..Default::default()
                };
                self.fs().setattr(ino, set).map_err(|x| e("truncate", x))?;
            }
            Op::Falloc(p, off, len, keep) => {
                let ino = self.resolve(p).map_err(|x| e("lookup", x))?;
                let mode = if *keep { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                self.fs()
                    .fallocate(ino, *off, *len, mode)
                    .map_err(|x| e("fallocate", x))?;
            }
            Op::Punch(p, off, len) => {
                let ino = self.resolve(p).map_err(|x| e("lookup", x))?;
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                self.fs()
                    .fallocate(ino, *off, *len, mode)
                    .map_err(|x| e("punch", x))?;
            }
            Op::Link(src, dst) => {
                let ino = self.resolve(src).map_err(|x| e("lookup", x))?;
                let (par, name) = self.parent_and_name(dst).map_err(|x| e("lookup", x))?;
                let a = self
                    .fs()
                    .link(ino, par, name.as_bytes())
                    .map_err(|x| e("link", x))?;
                self.counted(a.ino);
            }
            Op::Unlink(p) => {
                let (par, name) = self.parent_and_name(p).map_err(|x| e("lookup", x))?;
                self.fs()
                    .unlink(par, name.as_bytes())
                    .map_err(|x| e("unlink", x))?;
            }
            Op::Rmdir(p) => {
                let (par, name) = self.parent_and_name(p).map_err(|x| e("lookup", x))?;
                self.fs()
                    .rmdir(par, name.as_bytes())
                    .map_err(|x| e("rmdir", x))?;
            }
            Op::Rename(src, dst) => {
                let (sp, sn) = self.parent_and_name(src).map_err(|x| e("lookup", x))?;
                let (dp, dn) = self.parent_and_name(dst).map_err(|x| e("lookup", x))?;
                self.fs()
                    .rename(sp, sn.as_bytes(), dp, dn.as_bytes(), 0)
                    .map_err(|x| e("rename", x))?;
            }
            Op::Symlink(p, target) => {
                let (par, name) = self.parent_and_name(p).map_err(|x| e("lookup", x))?;
                let a = self
                    .fs()
                    .symlink(par, name.as_bytes(), target.as_bytes(), ME)
                    .map_err(|x| e("symlink", x))?;
                self.counted(a.ino);
            }
            Op::SetXattr(p, x, v) => {
                let ino = self.resolve(p).map_err(|x| e("lookup", x))?;
                let val = crate::model::xattr_value(*v);
                self.fs()
                    .setxattr(ino, crate::model::XATTRS[*x].as_bytes(), &val, 0)
                    .map_err(|x| e("setxattr", x))?;
            }
            Op::RemoveXattr(p, x) => {
                let ino = self.resolve(p).map_err(|x| e("lookup", x))?;
                self.fs()
                    .removexattr(ino, crate::model::XATTRS[*x].as_bytes())
                    .map_err(|x| e("removexattr", x))?;
            }
            Op::Fsync(p, _) => {
                // The file system's fsync commits every finished operation,
                // whichever file or directory it is called on.
                self.resolve(p).map_err(|x| e("lookup", x))?;
                self.fs().fsync().map_err(|x| e("fsync", x))?;
            }
            Op::Sync => self.fs().fsync().map_err(|x| e("sync", x))?,
            Op::Checkpoint => self.m.checkpoint()?,
            Op::Evict => self.evict(),
            Op::Scatter(p, start, count, stride, byte) => {
                let ino = self.resolve(p).map_err(|x| e("lookup", x))?;
                // Normally expanded before it runs (see `expand`).
                for (i, u) in crate::model::scatter_order(*start, *count, *stride).enumerate() {
                    if i % 96 == 95 {
                        self.m.checkpoint()?;
                    }
                    if self.m.crashed() {
                        // The power is gone: the process would be too (and
                        // a crashed journal never frees ring space again).
                        return Err("crashed".into());
                    }
                    self.write(ino, u * OFF_UNIT, OFF_UNIT, *byte)?;
                }
            }
            Op::Remount => unreachable!("handled by the caller"),
        }
        Ok(())
    }

    fn write(&mut self, ino: u64, off: u64, len: u64, byte: u8) -> Result<(), String> {
        let data: Vec<u8> = (0..len).map(|i| fill(byte, off + i)).collect();
        let n = self
            .fs()
            .write(ino, off, &data)
            .map_err(|x| format!("write: {x}"))?;
        if u64::from(n) != len {
            return Err(format!("short write: {n} of {len}"));
        }
        Ok(())
    }

    /// Everything the file system shows, in the model's terms.
    fn tree(&mut self) -> Result<Tree, String> {
        let mut out = Tree::new();
        let mut first: BTreeMap<u64, String> = BTreeMap::new();
        let mut stack = vec![(self.fs().root(), String::new())];
        while let Some((dir, prefix)) = stack.pop() {
            let ents = self
                .fs()
                .readdir(dir, 0, usize::MAX)
                .map_err(|x| format!("readdir {prefix:?}: {x}"))?;
            for de in ents {
                let name = String::from_utf8_lossy(&de.name).into_owned();
                if name == "." || name == ".." {
                    continue;
                }
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}/{name}")
                };
                let ino = self
                    .look(dir, &name)
                    .map_err(|x| format!("lookup {path}: {x}"))?;
                if ino != de.ino {
                    return Err(format!(
                        "{path}: readdir says inode {}, lookup {ino}",
                        de.ino
                    ));
                }
                let a = self
                    .fs()
                    .getattr(ino)
                    .map_err(|x| format!("getattr {path}: {x}"))?;
                let xattrs = |fs: &FileSystem| -> Result<BTreeMap<String, Vec<u8>>, String> {
                    let list = fs
                        .listxattr(ino)
                        .map_err(|x| format!("listxattr {path}: {x}"))?;
                    let mut m = BTreeMap::new();
                    for n in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
                        let v = fs
                            .getxattr(ino, n)
                            .map_err(|x| format!("getxattr {path}: {x}"))?;
                        m.insert(String::from_utf8_lossy(n).into_owned(), v);
                    }
                    Ok(m)
                };
                let v = match a.mode & libc::S_IFMT {
                    libc::S_IFDIR => {
                        stack.push((ino, path.clone()));
                        View::Dir {
                            xattrs: xattrs(self.fs())?,
                        }
                    }
                    libc::S_IFLNK => {
                        let t = self
                            .fs()
                            .readlink(ino)
                            .map_err(|x| format!("readlink {path}: {x}"))?;
                        View::Sym(String::from_utf8_lossy(&t).into_owned())
                    }
                    _ => {
                        let data = read_all(self.fs(), ino, a.size)
                            .map_err(|x| format!("read {path}: {x}"))?;
                        View::File {
                            data: crate::model::Data::from_bytes(&data),
                            xattrs: xattrs(self.fs())?,
                            nlink: a.nlink,
                            first: first.entry(ino).or_insert_with(|| path.clone()).clone(),
                        }
                    }
                };
                out.insert(path, v);
            }
        }
        // `first` must be the first path in order, as the model has it.
        let mut min: BTreeMap<String, String> = BTreeMap::new();
        for (p, v) in &out {
            if let View::File { first, .. } = v {
                let m = min.entry(first.clone()).or_insert_with(|| p.clone());
                if p < m {
                    *m = p.clone();
                }
            }
        }
        for v in out.values_mut() {
            if let View::File { first, .. } = v {
                *first = min[first.as_str()].clone();
            }
        }
        Ok(out)
    }
}

fn read_all(fs: &FileSystem, ino: u64, size: u64) -> Result<Vec<u8>, Errno> {
    let mut data = Vec::with_capacity(size as usize);
    while (data.len() as u64) < size {
        let chunk = fs.read(ino, data.len() as u64, 1 << 20)?;
        if chunk.is_empty() {
            break;
        }
        data.extend_from_slice(&chunk);
    }
    Ok(data)
}

/// A short description of a tree for messages: path → kind and size.
fn sketch(t: &Tree) -> String {
    let parts: Vec<String> = t
        .iter()
        .map(|(p, v)| match v {
            View::Dir { .. } => format!("{p}/"),
            View::Sym(s) => format!("{p}->{s}"),
            View::File { data, nlink, .. } => format!("{p}[{}b,{}l]", data.len(), nlink),
        })
        .collect();
    parts.join(" ")
}

fn diff(want: &Tree, got: &Tree) -> String {
    for (p, v) in want {
        match got.get(p) {
            None => return format!("{p} missing"),
            Some(g) if g != v => {
                if let (View::File { data: a, .. }, View::File { data: b, .. }) = (v, g) {
                    if a != b {
                        let (a, b) = (a.to_vec(), b.to_vec());
                        let at = a
                            .iter()
                            .zip(&b)
                            .position(|(x, y)| x != y)
                            .unwrap_or(a.len().min(b.len()));
                        return format!(
                            "{p}: data differs (sizes {} vs {}, first difference at byte {at})",
                            a.len(),
                            b.len()
                        );
                    }
                }
                return format!("{p}: model {v:?}\n     got {g:?}");
            }
            _ => {}
        }
    }
    match got.keys().find(|p| !want.contains_key(*p)) {
        Some(p) => format!("{p} should not exist"),
        None => "equal".into(),
    }
}

/// Which crash the input asked for.
#[derive(Clone, Copy, Debug)]
enum Crash {
    None,
    /// At the given region event counted from the start of operation `op`.
    RegionEvent {
        op: usize,
        event: u64,
    },
    /// At the given device write counted from the start of operation `op`.
    DeviceWrite {
        op: usize,
        write: u64,
    },
    /// When the given device flush (counted from the start of operation
    /// `op`) begins.
    DeviceFlush {
        op: usize,
        flush: u64,
    },
}

/// Run one input; see the module doc.
pub fn run(data: &[u8]) -> CheckResult {
    let mut inp = Input::new(data);
    let crash = match inp.below(8) {
        0 | 1 => Crash::None,
        2 => Crash::DeviceWrite {
            op: inp.below(MAX_OPS as u32 + 1) as usize,
            write: 1 + u64::from(inp.below(16)),
        },
        3 => Crash::DeviceFlush {
            op: inp.below(MAX_OPS as u32 + 1) as usize,
            flush: 1 + u64::from(inp.below(3)),
        },
        _ => Crash::RegionEvent {
            op: inp.below(MAX_OPS as u32 + 1) as usize,
            event: u64::from(inp.below(48)),
        },
    };
    let eager_evict = inp.below(4) == 0;
    let torn = inp.bool();
    // A concurrent fsync after the k-th transaction of operation `op`.
    let concurrent = (inp.below(2) == 0).then(|| {
        (
            inp.below(MAX_OPS as u32) as usize,
            1 + u64::from(inp.below(3)),
        )
    });
    // Generated against the model as it would stand, so most are valid.
    let mut m = Model::default();
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS && !inp.is_empty() {
        let op = gen_op(&mut inp, &m);
        if m.apply(&op) {
            ops.push(op);
        }
    }
    // A scatter is many writes, each its own operation (and transaction),
    // with the checkpoint a background thread would start as the ring
    // fills, at a deterministic point. The crash and concurrent-fsync
    // positions scale to the expanded list.
    let n = ops.len().max(1);
    let ops: Vec<Op> = ops.into_iter().flat_map(expand).collect();
    let scale = |i: usize| i * ops.len() / n;
    let crash = match crash {
        Crash::DeviceWrite { op, write } => Crash::DeviceWrite {
            op: scale(op),
            write,
        },
        Crash::DeviceFlush { op, flush } => Crash::DeviceFlush {
            op: scale(op),
            flush,
        },
        Crash::RegionEvent { op, event } => Crash::RegionEvent {
            op: scale(op),
            event,
        },
        Crash::None => Crash::None,
    };
    let concurrent = concurrent.map(|(op, k)| (scale(op), k));
    let second = inp.u16();
    let ftl = UNDER[inp.below(UNDER.len() as u32) as usize];
    let opts = Opts {
        crash,
        eager_evict,
        torn,
        concurrent,
        second,
        ftl,
        snaps: SNAPS,
    };
    run_ops(&ops, opts)
}

/// How one run goes, besides its operations.
#[derive(Clone, Copy, Debug)]
struct Opts {
    crash: Crash,
    /// Drop the inode cache after every operation.
    eager_evict: bool,
    torn: bool,
    /// A concurrent fsync after the k-th transaction of an operation.
    concurrent: Option<(usize, u64)>,
    /// Picks the post-crash images and the second crash during recovery.
    second: u16,
    ftl: Under,
    /// Between-operation cuts to draw (at most).
    snaps: usize,
}

fn expand(op: Op) -> Vec<Op> {
    match op {
        Op::Scatter(p, start, count, stride, byte) => {
            let mut v = Vec::new();
            for (i, u) in crate::model::scatter_order(start, count, stride).enumerate() {
                if i % 96 == 95 {
                    v.push(Op::Checkpoint);
                }
                v.push(Op::Write(p.clone(), u * OFF_UNIT, OFF_UNIT, byte));
            }
            v
        }
        op => vec![op],
    }
}

fn run_ops(ops: &[Op], opts: Opts) -> CheckResult {
    let Opts {
        crash,
        eager_evict,
        torn,
        concurrent,
        second,
        ftl,
        snaps,
    } = opts;
    let media = Media::new(ftl);
    media.image.set_torn_writes(torn);
    let m = assembly::mount(&media).map_err(|e| Violation::new(T, format!("fresh stack: {e}")))?;
    let mut live = Live {
        m,
        lookups: HashMap::new(),
    };
    let dev = media.image.clone();
    let region = media.region.clone();
    // The cut hits both media at once.
    media.link_power();
    // Between-operation cuts: up to SNAPS operations, spread over the run,
    // after which an image is drawn while the run goes on.
    let snaps: Vec<usize> = match ops.len() {
        0 => Vec::new(),
        n => (0..snaps)
            .map(|k| (k * n / snaps + usize::from(second) % n.div_ceil(snaps)).min(n - 1))
            .collect(),
    };
    let keep_states = !matches!(crash, Crash::None) || !snaps.is_empty();
    let mut snapped = 0;
    let mut model = Model::default();
    let mut states = vec![model.view()];
    let mut durable_from = 0;
    let mut done: Vec<&Op> = Vec::new();
    let fail = |done: &[&Op], what: String| {
        // The last operations (a scatter expands into hundreds).
        let skip = done.len().saturating_sub(24);
        let tail = &done[skip..];
        Violation::new(
            T,
            format!(
                "{what}\n  after {skip} earlier ops and: {tail:?}\n  crash: {crash:?}, on {ftl:?}"
            ),
        )
    };
    for (i, op) in ops.iter().enumerate() {
        match crash {
            Crash::RegionEvent { op, event } if op == i => {
                region.crash_at_event(region.events() + event)
            }
            Crash::DeviceWrite { op, write } if op == i => {
                dev.inject(Fault::PowerCutAtWrite(write))
            }
            Crash::DeviceFlush { op, flush } if op == i => {
                dev.inject(Fault::PowerCutAtFlush(flush))
            }
            _ => {}
        }
        if let Some((op, k)) = concurrent {
            if op == i {
                live.m.commit_after(k);
            }
        }
        let mut next = model.clone();
        if !next.apply(op) {
            continue; // invalid here: the generator skips it
        }
        let (ev0, wr0) = (region.events(), dev.stats().writes);
        let res = if *op == Op::Remount {
            live.lookups.clear();
            let r = live.m.close();
            r.and_then(|()| assembly::mount(&media).map(|m| live.m = m))
        } else {
            let r = live.exec(op);
            // As the FUSE layers do after each reply: freed space is
            // discarded once enough was freed (a sync, then TRIMs).
            live.m.fs().trim_if_due();
            r
        };
        if trace() {
            eprintln!(
                "op {i} {op:?}: {} region events, {} SSD image writes",
                region.events() - ev0,
                dev.stats().writes - wr0
            );
        }
        if region.is_crashed() {
            // The operation under way may or may not have finished.
            states.push(next.view());
            break;
        }
        done.push(op);
        if let Err(e) = res {
            // A full device is a fine answer (the live checks see whether
            // the failed operation left anything behind); nothing else is.
            if e.contains("No space left") || e.contains("too large") {
                continue;
            }
            return Err(fail(&done, format!("{op:?} failed with no crash: {e}")));
        }
        model = next;
        // Only states a crash could still show are kept.
        if keep_states {
            states.push(model.view());
        }
        if matches!(op, Op::Fsync(..) | Op::Sync | Op::Checkpoint | Op::Remount) {
            states.drain(..states.len() - 1);
            durable_from = done.len();
        }
        if snaps.contains(&i) {
            // Power lost right here, between two operations: one image,
            // recovered and checked now (the run goes on).
            let img = media.crash_copy(u64::from(second) ^ ((i as u64) << 16));
            check_image(&img, &states, false).map_err(|e| {
                fail(
                    &done,
                    format!("image of a cut after op {i} (op {durable_from} synced): {e}"),
                )
            })?;
            snapped += 1;
        }
        if eager_evict {
            live.evict();
        }
        if matches!(crash, Crash::None) && (eager_evict || matches!(op, Op::Evict | Op::Remount)) {
            let got = live
                .tree()
                .map_err(|e| fail(&done, format!("walking the live tree: {e}")))?;
            let want = model.view();
            if got != want {
                return Err(fail(
                    &done,
                    format!("live tree differs from the model: {}", diff(&want, &got)),
                ));
            }
        }
    }
    if matches!(crash, Crash::None) {
        live.evict();
        let got = live
            .tree()
            .map_err(|e| fail(&done, format!("walking the live tree: {e}")))?;
        if got != model.view() {
            return Err(fail(
                &done,
                format!(
                    "live tree differs from the model: {}",
                    diff(&model.view(), &got)
                ),
            ));
        }
        live.m
            .close()
            .map_err(|e| fail(&done, format!("close: {e}")))?;
        fsck_clean(&media).map_err(|e| fail(&done, e))?;
        return Ok(snapped);
    }
    region.crash_now();
    drop(live);
    let allowed = &states[..];
    if trace() {
        eprintln!(
            "crash {crash:?}: {} ops done of {}, {} allowed states, last: {}",
            done.len(),
            ops.len(),
            allowed.len(),
            sketch(&states[states.len() - 1])
        );
    }
    let mut checked = snapped;
    for s in 0..IMAGES {
        let seed = u64::from(second).wrapping_mul(31).wrapping_add(s);
        let mut img = media.crash_copy(seed);
        if s == 1 {
            img = crash_during_recovery(img, second);
        }
        check_image(&img, allowed, s == 0)
            .map_err(|e| fail(&done, format!("image {s} (op {durable_from} synced): {e}")))?;
        checked += 1;
    }
    Ok(checked)
}

/// Recover `img` with `Stack::open` and check it: the tree is one of
/// `allowed`, (with `extra`) the stack takes new work, and after a clean
/// close `fsck` finds it clean.
fn check_image(img: &Media, allowed: &[Tree], extra: bool) -> Result<(), String> {
    let m = assembly::mount(img).map_err(|e| format!("recovery failed: {e}"))?;
    let mut rec = Live {
        m,
        lookups: HashMap::new(),
    };
    let got = rec
        .tree()
        .map_err(|e| format!("walking the recovered tree: {e}"))?;
    if !allowed.contains(&got) {
        let near = allowed.last().map(|w| diff(w, &got)).unwrap_or_default();
        return Err(format!(
            "recovered tree matches no state at or after the last sync:\n  got: {}\n  vs newest allowed: {near}",
            sketch(&got)
        ));
    }
    if extra {
        // The recovered stack takes new work.
        let extra = [
            Op::Mkdir("zz".into()),
            Op::Create("zz/new".into()),
            Op::Write("zz/new".into(), 0, 5000, 9),
            Op::Sync,
        ];
        for op in &extra {
            rec.exec(op)
                .map_err(|e| format!("after recovery {op:?}: {e}"))?;
        }
        let t = rec.tree()?;
        if !matches!(t.get("zz/new"), Some(View::File { data, .. }) if data.len() == 5000) {
            return Err("a file written after recovery is not there".into());
        }
    }
    rec.m
        .close()
        .map_err(|e| format!("close after recovery: {e}"))?;
    fsck_clean(img)
}

/// `PTSD_FUZZ_TRACE=1`: say what each operation did and where the cut fell.
fn trace() -> bool {
    std::env::var_os("PTSD_FUZZ_TRACE").is_some()
}

/// Start recovering `img` with `Stack::open`, cut the power at an early
/// region event or SSD image write of that recovery (or right after it),
/// and return the media the second cut left.
fn crash_during_recovery(img: Media, at: u16) -> Media {
    img.link_power();
    if at & 1 == 0 {
        img.region.crash_at_event(u64::from(at / 2 % 48));
    } else {
        img.image
            .inject(Fault::PowerCutAtWrite(1 + u64::from(at / 2 % 24)));
    }
    if let Ok(m) = assembly::mount(&img) {
        img.region.crash_now();
        drop(m);
    }
    img.region.crash_now();
    img.crash_copy(u64::from(at) ^ 0x5EC0)
}

fn fsck_clean(media: &Media) -> Result<(), String> {
    let report = assembly::fsck(media).map_err(|e| format!("fsck: {e}"))?;
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(format!("fsck after a clean close: {:?}", report.problems))
    }
}

/// Run a fixed workload crashed at region event `event` of operation
/// `event.0`, with a concurrent fsync right after the `k`-th transaction of
/// operation `concurrent.0` (a tailored case: the injected-bug test).
pub fn run_case(
    ops: &[Op],
    event: Option<(usize, u64)>,
    concurrent: Option<(usize, u64)>,
) -> CheckResult {
    let crash = event.map_or(Crash::None, |(op, event)| Crash::RegionEvent { op, event });
    let opts = Opts {
        crash,
        eager_evict: false,
        torn: false,
        concurrent,
        second: 0,
        ftl: UNDER[0],
        snaps: 0,
    };
    run_ops(ops, opts)
}

/// Run a fixed workload (the exhaustive set) on `ftl`:
/// `ops`, crashed at region event `event.1` of operation `event.0` (`None`:
/// no crash, every step checked live); `second` picks the post-crash
/// images and the second crash during recovery; `snaps` cuts are also
/// drawn between operations.
pub fn run_fixed(
    ops: &[Op],
    event: Option<(usize, u64)>,
    second: u16,
    ftl: Under,
    snaps: usize,
) -> CheckResult {
    let crash = event.map_or(Crash::None, |(op, event)| Crash::RegionEvent { op, event });
    let opts = Opts {
        crash,
        eager_evict: false,
        torn: false,
        concurrent: None,
        second,
        ftl,
        snaps,
    };
    run_ops(ops, opts)
}

/// The region events (journal persistence points: a crash point each) of
/// every operation of `ops`, run without a crash on `ftl`; the exhaustive
/// sets crash at each.
pub fn events_per_op(ops: &[Op], ftl: Under) -> Result<Vec<u64>, String> {
    let media = Media::new(ftl);
    let mut live = Live {
        m: assembly::mount(&media)?,
        lookups: HashMap::new(),
    };
    let mut model = Model::default();
    let mut out = Vec::new();
    for op in ops {
        let before = media.region.events();
        if model.apply(op) {
            if *op == Op::Remount {
                live.lookups.clear();
                live.m.close()?;
                live.m = assembly::mount(&media)?;
            } else {
                live.exec(op)?;
            }
        }
        out.push(media.region.events() - before);
    }
    live.m.close()?;
    Ok(out)
}
