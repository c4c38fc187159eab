//! The attack matrix: a hostile TenantControlPlane writer and a hostile token holder against a victim
//! tenant, on the real stack. Each test names the attack and asserts the exact outcome for the victim
//! (data intact and readable by the victim only) and for the attacker (a condition, never credentials).

mod datastore;
mod decoy;
mod forged_migration;
mod forged_served;
