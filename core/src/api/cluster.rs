//! What `tinystore cluster` does to a cluster store's epoch in etcd
//! (docs/cluster.md): make it, and raise it after a restore.

use crate::api::store::ConnectOptions;
use crate::base::error::Result;
use crate::net::etcd::Etcd;
use crate::runtime;

/// Makes the epoch of the cluster store at `address` (`etcd://.../PREFIX`)
/// if it has none: milliseconds since 1970, so larger than the epoch of
/// any store on one machine made before it. A store's first connect makes
/// it too; this says so ahead of time. Gives the epoch and whether this
/// call made it. Errors: `invalid` (address), `unavailable`, `auth`.
pub fn init(address: &str, opts: ConnectOptions) -> Result<(u64, bool)> {
    let (addr, eo, _) = opts.for_cluster(address)?;
    runtime::block_on(async {
        let etcd = Etcd::connect(&addr, eo).await?;
        let (epoch, _) = etcd.init().await?;
        // `connect` made it if it was missing: tell which.
        Ok((epoch, etcd.made_epoch()))
    })
}

/// Raises the epoch of the cluster store at `address` to the larger of
/// epoch + 1 and milliseconds since 1970: every fence after is larger than
/// every fence before, also when a restore from a snapshot took etcd's
/// revisions back (restore without `--bump-revision`). Stores already
/// open use the new epoch from their next hold. Gives (old, new). Errors
/// as [`init`].
pub fn bump_epoch(address: &str, opts: ConnectOptions) -> Result<(u64, u64)> {
    let (addr, eo, _) = opts.for_cluster(address)?;
    runtime::block_on(async { Etcd::connect(&addr, eo).await?.bump_epoch().await })
}

/// What [`init_from`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// The epoch of the store's last open on one machine (in `DIR/kv.db`).
    pub local_epoch: u64,
    /// The cluster's epoch before (`None` when this call made it).
    pub before: Option<u64>,
    /// The cluster's epoch now: larger than `local_epoch`.
    pub epoch: u64,
}

/// For a store moving from one machine (`dir`) to the cluster at
/// `address`: makes the cluster's epoch, or raises it, so that it is larger
/// than the epoch of the last open of `dir` (max(that + 1, milliseconds
/// since 1970)); an epoch already larger is kept. Every fence the cluster
/// gives after is then larger than every fence the store on one machine
/// gave. `dir` is locked as an owner would lock it while this runs, so no
/// process may own it then. Errors: `owned` (a process owns `dir`: stop it
/// first), `invalid` (`dir` holds no store, or the address), `unavailable`,
/// `auth`.
pub fn init_from(address: &str, dir: impl AsRef<std::path::Path>, opts: ConnectOptions) -> Result<Migrated> {
    let dir = dir.as_ref();
    let (addr, eo, _) = opts.for_cluster(address)?;
    let local_epoch = crate::net::files::last_epoch(dir)?;
    // No owner may open it (and take a new epoch) while the epoch is raised.
    let _lock = crate::net::files::take_dir_lock(dir)?;
    let local_epoch = local_epoch.max(crate::net::files::last_epoch(dir)?);
    runtime::block_on(async {
        let etcd = Etcd::connect(&addr, eo).await?;
        let made = etcd.made_epoch();
        let (old, epoch) = etcd.raise_epoch_above(local_epoch).await?;
        Ok(Migrated { local_epoch, before: (!made).then_some(old), epoch })
    })
}
