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
