//! Export a block device (a `/dev/ublkbN`) over NVMe/TCP through the
//! kernel's own NVMe target (`nvmet`, `nvmet-tcp`), configured in configfs —
//! no target of our own.
//!
//! An export is one subsystem (NQN `nqn.2014-08.org.ptsd:<device name>`,
//! any host allowed) with the device as namespace 1, linked to a TCP port.
//! [`unexport`] takes exactly that down again, and the port too once no
//! other subsystem uses it.
//!
//! ```
//! use ptsd_ublk::nvmet::{export, unexport, Nvmet, TcpAddr};
//!
//! // A directory stands in for /sys/kernel/config in this example.
//! let cfs = tempfile::tempdir().unwrap();
//! std::fs::create_dir_all(cfs.path().join("nvmet/subsystems")).unwrap();
//! std::fs::create_dir_all(cfs.path().join("nvmet/ports")).unwrap();
//! let nvmet = Nvmet::at(cfs.path());
//! let dev = tempfile::NamedTempFile::new().unwrap();
//!
//! let addr: TcpAddr = "127.0.0.1:4420".parse().unwrap();
//! let e = export(&nvmet, "ublkb0", dev.path(), addr).unwrap();
//! assert_eq!(e.nqn, "nqn.2014-08.org.ptsd:ublkb0");
//! unexport(&nvmet, "ublkb0").unwrap();
//! ```

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use thiserror::Error;

