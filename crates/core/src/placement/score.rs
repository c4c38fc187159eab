//! How each policy ranks the DataStores that fit, and the rendezvous hash.
//!
//! Every policy ranks by a score where higher is better, then by DataStore name (smallest first):
//!
//! | policy | score | what it means |
//! |---|---|---|
//! | `Spread` | `1 − (load + 1) / capacity` | the share left free after placing |
//! | `Binpack` | `(load + 1) / capacity` | the share used after placing |
//! | `Rendezvous` | `capacity / −ln(u)` | weighted highest random weight, `u` from [`rendezvous_hash`] |
//! | `Dedicated` | `1` | every empty DataStore is as good: the name decides |
//!
//! `Spread` and `Binpack` compare the fractions exactly (integer cross-multiplication), not as floats.
//! Capacity is the effective one: at most 1 for NATS and in `Dedicated` pools.
//!
//! `Rendezvous` uses the logarithmic method of weighted rendezvous hashing: with `u` uniform in (0, 1), the
//! DataStore with the highest `capacity / −ln(u)` wins, so each DataStore gets a share of control planes
//! proportional to its capacity, and adding a DataStore moves only the control planes that it now wins
//! (about `its capacity / total capacity` of them). Weights are the configured capacity, not the free
//! capacity, so a placement does not move when loads change; a full DataStore is removed by the capacity
//! constraint and its control planes go to their next-ranked DataStore. When two DataStores have the same
//! capacity, the order of `u` is the order of the score, and that is what is compared (no logarithm).

use std::cmp::Ordering;

use super::model::{DataStoreSnapshot, Policy};

/// FNV-1a 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`, continuing from state `h`.
pub(crate) fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The 64-bit finalizer of MurmurHash3: spreads every input bit over every output bit.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// FNV-1a 64 of a control-plane id: the half of the rendezvous hash shared by every DataStore.
pub(crate) fn control_plane_hash(control_plane_id: &str) -> u64 {
    fnv1a(FNV_OFFSET, control_plane_id.as_bytes())
}

/// The rendezvous hash of a control plane on a DataStore; fixed forever, since changing it moves tenants.
///
/// It is `fmix64(FNV-1a-64(control_plane_id) XOR rotate_left(FNV-1a-64(data_store), 32))`: FNV-1a 64 (offset
/// basis `0xcbf29ce484222325`, prime `0x100000001b3`) of the UTF-8 bytes of each string, the DataStore's
/// half rotated by 32 bits so the pair is ordered and the better-mixed high bits of each meet the low bits
/// of the other, then the MurmurHash3 `fmix64` finalizer, because FNV-1a alone mixes poorly. The two halves
/// are independent, so a DataStore's half could be computed once and cached by whoever builds snapshots.
pub fn rendezvous_hash(control_plane_id: &str, data_store: &str) -> u64 {
    combine(control_plane_hash(control_plane_id), data_store)
}

/// [`rendezvous_hash`] from the control plane's precomputed half.
pub(crate) fn combine(control_plane_hash: u64, data_store: &str) -> u64 {
    fmix64(control_plane_hash ^ fnv1a(FNV_OFFSET, data_store.as_bytes()).rotate_left(32))
}

/// The hash as a uniform number in the open interval (0, 1): its top 52 bits, centred, so both ends are exact.
fn unit(hash: u64) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 52) as f64;
    ((hash >> 12) as f64 + 0.5) * SCALE
}

/// The effective tenant capacity: at most 1 when the DataStore is exclusive (NATS, or a `Dedicated` pool).
pub(crate) fn effective_capacity(ds: &DataStoreSnapshot, exclusive: bool) -> u32 {
    if exclusive {
        ds.capacity_tenants.min(1)
    } else {
        ds.capacity_tenants
    }
}

/// What a policy compares, computed once per DataStore.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Key {
    /// Tenants after placing, over effective capacity; lower ranks first.
    Spread { used: u64, capacity: u64 },
    /// Tenants after placing, over effective capacity; higher ranks first.
    Binpack { used: u64, capacity: u64 },
    /// Capacity weight and rendezvous hash; higher score ranks first.
    Rendezvous { weight: u32, hash: u64 },
    /// All alike.
    Dedicated,
}

