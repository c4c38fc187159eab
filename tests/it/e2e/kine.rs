//! kine on PostgreSQL, MariaDB and NATS.
