//! `MappingScheme::request`: a scheme that asks for it sees every read,
//! write and discard request whole, in dispatch order, before its pages are
//! translated; one that does not is never called.

use std::sync::{Arc, Mutex};

use ptsd_ftl::mapping::{MapAction, MapGeometry, MappingScheme, SchemeFactory};
use ptsd_ftl::{FtlConfig, Op, Payload, Request, SchemeConfig, Ssd};

type Log = Arc<Mutex<Vec<String>>>;

/// DFTL, logging the hook's calls and each page translated.
struct Logged {
    inner: Box<dyn MappingScheme>,
    log: Log,
    sees: bool,
}

impl MappingScheme for Logged {
    fn request(&mut self, op: Op, lpn: u32, pages: u32) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{op:?} {lpn}+{pages}"));
    }
    fn sees_requests(&self) -> bool {
        self.sees
    }
    fn read(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.log.lock().unwrap().push(format!("read {lpn}"));
        self.inner.read(lpn, mpn, acts)
    }
    fn write(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.log.lock().unwrap().push(format!("write {lpn}"));
        self.inner.write(lpn, mpn, acts)
    }
    fn gc_update(&mut self, mpn: u32, lpns: &[u32], acts: &mut Vec<MapAction>) {
        self.inner.gc_update(mpn, lpns, acts)
    }
    fn write_back_all(&mut self, acts: &mut Vec<MapAction>) {
        self.inner.write_back_all(acts)
    }
    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }
    fn clone_box(&self) -> Box<dyn MappingScheme> {
        Box::new(Logged {
            inner: self.inner.clone_box(),
            log: self.log.clone(),
            sees: self.sees,
        })
    }
}

#[derive(Debug)]
struct Factory {
    log: Log,
    sees: bool,
}

impl SchemeFactory for Factory {
    fn name(&self) -> String {
        "logged".into()
    }
    fn build(&self, g: &MapGeometry) -> Box<dyn MappingScheme> {
        Box::new(Logged {
            inner: SchemeConfig::Dftl.build(g),
            log: self.log.clone(),
            sees: self.sees,
        })
    }
}

/// Run write 10+3, flush, read 9+4, discard 11+2 one at a time; the log.
fn run(sees: bool) -> Vec<String> {
    let log = Log::default();
    let cfg = FtlConfig::paper_with(
        Arc::new(Factory {
            log: log.clone(),
            sees,
        }),
        64 << 20,
    );
    let mut ssd = Ssd::new(cfg).unwrap();
    let reqs = [
        (Op::Write, 10, 3),
        (Op::Flush, 0, 0),
        (Op::Read, 9, 4),
        (Op::Discard, 11, 2),
    ];
    let mut t = 0;
    let mut done = Vec::new();
    for (id, (op, lpn, pages)) in reqs.into_iter().enumerate() {
        let req = Request {
            id: id as u64,
            op,
            lpn,
            pages,
        };
        ssd.submit(t, req, Payload::None).unwrap();
        while let Some(next) = ssd.next_event() {
            t = next;
            ssd.advance(t, &mut done);
        }
    }
    assert_eq!(done.len(), reqs.len());
    let log = log.lock().unwrap().clone();
    log
}

#[test]
fn the_hook_sees_whole_requests_before_their_pages() {
    let log = run(true);
    assert_eq!(
        log,
        [
            "Write 10+3",
            // The flush programs the buffered pages.
            "write 10",
            "write 11",
            "write 12",
            "Read 9+4",
            "read 9",
            "read 10",
            "read 11",
            "read 12",
            "Discard 11+2",
            "write 11",
            "write 12",
        ]
    );
}

#[test]
fn a_scheme_that_does_not_ask_is_not_called() {
    let log = run(false);
    assert!(
        log.iter().all(|l| l.starts_with(char::is_lowercase)),
        "{log:?}"
    );
    assert_eq!(log.len(), 9);
}
