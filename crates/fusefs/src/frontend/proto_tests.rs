use super::*;

fn hdr(opcode: u32) -> InHeader {
    InHeader {
        len: 0,
        opcode,
        unique: 7,
        nodeid: 1,
        uid: 1000,
        gid: 1000,
        pid: 42,
    }
}

fn le(fields: &[u64], widths: &[usize]) -> Vec<u8> {
    let mut v = Vec::new();
    for (f, w) in fields.iter().zip(widths) {
        v.extend_from_slice(&f.to_le_bytes()[..*w]);
    }
    v
}

#[test]
fn header_round_trips() {
    let h = hdr(opcode::WRITE);
    assert_eq!(InHeader::decode(&h.encode()).unwrap(), h);
    assert!(matches!(
        InHeader::decode(&h.encode()[..39]),
        Err(DecodeError::Short { need: 40, .. })
    ));
}

#[test]
fn names_come_from_the_payload() {
    let r = decode(&hdr(opcode::LOOKUP), &[], b"hello\0").unwrap();
    assert_eq!(r, Request::Lookup { name: b"hello" });
    let r = decode(&hdr(opcode::SYMLINK), &[], b"l\0/target/x\0").unwrap();
    assert_eq!(
        r,
        Request::Symlink {
            name: b"l",
            target: b"/target/x"
        }
    );
    assert_eq!(
        decode(&hdr(opcode::UNLINK), &[], b"gone"),
        Err(DecodeError::Unterminated {
            opcode: opcode::UNLINK,
            what: "name"
        })
    );
}

#[test]
fn write_takes_exactly_its_size() {
    let op_in = le(
        &[3, 4096, 5, WRITE_KILL_SUIDGID as u64, 0, 0, 0],
        &[8, 8, 4, 4, 8, 4, 4],
    );
    let r = decode(&hdr(opcode::WRITE), &op_in, b"abcdefgh").unwrap();
    assert_eq!(
        r,
        Request::Write {
            fh: 3,
            offset: 4096,
            data: b"abcde",
            write_flags: WRITE_KILL_SUIDGID,
            flags: 0,
        }
    );
    // A size beyond the payload is an error, not a panic or a short write.
    let op_in = le(&[3, 0, 9, 0, 0, 0, 0], &[8, 8, 4, 4, 8, 4, 4]);
    assert!(matches!(
        decode(&hdr(opcode::WRITE), &op_in, b"abc"),
        Err(DecodeError::Short {
            what: "write data",
            need: 9,
            got: 3,
            ..
        })
    ));
}

#[test]
fn setattr_keeps_only_the_valid_fields() {
    // valid = MODE | SIZE | MTIME_NOW | KILL_SUIDGID
    let valid = fattr::MODE | fattr::SIZE | fattr::MTIME_NOW | fattr::KILL_SUIDGID;
    let op_in = le(
        &[
            valid as u64,
            0,
            0,
            12345,
            0,
            1,
            2,
            3,
            4,
            5,
            6,
            0o644,
            0,
            77,
            88,
            0,
        ],
        &[4, 4, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4],
    );
    assert_eq!(op_in.len(), 88);
    let Request::Setattr(s) = decode(&hdr(opcode::SETATTR), &op_in, &[]).unwrap() else {
        panic!("not a setattr");
    };
    assert_eq!(
        s,
        SetattrIn {
            mode: Some(0o644),
            uid: None,
            gid: None,
            size: Some(12345),
            atime: None,
            mtime: Some(TimeOrNow::Now),
            kill_suidgid: true,
        }
    );
}

#[test]
fn rename2_and_batch_forget() {
    let op_in = le(&[9, 1], &[8, 4]);
    let r = decode(&hdr(opcode::RENAME2), &op_in, b"a\0b\0").unwrap();
    assert_eq!(
        r,
        Request::Rename {
            newdir: 9,
            name: b"a",
            newname: b"b",
            flags: 1
        }
    );
    let op_in = le(&[2, 0], &[4, 4]);
    let payload = le(&[10, 1, 11, 2], &[8, 8, 8, 8]);
    let r = decode(&hdr(opcode::BATCH_FORGET), &op_in, &payload).unwrap();
    assert_eq!(
        r,
        Request::BatchForget {
            nodes: vec![(10, 1), (11, 2)]
        }
    );
    // A count larger than the payload: an error, and no huge allocation.
    let op_in = le(&[u32::MAX as u64, 0], &[4, 4]);
    assert!(decode(&hdr(opcode::BATCH_FORGET), &op_in, &payload).is_err());
}

