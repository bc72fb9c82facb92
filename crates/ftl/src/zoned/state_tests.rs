//! The zone state machine against an oracle written from the ZNS rules:
//! hand-picked cases, then random command sequences (proptest).

use proptest::prelude::*;

use super::state::{ZoneError, ZoneLimits, ZoneState, Zones};

const LIM: ZoneLimits = ZoneLimits {
    zones: 6,
    zone_pages: 8,
    capacity: 6,
    max_open: 2,
    max_active: 3,
    max_append: 3,
};

/// Which rule refused a command (the oracle does not build messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    NoSuchZone,
    OutOfRange,
    ZeroLength,
    NotAtWp,
    Boundary,
    Full,
    ReadOnly,
    Offline,
    TooManyOpen,
    TooManyActive,
    Transition,
    AppendStart,
    AppendSize,
}

fn refusal(e: &ZoneError) -> Refusal {
    match e {
        ZoneError::NoSuchZone { .. } => Refusal::NoSuchZone,
        ZoneError::OutOfRange { .. } => Refusal::OutOfRange,
        ZoneError::ZeroLength => Refusal::ZeroLength,
        ZoneError::NotAtWritePointer { .. } => Refusal::NotAtWp,
        ZoneError::Boundary { .. } => Refusal::Boundary,
        ZoneError::ZoneFull { .. } => Refusal::Full,
        ZoneError::ReadOnly { .. } => Refusal::ReadOnly,
        ZoneError::Offline { .. } => Refusal::Offline,
        ZoneError::TooManyOpen { .. } => Refusal::TooManyOpen,
        ZoneError::TooManyActive { .. } => Refusal::TooManyActive,
        ZoneError::InvalidTransition { .. } => Refusal::Transition,
        ZoneError::AppendNotAtStart { .. } => Refusal::AppendStart,
        ZoneError::AppendTooLarge { .. } => Refusal::AppendSize,
    }
}

/// The oracle: per-zone state and write pointer, counts recomputed from
/// the states every time, the implicitly opened zones in order of their
/// last write (the front one is closed when an open resource is needed).
#[derive(Clone, Debug)]
struct Oracle {
    st: Vec<ZoneState>,
    wp: Vec<u64>,
    lru: Vec<usize>,
}

use ZoneState::*;

impl Oracle {
    fn new() -> Self {
        Oracle {
            st: vec![Empty; LIM.zones as usize],
            wp: vec![0; LIM.zones as usize],
            lru: Vec::new(),
        }
    }

    fn open_n(&self) -> u32 {
        self.st
            .iter()
            .filter(|s| matches!(s, ImplicitlyOpen | ExplicitlyOpen))
            .count() as u32
    }

    fn active_n(&self) -> u32 {
        self.st
            .iter()
            .filter(|s| matches!(s, ImplicitlyOpen | ExplicitlyOpen | Closed))
            .count() as u32
    }

    fn set(&mut self, z: usize, s: ZoneState) {
        self.lru.retain(|&x| x != z);
        if s == ImplicitlyOpen {
            self.lru.push(z);
        }
        self.st[z] = s;
    }

    /// Resources for a zone leaving `from` (empty or closed) to open.
    fn resources(&mut self, from: ZoneState) -> Result<(), Refusal> {
        if from == Empty && self.active_n() >= LIM.max_active {
            return Err(Refusal::TooManyActive);
        }
        if self.open_n() >= LIM.max_open {
            let Some(&v) = self.lru.first() else {
                return Err(Refusal::TooManyOpen);
            };
            self.set(v, Closed);
        }
        Ok(())
    }

