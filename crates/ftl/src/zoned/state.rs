//! The zone state machine of the NVMe Zoned Namespace (ZNS) command set,
//! without timing or data: states, write pointers, and the open and active
//! resources.
//!
//! Where the specification leaves a choice, the Linux kernel's reference
//! emulator (null_blk) is followed, as that is what the kernel's zoned stack
//! and its tools are tested against:
//! - closing a zone with nothing written makes it empty again;
//! - a write or explicit open that needs an open resource when all are
//!   taken implicitly closes the least recently written implicitly opened
//!   zone; if every open zone was explicitly opened, it fails;
//! - finishing an empty zone needs an active resource, as if it were
//!   opened first.

use serde::Serialize;
use thiserror::Error;

/// The state of a zone (values as in ZNS and Linux's `BLK_ZONE_COND_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ZoneState {
    Empty = 0x1,
    ImplicitlyOpen = 0x2,
    ExplicitlyOpen = 0x3,
    Closed = 0x4,
    ReadOnly = 0xD,
    Full = 0xE,
    Offline = 0xF,
}

impl ZoneState {
    /// Holds an open resource.
    pub fn is_open(self) -> bool {
        matches!(self, ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen)
    }

    /// Holds an active resource (open or closed).
    pub fn is_active(self) -> bool {
        self.is_open() || self == ZoneState::Closed
    }

    /// The ZNS / Linux condition code.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// A zone management action, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ZoneAction {
    Open,
    Close,
    Finish,
    Reset,
}

/// One zone as a zone report gives it (in logical pages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneInfo {
    /// First page of the zone.
    pub start: u64,
    /// Pages the zone spans in the address space.
    pub size: u64,
    /// Pages that can be written (`<= size`).
    pub capacity: u64,
    /// Write pointer, absolute (`start + pages written`; `start + capacity`
    /// when full).
    pub wp: u64,
    pub state: ZoneState,
}

/// A zoned request the device refuses. Nothing was changed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ZoneError {
    #[error("zone {zone} does not exist (the device has {zones} zones)")]
    NoSuchZone { zone: u64, zones: u32 },
    #[error("pages {lpn}..{} are beyond the device's {device_pages} pages", .lpn.saturating_add(u64::from(*.pages)))]
    OutOfRange {
        lpn: u64,
        pages: u32,
        device_pages: u64,
    },
    #[error("a request needs at least one page")]
    ZeroLength,
    #[error("write at page {lpn} of zone {zone} is not at its write pointer {wp}")]
    NotAtWritePointer { zone: u32, lpn: u64, wp: u64 },
    #[error(
        "{pages} pages at page {lpn} go past the capacity of zone {zone} (it ends at page {end})"
    )]
    Boundary {
        zone: u32,
        lpn: u64,
        pages: u32,
        end: u64,
    },
    #[error("zone {zone} is full")]
    ZoneFull { zone: u32 },
    #[error("zone {zone} is read-only")]
    ReadOnly { zone: u32 },
    #[error("zone {zone} is offline")]
    Offline { zone: u32 },
    #[error("too many open zones (at most {limit})")]
    TooManyOpen { limit: u32 },
    #[error("too many active zones (at most {limit})")]
    TooManyActive { limit: u32 },
    #[error("cannot {action:?} zone {zone} in state {state:?}")]
    InvalidTransition {
        zone: u32,
        action: ZoneAction,
        state: ZoneState,
    },
    #[error("a zone append must name its zone's first page {start}, not page {lpn}")]
    AppendNotAtStart { lpn: u64, start: u64 },
    #[error("a zone append of {pages} pages is over the limit of {limit}")]
    AppendTooLarge { pages: u32, limit: u32 },
}

/// Shape and limits of a zoned address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneLimits {
    pub zones: u32,
    /// Pages per zone in the address space.
    pub zone_pages: u64,
    /// Writable pages per zone (`1..=zone_pages`).
    pub capacity: u64,
    /// 0 = no limit.
    pub max_open: u32,
    /// 0 = no limit.
    pub max_active: u32,
    /// Largest zone append, in pages.
    pub max_append: u32,
}

#[derive(Clone, Copy, Debug)]
struct Zone {
    state: ZoneState,
    /// Pages written (the write pointer, relative); `capacity` when full.
    wp: u64,
    /// Pages actually programmed since the last reset (`< wp` after a
    /// finish): what a reset must erase, and what recovery finds.
    programmed: u64,
    /// Last write or open, for choosing which zone to close implicitly.
    touched: u64,
}