#[test]
fn unknown_opcodes_are_unsupported() {
    assert_eq!(
        decode(&hdr(4000), &[], &[]).unwrap(),
        Request::Unsupported(4000)
    );
}

#[test]
fn replies_lay_out_as_the_kernel_reads_them() {
    let mut buf = vec![0u8; 256];
    let e = EntryOut {
        nodeid: 5,
        generation: 2,
        valid: 5,
        attr: FuseAttr {
            ino: 5,
            size: 100,
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
            blksize: 4096,
            ..FuseAttr::default()
        },
    };
    let r = Response::Create {
        entry: e,
        fh: 0,
        flags: 2,
    };
    assert_eq!(r.encode(&mut buf), (0, ENTRY_OUT_LEN + OPEN_OUT_LEN));
    assert_eq!(&buf[0..8], &5u64.to_le_bytes());
    assert_eq!(&buf[40..48], &5u64.to_le_bytes()); // attr.ino
    assert_eq!(&buf[48..56], &100u64.to_le_bytes()); // attr.size
                                                     // attr.mode sits after 6 u64 and 3 u32 of the attr.
    assert_eq!(
        &buf[40 + 60..40 + 64],
        &(libc::S_IFREG | 0o644).to_le_bytes()
    );
    assert_eq!(
        &buf[ENTRY_OUT_LEN + 8..ENTRY_OUT_LEN + 12],
        &2u32.to_le_bytes()
    );
    assert_eq!(
        Response::Error(libc::ENOENT).encode(&mut buf),
        (-libc::ENOENT, 0)
    );
    // Too big for the buffer: EIO, never a cut reply.
    assert_eq!(
        Response::Data(vec![1; 300]).encode(&mut buf),
        (-libc::EIO, 0)
    );
    let h = out_header(99, -2, 0);
    assert_eq!(&h[4..8], &(-2i32).to_le_bytes());
    assert_eq!(&h[8..16], &99u64.to_le_bytes());
}

#[test]
fn dirents_are_padded_and_bounded() {
    let mut d = DirBuf::new(80);
    assert!(d.add(3, 1, 8, b"abc")); // 24 + 3 -> 32
    assert!(d.add(4, 2, 4, b"0123456789")); // 24 + 10 -> 40
    let Response::Data(v) = d.into_response() else {
        unreachable!()
    };
    assert_eq!(v.len(), 72);
    let mut d = DirBuf::new(40);
    assert!(d.add(3, 1, 8, b"abc"));
    assert!(!d.add(4, 2, 4, b"x"));
    let Response::Data(v) = d.into_response() else {
        unreachable!()
    };
    assert_eq!(v.len(), 32);
    assert_eq!(&v[16..20], &3u32.to_le_bytes());
    assert_eq!(&v[24..27], b"abc");
    assert_eq!(&v[27..32], &[0; 5]);
}

proptest::proptest! {
    /// Any bytes: a request or an error, never a panic.
    #[test]
    fn decode_never_panics(op in 0u32..60, op_in in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128),
                           payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        let _ = decode(&hdr(op), &op_in, &payload);
    }
}

/// A request captured from a real ring (`PTSD_URING_CAPTURE`, Linux 6.18):
/// its header, its op header, its payload (the ring's `payload_sz` bytes).
fn captured(bytes: &[u8]) -> (InHeader, &[u8], &[u8]) {
    let h = InHeader::decode(&bytes[..IN_HEADER_LEN]).unwrap();
    let payload_sz = u32::from_le_bytes(bytes[272..276].try_into().unwrap()) as usize;
    // commit_id, what COMMIT_AND_FETCH answers, is the request's unique.
    assert_eq!(
        u64::from_le_bytes(bytes[264..272].try_into().unwrap()),
        h.unique
    );
    (h, &bytes[128..256], &bytes[288..288 + payload_sz])
}