    fn write(&mut self, lpn: u64, pages: u32, append: bool) -> Result<u64, Refusal> {
        let dev = u64::from(LIM.zones) * LIM.zone_pages;
        if pages == 0 {
            return Err(Refusal::ZeroLength);
        }
        if lpn + u64::from(pages) > dev {
            return Err(Refusal::OutOfRange);
        }
        let z = (lpn / LIM.zone_pages) as usize;
        if append && lpn % LIM.zone_pages != 0 {
            return Err(Refusal::AppendStart);
        }
        if append && pages > LIM.max_append {
            return Err(Refusal::AppendSize);
        }
        match self.st[z] {
            Full => return Err(Refusal::Full),
            ReadOnly => return Err(Refusal::ReadOnly),
            Offline => return Err(Refusal::Offline),
            _ => {}
        }
        if !append && lpn % LIM.zone_pages != self.wp[z] {
            return Err(Refusal::NotAtWp);
        }
        if self.wp[z] + u64::from(pages) > LIM.capacity {
            return Err(Refusal::Boundary);
        }
        let s = self.st[z];
        if matches!(s, Empty | Closed) {
            self.resources(s)?;
        }
        let at = self.wp[z];
        self.wp[z] += u64::from(pages);
        let next = if self.wp[z] == LIM.capacity {
            Full
        } else if s == ExplicitlyOpen {
            ExplicitlyOpen
        } else {
            ImplicitlyOpen
        };
        self.set(z, next);
        Ok(at)
    }

    fn manage(&mut self, action: u8, zone: u64) -> Result<(), Refusal> {
        if zone >= u64::from(LIM.zones) {
            return Err(Refusal::NoSuchZone);
        }
        let z = zone as usize;
        let s = self.st[z];
        if s == ReadOnly {
            return Err(Refusal::ReadOnly);
        }
        if s == Offline {
            return Err(Refusal::Offline);
        }
        match action {
            // open
            0 => match s {
                ExplicitlyOpen => Ok(()),
                ImplicitlyOpen => {
                    self.set(z, ExplicitlyOpen);
                    Ok(())
                }
                Empty | Closed => {
                    self.resources(s)?;
                    self.set(z, ExplicitlyOpen);
                    Ok(())
                }
                _ => Err(Refusal::Transition),
            },
            // close
            1 => match s {
                Closed => Ok(()),
                ImplicitlyOpen | ExplicitlyOpen => {
                    let to = if self.wp[z] == 0 { Empty } else { Closed };
                    self.set(z, to);
                    Ok(())
                }
                _ => Err(Refusal::Transition),
            },
            // finish
            2 => {
                if s == Empty && self.active_n() >= LIM.max_active {
                    return Err(Refusal::TooManyActive);
                }
                self.set(z, Full);
                self.wp[z] = LIM.capacity;
                Ok(())
            }
            // reset
            _ => {
                self.set(z, Empty);
                self.wp[z] = 0;
                Ok(())
            }
        }
    }

    fn fail(&mut self, z: usize, to: ZoneState) {
        self.set(z, to);
        if to == Offline {
            self.wp[z] = 0;
        }
    }
}

#[derive(Clone, Debug)]
enum Cmd {
    /// A write at the zone's write pointer moved by `skew`.
    Write {
        zone: u64,
        skew: i8,
        pages: u32,
    },
    Append {
        zone: u64,
        misaligned: bool,
        pages: u32,
    },
    Manage {
        action: u8,
        zone: u64,
    },
    Fail {
        zone: u32,
        offline: bool,
    },
    Read {
        lpn: u64,
        pages: u32,
    },
}

fn cmd() -> impl Strategy<Value = Cmd> {
    let zone = 0..u64::from(LIM.zones) + 1;
    prop_oneof![
        6 => (0..u64::from(LIM.zones), prop_oneof![8 => Just(0i8), 1 => -2i8..3], 0u32..4)
            .prop_map(|(zone, skew, pages)| Cmd::Write { zone, skew, pages }),
        3 => (0..u64::from(LIM.zones), prop::bool::weighted(0.1), 0u32..5)
            .prop_map(|(zone, misaligned, pages)| Cmd::Append { zone, misaligned, pages }),
        4 => (0u8..4, zone).prop_map(|(action, zone)| Cmd::Manage { action, zone }),
        1 => (0..LIM.zones, any::<bool>()).prop_map(|(zone, offline)| Cmd::Fail { zone, offline }),
        1 => (0u64..60, 0u32..10).prop_map(|(lpn, pages)| Cmd::Read { lpn, pages }),
    ]
}