/// Where a write or an append went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub zone: u32,
    /// First page written, relative to the zone.
    pub offset: u64,
    /// A zone implicitly closed to free an open resource.
    pub closed: Option<u32>,
}

/// Every zone's state and write pointer, and the open/active counts.
///
/// ```
/// use ptsd_ftl::zoned::{ZoneError, ZoneLimits, ZoneState, Zones};
/// let mut z = Zones::new(ZoneLimits {
///     zones: 4, zone_pages: 8, capacity: 6, max_open: 1, max_active: 2, max_append: 4,
/// });
/// z.write(0, 2).unwrap();                       // zone 0 opens implicitly
/// assert_eq!(z.info(0).state, ZoneState::ImplicitlyOpen);
/// assert!(matches!(z.write(5, 1), Err(ZoneError::NotAtWritePointer { wp: 2, .. })));
/// assert_eq!(z.append(8, 3).unwrap().offset, 0); // zone 1: zone 0 closed implicitly
/// assert_eq!(z.info(0).state, ZoneState::Closed);
/// assert!(matches!(z.write(16, 1), Err(ZoneError::TooManyActive { limit: 2 })));
/// ```
#[derive(Clone, Debug)]
pub struct Zones {
    lim: ZoneLimits,
    zones: Vec<Zone>,
    open: u32,
    active: u32,
    tick: u64,
}

impl Zones {
    /// Every zone empty.
    pub fn new(lim: ZoneLimits) -> Zones {
        let empty = Zone {
            state: ZoneState::Empty,
            wp: 0,
            programmed: 0,
            touched: 0,
        };
        Zones {
            lim,
            zones: vec![empty; lim.zones as usize],
            open: 0,
            active: 0,
            tick: 0,
        }
    }

    pub fn limits(&self) -> &ZoneLimits {
        &self.lim
    }

    /// Zones holding an open resource.
    pub fn open_count(&self) -> u32 {
        self.open
    }

    /// Zones holding an active resource.
    pub fn active_count(&self) -> u32 {
        self.active
    }

    /// Pages of the whole address space.
    pub fn device_pages(&self) -> u64 {
        u64::from(self.lim.zones) * self.lim.zone_pages
    }

    /// Zone `zone` as a report gives it (`zone` must exist).
    pub fn info(&self, zone: u32) -> ZoneInfo {
        let z = &self.zones[zone as usize];
        let start = u64::from(zone) * self.lim.zone_pages;
        ZoneInfo {
            start,
            size: self.lim.zone_pages,
            capacity: self.lim.capacity,
            wp: start + z.wp,
            state: z.state,
        }
    }

    /// Pages programmed in `zone` since its last reset.
    pub fn programmed(&self, zone: u32) -> u64 {
        self.zones[zone as usize].programmed
    }

    /// The zone holding page `lpn`.
    pub fn zone_of(&self, lpn: u64) -> Result<u32, ZoneError> {
        if lpn >= self.device_pages() {
            return Err(ZoneError::OutOfRange {
                lpn,
                pages: 1,
                device_pages: self.device_pages(),
            });
        }
        Ok((lpn / self.lim.zone_pages) as u32)
    }

    fn check_zone(&self, zone: u64) -> Result<u32, ZoneError> {
        if zone >= u64::from(self.lim.zones) {
            return Err(ZoneError::NoSuchZone {
                zone,
                zones: self.lim.zones,
            });
        }
        Ok(zone as u32)
    }

    /// Check a read of `pages` at `lpn`: in range, no offline zone. Pages
    /// at or past a zone's write pointer read as zeroes.
    pub fn check_read(&self, lpn: u64, pages: u32) -> Result<(), ZoneError> {
        self.check_range(lpn, pages)?;
        let first = lpn / self.lim.zone_pages;
        let last = (lpn + u64::from(pages) - 1) / self.lim.zone_pages;
        for z in first..=last {
            if self.zones[z as usize].state == ZoneState::Offline {
                return Err(ZoneError::Offline { zone: z as u32 });
            }
        }
        Ok(())
    }

    fn check_range(&self, lpn: u64, pages: u32) -> Result<(), ZoneError> {
        if pages == 0 {
            return Err(ZoneError::ZeroLength);
        }
        if lpn
            .checked_add(u64::from(pages))
            .is_none_or(|e| e > self.device_pages())
        {
            return Err(ZoneError::OutOfRange {
                lpn,
                pages,
                device_pages: self.device_pages(),
            });
        }
        Ok(())
    }