macro_rules! cap {
    ($name:literal) => {
        captured(include_bytes!(concat!("captured/", $name, ".bin")))
    };
}

#[test]
fn captured_requests_decode() {
    let (h, a, p) = cap!("lookup");
    assert_eq!((h.opcode, h.nodeid, h.uid), (opcode::LOOKUP, 1, 0));
    assert_eq!(decode(&h, a, p).unwrap(), Request::Lookup { name: b"file" });

    let (h, a, p) = cap!("create");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Create {
            name: b"file",
            mode: libc::S_IFREG | 0o644,
            umask: 0o022,
            flags: 0o101101 // O_WRONLY|O_CREAT|O_TRUNC|O_LARGEFILE
        }
    );

    let (h, a, p) = cap!("write");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Write {
            fh: 0,
            offset: 0,
            data: b"hello\n",
            write_flags: 0,
            flags: 0o100001, // O_WRONLY|O_LARGEFILE
        }
    );

    let (h, a, p) = cap!("mkdir");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Mkdir {
            name: b"sub",
            mode: 0o755,
            umask: 0o022
        }
    );

    let (h, a, p) = cap!("symlink");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Symlink {
            name: b"lnk",
            target: b"file"
        }
    );

    let (h, a, p) = cap!("rename2");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Rename {
            newdir: 1,
            name: b"file",
            newname: b"renamed",
            // mv asks renameat2 for RENAME_NOREPLACE.
            flags: libc::RENAME_NOREPLACE
        }
    );

    // truncate -s 100: FATTR_SIZE (with FH and LOCKOWNER, which ptsd ignores).
    let (h, a, p) = cap!("setattr_truncate");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Setattr(SetattrIn {
            size: Some(100),
            ..SetattrIn::default()
        })
    );

    let (h, a, p) = cap!("link");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Link {
            oldnodeid: 36,
            name: b"hard"
        }
    );

    let (h, a, p) = cap!("mknod_fifo");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Mknod {
            name: b"fifo",
            mode: libc::S_IFIFO | 0o644,
            umask: 0o022,
            rdev: 0
        }
    );

    // open(dir, O_TMPFILE|O_RDWR, 0600); the kernel sends a name of "/".
    let (h, a, p) = cap!("tmpfile");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Tmpfile {
            mode: libc::S_IFREG | 0o600,
            umask: 0o022,
            // The kernel adds O_LARGEFILE (0o100000; libc's constant is 0 on x86-64).
            flags: (libc::O_TMPFILE | libc::O_RDWR) as u32 | 0o100000
        }
    );

    let (h, a, p) = cap!("fallocate");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Fallocate {
            offset: 0,
            length: 8192,
            mode: 0
        }
    );

    let (h, a, p) = cap!("lseek_data");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Lseek {
            offset: 0,
            whence: libc::SEEK_DATA
        }
    );

    let (h, a, p) = cap!("readdirplus");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Readdirplus {
            offset: 7,
            size: 32768
        }
    );

    let (h, a, p) = cap!("getxattr");
    assert_eq!(
        decode(&h, a, p).unwrap(),
        Request::Getxattr {
            name: b"system.posix_acl_access",
            size: 4096
        }
    );

    let (h, a, p) = cap!("unlink");
    assert_eq!(decode(&h, a, p).unwrap(), Request::Unlink { name: b"hard" });
    let (h, a, p) = cap!("rmdir");
    assert_eq!(decode(&h, a, p).unwrap(), Request::Rmdir { name: b"sub" });
}

#[test]
fn captured_requests_cut_short_are_errors() {
    // Every captured request with its payload cut at every length decodes
    // or fails cleanly, and a cut name never decodes as a shorter name.
    for bytes in [
        &include_bytes!("captured/lookup.bin")[..],
        include_bytes!("captured/symlink.bin"),
        include_bytes!("captured/rename2.bin"),
        include_bytes!("captured/write.bin"),
        include_bytes!("captured/create.bin"),
    ] {
        let (h, a, p) = captured(bytes);
        let whole = decode(&h, a, p).unwrap();
        for cut in 0..p.len() {
            assert_ne!(decode(&h, a, &p[..cut]).ok(), Some(whole.clone()));
        }
    }
}
