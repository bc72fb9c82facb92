//! Mounting and serving: mount and INIT (through fuser, [`crate::fuse`]),
//! then the transports INIT agreed on — the io_uring queues and the
//! /dev/fuse threads — all handing their requests to one [`Frontend`]
//! over the caller's [`Handler`]. `ptsd mount` and the benchmark's no-op
//! ceiling both serve through here.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fuser::{Session, SessionUnmounter};
use thiserror::Error;

use super::devfuse::DevFuse;
use super::{Frontend, Handler, Notifier};
use crate::fuse::{access_of, mount_config, Init, MountOpts};
use crate::opcount::OpCounts;
use crate::uring::{self, Availability, RingConfig, Rings, UringInit};

/// How a mount is served.
#[derive(Clone)]
pub struct ServeOptions {
    /// Kernel mount options and the /dev/fuse thread count.
    pub mount: MountOpts,
    /// `mount.threads` was asked for (not the default): the io_uring
    /// queues then split that many threads between them.
    pub threads_given: bool,
    /// Ask for FUSE over io_uring at INIT (used where the kernel offers it).
    pub uring: bool,
    /// Busy-poll the io_uring queues this long before sleeping.
    pub uring_poll: Option<Duration>,
    /// Write-only opens bypass the page cache (where the kernel keeps
    /// readers coherent).
    pub direct_writes: bool,
    /// Ask for the kernel's writeback cache (the no-op ceiling's option).
    pub writeback_cache: bool,
    /// Count requests per opcode here.
    pub counts: Option<Arc<OpCounts>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            mount: MountOpts::default(),
            threads_given: false,
            uring: true,
            uring_poll: None,
            direct_writes: true,
            writeback_cache: false,
            counts: None,
        }
    }
}

