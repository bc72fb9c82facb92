//! Permission semantics of issue 45: set-id bits dropped where Linux drops
//! them, and POSIX ACLs.

use std::sync::{Arc, Mutex};

use ptsd_fs::{Caller, DirectStore, FileSystem, SetAttr};

const ROOT: Caller = Caller { uid: 0, gid: 0 };

fn mode(fs: &FileSystem, ino: u64) -> u32 {
    fs.getattr(ino).unwrap().mode & 0o7777
}

fn chmod(fs: &FileSystem, ino: u64, m: u32) {
    fs.setattr(
        ino,
        SetAttr {
            mode: Some(m),
            ..Default::default()
        },
    )
    .unwrap();
}

/// Item 4: every fallocate mode by a caller without CAP_FSETID drops
/// setuid (and setgid when group-executable) like a write, and tells the
/// transport the kernel's cached mode is stale; a privileged caller keeps
/// them; setgid without group-exec stays.
#[test]
fn fallocate_of_every_mode_drops_set_id_bits_for_the_unprivileged() {
    let (_dev, fs) = fresh(4096);
    let stale = Arc::new(Mutex::new(Vec::new()));
    let s = stale.clone();
    fs.set_attr_invalidator(Box::new(move |ino| s.lock().unwrap().push(ino)));
    let f = fs.create(fs.root(), b"f", 0o644, ROOT).unwrap().ino;
    fs.write_as(f, 0, &vec![1u8; 64 << 10], false).unwrap();
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    let modes = [
        0,
        keep,
        libc::FALLOC_FL_PUNCH_HOLE | keep,
        libc::FALLOC_FL_ZERO_RANGE,
        libc::FALLOC_FL_ZERO_RANGE | keep,
    ];
    for m in modes {
        chmod(&fs, f, 0o6755);
        stale.lock().unwrap().clear();
        // Privileged: kept, nothing to invalidate.
        fs.fallocate_as(f, 4096, 8192, m, false).unwrap();
        assert_eq!(mode(&fs, f), 0o6755, "mode {m:#x} by root");
        assert!(stale.lock().unwrap().is_empty());
        fs.fallocate_as(f, 4096, 8192, m, true).unwrap();
        assert_eq!(mode(&fs, f), 0o0755, "fallocate mode {m:#x}");
        assert_eq!(*stale.lock().unwrap(), [f], "mode {m:#x} invalidates");
        // setgid without group execute marks mandatory locking: kept.
        chmod(&fs, f, 0o2644);
        stale.lock().unwrap().clear();
        fs.fallocate(f, 0, 4096, m).unwrap();
        assert_eq!(mode(&fs, f), 0o2644);
        assert!(
            stale.lock().unwrap().is_empty(),
            "unchanged: no invalidation"
        );
    }
    // A direct write by the unprivileged drops them and invalidates too.
    chmod(&fs, f, 0o6755);
    stale.lock().unwrap().clear();
    fs.write_as(f, 0, b"x", true).unwrap();
    assert_eq!(mode(&fs, f), 0o0755);
    assert_eq!(*stale.lock().unwrap(), [f]);
    fs.release(f).unwrap();
}

use ptsd_fs::acl::{Acl, Entry, Tag, UNDEFINED_ID};
use ptsd_fs::Errno;

mod common;
use common::fresh;

const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";

/// user::`u` user:1000:`named` group::`g` mask::`m` other::`o`
fn acl_with_user(u: u16, named: u16, g: u16, m: u16, o: u16) -> Acl {
    let e = |tag, perm, id| Entry { tag, perm, id };
    Acl {
        entries: vec![
            e(Tag::UserObj, u, UNDEFINED_ID),
            e(Tag::User, named, 1000),
            e(Tag::GroupObj, g, UNDEFINED_ID),
            e(Tag::Mask, m, UNDEFINED_ID),
            e(Tag::Other, o, UNDEFINED_ID),
        ],
    }
}

fn acl_of(fs: &FileSystem, ino: u64, name: &[u8]) -> Option<Acl> {
    match fs.getxattr(ino, name) {
        Ok(v) => Some(Acl::decode(&v).unwrap()),
        Err(Errno::ENODATA) => None,
        Err(e) => panic!("getxattr: {e:?}"),
    }
}