    /// A write of `pages` at `lpn`, which must be its zone's write pointer.
    pub fn write(&mut self, lpn: u64, pages: u32) -> Result<Placed, ZoneError> {
        self.check_range(lpn, pages)?;
        let zone = (lpn / self.lim.zone_pages) as u32;
        let offset = lpn % self.lim.zone_pages;
        self.write_at(zone, Some(offset), lpn, pages)
    }

    /// A zone append of `pages` to the zone starting at `zone_lpn`: written
    /// at the write pointer, which the result tells.
    pub fn append(&mut self, zone_lpn: u64, pages: u32) -> Result<Placed, ZoneError> {
        self.check_range(zone_lpn, pages)?;
        let zone = (zone_lpn / self.lim.zone_pages) as u32;
        let start = u64::from(zone) * self.lim.zone_pages;
        if zone_lpn != start {
            return Err(ZoneError::AppendNotAtStart {
                lpn: zone_lpn,
                start,
            });
        }
        if pages > self.lim.max_append {
            return Err(ZoneError::AppendTooLarge {
                pages,
                limit: self.lim.max_append,
            });
        }
        self.write_at(zone, None, zone_lpn, pages)
    }

    fn write_at(
        &mut self,
        zone: u32,
        offset: Option<u64>,
        lpn: u64,
        pages: u32,
    ) -> Result<Placed, ZoneError> {
        let z = self.zones[zone as usize];
        match z.state {
            ZoneState::Full => return Err(ZoneError::ZoneFull { zone }),
            ZoneState::ReadOnly => return Err(ZoneError::ReadOnly { zone }),
            ZoneState::Offline => return Err(ZoneError::Offline { zone }),
            _ => {}
        }
        let start = u64::from(zone) * self.lim.zone_pages;
        if let Some(off) = offset {
            if off != z.wp {
                return Err(ZoneError::NotAtWritePointer {
                    zone,
                    lpn,
                    wp: start + z.wp,
                });
            }
        }
        if z.wp + u64::from(pages) > self.lim.capacity {
            return Err(ZoneError::Boundary {
                zone,
                lpn: start + z.wp,
                pages,
                end: start + self.lim.capacity,
            });
        }
        let closed = match z.state {
            ZoneState::Empty => self.take_resources(true)?,
            ZoneState::Closed => self.take_resources(false)?,
            _ => None,
        };
        self.tick += 1;
        let tick = self.tick;
        let cap = self.lim.capacity;
        let z = &mut self.zones[zone as usize];
        let placed = Placed {
            zone,
            offset: z.wp,
            closed,
        };
        if !z.state.is_open() {
            z.state = ZoneState::ImplicitlyOpen;
        }
        z.wp += u64::from(pages);
        z.programmed = z.wp;
        z.touched = tick;
        if z.wp == cap {
            z.state = ZoneState::Full;
            self.open -= 1;
            self.active -= 1;
        }
        Ok(placed)
    }

    /// Take an open resource (and an active one if `active`), implicitly
    /// closing the least recently written implicitly opened zone if every
    /// open resource is taken. Checks everything before changing anything.
    fn take_resources(&mut self, active: bool) -> Result<Option<u32>, ZoneError> {
        let lim = self.lim;
        if active && lim.max_active != 0 && self.active >= lim.max_active {
            return Err(ZoneError::TooManyActive {
                limit: lim.max_active,
            });
        }
        let mut closed = None;
        if lim.max_open != 0 && self.open >= lim.max_open {
            let victim = self
                .zones
                .iter()
                .enumerate()
                .filter(|(_, z)| z.state == ZoneState::ImplicitlyOpen)
                .min_by_key(|(_, z)| z.touched)
                .map(|(i, _)| i);
            let Some(v) = victim else {
                return Err(ZoneError::TooManyOpen {
                    limit: lim.max_open,
                });
            };
            // It has pages written (an implicitly opened zone always has),
            // so it stays active, now closed.
            self.zones[v].state = ZoneState::Closed;
            self.open -= 1;
            closed = Some(v as u32);
        }
        self.open += 1;
        if active {
            self.active += 1;
        }
        Ok(closed)
    }

    /// Explicitly open `zone`.
    pub fn open(&mut self, zone: u64) -> Result<Option<u32>, ZoneError> {
        let zone = self.check_zone(zone)?;
        let z = self.zones[zone as usize];
        let closed = match z.state {
            ZoneState::ExplicitlyOpen | ZoneState::ImplicitlyOpen => None,
            ZoneState::Empty => self.take_resources(true)?,
            ZoneState::Closed => self.take_resources(false)?,
            s => return Err(self.refused(zone, ZoneAction::Open, s)),
        };
        self.tick += 1;
        let z = &mut self.zones[zone as usize];
        z.state = ZoneState::ExplicitlyOpen;
        z.touched = self.tick;
        Ok(closed)
    }