/// Why a mount could not be served.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The FUSE mount (or INIT) failed.
    #[error("mounting FUSE at {}", dir.display())]
    Mount {
        /// The mount point.
        dir: PathBuf,
        /// What mount(2), fusermount3 or INIT said.
        #[source]
        source: io::Error,
    },
    /// INIT agreed on io_uring but the queues did not start.
    #[error("starting the FUSE io_uring queues")]
    Rings(#[source] io::Error),
    /// The /dev/fuse threads did not start, or one ended with an error.
    #[error("FUSE session")]
    DevFuse(#[source] io::Error),
}

/// A mount whose INIT is done and whose requests wait for [`Mount::start`].
pub struct Mount {
    session: Session<Init>,
    init: Arc<UringInit>,
    dir: PathBuf,
    opts: ServeOptions,
}

impl Mount {
    /// Mounts on `dir` and answers INIT as `opts` say.
    pub fn new(dir: &Path, opts: ServeOptions) -> Result<Self, ServeError> {
        let init = Arc::new(UringInit::new(opts.uring));
        let step =
            Init::new(init.clone(), opts.direct_writes).writeback_cache(opts.writeback_cache);
        let mount_err = |source| ServeError::Mount {
            dir: dir.to_path_buf(),
            source,
        };
        let session = Session::new(step, dir, &mount_config(&opts.mount)).map_err(mount_err)?;
        // What fuser's mount(2) cannot say (strictatime, nodiratime,
        // lazytime) is set right after it.
        if opts.mount.flags.need_remount() {
            crate::fuse::remount(dir, &opts.mount.flags).map_err(mount_err)?;
        }
        Ok(Mount {
            session,
            init,
            dir: dir.to_path_buf(),
            opts,
        })
    }

    /// What INIT agreed on.
    pub fn negotiated(&self) -> &UringInit {
        &self.init
    }

    /// Starts the transports INIT agreed on, every request answered by
    /// `handler` through one [`Frontend`].
    pub fn start(mut self, handler: Arc<dyn Handler>) -> Result<Served, ServeError> {
        let o = &self.opts;
        let notifier = Notifier::new(
            std::os::fd::AsFd::as_fd(&self.session)
                .try_clone_to_owned()
                .map_err(ServeError::DevFuse)?,
        );
        handler.connected(notifier.clone());
        let fe = Frontend::new(handler, self.init.policy(), o.counts.clone())
            .with_access(access_of(&mount_config(&o.mount)));
        let fe = Arc::new(fe);
        let dev = || {
            std::os::fd::AsFd::as_fd(&self.session)
                .try_clone_to_owned()
                .map_err(ServeError::DevFuse)
        };
        let classic = format!("/dev/fuse, {} FUSE threads", o.mount.threads);
        let (rings, transport) = if !o.uring {
            (None, classic)
        } else if !self.init.negotiated() {
            let why = Availability::probe().reason();
            (None, format!("{classic} (FUSE over io_uring: {why})"))
        } else {
            let queues = uring::possible_cpus();
            let cfg = RingConfig {
                threads_per_queue: match (o.threads_given, o.uring_poll) {
                    (true, _) => o.mount.threads.div_ceil(queues).max(1),
                    // Spinning threads each want a CPU of their own.
                    (false, Some(_)) => 1,
                    (false, None) => (o.mount.threads / queues).max(1),
                },
                poll: o.uring_poll,
                payload: self.init.payload_bytes(),
            };
            // The kernel holds requests until every queue has an entry (a
            // failed REGISTER sends it back to /dev/fuse); without queue
            // threads it would hold them for ever, so this is an error, not
            // a fallback.
            let r = uring::start(dev()?, fe.clone(), &cfg).map_err(ServeError::Rings)?;
            let poll = o.uring_poll.map_or(String::new(), |d| {
                format!(", busy-polling {} µs", d.as_micros())
            });
            let t = format!(
                "FUSE over io_uring, {queues} queues x {} threads{poll}",
                cfg.threads_per_queue
            );
            (Some(r), t)
        };
        // Over io_uring only FORGET, INTERRUPT and what comes before the
        // queues are ready still arrive on /dev/fuse.
        let threads = if rings.is_some() { 2 } else { o.mount.threads };
        let devfuse = DevFuse::start(dev()?, fe, threads).map_err(ServeError::DevFuse)?;
        let unmounter = self.session.unmount_callable();
        Ok(Served {
            devfuse,
            rings,
            session: self.session,
            unmounter,
            transport,
            dir: self.dir,
            notifier,
        })
    }
}

/// A mount being served.
pub struct Served {
    devfuse: DevFuse,
    rings: Option<Rings>,
    session: Session<Init>,
    unmounter: SessionUnmounter,
    transport: String,
    dir: PathBuf,
    notifier: Notifier,
}

impl Served {
    /// Which transport serves the mount, for the one line ptsd says (and,
    /// when io_uring was asked for but is not used, why).
    pub fn transport(&self) -> &str {
        &self.transport
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The io_uring queues' counters, when they serve.
    pub fn ring_stats(&self) -> Option<&uring::RingStats> {
        self.rings.as_ref().map(|r| r.stats())
    }

    /// Unmounts (the threads then end; [`wait`](Self::wait) for them).
    pub fn unmount(&mut self) -> io::Result<()> {
        self.unmounter.unmount()
    }

    /// Serves until the kernel ends the connection (an unmount), then
    /// closes /dev/fuse: when this returns, nothing is in the handler and
    /// the connection's descriptors are closed.
    pub fn wait(self) -> Result<(), ServeError> {
        let res = self.devfuse.join().map_err(ServeError::DevFuse);
        // The queues end as the kernel tears them down at unmount.
        if let Some(r) = self.rings {
            r.join();
        }
        self.notifier.close();
        drop(self.session);
        res
    }
}

/// Mounts on `dir`, serves every request through `handler` until the
/// unmount, and returns then. `ready` is called once the transports run,
/// with the line saying which (the caller reports the mount then).
pub fn serve(
    dir: &Path,
    opts: ServeOptions,
    handler: Arc<dyn Handler>,
    ready: impl FnOnce(&Served),
) -> Result<(), ServeError> {
    let served = Mount::new(dir, opts)?.start(handler)?;
    ready(&served);
    served.wait()
}
