//! Delete and upgrade.
