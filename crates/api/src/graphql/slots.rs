//! Per-tenant caps on GraphQL WebSockets: open connections, and live operations (subscriptions, and
//! queries and mutations until they end), of all a tenant's tokens together (platform admins count as
//! one tenant of their own). Minting more tokens or opening more connections adds nothing.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use uuid::Uuid;

/// The caps, and what each tenant uses now; cheap to clone (clones share the counts).
#[derive(Debug, Clone)]
pub struct TenantSockets {
    usage: Arc<Mutex<HashMap<Option<Uuid>, Usage>>>,
    /// Open connections a tenant may have.
    pub max_sockets: usize,
    /// Live operations a tenant may have over all its connections.
    pub max_operations: usize,
}

/// What one tenant uses.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    sockets: usize,
    operations: usize,
}

/// One open connection's place under its tenant's caps, and its live operations; gives them back when
/// dropped.
#[derive(Debug)]
pub struct SocketSlot {
    sockets: TenantSockets,
    tenant: Option<Uuid>,
    live: Mutex<HashSet<String>>,
}

impl TenantSockets {
    /// Caps of `max_sockets` connections and `max_operations` live operations per tenant.
    pub fn new(max_sockets: usize, max_operations: usize) -> Self {
        Self {
            usage: Arc::default(),
            max_sockets,
            max_operations,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Option<Uuid>, Usage>> {
        self.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more connection of `tenant`; `None` when it has `max_sockets` open already.
    pub fn open(&self, tenant: Option<Uuid>) -> Option<SocketSlot> {
        let mut usage = self.lock();
        let used = usage.entry(tenant).or_default();
        if used.sockets >= self.max_sockets {
            return None;
        }
        used.sockets += 1;
        Some(SocketSlot {
            sockets: self.clone(),
            tenant,
            live: Mutex::default(),
        })
    }
}

impl SocketSlot {
    fn live(&self) -> MutexGuard<'_, HashSet<String>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts operation `id` against the tenant's cap; `false` when the tenant has `max_operations` live
    /// already (an id already counted counts once).
    pub fn start(&self, id: &str) -> bool {
        let mut live = self.live();
        if live.contains(id) {
            return true;
        }
        let mut usage = self.sockets.lock();
        let used = usage.entry(self.tenant).or_default();
        if used.operations >= self.sockets.max_operations {
            return false;
        }
        used.operations += 1;
        live.insert(id.to_string());
        true
    }

    /// Operation `id` ended: the server completed it or answered it with an error, or the client stopped it.
    pub fn end(&self, id: &str) {
        if self.live().remove(id) {
            let mut usage = self.sockets.lock();
            if let Some(used) = usage.get_mut(&self.tenant) {
                used.operations = used.operations.saturating_sub(1);
            }
        }
    }
}

impl Drop for SocketSlot {
    fn drop(&mut self) {
        let live = self.live().len();
        let mut usage = self.sockets.lock();
        if let Some(used) = usage.get_mut(&self.tenant) {
            used.sockets = used.sockets.saturating_sub(1);
            used.operations = used.operations.saturating_sub(live);
            if used.sockets == 0 && used.operations == 0 {
                usage.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::TenantSockets;

    #[test]
    fn a_tenant_has_at_most_its_sockets_and_operations_and_gets_them_back() {
        let caps = TenantSockets::new(2, 3);
        let (tenant, other) = (Some(uuid::Uuid::new_v4()), Some(uuid::Uuid::new_v4()));
        let first = caps.open(tenant).unwrap();
        let second = caps.open(tenant).unwrap();
        assert!(caps.open(tenant).is_none());
        assert!(caps.open(other).is_some());
        assert!(first.start("1") && first.start("2") && second.start("1"));
        // An id counted already counts once; one more is refused until one ends.
        assert!(first.start("1"));
        assert!(!second.start("2"));
        first.end("1");
        first.end("1");
        assert!(second.start("2"));
        assert!(!first.start("3"));
        // A closed connection gives back its place and its operations.
        drop(first);
        let third = caps.open(tenant).unwrap();
        assert!(third.start("a"));
        assert!(!third.start("b"));
        drop((second, third));
        assert!(caps.lock().is_empty());
    }
}