impl Key {
    /// The key of a DataStore that passed every constraint (so its effective capacity is at least 1).
    pub(crate) fn new(policy: Policy, ds: &DataStoreSnapshot, exclusive: bool, cp_hash: u64) -> Key {
        let capacity = effective_capacity(ds, exclusive);
        let used = u64::from(ds.load_tenants) + 1;
        match policy {
            Policy::Spread => Key::Spread {
                used,
                capacity: u64::from(capacity),
            },
            Policy::Binpack => Key::Binpack {
                used,
                capacity: u64::from(capacity),
            },
            Policy::Rendezvous => Key::Rendezvous {
                weight: capacity,
                hash: combine(cp_hash, &ds.name),
            },
            Policy::Dedicated => Key::Dedicated,
        }
    }

    /// The score shown in reports (higher is better).
    pub(crate) fn score(self) -> f64 {
        match self {
            Key::Spread { used, capacity } => 1.0 - used as f64 / capacity.max(1) as f64,
            Key::Binpack { used, capacity } => used as f64 / capacity.max(1) as f64,
            Key::Rendezvous { weight, hash } => rendezvous_score((weight, hash)),
            Key::Dedicated => 1.0,
        }
    }

    /// `Less` when `self` ranks before `other` (is better); `Equal` leaves it to the name.
    pub(crate) fn rank(self, other: Key) -> Ordering {
        match (self, other) {
            (Key::Spread { used, capacity }, Key::Spread { used: u, capacity: c }) => {
                cmp_fraction((used, capacity), (u, c))
            }
            (Key::Binpack { used, capacity }, Key::Binpack { used: u, capacity: c }) => {
                cmp_fraction((u, c), (used, capacity))
            }
            (Key::Rendezvous { weight, hash }, Key::Rendezvous { weight: w, hash: h }) => {
                cmp_rendezvous((weight, hash), (w, h))
            }
            _ => Ordering::Equal,
        }
    }
}

/// Tenants after placing and effective capacity: the `Spread` and `Binpack` fraction.
pub(crate) fn fill(ds: &DataStoreSnapshot, exclusive: bool) -> (u64, u64) {
    (
        u64::from(ds.load_tenants) + 1,
        u64::from(effective_capacity(ds, exclusive)),
    )
}

/// Compares the fractions `a.0 / a.1` and `b.0 / b.1` exactly.
pub(crate) fn cmp_fraction(a: (u64, u64), b: (u64, u64)) -> Ordering {
    (u128::from(a.0) * u128::from(b.1)).cmp(&(u128::from(b.0) * u128::from(a.1)))
}

/// The rendezvous score of a (weight, hash) pair: `weight / −ln(u)`.
fn rendezvous_score((weight, hash): (u32, u64)) -> f64 {
    f64::from(weight) / -unit(hash).ln()
}

/// `Less` when rendezvous (weight, hash) `a` ranks before `b`; equal weights compare hashes, without logarithms.
pub(crate) fn cmp_rendezvous(a: (u32, u64), b: (u32, u64)) -> Ordering {
    if a.0 == b.0 {
        b.1.cmp(&a.1)
    } else {
        rendezvous_score(b).total_cmp(&rendezvous_score(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn rendezvous_hash_is_frozen() {
        // Changing these values moves tenants between DataStores: never change them.
        assert_eq!(rendezvous_hash("cp-1", "etcd-a"), FROZEN_CP1_ETCD_A);
        assert_eq!(rendezvous_hash("", ""), FROZEN_EMPTY);
    }

    const FROZEN_CP1_ETCD_A: u64 = 13_396_257_536_991_460_859;
    const FROZEN_EMPTY: u64 = 0xf70e_cfc1_8523_a442;

    #[test]
    fn unit_stays_strictly_between_zero_and_one() {
        assert!(unit(0) > 0.0);
        assert!(unit(u64::MAX) < 1.0);
        assert!(
            Key::Rendezvous {
                weight: 1,
                hash: u64::MAX
            }
            .score()
            .is_finite()
        );
        assert!(Key::Rendezvous { weight: 1, hash: 0 }.score() > 0.0);
    }

    #[test]
    fn spread_and_binpack_compare_fractions_exactly() {
        let third = Key::Spread { used: 1, capacity: 3 };
        let three_ninths = Key::Spread { used: 3, capacity: 9 };
        let half = Key::Spread { used: 1, capacity: 2 };
        assert_eq!(third.rank(three_ninths), Ordering::Equal);
        assert_eq!(third.rank(half), Ordering::Less);
        let big = Key::Binpack {
            used: u64::from(u32::MAX),
            capacity: u64::from(u32::MAX),
        };
        let almost = Key::Binpack {
            used: u64::from(u32::MAX) - 1,
            capacity: u64::from(u32::MAX),
        };
        assert_eq!(big.rank(almost), Ordering::Less);
    }
}