    /// Close `zone` (open → closed, or empty if nothing was written).
    pub fn close(&mut self, zone: u64) -> Result<(), ZoneError> {
        let zone = self.check_zone(zone)?;
        let z = &mut self.zones[zone as usize];
        match z.state {
            ZoneState::Closed => Ok(()),
            ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen => {
                self.open -= 1;
                if z.wp == 0 {
                    z.state = ZoneState::Empty;
                    self.active -= 1;
                } else {
                    z.state = ZoneState::Closed;
                }
                Ok(())
            }
            s => Err(self.refused(zone, ZoneAction::Close, s)),
        }
    }

    /// Finish `zone`: full, its write pointer at its capacity.
    pub fn finish(&mut self, zone: u64) -> Result<(), ZoneError> {
        let zone = self.check_zone(zone)?;
        let lim = self.lim;
        let z = self.zones[zone as usize];
        match z.state {
            ZoneState::Full => return Ok(()),
            ZoneState::Empty => {
                if lim.max_active != 0 && self.active >= lim.max_active {
                    return Err(ZoneError::TooManyActive {
                        limit: lim.max_active,
                    });
                }
            }
            ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen => {
                self.open -= 1;
                self.active -= 1;
            }
            ZoneState::Closed => self.active -= 1,
            s => return Err(self.refused(zone, ZoneAction::Finish, s)),
        }
        let z = &mut self.zones[zone as usize];
        z.state = ZoneState::Full;
        z.wp = lim.capacity;
        Ok(())
    }

    /// Reset `zone` to empty; returns the pages that were programmed (0:
    /// nothing to erase).
    pub fn reset(&mut self, zone: u64) -> Result<u64, ZoneError> {
        let zone = self.check_zone(zone)?;
        let z = self.zones[zone as usize];
        match z.state {
            ZoneState::Empty => return Ok(0),
            ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen => {
                self.open -= 1;
                self.active -= 1;
            }
            ZoneState::Closed => self.active -= 1,
            ZoneState::Full => {}
            s => return Err(self.refused(zone, ZoneAction::Reset, s)),
        }
        let z = &mut self.zones[zone as usize];
        let programmed = z.programmed;
        z.state = ZoneState::Empty;
        z.wp = 0;
        z.programmed = 0;
        Ok(programmed)
    }

    /// The device takes `zone` read-only or offline (wear, a failure):
    /// it gives up its resources; an offline zone loses its data.
    pub fn set_failed(&mut self, zone: u32, state: ZoneState) {
        debug_assert!(matches!(state, ZoneState::ReadOnly | ZoneState::Offline));
        let z = &mut self.zones[zone as usize];
        if z.state.is_open() {
            self.open -= 1;
        }
        if z.state.is_active() {
            self.active -= 1;
        }
        z.state = state;
        if state == ZoneState::Offline {
            z.wp = 0;
            z.programmed = 0;
        }
    }

    /// Recovery: `zone` had `programmed` pages on the media and was
    /// finished, read-only or offline (`failed`) or not. An unfinished
    /// zone with pages comes back closed (an open zone is closed at a
    /// power cycle, as on a ZNS drive), empty or full by its pages.
    pub fn restore(
        &mut self,
        zone: u32,
        programmed: u64,
        finished: bool,
        failed: Option<ZoneState>,
    ) {
        let cap = self.lim.capacity;
        let z = &mut self.zones[zone as usize];
        debug_assert!(z.state == ZoneState::Empty && programmed <= cap);
        z.programmed = programmed;
        z.wp = programmed;
        if let Some(f) = failed {
            z.state = f;
            if f == ZoneState::Offline {
                z.wp = 0;
                z.programmed = 0;
            }
        } else if finished || programmed == cap {
            z.state = ZoneState::Full;
            z.wp = cap;
        } else if programmed > 0 {
            z.state = ZoneState::Closed;
            self.active += 1;
        }
    }

    fn refused(&self, zone: u32, action: ZoneAction, state: ZoneState) -> ZoneError {
        match state {
            ZoneState::ReadOnly => ZoneError::ReadOnly { zone },
            ZoneState::Offline => ZoneError::Offline { zone },
            _ => ZoneError::InvalidTransition {
                zone,
                action,
                state,
            },
        }
    }
}
