//! Each atime mode on a RAM device, counting the transactions reads start.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};

use super::{Atime, AtimePolicy};
use crate::filesystem::{Caller, FileSystem, SetAttr, SetTime};
use crate::format::Ts;
use crate::store::{CountingStore, DirectStore};
use crate::{mkfs, MkfsOptions};

const ME: Caller = Caller { uid: 0, gid: 0 };

struct T {
    dev: Arc<dyn BlockDevice>,
    store: Arc<CountingStore>,
    fs: FileSystem,
}

impl T {
    fn new(p: AtimePolicy) -> T {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 1024).unwrap());
        let s = DirectStore::new(dev.clone()).unwrap();
        mkfs(&s, &MkfsOptions::default()).unwrap();
        T::mount(dev, p)
    }
    fn mount(dev: Arc<dyn BlockDevice>, p: AtimePolicy) -> T {
        let store = Arc::new(CountingStore::new(Arc::new(
            DirectStore::new(dev.clone()).unwrap(),
        )));
        let fs = FileSystem::mount(store.clone()).unwrap();
        fs.set_atime_policy(p);
        T { dev, store, fs }
    }
    fn txns(&self) -> u64 {
        self.store.transactions()
    }
    /// A file with some data, closed, its atime set to `ago` seconds back.
    fn file(&self, name: &[u8], ago: i64) -> u64 {
        let f = self.fs.create(self.fs.root(), name, 0o644, ME).unwrap().ino;
        self.fs.write(f, 0, b"data").unwrap();
        self.fs.release(f).unwrap();
        self.set_atime(f, ago);
        f
    }
    fn set_atime(&self, ino: u64, ago: i64) {
        let mut t = Ts::now();
        t.sec -= ago;
        let set = SetAttr {
            atime: Some(SetTime::At(t)),
            ..Default::default()
        };
        self.fs.setattr(ino, set).unwrap();
    }
    fn atime(&self, ino: u64) -> (i64, u32) {
        let a = self.fs.getattr(ino).unwrap().atime;
        (a.sec, a.nsec)
    }
}

fn policy(atime: Atime) -> AtimePolicy {
    AtimePolicy {
        atime,
        ..Default::default()
    }
}

#[test]
fn relatime_updates_after_a_change_or_a_day_then_not_again() {
    let t = T::new(policy(Atime::Relatime));
    let f = t.file(b"f", 0);
    // The setattr moved ctime past the atime it set.
    let before = t.atime(f);
    t.fs.read(f, 0, 4).unwrap();
    let first = t.atime(f);
    assert!(first > before, "atime <= ctime: updated");
    let n = t.txns();
    for _ in 0..1000 {
        t.fs.read(f, 0, 4).unwrap();
    }
    assert_eq!(t.atime(f), first, "newer than mtime and ctime: kept");
    assert_eq!(t.txns(), n, "a read loop stages no journal block");
    // Written since: the next read updates it.
    t.fs.write(f, 0, b"more").unwrap();
    t.fs.read(f, 0, 4).unwrap();
    assert!(t.atime(f) > first);
    // A day old (and newer than mtime/ctime otherwise): updated.
    let g = t.file(b"g", 0);
    t.fs.read(g, 0, 4).unwrap();
    let kept = t.atime(g);
    t.fs.read(g, 0, 4).unwrap();
    assert_eq!(t.atime(g), kept);
    let a = t.fs.getattr(g).unwrap();
    assert!((a.atime.sec, a.atime.nsec) > (a.ctime.sec, a.ctime.nsec));
    let mut old = t.fs.lock(g).unwrap();
    old.d.atime.sec -= 25 * 3600;
    old.d.mtime.sec -= 26 * 3600;
    old.d.ctime.sec -= 26 * 3600;
    drop(old);
    let m = t.txns();
    t.fs.read(g, 0, 4).unwrap();
    assert!(t.atime(g).0 >= kept.0, "a 25-hour-old atime is refreshed");
    assert_eq!(t.txns(), m + 1, "in one transaction");
}

#[test]
fn strictatime_updates_at_every_read_noatime_never() {
    let t = T::new(policy(Atime::Strictatime));
    let f = t.file(b"f", 0);
    t.fs.read(f, 0, 4).unwrap();
    let n = t.txns();
    let mut last = t.atime(f);
    for _ in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(1));
        t.fs.read(f, 0, 4).unwrap();
        assert!(t.atime(f) > last);
        last = t.atime(f);
    }
    assert_eq!(t.txns(), n + 10, "one transaction per read");
    let t = T::new(policy(Atime::Noatime));
    let f = t.file(b"f", 3600 * 48);
    let before = t.atime(f);
    let n = t.txns();
    t.fs.read(f, 0, 4).unwrap();
    let d = t.fs.root();
    t.fs.readdir(d, 0, 100).unwrap();
    assert_eq!(t.atime(f), before);
    assert_eq!(t.txns(), n);
}