/// Item 7 (a), (b): an access ACL sets the mode (the group bits are the
/// mask's); one the mode can say is kept as the mode only; chmod rewrites
/// the ACL's owner, mask and other entries; malformed ACLs are EINVAL, a
/// default ACL on a file EACCES.
#[test]
fn access_acl_and_mode_stay_consistent() {
    let (dev, fs) = fresh(4096);
    let f = fs.create(fs.root(), b"f", 0o644, ROOT).unwrap().ino;
    fs.release(f).unwrap();
    fs.setxattr(f, ACCESS, &acl_with_user(6, 7, 4, 5, 0).encode(), 0)
        .unwrap();
    assert_eq!(mode(&fs, f), 0o650, "owner rw-, mask r-x, other ---");
    assert_eq!(acl_of(&fs, f, ACCESS), Some(acl_with_user(6, 7, 4, 5, 0)));
    chmod(&fs, f, 0o741);
    assert_eq!(
        acl_of(&fs, f, ACCESS),
        Some(acl_with_user(7, 7, 4, 4, 1)),
        "chmod sets the mask, not the owning group"
    );
    // An ACL the mode says all of: the mode only, the xattr goes.
    fs.setxattr(f, ACCESS, &Acl::from_mode(0o604).encode(), 0)
        .unwrap();
    assert_eq!(mode(&fs, f), 0o604);
    assert_eq!(acl_of(&fs, f, ACCESS), None);
    assert_eq!(fs.listxattr(f).unwrap(), b"");
    // Malformed: EINVAL, nothing changed.
    let mut bad = Acl::from_mode(0o777).encode();
    bad[0] = 1;
    for v in [&b""[..], b"\x02\0\0\0", &bad[..], &bad[..9]] {
        assert_eq!(fs.setxattr(f, ACCESS, v, 0), Err(Errno::EINVAL));
    }
    assert_eq!(mode(&fs, f), 0o604);
    assert_eq!(
        fs.setxattr(f, DEFAULT, &Acl::from_mode(0o777).encode(), 0),
        Err(Errno(libc::EACCES))
    );
    // Stored ACLs and modes survive a remount.
    fs.setxattr(f, ACCESS, &acl_with_user(7, 6, 5, 6, 4).encode(), 0)
        .unwrap();
    fs.close().unwrap();
    drop(fs);
    let fs = FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap())).unwrap();
    assert_eq!(mode(&fs, f), 0o764);
    assert_eq!(acl_of(&fs, f, ACCESS), Some(acl_with_user(7, 6, 5, 6, 4)));
    fs.close().unwrap();
}

