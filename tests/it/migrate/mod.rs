//! Live migration movers against real datastores (issue 21).

mod etcd;
mod sql;