fn run(cmds: &[Cmd]) -> Result<(), TestCaseError> {
    let mut m = Zones::new(LIM);
    let mut o = Oracle::new();
    for (i, c) in cmds.iter().enumerate() {
        match *c {
            Cmd::Write { zone, skew, pages } => {
                let wp = o.wp[zone as usize] as i64 + i64::from(skew);
                let lpn = (zone * LIM.zone_pages) as i64 + wp.max(0);
                let got = m
                    .write(lpn as u64, pages)
                    .map(|p| p.offset)
                    .map_err(|e| refusal(&e));
                let want = o.write(lpn as u64, pages, false);
                prop_assert_eq!(got, want, "step {} {:?}", i, c);
            }
            Cmd::Append {
                zone,
                misaligned,
                pages,
            } => {
                let lpn = zone * LIM.zone_pages + u64::from(misaligned);
                let got = m
                    .append(lpn, pages)
                    .map(|p| p.offset)
                    .map_err(|e| refusal(&e));
                let want = o.write(lpn, pages, true);
                prop_assert_eq!(got, want, "step {} {:?}", i, c);
            }
            Cmd::Manage { action, zone } => {
                let got = match action {
                    0 => m.open(zone).map(|_| ()),
                    1 => m.close(zone),
                    2 => m.finish(zone),
                    _ => m.reset(zone).map(|_| ()),
                }
                .map_err(|e| refusal(&e));
                let want = o.manage(action, zone);
                prop_assert_eq!(got, want, "step {} {:?}", i, c);
            }
            Cmd::Fail { zone, offline } => {
                let to = if offline { Offline } else { ReadOnly };
                m.set_failed(zone, to);
                o.fail(zone as usize, to);
            }
            Cmd::Read { lpn, pages } => {
                let dev = u64::from(LIM.zones) * LIM.zone_pages;
                let want = if pages == 0 {
                    Err(Refusal::ZeroLength)
                } else if lpn + u64::from(pages) > dev {
                    Err(Refusal::OutOfRange)
                } else if (lpn / 8..=(lpn + u64::from(pages) - 1) / 8)
                    .any(|z| o.st[z as usize] == Offline)
                {
                    Err(Refusal::Offline)
                } else {
                    Ok(())
                };
                prop_assert_eq!(m.check_read(lpn, pages).map_err(|e| refusal(&e)), want);
            }
        }
        for z in 0..LIM.zones {
            let info = m.info(z);
            prop_assert_eq!(
                info.state,
                o.st[z as usize],
                "zone {} after step {} {:?}",
                z,
                i,
                c
            );
            prop_assert_eq!(info.wp, u64::from(z) * LIM.zone_pages + o.wp[z as usize]);
        }
        prop_assert_eq!(m.open_count(), o.open_n());
        prop_assert_eq!(m.active_count(), o.active_n());
        prop_assert!(m.open_count() <= LIM.max_open && m.active_count() <= LIM.max_active);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn state_machine_follows_the_zns_rules(cmds in prop::collection::vec(cmd(), 1..80)) {
        run(&cmds)?;
    }
}

fn zones() -> Zones {
    Zones::new(LIM)
}

#[test]
fn a_write_off_the_write_pointer_fails_and_changes_nothing() {
    let mut z = zones();
    z.write(0, 2).unwrap();
    for lpn in [0, 1, 3, 5] {
        assert!(matches!(
            z.write(lpn, 1),
            Err(ZoneError::NotAtWritePointer { zone: 0, wp: 2, .. })
        ));
    }
    assert_eq!(z.info(0).wp, 2);
    // A write into an empty zone must start at its first page.
    assert!(matches!(
        z.write(9, 1),
        Err(ZoneError::NotAtWritePointer { zone: 1, wp: 8, .. })
    ));
    assert_eq!(z.info(1).state, Empty);
}

#[test]
fn writing_to_capacity_makes_a_zone_full_and_frees_its_resources() {
    let mut z = zones();
    z.write(0, 4).unwrap();
    assert_eq!((z.open_count(), z.active_count()), (1, 1));
    // Capacity 6 < size 8: a write past the capacity is refused.
    assert!(matches!(
        z.write(4, 3),
        Err(ZoneError::Boundary { end: 6, .. })
    ));
    z.write(4, 2).unwrap();
    assert_eq!(z.info(0).state, Full);
    assert_eq!(z.info(0).wp, 6);
    assert_eq!((z.open_count(), z.active_count()), (0, 0));
    assert!(matches!(
        z.write(6, 1),
        Err(ZoneError::ZoneFull { zone: 0 })
    ));
    assert!(matches!(
        z.append(0, 1),
        Err(ZoneError::ZoneFull { zone: 0 })
    ));
}

#[test]
fn the_open_limit_closes_the_least_recently_written_implicit_zone() {
    let mut z = zones();
    z.write(0, 1).unwrap(); // zone 0
    z.write(8, 1).unwrap(); // zone 1
    z.write(1, 1).unwrap(); // zone 0 again: zone 1 is now the older
    let p = z.write(16, 1).unwrap(); // zone 2 needs an open resource
    assert_eq!(p.closed, Some(1));
    assert_eq!(z.info(1).state, Closed);
    // Active limit 3: zones 0, 1 (closed), 2 are active; a fourth fails.
    assert!(matches!(
        z.write(24, 1),
        Err(ZoneError::TooManyActive { limit: 3 })
    ));
    assert_eq!(z.info(3).state, Empty);
}

#[test]
fn explicitly_opened_zones_are_never_closed_implicitly() {
    let mut z = zones();
    z.open(0).unwrap();
    z.open(1).unwrap();
    assert!(matches!(
        z.write(16, 1),
        Err(ZoneError::TooManyOpen { limit: 2 })
    ));
    assert!(matches!(
        z.open(2),
        Err(ZoneError::TooManyOpen { limit: 2 })
    ));
    // Closing an explicitly opened zone with nothing written empties it.
    z.close(0).unwrap();
    assert_eq!(z.info(0).state, Empty);
    assert_eq!(z.active_count(), 1);
    z.write(16, 1).unwrap();
}

#[test]
fn management_commands_refuse_invalid_transitions() {
    let mut z = zones();
    assert!(matches!(
        z.close(0),
        Err(ZoneError::InvalidTransition { .. })
    ));
    z.finish(0).unwrap();
    assert_eq!(z.info(0).state, Full);
    assert!(matches!(
        z.open(0),
        Err(ZoneError::InvalidTransition { .. })
    ));
    assert!(matches!(
        z.close(0),
        Err(ZoneError::InvalidTransition { .. })
    ));
    z.finish(0).unwrap(); // full stays full
    assert_eq!(
        z.reset(0).unwrap(),
        0,
        "a finished zone without writes has nothing to erase"
    );
    z.write(8, 3).unwrap();
    z.finish(1).unwrap();
    assert_eq!(z.info(1).wp, 8 + 6);
    assert_eq!(z.reset(1).unwrap(), 3, "a reset erases what was programmed");
    assert!(matches!(
        z.reset(6),
        Err(ZoneError::NoSuchZone { zone: 6, zones: 6 })
    ));
    z.set_failed(2, ReadOnly);
    assert!(matches!(z.reset(2), Err(ZoneError::ReadOnly { zone: 2 })));
    z.set_failed(3, Offline);
    assert!(matches!(
        z.check_read(24, 1),
        Err(ZoneError::Offline { zone: 3 })
    ));
    z.check_read(16, 2).unwrap(); // a read-only zone reads
}

#[test]
fn zone_append_goes_to_the_write_pointer() {
    let mut z = zones();
    assert_eq!(z.append(8, 2).unwrap().offset, 0);
    assert_eq!(z.append(8, 3).unwrap().offset, 2);
    assert!(matches!(
        z.append(9, 1),
        Err(ZoneError::AppendNotAtStart { start: 8, .. })
    ));
    assert!(matches!(
        z.append(8, 4),
        Err(ZoneError::AppendTooLarge { limit: 3, .. })
    ));
    assert!(matches!(z.append(8, 2), Err(ZoneError::Boundary { .. })));
    assert_eq!(z.append(8, 1).unwrap().offset, 5);
    assert_eq!(z.info(1).state, Full);
}