/// Why an export or unexport failed.
#[derive(Debug, Error)]
pub enum NvmetError {
    /// The address is not ADDR:PORT.
    #[error("{0:?} is not ADDR:PORT (e.g. 127.0.0.1:4420 or [::1]:4420)")]
    BadAddress(String),
    /// The path is not a block device.
    #[error("{0} is not a block device")]
    NotABlockDevice(PathBuf),
    /// The kernel's NVMe target (configfs, nvmet, nvmet-tcp) is missing.
    #[error(
        "the kernel's NVMe target is not available: {why} (it needs the modules configfs, nvmet and nvmet-tcp: `modprobe nvmet-tcp`, as root)"
    )]
    Unavailable {
        /// What is missing.
        why: String,
    },
    #[error("{name} is already exported as {nqn}")]
    /// The device is already exported.
    AlreadyExported {
        /// The device's name.
        name: String,
        /// Its NQN.
        nqn: String,
    },
    #[error("{name} is not exported (no subsystem {nqn})")]
    /// The device has no export to remove.
    NotExported {
        /// The device's name.
        name: String,
        /// The NQN it would have.
        nqn: String,
    },
    /// A configfs operation failed.
    #[error("configfs {path}")]
    Configfs {
        /// The configfs path.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// An NVMe/TCP listening address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpAddr(pub SocketAddr);

impl FromStr for TcpAddr {
    type Err = NvmetError;
    fn from_str(s: &str) -> Result<Self, NvmetError> {
        s.parse::<SocketAddr>()
            .map(TcpAddr)
            .map_err(|_| NvmetError::BadAddress(s.to_string()))
    }
}

impl fmt::Display for TcpAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where the kernel's NVMe target is configured.
#[derive(Clone, Debug)]
pub struct Nvmet {
    root: PathBuf,
    load_modules: bool,
}

impl Nvmet {
    /// The real one: `/sys/kernel/config/nvmet`, loading `nvmet-tcp` (and
    /// mounting configfs) if it is not there yet.
    pub fn system() -> Self {
        Nvmet {
            root: PathBuf::from("/sys/kernel/config"),
            load_modules: true,
        }
    }

    /// A configfs at `root` (tests), taken as it is.
    pub fn at(root: &Path) -> Self {
        Nvmet {
            root: root.to_owned(),
            load_modules: false,
        }
    }

    fn dir(&self) -> PathBuf {
        self.root.join("nvmet")
    }

    /// Make sure `nvmet/` and the TCP transport exist.
    fn ready(&self) -> Result<(), NvmetError> {
        if self.load_modules {
            if !self.root.join("nvmet").exists() || !tcp_transport_loaded() {
                let out = Command::new("modprobe").arg("nvmet-tcp").output();
                let why = match out {
                    Ok(o) if o.status.success() => None,
                    Ok(o) => Some(format!(
                        "modprobe nvmet-tcp: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )),
                    Err(e) => Some(format!("modprobe nvmet-tcp: {e}")),
                };
                if let Some(why) = why {
                    return Err(NvmetError::Unavailable { why });
                }
            }
            if !self.root.join("nvmet").exists() {
                // configfs loaded but not mounted (a minimal system).
                let _ = Command::new("mount")
                    .args(["-t", "configfs", "none"])
                    .arg(&self.root)
                    .status();
            }
        }
        if !self.dir().join("subsystems").is_dir() {
            return Err(NvmetError::Unavailable {
                why: format!("{} does not exist", self.dir().join("subsystems").display()),
            });
        }
        Ok(())
    }
}

fn tcp_transport_loaded() -> bool {
    std::fs::read_to_string("/proc/modules")
        .map(|m| m.lines().any(|l| l.starts_with("nvmet_tcp ")))
        .unwrap_or(false)
        || Path::new("/sys/module/nvmet_tcp").exists()
}

/// The subsystem name of an exported device.
pub fn nqn_for(name: &str) -> String {
    format!("nqn.2014-08.org.ptsd:{name}")
}

/// A live export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// The subsystem's NQN (what initiators connect to).
    pub nqn: String,
    /// The nvmet port's id.
    pub port_id: u32,
    /// The TCP address it listens on.
    pub addr: TcpAddr,
    /// The exported block device.
    pub device: PathBuf,
}

fn cfs<T>(path: &Path, r: std::io::Result<T>) -> Result<T, NvmetError> {
    r.map_err(|source| NvmetError::Configfs {
        path: path.to_owned(),
        source,
    })
}

fn write_attr(path: &Path, value: &str) -> Result<(), NvmetError> {
    cfs(path, std::fs::write(path, value))
}

fn read_attr(path: &Path) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Export `device` (named `name`, e.g. `ublkb0`) on `addr` over NVMe/TCP.
/// A port already listening on `addr` is shared; otherwise a new one is made.
pub fn export(
    nvmet: &Nvmet,
    name: &str,
    device: &Path,
    addr: TcpAddr,
) -> Result<Export, NvmetError> {
    if nvmet.load_modules {
        use std::os::unix::fs::FileTypeExt;
        let meta = std::fs::metadata(device);
        if !meta
            .map(|m| m.file_type().is_block_device())
            .unwrap_or(false)
        {
            return Err(NvmetError::NotABlockDevice(device.to_owned()));
        }
    }
    nvmet.ready()?;
    let nqn = nqn_for(name);
    let subsys = nvmet.dir().join("subsystems").join(&nqn);
    if subsys.exists() {
        return Err(NvmetError::AlreadyExported {
            name: name.to_string(),
            nqn,
        });
    }
    let port_id = find_or_pick_port(nvmet, addr)?;
    // Undo what was made if a later step fails: no half export is left.
    let result = (|| {
        cfs(&subsys, std::fs::create_dir(&subsys))?;
        write_attr(&subsys.join("attr_allow_any_host"), "1")?;
        let ns = subsys.join("namespaces").join("1");
        cfs(&ns, std::fs::create_dir_all(&ns))?;
        write_attr(&ns.join("device_path"), &device.display().to_string())?;
        write_attr(&ns.join("enable"), "1")?;
        let port = nvmet.dir().join("ports").join(port_id.to_string());
        if !port.exists() {
            cfs(&port, std::fs::create_dir(&port))?;
            write_attr(&port.join("addr_trtype"), "tcp")?;
            let fam = match addr.0.ip() {
                IpAddr::V4(_) => "ipv4",
                IpAddr::V6(_) => "ipv6",
            };
            write_attr(&port.join("addr_adrfam"), fam)?;
            write_attr(&port.join("addr_traddr"), &addr.0.ip().to_string())?;
            write_attr(&port.join("addr_trsvcid"), &addr.0.port().to_string())?;
        }
        let link_dir = port.join("subsystems");
        cfs(&link_dir, std::fs::create_dir_all(&link_dir))?;
        let link = link_dir.join(&nqn);
        cfs(&link, std::os::unix::fs::symlink(&subsys, &link))?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = unexport(nvmet, name);
        return Err(e);
    }
    Ok(Export {
        nqn,
        port_id,
        addr,
        device: device.to_owned(),
    })
}

/// The port listening on `addr`, or the lowest unused port number.
fn find_or_pick_port(nvmet: &Nvmet, addr: TcpAddr) -> Result<u32, NvmetError> {
    let ports = nvmet.dir().join("ports");
    let mut used = Vec::new();
    for entry in cfs(&ports, std::fs::read_dir(&ports))? {
        let entry = cfs(&ports, entry)?;
        let Ok(id) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        used.push(id);
        let p = entry.path();
        if read_attr(&p.join("addr_trtype")) == "tcp"
            && read_attr(&p.join("addr_traddr")) == addr.0.ip().to_string()
            && read_attr(&p.join("addr_trsvcid")) == addr.0.port().to_string()
        {
            return Ok(id);
        }
    }
    Ok((1..).find(|id| !used.contains(id)).unwrap_or(1))
}

/// Take down the export of `name`: unlink it from its ports (removing a port
/// no other subsystem uses), disable and remove its namespace and subsystem.
pub fn unexport(nvmet: &Nvmet, name: &str) -> Result<(), NvmetError> {
    let nqn = nqn_for(name);
    let subsys = nvmet.dir().join("subsystems").join(&nqn);
    if !subsys.exists() {
        return Err(NvmetError::NotExported {
            name: name.to_string(),
            nqn,
        });
    }
    let ports = nvmet.dir().join("ports");
    if let Ok(entries) = std::fs::read_dir(&ports) {
        for entry in entries.flatten() {
            let link_dir = entry.path().join("subsystems");
            let link = link_dir.join(&nqn);
            if link.symlink_metadata().is_ok() {
                cfs(&link, std::fs::remove_file(&link))?;
                let others = std::fs::read_dir(&link_dir).map(|d| d.count()).unwrap_or(0);
                if others == 0 {
                    nvmet.remove_group(&entry.path())?;
                }
            }
        }
    }
    let namespaces = subsys.join("namespaces");
    if let Ok(entries) = std::fs::read_dir(&namespaces) {
        for entry in entries.flatten() {
            let ns = entry.path();
            let _ = std::fs::write(ns.join("enable"), "0");
            nvmet.remove_group(&ns)?;
        }
    }
    nvmet.remove_group(&subsys)
}

impl Nvmet {
    /// configfs removes a group's attributes with it (rmdir); a plain
    /// directory standing in for configfs (tests) needs them removed first.
    fn remove_group(&self, dir: &Path) -> Result<(), NvmetError> {
        if self.load_modules {
            cfs(dir, std::fs::remove_dir(dir))
        } else {
            cfs(dir, std::fs::remove_dir_all(dir))
        }
    }
}

/// Every subsystem ptsd exported, as `(nqn, device path)`.
pub fn list(nvmet: &Nvmet) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(nvmet.dir().join("subsystems")) {
        for e in entries.flatten() {
            let nqn = e.file_name().to_string_lossy().into_owned();
            if nqn.starts_with("nqn.2014-08.org.ptsd:") {
                out.push((nqn, read_attr(&e.path().join("namespaces/1/device_path"))));
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake() -> (tempfile::TempDir, Nvmet) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("nvmet/subsystems")).unwrap();
        std::fs::create_dir_all(d.path().join("nvmet/ports")).unwrap();
        let n = Nvmet::at(d.path());
        (d, n)
    }

    #[test]
    fn export_writes_the_configfs_tree_and_unexport_removes_it() {
        let (d, n) = fake();
        let root = d.path().join("nvmet");
        let e = export(
            &n,
            "ublkb3",
            Path::new("/dev/ublkb3"),
            "127.0.0.1:4420".parse().unwrap(),
        )
        .unwrap();
        assert_eq!(e.port_id, 1);
        let sub = root.join("subsystems/nqn.2014-08.org.ptsd:ublkb3");
        assert_eq!(read_attr(&sub.join("attr_allow_any_host")), "1");
        assert_eq!(
            read_attr(&sub.join("namespaces/1/device_path")),
            "/dev/ublkb3"
        );
        assert_eq!(read_attr(&sub.join("namespaces/1/enable")), "1");
        let port = root.join("ports/1");
        for (attr, want) in [
            ("addr_trtype", "tcp"),
            ("addr_adrfam", "ipv4"),
            ("addr_traddr", "127.0.0.1"),
            ("addr_trsvcid", "4420"),
        ] {
            assert_eq!(read_attr(&port.join(attr)), want, "{attr}");
        }
        let link = port.join("subsystems/nqn.2014-08.org.ptsd:ublkb3");
        assert_eq!(std::fs::read_link(&link).unwrap(), sub);
        assert_eq!(list(&n), [(e.nqn.clone(), "/dev/ublkb3".to_string())]);

        // Twice is refused, nothing changed.
        let err = export(
            &n,
            "ublkb3",
            Path::new("/dev/ublkb3"),
            "127.0.0.1:4420".parse().unwrap(),
        )
        .unwrap_err();
        assert!(matches!(err, NvmetError::AlreadyExported { .. }), "{err}");

        unexport(&n, "ublkb3").unwrap();
        assert!(!sub.exists() && !port.exists());
        assert!(list(&n).is_empty());
        let err = unexport(&n, "ublkb3").unwrap_err();
        assert!(err.to_string().contains("is not exported"), "{err}");
    }

    #[test]
    fn two_devices_share_a_port_which_outlives_the_first_unexport() {
        let (d, n) = fake();
        let addr: TcpAddr = "[::1]:4421".parse().unwrap();
        let a = export(&n, "ublkb0", Path::new("/dev/ublkb0"), addr).unwrap();
        let b = export(&n, "ublkb1", Path::new("/dev/ublkb1"), addr).unwrap();
        assert_eq!(a.port_id, b.port_id);
        let port = d.path().join(format!("nvmet/ports/{}", a.port_id));
        assert_eq!(read_attr(&port.join("addr_adrfam")), "ipv6");
        // Another address gets another port.
        let c = export(
            &n,
            "ublkb2",
            Path::new("/dev/ublkb2"),
            "127.0.0.1:4420".parse().unwrap(),
        )
        .unwrap();
        assert_ne!(c.port_id, a.port_id);
        unexport(&n, "ublkb0").unwrap();
        assert!(port.exists(), "port removed while ublkb1 still uses it");
        unexport(&n, "ublkb1").unwrap();
        assert!(!port.exists());
        assert_eq!(list(&n).len(), 1);
    }

    #[test]
    fn bad_addresses_and_a_missing_target_are_clear_errors() {
        for bad in ["4420", "localhost:4420", "1.2.3.4", "1.2.3.4:x"] {
            let err = bad.parse::<TcpAddr>().unwrap_err().to_string();
            assert!(err.contains("is not ADDR:PORT"), "{bad}: {err}");
        }
        let d = tempfile::tempdir().unwrap();
        let err = export(
            &Nvmet::at(d.path()),
            "ublkb0",
            Path::new("/dev/ublkb0"),
            "127.0.0.1:4420".parse().unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("NVMe target is not available"), "{err}");
    }
}
