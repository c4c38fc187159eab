//! Relay connections of the platform-admin lists (tenants, pools, DataStores): one generic shape, named per
//! node type, built from a keyset page of the service.

use async_graphql::{OutputType, SimpleObject};

use super::types::{DataStore, PageInfo, Pool, Tenant};

/// A node and its cursor.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(
    concrete(name = "TenantEdge", params(Tenant)),
    concrete(name = "PoolEdge", params(Pool)),
    concrete(name = "DataStoreEdge", params(DataStore))
)]
pub struct Edge<N: OutputType> {
    /// Cursor of this edge (pass as `after` to continue after it).
    pub cursor: String,
    /// The node.
    pub node: N,
}

/// A page of nodes, oldest first.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(
    concrete(name = "TenantConnection", params(Tenant)),
    concrete(name = "PoolConnection", params(Pool)),
    concrete(name = "DataStoreConnection", params(DataStore))
)]
pub struct Connection<N: OutputType + Clone>
where
    Edge<N>: OutputType,
{
    /// Edges.
    pub edges: Vec<Edge<N>>,
    /// The nodes, without cursors.
    pub nodes: Vec<N>,
    /// Paging.
    pub page_info: PageInfo,
}

impl<N: OutputType + Clone> Connection<N>
where
    Edge<N>: OutputType,
{
    /// The connection of `items` (each with its cursor), asked for `after` a cursor or not, with a next
    /// page or not.
    pub fn of(items: Vec<(N, String)>, after: bool, has_next_page: bool) -> Self {
        let cursors: Vec<String> = items.iter().map(|(_, c)| c.clone()).collect();
        let nodes = items.iter().map(|(n, _)| n.clone()).collect();
        let edges = items
            .into_iter()
            .map(|(node, cursor)| Edge { cursor, node })
            .collect();
        Self {
            edges,
            nodes,
            page_info: PageInfo::of(&cursors, after, has_next_page),
        }
    }
}