#[test]
fn readdir_moves_a_directorys_atime_unless_nodiratime() {
    for nodiratime in [false, true] {
        let t = T::new(AtimePolicy {
            nodiratime,
            ..Default::default()
        });
        let d = t.fs.mkdir(t.fs.root(), b"d", 0o755, ME).unwrap().ino;
        t.set_atime(d, 3600);
        let before = t.atime(d);
        t.fs.readdir(d, 0, 100).unwrap();
        assert_eq!(t.atime(d) == before, nodiratime, "nodiratime {nodiratime}");
        // Files still follow relatime under nodiratime.
        let f = t.file(b"f", 0);
        let before = t.atime(f);
        t.fs.read(f, 0, 1).unwrap();
        assert!(t.atime(f) > before);
    }
}

#[test]
fn read_only_and_o_noatime_reads_leave_atime() {
    let t = T::new(policy(Atime::Strictatime));
    let f = t.file(b"f", 0);
    let before = t.atime(f);
    t.fs.read_access(f, 0, 4, false).unwrap();
    assert_eq!(t.atime(f), before, "O_NOATIME");
    t.fs.set_read_only(true);
    let n = t.txns();
    t.fs.read(f, 0, 4).unwrap();
    assert_eq!(t.atime(f), before, "read-only");
    assert_eq!(t.txns(), n);
}

#[test]
fn lazytime_keeps_atime_in_memory_until_fsync_eviction_or_unmount() {
    let lazy = AtimePolicy {
        atime: Atime::Strictatime,
        lazytime: true,
        ..Default::default()
    };
    let t = T::new(lazy);
    let f = t.file(b"f", 0);
    let g = t.file(b"g", 0);
    let h = t.file(b"h", 0);
    let n = t.txns();
    for i in [f, g, h] {
        t.fs.read(i, 0, 4).unwrap();
    }
    assert_eq!(t.txns(), n, "no transaction for a lazy atime");
    let (af, ag, ah) = (t.atime(f), t.atime(g), t.atime(h));
    // fsync writes every lazy atime.
    t.fs.fsync().unwrap();
    assert_eq!(t.txns(), n + 3);
    t.fs.fsync().unwrap();
    assert_eq!(t.txns(), n + 3, "written once");
    // The next change of the inode carries it (no extra transaction).
    t.fs.read(f, 0, 4).unwrap();
    let af2 = t.atime(f);
    t.fs.write(f, 0, b"x").unwrap();
    t.fs.fsync().unwrap();
    assert_eq!(t.txns(), n + 4, "the write's transaction only");
    // Eviction writes it (the kernel forgets an inode it looked up).
    t.fs.read(g, 0, 4).unwrap();
    let ag2 = t.atime(g);
    // Its one reference (the create's) given back, and closed: evicted.
    t.fs.forget(g, 1);
    assert_eq!(t.txns(), n + 5, "written at eviction");
    // The unmount writes the rest.
    t.fs.read(h, 0, 4).unwrap();
    let ah2 = t.atime(h);
    assert!(af2 > af && ag2 > ag && ah2 > ah);
    t.fs.close().unwrap();
    let dev = t.dev.clone();
    drop(t);
    let t = T::mount(dev, lazy);
    assert_eq!(t.atime(f), af2);
    assert_eq!(t.atime(g), ag2);
    assert_eq!(t.atime(h), ah2);
}

#[test]
fn readlink_is_an_access() {
    let t = T::new(policy(Atime::Relatime));
    let l = t.fs.symlink(t.fs.root(), b"l", b"target", ME).unwrap().ino;
    t.set_atime(l, 0);
    let before = t.atime(l);
    assert_eq!(t.fs.readlink(l).unwrap(), b"target");
    assert!(t.atime(l) > before, "atime <= ctime: updated");
    let t = T::new(policy(Atime::Noatime));
    let l = t.fs.symlink(t.fs.root(), b"l", b"target", ME).unwrap().ino;
    let before = t.atime(l);
    let n = t.txns();
    t.fs.readlink(l).unwrap();
    assert_eq!((t.atime(l), t.txns()), (before, n));
}