/// Item 7 (c), (d): under a default ACL a new file, node, directory or
/// O_TMPFILE takes its mode from the requested mode masked by the ACL (the
/// umask ignored) and the ACL as its access ACL when the mode cannot say
/// it all; a directory inherits the default ACL too; a symlink neither.
/// Without a default ACL the umask applies. An O_TMPFILE in a setgid
/// directory takes the directory's group.
#[test]
fn default_acls_are_inherited_instead_of_the_umask() {
    let (_dev, fs) = fresh(4096);
    let root = fs.root();
    let me = Caller {
        uid: 1000,
        gid: 1000,
    };
    let plain = fs.create_umask(root, b"plain", 0o666, 0o027, me).unwrap();
    assert_eq!(plain.mode & 0o7777, 0o640, "no default ACL: the umask");
    fs.release(plain.ino).unwrap();
    let d = fs.mkdir(root, b"d", 0o777, ROOT).unwrap().ino;
    let default = acl_with_user(7, 7, 5, 7, 0);
    fs.setxattr(d, DEFAULT, &default.encode(), 0).unwrap();
    // create(0o666): owner rw-, mask rw- (& r-x... mask 7 & 6 = 6), other ---.
    let f = fs.create_umask(d, b"f", 0o666, 0o077, me).unwrap();
    assert_eq!(f.mode & 0o7777, 0o660, "umask ignored under a default ACL");
    assert_eq!(
        acl_of(&fs, f.ino, ACCESS),
        Some(acl_with_user(6, 7, 5, 6, 0))
    );
    assert_eq!(acl_of(&fs, f.ino, DEFAULT), None);
    fs.release(f.ino).unwrap();
    let n = fs
        .mknod_umask(d, b"fifo", libc::S_IFIFO | 0o640, 0, 0o077, me)
        .unwrap();
    assert_eq!(n.mode, libc::S_IFIFO | 0o640);
    assert_eq!(
        acl_of(&fs, n.ino, ACCESS),
        Some(acl_with_user(6, 7, 5, 4, 0))
    );
    let sub = fs.mkdir_umask(d, b"sub", 0o755, 0o077, me).unwrap();
    assert_eq!(sub.mode & 0o7777, 0o750);
    assert_eq!(
        acl_of(&fs, sub.ino, ACCESS),
        Some(acl_with_user(7, 7, 5, 5, 0))
    );
    assert_eq!(acl_of(&fs, sub.ino, DEFAULT), Some(default.clone()));
    // ...and passes it on.
    let deeper = fs.create_umask(sub.ino, b"x", 0o600, 0o077, me).unwrap();
    assert_eq!(
        acl_of(&fs, deeper.ino, ACCESS),
        Some(acl_with_user(6, 7, 5, 0, 0))
    );
    fs.release(deeper.ino).unwrap();
    let l = fs.symlink(d, b"l", b"f", me).unwrap();
    assert_eq!(l.mode & 0o777, 0o777);
    assert_eq!(fs.listxattr(l.ino).unwrap(), b"");
    // A default ACL the mode says all of: no access ACL stored.
    let d2 = fs.mkdir(root, b"d2", 0o777, ROOT).unwrap().ino;
    fs.setxattr(d2, DEFAULT, &Acl::from_mode(0o750).encode(), 0)
        .unwrap();
    let g = fs.create_umask(d2, b"g", 0o666, 0o000, me).unwrap();
    assert_eq!(g.mode & 0o777, 0o640);
    assert_eq!(fs.listxattr(g.ino).unwrap(), b"");
    fs.release(g.ino).unwrap();
    // O_TMPFILE: the ACL, and a setgid directory's group.
    fs.setattr(
        d,
        SetAttr {
            mode: Some(0o2777),
            gid: Some(4242),
            ..Default::default()
        },
    )
    .unwrap();
    let t = fs.tmpfile_umask(d, 0o666, 0o077, me).unwrap();
    assert_eq!(t.gid, 4242, "O_TMPFILE takes a setgid directory's group");
    assert_eq!(t.mode & 0o7777, 0o660);
    assert_eq!(
        acl_of(&fs, t.ino, ACCESS),
        Some(acl_with_user(6, 7, 5, 6, 0))
    );
    fs.release(t.ino).unwrap();
    fs.close().unwrap();
}

/// The merge of items 7 and 10: ACLs of a file whose xattrs take a chain
/// of blocks (setfacl, chmod rewriting the mask) keep every other xattr,
/// survive a remount, and leave an image fsck finds clean.
#[test]
fn acls_among_xattrs_of_many_blocks() {
    let (dev, fs) = fresh(4096);
    let f = fs.create(fs.root(), b"f", 0o644, ROOT).unwrap().ino;
    fs.release(f).unwrap();
    let name = |i: usize| format!("user.attribute.{i:05}").into_bytes();
    for i in 0..500 {
        fs.setxattr(f, &name(i), b"some value", 0).unwrap();
    }
    let blocks = fs.getattr(f).unwrap().blocks;
    assert!(blocks > 8, "the xattrs take more than one block");
    fs.setxattr(f, ACCESS, &acl_with_user(6, 7, 4, 5, 0).encode(), 0)
        .unwrap();
    assert_eq!(mode(&fs, f), 0o650);
    chmod(&fs, f, 0o741);
    fs.close().unwrap();
    drop(fs);
    let fs = FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap())).unwrap();
    assert_eq!(acl_of(&fs, f, ACCESS), Some(acl_with_user(7, 7, 4, 4, 1)));
    for i in 0..500 {
        assert_eq!(fs.getxattr(f, &name(i)).unwrap(), b"some value");
    }
    fs.close().unwrap();
    drop(fs);
    let store: Arc<dyn ptsd_fs::Store> = Arc::new(DirectStore::new(dev).unwrap());
    let r = ptsd_fs::fsck::check(store, false).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}
